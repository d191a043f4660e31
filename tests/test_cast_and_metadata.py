"""cast (DALI's rounding and saturation), DataNode metadata, and the Pillow fallback."""
import warnings

import numpy as np
import pytest
from PIL import Image

import torchdali
from torchdali import fn, pipeline_def, types
from torchdali.operators import decoders

from conftest import dali_or_skip

VALUES = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 300.2, -300.0, 127.49, 0.4, -0.2, 1e30, -1e30, np.nan],
                  np.float32)


def cast_values(lib, dtype):
    @lib.pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def pipe():
        return lib.fn.cast(lib.fn.external_source(lambda: [VALUES]), dtype=dtype)

    p = pipe()
    p.build()
    return np.array(p.run()[0].at(0))


@pytest.mark.parametrize("dtype,expected", [
    (types.UINT8, [1, 2, 3, 0, 0, 0, 255, 0, 127, 0, 0, 255, 0, 0]),
    (types.INT8, [1, 2, 3, -1, -2, -3, 127, -128, 127, 0, 0, 127, -128, 0]),
    (types.INT32, [1, 2, 3, -1, -2, -3, 300, -300, 127, 0, 0, 2 ** 31 - 1, -2 ** 31, 0]),
    (types.INT64, [1, 2, 3, -1, -2, -3, 300, -300, 127, 0, 0, 2 ** 63 - 1, -2 ** 63, 0]),
    # a float becomes a bool after rounding: 0.4 is False, NaN True
    (types.BOOL, [True, True, True, True, True, True, True, True, True, False, False, True, True, True]),
])
def test_cast_rounds_half_away_and_saturates(dtype, expected):
    assert cast_values(torchdali, dtype).tolist() == expected


@pytest.mark.parametrize("dtype", [types.UINT8, types.INT8, types.INT16, types.INT64, types.BOOL, types.FLOAT16])
def test_cast_matches_dali(dtype):
    nvidia_dali = dali_or_skip()
    import nvidia.dali.fn  # noqa: F401
    ours, theirs = cast_values(torchdali, dtype)[:-1], cast_values(nvidia_dali, dtype)[:-1]  # NaN aside
    np.testing.assert_array_equal(ours, theirs)


WIDE_INTEGERS = {"uint64": np.array([0, 5, 2 ** 31, 2 ** 63 - 1, 2 ** 63, 2 ** 64 - 1], np.uint64),
                 "int64": np.array([0, 7, -1, -2 ** 31 - 1, 2 ** 40, -2 ** 63, 2 ** 63 - 1], np.int64)}


@pytest.mark.parametrize("source", list(WIDE_INTEGERS))
@pytest.mark.parametrize("name", ["UINT8", "INT8", "UINT16", "INT32", "UINT32", "INT64", "UINT64"])
def test_integer_casts_saturate_as_dali(source, name):
    """uint64 values from 2^63 on and negative values into uint64 saturate, as in DALI."""
    nvidia_dali = dali_or_skip()
    data = WIDE_INTEGERS[source]

    def run(lib):
        @lib.pipeline_def(batch_size=1, num_threads=1, device_id=None)
        def pipe():
            return lib.fn.cast(lib.fn.external_source(lambda: [data]), dtype=getattr(lib.types, name))

        p = pipe()
        p.build()
        return np.array(p.run()[0].at(0))

    ours, theirs = run(torchdali), run(nvidia_dali)
    assert ours.dtype == theirs.dtype
    np.testing.assert_array_equal(ours, theirs)


def test_source_info_and_layout_properties(tmp_path):
    for k in range(3):
        Image.new("RGB", (4, 4)).save(tmp_path / f"{k}.png")
    files = [str(tmp_path / f"{k}.png") for k in range(3)]

    @pipeline_def(batch_size=3, num_threads=1, device_id=None)
    def pipe():
        data, _ = fn.readers.file(files=files)
        images = fn.decoders.image(data)
        return images.source_info(), images.property("layout"), fn.cast(images, dtype=types.FLOAT).source_info()

    info, layout, info_after_cast = pipe().run()
    assert [bytes(info.at(i)).decode() for i in range(3)] == files
    assert bytes(layout.at(0)).decode() == "HWC"
    assert bytes(info_after_cast.at(2)).decode() == files[2]
    with pytest.raises(ValueError, match="'key' = 'nope' is not one of"):
        fn.random.uniform().property("nope")


def test_pillow_fallback_without_torchvision(tmp_path, monkeypatch):
    Image.new("RGB", (5, 3), (10, 20, 30)).save(tmp_path / "a.jpg", quality=100)
    monkeypatch.setattr(decoders, "_tvio", None)
    monkeypatch.setattr(decoders, "_warned_no_torchvision", decoders.threading.Event())
    monkeypatch.setattr(decoders, "_jpeg_engine", lambda device: None)  # an extension built without our decoders

    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def pipe(device):
        data, _ = fn.readers.file(files=[str(tmp_path / "a.jpg")])
        return fn.decoders.image(data, device=device)

    with pytest.warns(UserWarning, match="torchvision cannot be imported; decoding with Pillow"):
        (img,) = pipe("cpu").run()
    assert img.at(0).shape == (3, 5, 3) and abs(int(img.at(0)[1, 2, 2]) - 30) <= 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pipe("cpu").run()  # warned once only
    monkeypatch.setattr(decoders.torch.cuda, "is_available", lambda: True)  # reach the operator's own check
    with pytest.raises(RuntimeError, match="device='mixed' needs torchvision"):
        pipe("mixed", device_id=0).build()
