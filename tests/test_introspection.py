"""Introspection, each checked against NVIDIA DALI where it is installed: DataNode.shape(),
source_info() and property(); output_dtype / output_ndim checks; executor_statistics()
memory figures; save_graph_to_dot_file()."""
import re

import numpy as np
import pytest

import torchdali
from torchdali.sample_data import write_sample_dataset

from conftest import dali_or_skip, requires_cuda

LIBS = ["torchdali", "dali"]


def lib(name):
    return torchdali if name == "torchdali" else dali_or_skip()


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return write_sample_dataset(str(tmp_path_factory.mktemp("intro")), num_images=6, num_classes=2,
                                min_size=16, max_size=24)


def metadata_outputs(L, root, device="cpu"):
    @L.pipeline_def(batch_size=3, num_threads=1, device_id=None if device == "cpu" else 0)
    def pipe():
        jpegs, labels = L.fn.readers.file(file_root=root)
        images = L.fn.decoders.image(jpegs, device="cpu" if device == "cpu" else "mixed")
        small = L.fn.resize(images, size=(5, 5))
        return (images.shape(), images.shape(dtype=L.types.INT32), small.shape(device=device),
                jpegs.source_info(), images.source_info(device=device), small.source_info(),
                L.fn.cast(small, dtype=L.types.FLOAT).source_info(), labels.source_info(),
                images.property("layout"), jpegs.property("layout"), small.property("source_info"))

    p = pipe()
    p.build()
    return [[np.array(out.as_cpu()[i]) if hasattr(out, "as_cpu") else np.array(out[i]) for i in range(len(out))]
            for out in p.run()]


def text(sample):
    return bytes(sample.astype(np.uint8)).decode()


def test_shapes_and_properties_follow_the_samples(root):
    outs = metadata_outputs(torchdali, root)
    shapes, shapes32, small, jpeg_info, image_info, small_info, cast_info, label_info, layout, raw_layout, prop = outs
    assert all(s.dtype == np.int64 and s.shape == (3,) and s[2] == 3 for s in shapes)
    assert all(s.dtype == np.int32 for s in shapes32) and [s.tolist() for s in small] == [[5, 5, 3]] * 3
    names = [text(s) for s in jpeg_info]
    assert names == [f"class_000/img_0000{i}.jpg" for i in (0, 2, 4)]  # relative to file_root, as DALI
    for info in (image_info, small_info, cast_info, prop):
        assert [text(s) for s in info] == names
    assert [text(s) for s in label_info] == [""] * 3
    assert [text(s) for s in layout] == ["HWC"] * 3 and [text(s) for s in raw_layout] == [""] * 3


def test_shapes_and_properties_match_dali(root):
    ours, theirs = metadata_outputs(torchdali, root), metadata_outputs(dali_or_skip(), root)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        for s, t in zip(a, b):
            assert s.dtype == t.dtype and np.array_equal(s, t), f"output {i}"


@requires_cuda
def test_gpu_metadata_matches_the_cpu_pipeline(root):
    cpu, gpu = metadata_outputs(torchdali, root), metadata_outputs(torchdali, root, "gpu")
    for a, b in zip(cpu, gpu):
        assert all(np.array_equal(s, t) for s, t in zip(a, b))


OUTPUT_DECLARATIONS = [
    (dict(output_dtype="FLOAT"), RuntimeError, "output_idx=1 does not match"),
    (dict(output_dtype=["FLOAT", None]), None, None),
    (dict(output_dtype=["FLOAT", "FLOAT"]), RuntimeError, "Data type in the output_idx=1"),
    (dict(output_dtype=["FLOAT"]), RuntimeError, "Lengths of provided output descriptions do not match"),
    (dict(output_ndim=1), RuntimeError, "Number of dimensions in the output_idx=1 does not match"),
    (dict(output_ndim=[1, 0]), None, None),
    (dict(output_ndim=[None, 0], output_dtype=[None, "INT32"]), None, None),
    (dict(output_ndim=[None, 1]), RuntimeError, "Number of dimensions in the output_idx=1"),
    (dict(output_ndim=[1, 0, 3]), RuntimeError, "Lengths of provided output descriptions do not match"),
    (dict(output_dtype="NO_TYPE"), ValueError, "can't be a types.NO_TYPE"),
    (dict(output_dtype=np.float32), TypeError, "`output_dtype` must be either"),
    (dict(output_dtype=["FLOAT", 3]), TypeError, "in the list"),
    (dict(output_ndim=-1), ValueError, "`output_ndim` must be non-negative"),
    (dict(output_ndim=1.0), TypeError, "`output_ndim` must be either"),
]


def _declared(L, kwargs):
    def convert(v):
        if isinstance(v, str):
            return getattr(L.types, v)
        return type(v)(convert(x) for x in v) if isinstance(v, (list, tuple)) else v
    return {k: convert(v) for k, v in kwargs.items()}


@pytest.mark.parametrize("lib_name", LIBS)
@pytest.mark.parametrize("declared, error, match", OUTPUT_DECLARATIONS)
def test_output_declarations_are_checked_as_dali_checks_them(lib_name, declared, error, match):
    L = lib(lib_name)

    def define():
        return L.fn.random.uniform(shape=[2]), L.fn.random.coin_flip()

    def run():
        p = L.pipeline_def(define, batch_size=2, num_threads=1, device_id=None, **_declared(L, declared))()
        p.build()
        p.run()
        return p

    if error is None:
        p = run()
        assert len(p.output_dtype()) == len(p.output_ndim()) == 2
    else:
        with pytest.raises(error, match=re.escape(match)):
            run()


