"""The mixed and GPU stages: transfers, GPU operators, streams, the mixed ImageNet pipeline."""
import re

import numpy as np
import pytest
import torch

from torchdali import fn, pipeline_def, types
from torchdali.sample_data import write_sample_dataset
from torchdali.pipeline import Pipeline
from torchdali.tensor_list import TensorListCPU, TensorListGPU

from conftest import requires_cuda

pytestmark = requires_cuda


@pytest.mark.parametrize("exec_async", [True, False])
def test_gpu_transfer_and_gpu_operators(exec_async):
    @pipeline_def(batch_size=4, num_threads=2, device_id=0, seed=1, exec_async=exec_async,
                  exec_pipelined=exec_async)
    def pipe():
        x = fn.external_source(lambda i: np.full((4, 2, 3), i, np.float32), layout="HW")
        g = x.gpu()
        scale = fn.random.uniform(range=(1.0, 2.0))
        return g * 2 + 1, fn.cast(g, dtype=types.UINT8), x, g.shape(device="gpu"), scale, g[0]

    p = pipe()
    for i in range(3):
        y, u8, x, shape, scale, row = p.run()
        assert isinstance(y, TensorListGPU) and isinstance(x, TensorListCPU)
        assert y.layout() == "HW" and y.as_torch().is_cuda
        assert torch.equal(y.as_torch().cpu(), torch.full((4, 2, 3), 2.0 * i + 1))
        assert u8.dtype == types.UINT8 and y.as_cpu().at(0).shape == (2, 3)
        assert shape.as_torch().tolist() == [[2, 3]] * 4 and row.shape() == [[3]] * 4
    assert p.output_stream() is not None


def test_gpu_external_source_and_outputs_on_a_user_stream():
    @pipeline_def(batch_size=2, num_threads=1, device_id=0)
    def pipe():
        return fn.external_source(lambda: [torch.ones(3, device="cuda")] * 2, device="gpu") + 1

    p = pipe()
    stream = torch.cuda.Stream()
    p.schedule_run()
    (out,) = p.outputs(cuda_stream=stream)
    with torch.cuda.stream(stream):
        total = out.as_torch().sum()
    stream.synchronize()
    assert total.item() == 12


def test_cpu_external_source_rejects_gpu_data():
    @pipeline_def(batch_size=1, num_threads=1, device_id=0)
    def pipe():
        return fn.external_source(lambda: [torch.ones(1, device="cuda")])

    with pytest.raises(TypeError, match="GPU data given to a CPU external_source"):
        pipe().run()


def test_mixed_imagenet_pipeline(tmp_path):
    data = write_sample_dataset(str(tmp_path), num_images=24, min_size=240, max_size=300)

    @pipeline_def(batch_size=8, num_threads=4, device_id=0, seed=3)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=data, random_shuffle=True, name="Reader")
        images = fn.decoders.image(jpegs, device="mixed")
        images = fn.crop_mirror_normalize(images, crop=(224, 224), mirror=fn.random.coin_flip(),
                                          crop_pos_x=fn.random.uniform(range=(0, 1)),
                                          mean=[128.0], std=[64.0], dtype=types.FLOAT16)
        return images, labels.gpu(), images.source_info()

    p = pipe()
    assert p.epoch_size("Reader") == 24
    for _ in range(4):
        images, labels, info = p.run()
        batch = images.as_torch()
        assert batch.shape == (8, 3, 224, 224) and batch.dtype == torch.float16 and batch.is_cuda
        assert labels.as_torch().is_cuda and labels.as_torch().shape == (8, 1)
        assert bytes(np.array(info.at(0))).decode().endswith(".jpg")  # CPU data, as in DALI


