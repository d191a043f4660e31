"""The documentation site (mkdocs.yml, docs/): it builds with `mkdocs build --strict`
(warnings are errors), the generated operator reference is current, the operators' examples
run (and give what DALI gives), the pages' code runs, and the performance page's tables and
chart are the README's.

In the pages this file runs, a ```python block runs (in order, in one namespace, on the
CPU); a block that needs a GPU or several processes is fenced ```py and only shown."""
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from torchdali import docs, schema
from torchdali.docs_examples import EXAMPLES, PRELUDE

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
RUN_PAGES = ["index.md", "concepts.md", "distributed.md", "compile.md", "checkpoints.md"]


def read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


@pytest.fixture
def own_tempdir(tmp_path, monkeypatch):
    """The pages write their sample data under tempfile.gettempdir(): here, the test's folder;
    and they run outside any distributed job."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_site_builds_without_warnings(tmp_path):
    pytest.importorskip("mkdocs", reason="the site's builder: pip install -r docs/requirements.txt")
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", os.path.join(ROOT, "mkdocs.yml"),
                          "-d", str(tmp_path / "site")], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    assert (tmp_path / "site" / "operators" / "geometry" / "index.html").exists()


def test_setup_installs_the_builder_and_readme_says_how_to_build():
    assert "docs/requirements.txt" in read("scripts", "setup.sh")
    assert re.search(r"^mkdocs\b", read("docs", "requirements.txt"), re.M)
    readme = read("README.md")
    assert "mkdocs build --strict" in readme and "mkdocs serve" in readme


def test_committed_reference_pages_are_current():
    pages = docs.reference_pages()
    stale = [path for path, text in pages.items() if not os.path.exists(os.path.join(DOCS, path))
             or read("docs", path) != text]
    extra = sorted(set(f"operators/{n}" for n in os.listdir(os.path.join(DOCS, "operators"))) - set(pages))
    assert not stale and not extra, \
        f"stale {stale}, no longer generated {extra}: run `python -m torchdali.docs`"


def test_every_family_page_is_in_the_nav():
    nav = read("mkdocs.yml")
    for path in docs.reference_pages():
        assert f" {path}\n" in nav, f"mkdocs.yml's nav lacks {path}"


def test_families_name_existing_operators_and_every_operator_once():
    public = {op.name for op in docs.public_operators()}
    named = [name for family in docs.FAMILIES for name in family.names]
    assert not set(named) - public, f"unknown operators in docs.FAMILIES: {sorted(set(named) - public)}"
    assert len(named) == len(set(named))
    headings = re.findall(r"^## fn\.(\S+)$", "".join(t for p, t in docs.reference_pages().items() if "/" in p), re.M)
    assert sorted(headings) == sorted(public)


def test_reference_shows_arguments_and_examples():
    page = docs.reference_pages()["operators/geometry.md"]
    section = page[page.index("## fn.rotate\n"):page.index("## fn.slice\n")]
    assert "Devices: cpu, gpu" in section
    assert "| `angle` | float | required | yes, or per frame |" in section   # per-sample, no default
    assert "| `device` |" not in section                          # the common ones are on the index page
    assert EXAMPLES["rotate"].strip() in section
    assert "| `seed` | int | `-1` |" in docs.reference_pages()["operators.md"]
    assert sorted(EXAMPLES) == sorted(set(EXAMPLES) & {op.name for op in docs.public_operators()})


def test_operator_summary_stops_at_the_first_sentence():
    class Op:
        doc = "Paste regions (FHWC: every frame alike) at anchors, e.g. corners: more.\nSecond line."
    assert docs.summary(Op) == "Paste regions (FHWC: every frame alike) at anchors, e.g. corners."


def run_example(code, api="torchdali"):
    """Run PRELUDE and the example (with `api` as the import of fn, pipeline_def and types);
    returns {pipeline name: its outputs' first batch}."""
    prelude = PRELUDE.replace("from torchdali import", f"from {api} import")
    namespace = {}
    exec(compile(prelude + code, "example", "exec"), namespace)
    made = {name: f for name, f in namespace.items() if getattr(f, "_is_pipeline_def", False)}
    outputs = {}
    for name, factory in made.items():
        pipe = factory()
        pipe.build()
        outputs[name] = pipe.run()
    return outputs


def sample_shapes(batch):
    return [tuple(np.asarray(batch.at(i)).shape) for i in range(len(batch))]


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_operator_example_runs(name, own_tempdir):
    outputs = run_example(EXAMPLES[name])
    assert outputs, "the example defines no @pipeline_def function"
    for pipe_name, batches in outputs.items():
        assert batches, pipe_name
        for batch in batches:
            assert len(batch) == 4 and all(np.asarray(batch.at(i)).size > 0 for i in range(4))
    assert f"fn.{name}(" in EXAMPLES[name]


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_operator_example_gives_what_dali_gives(name, own_tempdir):
    """The same code on NVIDIA DALI: outputs of the same types and dimensions, and where
    nothing is random, the same shapes."""
    pytest.importorskip("nvidia.dali")
    ours, theirs = run_example(EXAMPLES[name]), run_example(EXAMPLES[name], api="nvidia.dali")
    assert list(ours) == list(theirs)
    random = "random" in EXAMPLES[name]
    for pipe_name in ours:
        assert len(ours[pipe_name]) == len(theirs[pipe_name])
        for a, b in zip(ours[pipe_name], theirs[pipe_name]):
            assert a.dtype.name == b.dtype.name
            assert {len(s) for s in sample_shapes(a)} == {len(s) for s in sample_shapes(b)}
            if not random:
                assert sample_shapes(a) == sample_shapes(b)


def code_blocks(page):
    return re.findall(r"```python\n(.*?)```", read("docs", page), re.S)


@pytest.mark.parametrize("page", RUN_PAGES)
def test_page_code_runs(page, own_tempdir):
    blocks = code_blocks(page)
    assert len(blocks) >= 2
    namespace = {}
    for i, code in enumerate(blocks):
        exec(compile(code, f"docs/{page} block {i}", "exec"), namespace)


def markdown_tables(text):
    return re.findall(r"(?:^\|.*\n)+", text, re.M)


def test_performance_tables_are_the_readmes():
    tables = markdown_tables(read("docs", "performance.md"))
    readme = read("README.md")
    assert len(tables) >= 8
    for table in tables:
        if "| option |" not in table:
            assert table in readme, f"docs/performance.md has a table the README no longer has:\n{table}"


def test_chart_draws_the_readmes_headline_run(tmp_path):
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import chart
    finally:
        sys.path.pop(0)
    result = chart.from_readme(os.path.join(ROOT, "README.md"))
    assert set(result["stages"]) == {"train", "val"}
    train = {r["label"]: r for r in result["stages"]["train"]["rows"]}
    gpu = train["torchdali, mixed decode (GPU)"]
    assert gpu["images_per_s"] > 0 and gpu["ratio"] == 1.0 and gpu["system"] == "torchdali"
    assert result["date"] in read("docs", "performance.md")
    pytest.importorskip("matplotlib")
    assert chart.main(["--out", str(tmp_path / "chart.png")]) == 0
    assert (tmp_path / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert os.path.exists(os.path.join(DOCS, "images", "benchmark.png"))


def test_pages_show_their_pictures():
    assert "](images/pipeline_graph.png)" in read("docs", "concepts.md")
    assert "](images/samples.png)" in read("docs", "index.md")
    assert "](images/benchmark.png)" in read("docs", "performance.md")


def test_registry_examples_cover_the_common_operators():
    common = {"readers.file", "decoders.image", "resize", "crop_mirror_normalize", "random_resized_crop", "flip",
              "rotate", "warp_affine", "normalize", "crop", "color_twist", "hsv", "brightness_contrast", "cast",
              "reshape", "transpose", "slice", "pad", "external_source", "python_function", "random.uniform",
              "random.coin_flip", "gaussian_blur", "one_hot", "readers.webdataset"}
    assert common <= set(EXAMPLES)
    assert all(schema.get(name) for name in EXAMPLES)