def test_declarations_are_reported_per_output():
    p = torchdali.pipeline_def(lambda: (torchdali.fn.random.uniform(), torchdali.fn.random.coin_flip()),
                               batch_size=1, num_threads=1, device_id=None,
                               output_dtype=torchdali.types.FLOAT, output_ndim=(None, 0))()
    assert p.output_dtype() == [torchdali.types.FLOAT] * 2 and p.output_ndim() == [None, 0]


def statistics(L, **kwargs):
    @L.pipeline_def(batch_size=3, num_threads=1, device_id=None, exec_async=False, exec_pipelined=False,
                    exec_dynamic=False, **kwargs)
    def pipe():
        flip = L.fn.random.coin_flip(name="flip")
        values = L.fn.random.uniform(shape=[2, 5], name="values")
        return flip, L.fn.cast(values, dtype=L.types.UINT8, name="bytes")

    p = pipe()
    p.build()
    before = p.executor_statistics()
    p.run()
    p.run()
    return before, p.executor_statistics()


@pytest.mark.parametrize("lib_name", LIBS)
def test_memory_statistics_per_operator_output(lib_name):
    before, stats = statistics(lib(lib_name), enable_memory_stats=True)
    assert before == {}
    keys = ("real_memory_size", "max_real_memory_size", "reserved_memory_size", "max_reserved_memory_size")
    assert stats["CPU_flip"] == dict(zip(keys, ([12], [4], [12], [4])))
    assert stats["CPU_values"] == dict(zip(keys, ([120], [40], [120], [40])))
    assert stats["CPU_bytes"]["real_memory_size"] == [30] and stats["CPU_bytes"]["max_real_memory_size"] == [10]


@pytest.mark.parametrize("lib_name", LIBS)
@pytest.mark.parametrize("kwargs", [dict(enable_memory_stats=False, exec_dynamic=False),
                                    dict(enable_memory_stats=True, exec_dynamic=True)])
def test_no_statistics_unless_enabled(lib_name, kwargs):
    L = lib(lib_name)

    @L.pipeline_def(batch_size=2, num_threads=1, device_id=None, **kwargs)
    def pipe():
        return L.fn.random.coin_flip(name="flip")

    p = pipe()
    p.build()
    p.run()
    assert p.executor_statistics() == {}


def dot_text(L, tmp_path, device_id=None, **kwargs):
    @L.pipeline_def(batch_size=2, num_threads=1, device_id=device_id)
    def pipe():
        flip = L.fn.random.coin_flip(name="coin")
        values = L.fn.random.uniform(shape=[4, 4, 3], name="noise")
        image = L.fn.cast(values, dtype=L.types.UINT8, name="image")
        return L.fn.flip(image, horizontal=flip, name="flipped"), flip

    path = tmp_path / f"{L.__name__}.dot"
    pipe().save_graph_to_dot_file(str(path), **kwargs)
    return path.read_text()


def edges(text, style=""):
    """Operator -> operator edges (DALI's own MakeContiguous nodes left out)."""
    found = set()
    for a, b, attrs in re.findall(r'^"?([\w\[\]]+)"? -> "?([\w\[\]]+)"?(\[[^\]]*\])?;', text, re.M):
        if "MakeContiguous" not in b and (attrs or "") == style:
            found.add((a, b))
    return found


@pytest.mark.parametrize("show_tensors", [False, True])
def test_dot_file_has_dali_s_edges(tmp_path, show_tensors):
    style = "[style=dotted]" if show_tensors else ""
    ours = dot_text(torchdali, tmp_path, show_tensors=show_tensors)
    expected = {("noise", "image"), ("image", "flipped"), ("coin", "flipped")}
    assert ours.startswith("digraph graphname {\n") and edges(ours, style) == expected
    theirs = dot_text(dali_or_skip(), tmp_path, show_tensors=show_tensors)
    assert edges(theirs, style) == expected


def test_dot_file_tensors_and_colors(tmp_path):
    text = dot_text(torchdali, tmp_path, show_tensors=True, use_colors=True)
    assert '"coin[0]"[shape=box];' in text and '"coin" -> "coin[0]"[label=0];' in text
    assert '"coin[0]" -> "flipped"[label=1];' in text  # the argument input comes after the input
    assert '"image[0]" -> "flipped"[label=0];' in text
    assert text.count('[color="blue"]') == 4 and "style=dotted" in text
    plain = dot_text(torchdali, tmp_path)
    assert "color" not in plain and "shape=box" not in plain


def test_dot_file_colors_stages(tmp_path):
    @torchdali.pipeline_def(batch_size=2, num_threads=1, device_id=0)
    def pipe():
        jpegs, _ = torchdali.fn.readers.file(files=["a.jpg"], name="reader")
        images = torchdali.fn.decoders.image(jpegs, device="mixed", name="decode")
        return torchdali.fn.flip(images, name="flip")

    path = tmp_path / "stages.dot"
    pipe().save_graph_to_dot_file(str(path), use_colors=True)
    text = path.read_text()
    assert '"reader"[color="blue"]' in text and '"decode"[color="cyan"]' in text
    assert '"flip"[color="#76b900"]' in text
