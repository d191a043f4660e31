"""decoders.image followed by random_resized_crop, fused into one step (torchdali/fusion.py):
the same windows and, up to the filter's rounding, the same pixels as the two operators one
after the other, with skipped files, other formats and checkpoints; and only where the pair
may fuse."""
import numpy as np
import pytest
import torch
from PIL import Image

import torchdali.executor
from torchdali import fn, fusion, pipeline_def, types
from torchdali.sample_data import write_sample_dataset

from conftest import as_numpy_batch, requires_cuda

pytest.importorskip("torchdali._C", reason="the C++ extension is not built")
pytestmark = pytest.mark.usefixtures("cpu_jpeg_decoder")  # both CPU JPEG paths


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Photo-like JPEGs of odd sizes, an EXIF-rotated JPEG, a PNG and a truncated JPEG."""
    root = tmp_path_factory.mktemp("fusion")
    write_sample_dataset(str(root / "set"), num_images=12, num_classes=1, min_size=61, max_size=233)
    folder = root / "set" / "class_000"
    paths = sorted(str(p) for p in folder.iterdir())
    picture = np.asarray(Image.open(paths[0]))
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(picture).save(root / "rotated.jpg", quality=90, exif=exif)
    Image.fromarray(picture[:57, :83]).save(root / "picture.png")
    (root / "broken.jpg").write_bytes(open(paths[1], "rb").read()[:300])
    return paths + [str(root / "rotated.jpg"), str(root / "picture.png")], str(root / "broken.jpg")


def run(paths, fused, iterations=2, device="cpu", extra_output=False, on_error="raise", seed=11, flip=False,
        **crop):
    """`iterations` batches of decoders.image -> random_resized_crop (-> flip) over `paths`,
    with the pair fused (where it may be) or not: the crops as NumPy batches, and whether it
    was fused."""
    @pipeline_def(batch_size=len(paths), num_threads=2, device_id=None if device == "cpu" else 0, seed=seed)
    def pipe():
        jpegs, _ = fn.readers.file(files=list(paths))
        images = fn.decoders.image(jpegs, device=device, on_error=on_error)
        crops = fn.random_resized_crop(images, **{"size": (37, 53), **crop})
        if flip:
            crops = fn.flip(crops, horizontal=1)
        return (crops, images) if extra_output else crops

    with pytest.MonkeyPatch.context() as mp:
        if not fused:
            mp.setattr(torchdali.executor, "fuse_steps", lambda steps, outputs: None)
        p = pipe()
        p.build()
        crop_step = next(s for s in p._executor.steps if s.node.schema.name == "random_resized_crop")
        return [as_numpy_batch(p.run()[0]) for _ in range(iterations)], crop_step.run is fusion._passed_on


def assert_close(got, want, float_out=False):
    assert len(got) == len(want)
    for g_batch, w_batch in zip(got, want):
        assert len(g_batch) == len(w_batch)
        for g, w in zip(g_batch, w_batch):
            assert g.shape == w.shape and g.dtype == w.dtype
            diff = np.abs(g.astype(np.float64) - w)
            # The window's offset in the decoded part moves the filter's position by rounding.
            assert diff.max() <= (0.05 if float_out else 1) and (diff > 1e-3).mean() < 1e-3, diff.max()


@pytest.mark.parametrize("crop", [
    dict(),
    dict(interp_type=types.INTERP_CUBIC, size=(300, 211)),  # enlarging
    dict(interp_type=types.INTERP_LANCZOS3, antialias=False),
    dict(min_filter=types.INTERP_GAUSSIAN, mag_filter=types.INTERP_LINEAR, random_area=[0.5, 1.0]),
    dict(dtype=types.FLOAT, size=(19,)),
])
def test_the_pair_gives_the_two_operators_results(files, crop):
    got, fused = run(files[0], True, **crop)
    want, unfused = run(files[0], False, **crop)
    assert fused and not unfused
    assert_close(got, want, float_out=crop.get("dtype") == types.FLOAT)


def test_skipped_files_leave_the_others_windows_as_they_were(files):
    paths = files[0][:3] + [files[1]] + files[0][3:]
    got, fused = run(paths, True, on_error="skip")
    want, _ = run(paths, False, on_error="skip")
    assert fused and [len(b) for b in got] == [len(paths) - 1] * 2
    assert_close(got, want)


@pytest.mark.parametrize("case", ["decoded images also returned", "nearest neighbour", "crop argument per sample"])
def test_only_a_fusable_pair_is_fused(files, case):
    if case == "decoded images also returned":
        _, fused = run(files[0], True, extra_output=True)
    elif case == "nearest neighbour":
        _, fused = run(files[0], True, interp_type=types.INTERP_NN)
    else:
        _, fused = run(files[0], True, interp_type=fn.random.coin_flip(dtype=types.INT32))
    assert not fused


@pytest.mark.parametrize("device", ["cpu", pytest.param("mixed", marks=requires_cuda)])
def test_a_checkpoint_resumes_the_fused_pair(files, device):
    @pipeline_def(batch_size=5, num_threads=2, device_id=None if device == "cpu" else 0, seed=3,
                  enable_checkpointing=True)
    def pipe():
        jpegs, _ = fn.readers.file(files=files[0], random_shuffle=True)
        crops = fn.random_resized_crop(fn.decoders.image(jpegs, device=device), size=(31, 29))
        # On the GPU a GPU operator after it, so that the decode stage runs.
        return crops if device == "cpu" else fn.flip(crops, horizontal=1)

    first = pipe()
    first.build()
    first.run()
    saved = first.checkpoint()
    after = [as_numpy_batch(first.run()[0]) for _ in range(3)]
    resumed = pipe(checkpoint=saved)
    resumed.build()
    again = [as_numpy_batch(resumed.run()[0]) for _ in range(3)]
    for a, b in zip(after, again):
        assert all(np.array_equal(x, y) for x, y in zip(a, b))


@requires_cuda
@pytest.mark.parametrize("crop", [
    dict(), dict(interp_type=types.INTERP_LANCZOS3, size=(160, 224)),
    dict(flip=True),  # a GPU operator after it: the resize is finished in the GPU stage
    dict(flip=True, dtype=types.FLOAT)])
def test_the_mixed_pair_matches_the_two_operators_on_the_gpu(files, crop):
    got, fused = run(files[0], True, device="mixed", iterations=3, **crop)
    want, unfused = run(files[0], False, device="mixed", iterations=3, **crop)
    assert fused and not unfused
    for g_batch, w_batch in zip(got, want):
        for g, w in zip(g_batch, w_batch):
            # Only the window (and margin) decoded: chroma upsampled from the window's own
            # samples, a level or two off at places (as decoders.image_crop on 'mixed').
            diff = np.abs(g.astype(np.float64) - w)
            assert g.shape == w.shape and g.dtype == w.dtype and diff.max() <= 4 and diff.mean() <= 0.25


@requires_cuda
def test_the_mixed_pair_leaves_the_hardware_share_to_the_gpu_stage(files):
    @pipeline_def(batch_size=4, num_threads=2, device_id=0)
    def pipe():
        jpegs, _ = fn.readers.file(files=files[0])
        return fn.flip(fn.random_resized_crop(fn.decoders.image(jpegs, device="mixed"), size=(31, 29)), horizontal=1)

    p = pipe()
    p.build()
    (decoder,) = [s for s in p._executor.steps if s.node.schema.name == "decoders.image"]
    assert decoder.finishes_later and decoder.stage == "mixed"
    assert p.run()[0].as_tensor().shape() == [4, 31, 29, 3]