def test_decode_stage_overlaps_and_matches_the_synchronous_run(tmp_path):
    """With a mixed decoder followed by GPU operators, the asynchronous executor decodes in
    a thread and on a stream of its own: its batches equal those of the synchronous run."""
    import threading

    data = write_sample_dataset(str(tmp_path), num_images=40, min_size=120, max_size=260)

    def build(exec_async):
        @pipeline_def(batch_size=8, num_threads=3, device_id=0, seed=5, exec_async=exec_async,
                      exec_pipelined=exec_async, prefetch_queue_depth=3)
        def pipe():
            jpegs, labels = fn.readers.file(file_root=data, random_shuffle=True)
            images = fn.decoders.image_random_crop(jpegs, device="mixed")
            images = fn.resize(images, size=(64, 64))
            return fn.crop_mirror_normalize(images, mirror=fn.random.coin_flip(), dtype=types.FLOAT), labels

        return pipe()

    sync, overlapped = build(False), build(True)
    for _ in range(10):  # more than an epoch, so the decoder's memory is reused under load
        (a, la), (b, lb) = sync.run(), overlapped.run()
        assert torch.equal(a.as_torch(), b.as_torch()) and torch.equal(la.as_torch(), lb.as_torch())
    assert "torchdali-decode" in {t.name for t in threading.enumerate()}


def test_no_host_sync_on_the_gpu_path(tmp_path):
    """Reading, decoding on the GPU, augmenting: no operation of the GPU path waits for the
    GPU (torch's sync debug mode raises on one), when the outputs go to a CUDA stream."""
    data = write_sample_dataset(str(tmp_path), num_images=16, min_size=120, max_size=200)

    @pipeline_def(batch_size=8, num_threads=2, device_id=0, seed=2, exec_async=False, exec_pipelined=False)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=data, random_shuffle=True)
        images = fn.decoders.image_random_crop(jpegs, device="mixed")
        images = fn.resize(images, size=(48, 48))
        images = fn.crop_mirror_normalize(images, mirror=fn.random.coin_flip(), dtype=types.FLOAT)
        return images, labels.gpu()

    p = pipe()
    p.build()
    stream = torch.cuda.Stream()
    p.schedule_run()
    p.outputs(cuda_stream=stream)  # the first iteration sets everything up
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            p.schedule_run()
            images, labels = p.outputs(cuda_stream=stream)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert images.as_torch().shape == (8, 3, 48, 48) and labels.as_torch().is_cuda


def test_feed_input_with_gpu_arrays_of_every_kind():
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=0, prefetch_queue_depth=1)
    with pipe:
        pipe.set_outputs(fn.external_source(name="x", device="gpu") * 2)
    batch = torch.arange(6, dtype=torch.float32, device="cuda").reshape(2, 3)
    feeds = [batch, [batch[0], batch[1]], torch.utils.dlpack.to_dlpack(batch), batch.cpu().numpy()]
    try:
        import cupy
        feeds.append(cupy.asarray(batch.cpu().numpy()))
    except ImportError:
        pass
    for data in feeds:
        pipe.feed_input("x", data)
        (out,) = pipe.run()
        assert torch.equal(out.as_torch().cpu(), batch.cpu() * 2), type(data)


def _augmenting_pipeline(data, on_error="raise", exec_async=True):
    @pipeline_def(batch_size=8, num_threads=3, device_id=0, seed=11, exec_async=exec_async,
                  exec_pipelined=exec_async)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=data)
        images = fn.decoders.image_random_crop(jpegs, device="mixed", on_error=on_error)
        return fn.resize(images, size=(40, 40), dtype=types.FLOAT), labels.gpu(), jpegs.source_info()

    return pipe()


def _our_gpu_decoder():
    from torchdali.kernels import nvjpeg

    if not nvjpeg.available():
        pytest.skip("built without our nvJPEG decoder")
    return nvjpeg


