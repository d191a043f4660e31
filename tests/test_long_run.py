"""Long runs: memory stays flat over 30 epochs of a CPU pipeline fed by a parallel
external_source (the shared-memory slots, the workers' results and the executor's buffers
are all reused, not grown)."""
import os

import numpy as np
import pytest

from torchdali import fn, pipeline_def, types

from conftest import fork_or_skip

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
