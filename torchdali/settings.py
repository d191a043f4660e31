"""Settings read from environment variables, checked where they are read."""
import os


def int_variable(name, lowest):
    """The integer in environment variable `name`, None if unset; a ValueError naming the
    variable if it is not an integer of at least `lowest`."""
    text = os.environ.get(name)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"the environment variable {name}={text!r} is not an integer") from None
    if value < lowest:
        raise ValueError(f"the environment variable {name}={value} must be at least {lowest}")
    return value


# The most pixels an image may have: what a header claims before decoding, what an
# operator's arguments ask of an output. A few KB of JPEG can claim 60000 x 60000 pixels
# (10.8 GB decoded); OpenCV's limit (CV_IO_MAX_IMAGE_PIXELS).
MAX_IMAGE_PIXELS_VARIABLE = "TORCHDALI_MAX_IMAGE_PIXELS"
_DEFAULT_MAX_IMAGE_PIXELS = 1 << 30


def max_image_pixels():
    """$TORCHDALI_MAX_IMAGE_PIXELS, else 2**30."""
    value = int_variable(MAX_IMAGE_PIXELS_VARIABLE, 1)
    return _DEFAULT_MAX_IMAGE_PIXELS if value is None else value
