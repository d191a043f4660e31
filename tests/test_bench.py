"""The main job, `python -m torchdali.bench`, on a tiny set: every system that can run here
runs and is reported, every one that cannot is a row that says why, and the JSON holds
what the table shows. Its figures are not checked: speed is reported from real runs."""
import importlib
import json
import os
import statistics
import subprocess
import sys

import pytest
import torch

from torchdali import bench
from torchdali.bench import scaling, systems
from torchdali.bench.ranks import merge_rows
from torchdali.sample_data import describe_dataset, write_photo_dataset, write_sample_dataset

pytest.importorskip("torchdali._C", reason="the C++ extension is not built")

ALL_ROWS = ["torchdali-gpu", "torchdali-cpu", "dataloader", "dali-gpu", "dali-cpu"]


def _importable(module):
    try:
        importlib.import_module(module)
        return True
    except Exception:  # noqa: BLE001
        return False


def _runs_here(row_id):
    gpu = torch.cuda.is_available()
    return {"torchdali-gpu": gpu, "torchdali-cpu": True, "dataloader": True,
            "dali-gpu": gpu and _importable("nvidia.dali"), "dali-cpu": _importable("nvidia.dali")}[row_id]


@pytest.fixture(scope="module")
def tiny_set(tmp_path_factory):
    return write_sample_dataset(str(tmp_path_factory.mktemp("bench")), num_images=10, num_classes=3,
                                min_size=60, max_size=90)


def _bench(tiny_set, *extra):
    return bench.main(["--data", tiny_set, "--batch-size", "4", "--epochs", "2", "--threads", "2", *extra])


def test_every_system_is_a_row_and_the_json_holds_the_table(tiny_set, tmp_path, capsys):
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    result = _bench(tiny_set, "--device", "all", "--json", str(out_json), "--plot", str(out_png))
    printed = capsys.readouterr().out
    assert json.loads(out_json.read_text()) == json.loads(json.dumps(result))
    assert result["data"]["images"] == 10 and result["data"]["classes"] == 3
    assert result["versions"]["torch"] == torch.__version__ and result["machine"]["cpu_cores"] >= 1
    assert list(result["stages"]) == ["train", "val"]
    for stage, entry in result["stages"].items():
        rows = {r["system"]: r for r in entry["rows"]}
        assert list(rows) == ALL_ROWS
        for row_id, row in rows.items():
            assert row["label"] in printed
            if not _runs_here(row_id):
                assert row["error"].startswith("not run: "), row
                assert row["error"] in printed
                continue
            assert "error" not in row, row.get("traceback")
            assert len(row["epoch_images_per_s"]) == 2 and all(r > 0 for r in row["epoch_images_per_s"])
            assert row["images_per_s"] == pytest.approx(statistics.median(row["epoch_images_per_s"]), rel=1e-3)
            assert row["batch_shape"][1:] == [3, 224, 224]
            assert row["host_mib"] is not None
            assert (row["gpu_mib"] is not None) == (row["path"] == "gpu")
            reference = rows[f"torchdali-{row['path']}"]
            assert row["ratio_to"] == reference["system"]
            assert row["ratio"] == pytest.approx(row["images_per_s"] / reference["images_per_s"], abs=1e-3)
            epochs = row["epoch_images_per_s"]
            assert f"| {row['images_per_s']:,.0f} | {min(epochs):,.0f}–{max(epochs):,.0f} |" in printed
        assert rows["torchdali-cpu"]["ratio"] == 1.0
    assert out_png.exists() == _importable("matplotlib")


def test_a_failing_system_is_reported_and_the_others_still_run(tiny_set, monkeypatch, capsys):
    def broken_open(self, *args):
        raise RuntimeError("worker exploded\nsecond line")

    monkeypatch.setattr(systems.DataLoaderSystem, "open", broken_open)
    monkeypatch.setattr(systems, "_dali_import_error", lambda: "nvidia.dali is not installed (pip install x)")
    result = _bench(tiny_set, "--device", "cpu", "--stages", "val")
    rows = {r["system"]: r for r in result["stages"]["val"]["rows"]}
    assert list(rows) == ["torchdali-cpu", "dataloader", "dali-cpu"]
    assert rows["dataloader"]["error"] == "RuntimeError: worker exploded"
    assert "broken_open" in rows["dataloader"]["traceback"]
    assert rows["dali-cpu"]["error"] == "not run: nvidia.dali is not installed (pip install x)"
    assert rows["torchdali-cpu"]["images_per_s"] > 0
    assert "| RuntimeError: worker exploded |" in capsys.readouterr().out


def test_the_two_operator_train_stage_runs_on_request(tiny_set):
    result = _bench(tiny_set, "--device", "cpu", "--systems", "torchdali", "--stages", "train-2op")
    (row,) = result["stages"]["train-2op"]["rows"]
    assert "error" not in row, row.get("traceback")
    assert row["batch_shape"][1:] == [3, 224, 224]


def test_systems_and_stages_select_rows(tiny_set):
    result = _bench(tiny_set, "--device", "cpu", "--systems", "dataloader", "--stages", "train")
    assert list(result["stages"]) == ["train"]
    rows = result["stages"]["train"]["rows"]
    assert [r["system"] for r in rows] == ["dataloader"] and rows[0]["images_per_s"] > 0
    assert "ratio" not in rows[0]  # no torchdali row to compare with


