"""The benchmark scripts run (tiny batches on the CPU): they must not rot between GPU runs.
Their figures are not checked here; speed is reported by running them on a GPU."""
import os
import subprocess
import sys

import pytest

pytest.importorskip("torchdali._C", reason="the C++ extension is not built")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_kernel_benchmark_runs_and_prints_every_row():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "kernels.py"), "--device", "cpu",
                          "--batch", "2", "--iters", "1"], capture_output=True, text=True, timeout=300,
                         cwd=ROOT, check=True).stdout
    rows = [line for line in out.splitlines() if line.rstrip().endswith("x")]
    assert len(rows) == 7, out
    assert "crop_mirror_normalize" in out and "rotate" in out
