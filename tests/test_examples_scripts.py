"""The walk-through examples run as a user runs them (a subprocess each, on a small generated
image set) and do what they say: the parallel source's epochs, the three pipeline definitions'
identical batches, finite training losses, one compiled graph for every batch, the pictures
at their sizes; the GPU example says what it needs without a GPU and runs fully with one. The
pictures committed for the docs are there, small, and shown by docs/examples.md."""
import importlib.util
import math
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import requires_cuda
from torchdali.sample_data import write_sample_dataset

ROOT = pathlib.Path(__file__).parent.parent
EXAMPLES = ROOT / "examples"
NUM_IMAGES = 22


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return write_sample_dataset(str(tmp_path_factory.mktemp("images")), num_images=NUM_IMAGES, num_classes=3,
                                min_size=48, max_size=80)


def run(script, *args, env=None):
    """Run examples/`script` with `args`; its stdout, after checking that it exited 0."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    done = subprocess.run([sys.executable, str(EXAMPLES / script), *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{script} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_parallel_external_source_epochs(images):
    out = run("parallel_external_source.py", "--data", images, "--batch-size", 5, "--workers", 2, "--epochs", 2)
    lines = re.findall(r"^(train|val) epoch (\d): (\d+) batches, (\d+) images .*labels in file order: (\w+), "
                       r"read by (\d+) worker processes$", out, re.M)
    # StopIteration after the last whole batch ends each epoch; both pipelines, two epochs each.
    assert [(name, int(e)) for name, e, *_ in lines] == [("train", 0), ("val", 0), ("train", 1), ("val", 1)], out
    for _, _, batches, count, in_order, workers in lines:
        assert (int(batches), int(count), in_order, int(workers)) == (NUM_IMAGES // 5, NUM_IMAGES // 5 * 5, "True", 2)


def test_getting_started(images):
    out = run("getting_started.py", "--data", images, "--batch-size", 4)
    assert "the three give the same batch: True" in out
    assert "images is_dense_tensor: False | labels is_dense_tensor: True" in out
    assert "labels as_tensor: [4, 1] [0, 0, 0, 0]" in out  # unshuffled: the first class's files first
    shuffled = re.search(r"^  labels: \[(.*)\]$", out, re.M).group(1)
    assert sorted(set(map(int, shuffled.split(", ")))) != [0]
    angles = [float(a) for a in re.search(r"angles: \[(.*)\]", out).group(1).split(", ")]
    assert len(angles) == 4 and all(-10 <= a <= 10 for a in angles) and len(set(angles)) > 1
    gpu = "TensorListGPU" if torch.cuda.is_available() else "TensorListCPU"
    assert f"outputs: {gpu} TensorListCPU" in out
    assert len(re.search(r"rotated: \[(.*)\]", out).group(1).split(", ")) == 4


def test_imagenet_training_steps_and_validation(tmp_path):
    for split, n, seed in (("train", 20, 0), ("val", 10, 1)):
        write_sample_dataset(str(tmp_path / split), num_images=n, num_classes=3, min_size=40, max_size=64, seed=seed)
    out = run("imagenet_train.py", "--data", tmp_path, "--steps", 3, "--batch-size", 4, "--crop", 32,
              "--val-size", 36, "--threads", 1)
    steps = re.findall(r"^step (\d+) images \((\d+), 3, 32, 32\) loss (\S+)$", out, re.M)
    assert [int(s) for s, _, _ in steps] == [1, 2, 3] and all(b == "4" for _, b, _ in steps), out
    assert all(math.isfinite(float(loss)) for *_, loss in steps)
    assert re.search(r"validation: 10 images, accuracy (0|1)\.\d+", out), out  # every val image once


def test_compile_iterator_compiles_once(images):
    out = run("compile_iterator.py", "--data", images, "--batch-size", 4, "--image-size", 32, "--epochs", 2,
              "--backend", "aot_eager")
    per_epoch = re.findall(r"^epoch \d: (\d+) steps, mean loss (\S+), graphs compiled so far: (\d+)$", out, re.M)
    assert [(int(s), int(g)) for s, _, g in per_epoch] == [(NUM_IMAGES // 4, 1)] * 2, out  # DROP: one shape
    assert all(math.isfinite(float(loss)) for _, loss, _ in per_epoch)
    assert f"done: {2 * (NUM_IMAGES // 4)} steps, 1 compiled graph(s)" in out


def test_augmented_grid(images, tmp_path):
    out_png = tmp_path / "grid.png"
    tile, columns = 40, 3
    run("augmented_grid.py", "--data", images, "--out", out_png, "--columns", columns, "--tile", tile,
        "--colors", 0)
    grid = np.asarray(Image.open(out_png))
    assert grid.shape == (7 * (tile + 4) + 4, 150 + columns * (tile + 4), 3)

    def tile_at(row, column):
        top, left = 4 + row * (tile + 4), 150 + column * (tile + 4)
        return grid[top:top + tile, left:left + tile]

    for c in range(columns):
        base, flipped = tile_at(0, c), tile_at(2, c)
        assert any(np.array_equal(flipped, f) for f in (base, base[:, ::-1], base[::-1], base[::-1, ::-1]))
        assert not np.array_equal(tile_at(4, c), base)  # color_twist changed it
        assert tile_at(3, c)[0, 0].tolist() == [0, 0, 0] or np.array_equal(tile_at(3, c), base)  # rotated: black fill


def test_pipeline_graph(tmp_path):
    pytest.importorskip("matplotlib")
    dot, png = tmp_path / "graph.dot", tmp_path / "graph.png"
    out = run("pipeline_graph.py", "--out", png, "--dot", dot)
    assert re.search(r"\(11 nodes, 14 edges\)", out), out
    assert Image.open(png).size[0] > 2 * Image.open(png).size[1]  # a left-to-right drawing

    sys.path.insert(0, str(EXAMPLES))  # the example imports the pipeline from imagenet_train.py
    try:
        spec = importlib.util.spec_from_file_location("pipeline_graph", EXAMPLES / "pipeline_graph.py")
        graph = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(graph)
    finally:
        sys.path.remove(str(EXAMPLES))
    nodes, edges = graph.parse_dot(dot.read_text())
    assert nodes["Reader"]["color"] == "blue" and nodes["Reader[1]"]["shape"] == "box"
    assert {nodes[n].get("color") for n in nodes if "[" not in n} == {"blue", "cyan", "#76b900"}
    layer = graph.layers(nodes, edges)
    assert all(layer[t] < layer[h] for t, h, _ in edges)
    coin = next(n for n in nodes if "coin_flip" in n and "[" not in n)
    cmn = next(n for n in nodes if "crop_mirror_normalize" in n and "[" not in n)
    assert layer[cmn] - layer[coin] == 2  # drawn next to its consumer, not in the first column
    xy = graph.positions(nodes, edges, layer)
    chain = ["Reader", "Reader[0]", next(n for n in nodes if "image" in n and "[" not in n)]
    assert len({xy[n][1] for n in chain}) == 1 and len(set(xy.values())) == len(nodes)
    # names with quotes and backslashes, escaped as save_graph_to_dot_file escapes them
    assert graph.parse_dot('"a\\"b\\\\" -> "c"[label=1];') == ({'a"b\\': {}, "c": {}}, [('a"b\\', "c", {"label": "1"})])


def test_gpu_example_says_what_it_needs_without_a_gpu():
    out = run("gpu_python_function.py", env={"CUDA_VISIBLE_DEVICES": ""})
    assert "needs a CUDA GPU and CuPy" in out and "GPU False" in out


@requires_cuda
def test_gpu_python_function(images, tmp_path):
    pytest.importorskip("cupy")
    out = run("gpu_python_function.py", "--data", images, "--batch-size", 3, "--out", tmp_path / "gpu.png")
    assert "python_function outputs: [(300, 300, 3), (300, 300, 3), (300, 300, 3)]" in out
    assert "dl_tensor_python_function gives the same images as python_function: True" in out
    assert Image.open(tmp_path / "gpu.png").size == (3 * 300, 4 * 300)


@pytest.mark.parametrize("name", ["samples.png", "pipeline_graph.png"])
def test_committed_pictures_are_shown_on_the_examples_page(name):
    path = ROOT / "docs" / "images" / name
    assert path.stat().st_size < 300_000 and Image.open(path).format == "PNG"
    assert f"(images/{name})" in (ROOT / "docs" / "examples.md").read_text()


def test_examples_page_lists_every_example():
    page = (ROOT / "docs" / "examples.md").read_text()
    missing = [p.name for p in EXAMPLES.glob("*.py") if f"examples/{p.name}" not in page]
    assert not missing, missing
