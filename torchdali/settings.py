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
