"""Long runs: memory stays flat over 30 epochs of a CPU pipeline fed by a parallel
external_source (the shared-memory slots, the workers' results and the executor's buffers
are all reused, not grown), and over 20 epochs of the benchmark's training stage on the GPU
(the decoder's state, staging buffers and torch's cached blocks reused)."""
import os

import numpy as np
import pytest
import torch

import torchdali
from torchdali import fn, pipeline_def, types
from torchdali.bench.stages import define_pipeline
from torchdali.plugin.pytorch import DALIGenericIterator
from torchdali.sample_data import write_photo_dataset

from conftest import fork_or_skip, requires_cuda

EPOCHS = 30
BATCH = 8
ITERATIONS = 6
# Allowed growth of the pipeline process's and its workers' resident memory from the end of
# epoch 3 (everything allocated once) to the end of epoch 30.
BOUND_MIB = 8


def resident_mib(pids):
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            pass
    return total / 1024


def children():
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == os.getpid():
                        out.append(int(d))
            except OSError:
                continue
    return out


def images(info):
    if info.iteration >= ITERATIONS:
        raise StopIteration
    rng = np.random.default_rng(info.idx_in_epoch + 1000 * info.epoch_idx)
    h, w = 40 + info.idx_in_batch * 3, 50 + info.iteration * 5  # shapes vary within and across batches
    return rng.integers(0, 256, (h, w, 3), dtype=np.uint8)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc")
def test_memory_stays_flat_over_30_epochs_with_a_parallel_source():
    fork_or_skip()

    @pipeline_def(batch_size=BATCH, num_threads=2, device_id=None, py_num_workers=2, py_start_method="fork")
    def pipe():
        x = fn.external_source(images, batch=False, parallel=True, layout="HWC")
        x = fn.resize(x, size=(32, 32))
        return fn.crop_mirror_normalize(x, crop=(28, 28), mean=[128.0] * 3, std=[64.0] * 3,
                                        mirror=fn.random.coin_flip(), dtype=types.FLOAT)

    p = pipe()
    p.build()
    readings = []
    for epoch in range(EPOCHS):
        batches = 0
        while True:
            try:
                (out,) = p.run()
            except StopIteration:
                p.reset()
                break
            assert tuple(out.as_torch().shape) == (BATCH, 3, 28, 28)
            batches += 1
        assert batches == ITERATIONS
        readings.append(resident_mib([os.getpid()] + children()))
    growth = readings[-1] - readings[2]
    print(f"resident memory, pipeline and workers: {readings[2]:.1f} MiB after epoch 3, {readings[-1]:.1f} MiB "
          f"after epoch {EPOCHS} (+{growth:.1f}); bound +{BOUND_MIB}")
    assert growth < BOUND_MIB, readings


GPU_EPOCHS = 20
GPU_BATCH = 64
GPU_IMAGES = 1024
# Allowed growth from the end of epoch 3 to the end of epoch 20, of the process's resident
# memory and of the GPU memory in use (torch's reserved blocks, and the device's used memory,
# which also counts what the decoder allocates outside torch). One batch of the stage's
# output alone is 37 MiB: a batch kept per epoch would exceed both.
GPU_BOUND_MIB = 32


@requires_cuda
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc")
def test_gpu_memory_stays_flat_over_20_epochs_of_the_training_stage(tmp_path):
    data = write_photo_dataset(str(tmp_path / "photos"), num_images=GPU_IMAGES)
    pipe = define_pipeline(torchdali, "train")(data, True, batch_size=GPU_BATCH, num_threads=4, device_id=0, seed=7)
    pipe.build()
    loader = DALIGenericIterator([pipe], ["images", "labels"], reader_name="Reader", auto_reset=True)
    readings = []
    for epoch in range(GPU_EPOCHS):
        images = 0
        for (batch,) in loader:
            assert batch["images"].shape[1:] == (3, 224, 224) and batch["images"].is_cuda
            images += batch["images"].shape[0]
        assert images == GPU_IMAGES
        torch.cuda.synchronize()
        free, total = torch.cuda.mem_get_info()
        readings.append((resident_mib([os.getpid()]), torch.cuda.memory_reserved() / 2**20, (total - free) / 2**20))
    first, last = readings[2], readings[-1]
    names = ("resident", "GPU reserved by torch", "GPU used on the device")
    print("; ".join(f"{name}: {a:.1f} MiB after epoch 3, {b:.1f} after epoch {GPU_EPOCHS} (+{b - a:.1f})"
                    for name, a, b in zip(names, first, last)) + f"; bound +{GPU_BOUND_MIB}")
    for name, a, b in zip(names, first, last):
        assert b - a < GPU_BOUND_MIB, (name, readings)
