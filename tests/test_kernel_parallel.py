"""torchdali's CPU threads (csrc/parallel.h), which every C++ kernel shares its batch out over:
as many as the pipelines ask for whatever OMP_NUM_THREADS says, safe to call from many
threads at once, and usable in a process forked from one whose threads were running."""
import os
import subprocess
import sys
import textwrap
import threading

import pytest
import torch

pytest.importorskip("torchdali._C", reason="the C++ extension is not built")

from torchdali.kernels import request_cpu_threads  # noqa: E402
from torchdali.kernels.resize import resize  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(code, **env):
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": ROOT, **env})
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_the_pool_starts_at_torchs_thread_count_and_grows_to_what_pipelines_ask():
    out = _run("""
        import torch
        from torchdali import fn, pipeline_def
        import torchdali.kernels.io  # loads the extension

        print(torch.ops.torchdali.cpu_threads(), torch.get_num_threads())

        @pipeline_def(batch_size=2, device_id=None)
        def numbers():
            return fn.random.uniform(range=[0, 1])

        numbers(num_threads=5).build()
        print(torch.ops.torchdali.cpu_threads())
        numbers(num_threads=2).build()  # never fewer
        print(torch.ops.torchdali.cpu_threads(), torch.get_num_threads())
        """, OMP_NUM_THREADS="1")  # as torchrun sets it
    assert out.split() == ["1", "1", "5", "5", "1"]  # torch's own threads are left alone


def test_a_bad_thread_count_is_named():
    with pytest.raises(RuntimeError, match=r"request_cpu_threads: n must be in \[1, 4096\], got 0"):
        request_cpu_threads(0)


def _batch(seed, n=24):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (int(h), int(w), 3), dtype=torch.uint8, generator=g)
            for h, w in torch.randint(9, 70, (n, 2), generator=g)]


def test_kernels_called_from_many_threads_at_once_give_the_serial_results():
    request_cpu_threads(4)
    batches = [_batch(seed) for seed in range(8)]
    sizes = [[(17, 23)] * len(b) for b in batches]
    expected = [resize(b, s) for b, s in zip(batches, sizes)]
    results = [None] * len(batches)

    def work(i):
        for _ in range(5):
            results[i] = resize(batches[i], sizes[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(batches))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got, want in zip(results, expected):
        assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_a_forked_child_runs_the_kernels():
    """The parent's pool has running threads; the child has none of them and must not wait
    for them (nor for a lock one of them held)."""
    out = _run("""
        import os, threading, torch
        from torchdali.kernels import request_cpu_threads
        from torchdali.kernels.resize import resize

        request_cpu_threads(4)
        images = [torch.full((40 + i, 50, 3), i, dtype=torch.uint8) for i in range(32)]
        want = resize(images, [(20, 20)] * 32)
        busy = threading.Thread(target=lambda: [resize(images, [(20, 20)] * 32) for _ in range(200)])
        busy.start()  # the pool is at work while the process forks
        pid = os.fork()
        if pid == 0:
            got = resize(images, [(20, 20)] * 32)
            os._exit(0 if all(torch.equal(a, b) for a, b in zip(got, want)) else 3)
        busy.join()
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
        """)
    assert out.split() == ["0"]
