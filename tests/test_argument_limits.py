"""Arguments that would make an operator allocate without bound, loop for hours or hand a
kernel what it refuses in its own words are refused first, naming the operator and the
argument (the fuzz set, tests/test_fuzz.py, finds such cases; these pin them down)."""
import numpy as np
import pytest

import torchdali
from torchdali import fn

IMAGES = [np.full((9, 11, 3), 7, np.uint8), np.full((6, 5, 3), 9, np.uint8)]


def run(make, images=IMAGES):
    @torchdali.pipeline_def(batch_size=len(images), num_threads=1, device_id=None)
    def pipe():
        return make(fn.external_source(lambda: images, batch=True, layout="HWC"))

    return pipe().run()


HUGE_OUTPUTS = {  # operator call -> the arguments the error names
    "resize": (lambda x: fn.resize(x, size=(1e5, 1e5)), "argument 'size'"),
    "resize_x": (lambda x: fn.resize(x, resize_x=1e6), "argument 'resize_x'"),
    "random_resized_crop": (lambda x: fn.random_resized_crop(x, size=(1e5, 1e5)), "argument 'size'"),
    "random_resized_crop above int64": (lambda x: fn.random_resized_crop(x, size=(4, 1e38)), "argument 'size'"),
    "warp_affine": (lambda x: fn.warp_affine(x, matrix=[1, 0, 0, 0, 1, 0], size=(1e5, 1e5)), "argument 'size'"),
    "rotate": (lambda x: fn.rotate(x, angle=10, size=(1e5, 1e5)), "argument 'size'"),
    "pad": (lambda x: fn.pad(x, axes=(0, 1), shape=(100000, 100000)), "arguments 'shape', 'align'"),
    "paste": (lambda x: fn.paste(x, ratio=1e5, fill_value=(0, 0, 0)), "arguments 'ratio', 'min_canvas_size'"),
}


@pytest.mark.parametrize("case", HUGE_OUTPUTS)
def test_an_output_of_more_than_the_pixel_limit_is_refused_by_name(case):
    make, named = HUGE_OUTPUTS[case]
    with pytest.raises(ValueError, match=rf"{named} ask for an output of .* pixels for sample 0, more than the "
                                         r"1,073,741,824 allowed \(set TORCHDALI_MAX_IMAGE_PIXELS"):
        run(make)


def test_the_pixel_limit_is_the_decoders_and_can_be_set(monkeypatch):
    monkeypatch.setenv("TORCHDALI_MAX_IMAGE_PIXELS", "100")
    (out,) = run(lambda x: fn.resize(x, size=(10, 10)))
    assert out.as_torch().shape == (2, 10, 10, 3)
    with pytest.raises(ValueError, match="an output of 10 x 11 pixels for sample 0, more than the 100 allowed"):
        run(lambda x: fn.resize(x, size=(10, 11)))


@pytest.mark.parametrize("roi", [(1e8, 1e8), (1e38, 1e38), (-1e38, 4.0)])
def test_a_resize_window_beyond_its_limit_is_refused(roi):
    """The filter reads every pixel of the window: a 1e8-pixel one took 29 s for 4 x 4
    pixels, a 1e38 one ended in std::vector's length error."""
    with pytest.raises(ValueError, match=r"resize .*'roi_start'/'roi_end' give sample 0 a window of .* pixels; each "
                                         r"extent must be finite and at most 1,048,576"):
        run(lambda x: fn.resize(x, size=(4, 4), roi_start=(0, 0), roi_end=roi, antialias=True))


def test_random_resized_crop_attempts_and_an_area_above_the_image():
    with pytest.raises(ValueError, match=r"'num_attempts' = 9007199254740993: must be in \[1, 1,000,000\]"):
        run(lambda x: fn.random_resized_crop(x, size=(4, 4), num_attempts=2 ** 53 + 1))
    (out,) = run(lambda x: fn.random_resized_crop(x, size=(4, 4), random_area=[1e9, 1e9]))  # the whole image
    assert out.as_torch().shape == (2, 4, 4, 3)


def test_gaussian_blur_window_limit():
    with pytest.raises(ValueError, match=r"'window_size' = \[9223372036854775807\]: must be odd, positive and at "
                                         r"most 16,777,217"):
        run(lambda x: fn.gaussian_blur(x, window_size=2 ** 63 - 1))


@pytest.mark.parametrize("op", ["crop", "crop_mirror_normalize", "paste"])
def test_images_without_channels_or_of_mixed_channels_are_named_by_the_operator(op):
    call = {"crop": lambda x: fn.crop(x, crop=(4, 4)),
            "crop_mirror_normalize": lambda x: fn.crop_mirror_normalize(x, crop=(4, 4)),
            "paste": lambda x: fn.paste(x, ratio=2, fill_value=(0,))}[op]
    with pytest.raises(ValueError, match=rf"^{op} \('.*'\): sample 1 has no channels"):
        run(call, [np.zeros((9, 11, 1), np.uint8), np.zeros((9, 11, 0), np.uint8)])
    with pytest.raises(ValueError, match=rf"^{op} \('.*'\): sample 1 has 1 channels, sample 0 has 3"):
        run(call, [np.zeros((9, 11, 3), np.uint8), np.zeros((9, 11, 1), np.uint8)])


def test_crop_mirror_normalize_fill_values_count_is_named():
    with pytest.raises(ValueError, match="argument 'fill_values' has 5 values for 3 channels"):
        run(lambda x: fn.crop_mirror_normalize(x, crop=(4, 4), fill_values=[0.0] * 5))


def test_pad_axes_named_twice():
    with pytest.raises(ValueError, match=r"axes \[0, 0, 1\] name an axis more than once"):
        run(lambda x: fn.pad(x, axes=(0, 0, 1), shape=(12, 12, 3)))
