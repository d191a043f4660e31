"""The benchmark scripts in benchmarks/ run (tiny batches on the CPU): they must not rot
between GPU runs. Their figures are not checked here; speed is reported by running them on a
GPU. The main job, torchdali.bench, has its own tests (test_bench.py)."""
import importlib.util
import os
import re
import subprocess
import sys

import pytest
import torch

from conftest import requires_cuda

pytest.importorskip("torchdali._C", reason="the C++ extension is not built")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The scripts import torchdali from this checkout, installed or not.
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}


def test_kernel_benchmark_runs_and_prints_every_row():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "kernels.py"), "--device", "cpu",
                          "--batch", "2", "--iters", "1"], capture_output=True, text=True, timeout=300,
                         cwd=ROOT, check=True, env=ENV).stdout
    rows = [line for line in out.splitlines() if line.rstrip().endswith("x")]
    assert len(rows) == 9, out
    assert "crop_mirror_normalize" in out and "rotate" in out


@pytest.mark.parametrize("scenario,output", [([], "output: the bytes"),
                                             (["--decode-in-source"], "output: RGB images decoded in the sources")])
def test_external_source_benchmark_runs_and_prints_ratios(scenario, output):
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "external_source.py"), "--images", "16",
                          "--batch", "4", "--workers", "2", "--iters", "3"] + scenario, capture_output=True,
                         text=True, timeout=300, cwd=ROOT, check=True, env=ENV).stdout
    assert "parallel / readers.file" in out and "parallel / single-process" in out, out
    assert output in out and out.count(" images/s ") == 3, out


def test_chain_benchmark_prints_a_row_per_path():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "chain.py"), "--paths", "cpu",
                          "--batch-size", "8", "--iterations", "2", "--repeats", "1", "--warmup", "1"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT, check=True, env=ENV).stdout
    rows = [line for line in out.splitlines() if line.startswith("| cpu |")]
    assert len(rows) == 1, out
    ours = float(rows[0].split("|")[2])
    assert ours > 0, out


def test_profile_lists_the_per_sample_python_calls(tmp_path):
    env = dict(ENV, TMPDIR=str(tmp_path))  # the 512 generated photos go there
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "profile_pipeline.py"), "--device", "cpu",
                          "--batch-size", "8", "--iterations", "1", "--top", "3"], capture_output=True, text=True,
                         timeout=600, cwd=ROOT, check=True, env=env).stdout
    assert "train stage, cpu, batch 8" in out and "Python functions called at least once per sample" in out, out


def load_gpu_memory():
    spec = importlib.util.spec_from_file_location("gpu_memory", os.path.join(ROOT, "benchmarks", "gpu_memory.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_memory_breakdown_counts_live_blocks_at_the_peak_by_site():
    ours = [{"filename": "/x/torchdali/kernels/nvjpeg.py", "line": 51, "name": "decode_jpegs_start"}]
    other = [{"filename": "/x/train.py", "line": 3, "name": "step"}]
    trace = [{"action": "segment_alloc", "addr": 0, "size": 100, "frames": ours},
             {"action": "alloc", "addr": 0, "size": 60, "frames": ours},
             {"action": "alloc", "addr": 60, "size": 30, "frames": other},
             {"action": "free_completed", "addr": 60, "size": 30, "frames": other},
             {"action": "alloc", "addr": 60, "size": 10, "frames": ours}]
    at_peak, peak, reserved = load_gpu_memory().breakdown(trace)
    assert peak == 90 and at_peak == {"kernels/nvjpeg.py:51 (decode_jpegs_start)": 60, "elsewhere": 30}
    assert reserved == {"kernels/nvjpeg.py:51 (decode_jpegs_start)": 100}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_memory_script_prints_the_sites(tmp_path):
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "gpu_memory.py"), "--data",
                          str(tmp_path / "photos"), "--num-images", "64", "--batch-size", "16", "--epochs", "1"],
                         capture_output=True, text=True, timeout=600, cwd=ROOT, check=True, env=ENV).stdout
    assert "val, batch 16: allocated peak" in out and "decode_jpegs_start" in out, out


def run_timeline(tmp_path, device):
    env = dict(ENV, TMPDIR=str(tmp_path))  # the generated photos go there
    return subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "timeline.py"), "--device", device,
                           "--batch-size", "8", "--threads", "2", "--batches", "12", "--num-images", "64"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT, check=True, env=env).stdout


def test_timeline_times_every_stage_of_every_batch(tmp_path):
    out = run_timeline(tmp_path, "cpu")
    # the stages run ahead of the caller: a few more than its 12 batches may be timed
    assert "12 batches in" in out and re.search(r"cpu stage +torchdali-cpu +1\d ", out), out
    assert re.search(r"caller waits +MainThread +12 ", out), out


@requires_cuda
def test_timeline_on_the_gpu_times_the_decode_stage_and_the_decoder(tmp_path):
    out = run_timeline(tmp_path, "gpu")
    for row in (r"decode stage +torchdali-decode +1\d ", r"gpu stage +torchdali-gpu +1\d ",
                r"decode_jpegs_start +torchdali-decode +1\d "):
        assert re.search(row, out), out
    assert "decode stage -> gpu stage" in out, out


def test_readers_benchmark_prints_a_row_per_reader_with_ratios(tmp_path):
    pytest.importorskip("aiohttp", reason="the HTTP row reads through fsspec's http client")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "readers.py"), "--num-images", "24",
                          "--shard-size", "10", "--batch-size", "8", "--threads", "1", "--epochs", "1",
                          "--cache", str(tmp_path)], capture_output=True, text=True, timeout=600, cwd=ROOT,
                         check=True, env=ENV).stdout
    assert "3 shards of up to 10" in out, out
    rows = [line.split("|") for line in out.splitlines() if line.startswith("| readers.")]
    assert [r[1].strip() for r in rows] == ["readers.file, image folder", "readers.webdataset, local shards",
                                            "readers.webdataset, shards over HTTP (local server)"], out
    assert all(float(r[2]) > 0 for r in rows) and float(rows[0][3]) == 1.0, out
    dali_rows = [line.split("|")[1].split(":")[1].strip() for line in out.splitlines() if line.startswith("| DALI ")]
    expected = ["readers.file, image folder", "readers.webdataset, local shards"]
    assert dali_rows == (expected if importlib.util.find_spec("nvidia.dali") else []), out