@pytest.mark.parametrize("exec_async", [True, False])
def test_the_gpu_stage_finishes_what_the_hardware_decoder_started(tmp_path, monkeypatch, exec_async):
    """The decode stage hands the hardware decoder's share over and goes on to the next
    batch; the GPU stage waits for the share (decode_jpegs_finish runs in its thread)."""
    import threading

    nvjpeg = _our_gpu_decoder()
    data = write_sample_dataset(str(tmp_path), num_images=16, min_size=100, max_size=200)
    finished_in, real_finish = [], nvjpeg.decode_jpegs_finish

    def finish(pending):
        finished_in.append(threading.current_thread().name)
        return real_finish(pending)

    monkeypatch.setattr(nvjpeg, "decode_jpegs_finish", finish)
    p = _augmenting_pipeline(data, exec_async=exec_async)
    for _ in range(3):
        images, _, _ = p.run()
        assert images.as_torch().shape == (8, 40, 40, 3)
    assert len(finished_in) >= 3
    assert set(finished_in) == ({"torchdali-gpu"} if exec_async else {threading.current_thread().name})


def _refuse_at_finish(monkeypatch, nvjpeg, sample):
    """decode_jpegs_finish as if the engine had refused `sample` of each batch only then."""
    real_finish = nvjpeg.decode_jpegs_finish

    def finish(pending):
        status = real_finish(pending)
        status[sample] = 6  # NVJPEG_STATUS_EXECUTION_FAILED
        return status

    monkeypatch.setattr(nvjpeg, "decode_jpegs_finish", finish)


def test_a_file_refused_at_finish_is_decoded_on_the_cpu(tmp_path, monkeypatch):
    nvjpeg = _our_gpu_decoder()
    data = write_sample_dataset(str(tmp_path), num_images=8, min_size=100, max_size=200)
    expected, _, _ = _augmenting_pipeline(data).run()
    _refuse_at_finish(monkeypatch, nvjpeg, 3)
    p = _augmenting_pipeline(data)
    images, _, _ = p.run()
    a, b = expected.as_torch(), images.as_torch()
    keep = [i for i in range(8) if i != 3]
    assert torch.equal(a[keep], b[keep])
    # sample 3 comes from the CPU decoder (libjpeg-turbo's IDCT and chroma upsampling)
    assert 0 < (a[3] - b[3]).abs().mean().item() < 6.0
    (stats,) = [v["decoder_backend"] for k, v in p.executor_statistics().items() if "decoder_backend" in v]
    by_hardware, by_cpu = re.fullmatch(r"nvJPEG (?:hardware decoder|hybrid path): (\d+), CPU, one image at a time "
                                       r"\(.*\): (\d+)", stats).groups()  # one of 8 per batch on the CPU
    assert int(by_hardware) == 7 * int(by_cpu) > 0


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_file_refused_at_finish_that_the_cpu_cannot_decode(tmp_path, monkeypatch, on_error):
    """It fails the iteration naming the file, or leaves the iteration with its label and name."""
    from torchdali.operators import decoders

    nvjpeg = _our_gpu_decoder()
    data = write_sample_dataset(str(tmp_path), num_images=8, min_size=100, max_size=200)
    _, labels, names = _augmenting_pipeline(data).run()
    labels, names = labels.as_cpu().as_array().ravel().tolist(), [bytes(names.at(i)).decode() for i in range(8)]
    _refuse_at_finish(monkeypatch, nvjpeg, 2)

    def broken(blob, output_type, orient=True):
        raise ValueError("broken beyond repair")

    monkeypatch.setattr(decoders, "decode_cpu", broken)
    p = _augmenting_pipeline(data, on_error=on_error)
    if on_error == "raise":
        with pytest.raises(RuntimeError, match=rf"cannot decode {re.escape(names[2])}: broken beyond repair"):
            p.run()
        return
    with pytest.warns(UserWarning, match=rf"skipped 1 undecodable sample\(s\) in this batch \({re.escape(names[2])}\)"):
        images, got_labels, got_names = p.run()
    assert images.as_torch().shape == (7, 40, 40, 3)
    assert got_labels.as_cpu().as_array().ravel().tolist() == labels[:2] + labels[3:]
    assert [bytes(got_names.at(i)).decode() for i in range(7)] == names[:2] + names[3:]
