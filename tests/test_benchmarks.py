"""The benchmark scripts in benchmarks/ run (tiny batches on the CPU): they must not rot
between GPU runs. Their figures are not checked here; speed is reported by running them on a
GPU. The main job, torchdali.bench, has its own tests (test_bench.py)."""
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
    assert len(rows) == 9, out
    assert "crop_mirror_normalize" in out and "rotate" in out


@pytest.mark.parametrize("scenario,output", [([], "output: the bytes"),
                                             (["--decode-in-source"], "output: RGB images decoded in the sources")])
def test_external_source_benchmark_runs_and_prints_ratios(scenario, output):
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "external_source.py"), "--images", "16",
                          "--batch", "4", "--workers", "2", "--iters", "3"] + scenario, capture_output=True,
                         text=True, timeout=300, cwd=ROOT, check=True).stdout
    assert "parallel / readers.file" in out and "parallel / single-process" in out, out
    assert output in out and out.count(" images/s ") == 3, out


def test_chain_benchmark_prints_a_row_per_path():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "chain.py"), "--paths", "cpu",
                          "--batch-size", "8", "--iterations", "2", "--repeats", "1", "--warmup", "1"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT, check=True).stdout
    rows = [line for line in out.splitlines() if line.startswith("| cpu |")]
    assert len(rows) == 1, out
    ours = float(rows[0].split("|")[2])
    assert ours > 0, out


def test_profile_lists_the_per_sample_python_calls(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path))  # the 512 generated photos go there
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "profile_pipeline.py"), "--device", "cpu",
                          "--batch-size", "8", "--iterations", "1", "--top", "3"], capture_output=True, text=True,
                         timeout=600, cwd=ROOT, check=True, env=env).stdout
    assert "train stage, cpu, batch 8" in out and "Python functions called at least once per sample" in out, out