def test_the_plot_says_why_without_matplotlib(tiny_set, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails
    _bench(tiny_set, "--device", "cpu", "--systems", "torchdali", "--stages", "val",
           "--plot", str(tmp_path / "p.png"))
    assert "matplotlib is not installed" in capsys.readouterr().err
    assert not (tmp_path / "p.png").exists()


@pytest.mark.parametrize("argv,message", [
    (["--systems", "torchdali,pytorch"], "unknown system: pytorch"),
    (["--stages", "test"], "unknown stage: test"),
    (["--epochs", "0"], "--epochs must be at least 1"),
    (["--device", "tpu"], "invalid choice: 'tpu'"),
])
def test_bad_arguments_are_named(argv, message, capsys):
    with pytest.raises(SystemExit):
        bench.main(argv)
    assert message in capsys.readouterr().err


def test_a_missing_data_folder_is_named(tmp_path):
    with pytest.raises(SystemExit, match="no such directory"):
        bench.main(["--data", str(tmp_path / "nowhere")])


def test_the_module_runs_as_a_program(tiny_set):
    out = subprocess.run([sys.executable, "-m", "torchdali.bench", "--data", tiny_set, "--batch-size", "5",
                          "--epochs", "1", "--threads", "1", "--device", "cpu", "--systems", "torchdali"],
                         capture_output=True, text=True, timeout=300, check=True)
    assert "| torchdali, CPU |" in out.stdout and "1.00×" in out.stdout
    assert "warm-up" in out.stderr and "epoch 1/1" in out.stderr  # the progress, a line per epoch in a log


def test_the_generated_set_is_photo_like_and_made_once(tmp_path):
    root = write_photo_dataset(str(tmp_path / "a"), num_images=80, workers=2)
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".jpg"))
    assert len(files) == 80
    from PIL import Image, JpegImagePlugin
    for path in files:
        assert 60 <= os.path.getsize(path) / 1024 <= 120, path
        with Image.open(path) as im:
            assert 300 <= min(im.size) and max(im.size) <= 800, im.size
            assert JpegImagePlugin.get_sampling(im) == 2 and not im.info.get("progressive")  # 4:2:0, baseline
    info = describe_dataset(root)
    assert info["images"] == 80 and info["classes"] == 10
    assert 420 <= info["mean_width"] <= 560 and 360 <= info["mean_height"] <= 470
    # The same files whether written by forked workers or serially; found complete the second time.
    serial = write_photo_dataset(str(tmp_path / "b"), num_images=80, workers=1)
    assert [open(f, "rb").read() for f in files] == [open(f.replace(root, serial), "rb").read() for f in files]
    stamps = [os.path.getmtime(f) for f in files]
    write_photo_dataset(root, num_images=80, workers=2)
    assert [os.path.getmtime(f) for f in files] == stamps


# --- a job of several ranks (torchrun), and the scaling comparison ---

def test_merged_rows_count_every_rank_over_the_slowest():
    def row(images, seconds, cores):
        return {"system": "torchdali-cpu", "label": "torchdali, CPU", "path": "cpu", "batch_shape": [4, 3, 224, 224],
                "images_per_s": 1.0, "epoch_images": images, "epoch_seconds": seconds, "cpu_cores_used": cores,
                "host_cpu_busy": 0.5, "setup_s": 1.0, "gpu_mib": None, "gpu_torch_peak_mib": None,
                "host_mib": 10.0, "host_start_mib": 100.0}

    merged = merge_rows([row([5, 5, 5], [1.0, 0.5, 0.25], 1.5), row([4, 4, 4], [2.0, 0.25, 0.5], 2.0)])
    assert merged["epoch_images_per_s"] == [4.5, 18.0, 18.0]  # 9 images over the slower rank's seconds
    assert merged["images_per_s"] == 18.0 and merged["ranks"] == 2
    assert merged["cpu_cores_used"] == 3.5 and merged["host_mib"] == 20.0
    failed = merge_rows([row([5], [1.0], 1.0), {"system": "torchdali-cpu", "label": "torchdali, CPU", "path": "cpu",
                                                  "error": "RuntimeError: boom"}])
    assert failed["error"] == "rank 1: RuntimeError: boom" and "images_per_s" not in failed


def test_the_scaling_job_runs_each_rank_count_on_its_shards(tiny_set, tmp_path, capsys):
    """Three ranks on ten images: shards of 3, 3 and 4, which the ranks take in turn, each epoch's count checked."""
    systems_here = "torchdali,dali" if _importable("nvidia.dali") else "torchdali"
    summary = scaling.main(["--ranks", "1,3", "--epochs", "1", "--project", "8", "--json", str(tmp_path / "s.json"),
                            "--data", tiny_set, "--batch-size", "2", "--device", "cpu", "--systems", systems_here,
                            "--stages", "val"])
    printed = capsys.readouterr().out
    assert json.loads((tmp_path / "s.json").read_text()) == json.loads(json.dumps(summary))
    job = summary["runs"][1]
    assert job["settings"]["ranks"] == 3 and job["settings"]["epochs"] == 3  # as many images a rank as one rank
    for row in job["stages"]["val"]["rows"]:
        assert "error" not in row, row.get("traceback")
        assert row["ranks"] == 3 and len(row["rank_images_per_s"]) == 3 and len(row["epoch_images_per_s"]) == 3
    rows = summary["stages"]["val"]
    assert [(r["system"], r["ranks"]) for r in rows] == [(s, n) for s in ("torchdali-cpu", "dali-cpu")
                                                         if s.split("-")[0] in systems_here for n in (1, 3)]
    for r in rows:
        one = next(o for o in rows if o["system"] == r["system"] and o["ranks"] == 1)
        assert r["efficiency"] == pytest.approx(r["images_per_s"] / (r["ranks"] * one["images_per_s"]), abs=1e-3)
        assert f"| {r['label']} | {r['ranks']} | {r['threads']} | {r['images_per_s']:,.0f} |" in printed
    assert {p["system"] for p in summary["projection"]["val"]} == {r["system"] for r in rows}
    assert "Projection, not a measurement: 8 ranks" in printed
