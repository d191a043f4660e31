"""fn.multi_paste against NVIDIA DALI: pixels exactly equal on random images, the same
errors for the same bad regions, and the order of overlapping pastes."""
import numpy as np
import pytest

import torchdali
from torchdali import types

from conftest import as_numpy_batch, assert_batches_equal, constant_source, dali_or_skip, requires_cuda

RNG = np.random.default_rng(7)


def ids(*rows):
    """Per-sample in_ids."""
    return [np.array(r, np.int32) for r in rows]


def pairs(*rows):
    """Per-sample [regions, 2] int32 coordinates."""
    return [np.array(r, np.int32).reshape(-1, 2) for r in rows]


def run(lib, images, extra=(), layout="HWC", batch_size=None, device="cpu", **kwargs):
    """One iteration of lib.fn.multi_paste(images, *extra, **kwargs): per-sample lists of arrays
    become argument inputs; torchdali enums become lib's."""
    @lib.pipeline_def(batch_size=batch_size or len(images), num_threads=2,
                      device_id=None if device == "cpu" else 0, seed=1)
    def pipe():
        xs = [lib.fn.external_source(constant_source(b), layout=layout) for b in (images,) + tuple(extra)]
        if device == "gpu":
            xs = [x.gpu() for x in xs]
        named = {k: lib.fn.external_source(constant_source(v)) for k, v in kwargs.items()
                 if isinstance(v, list) and v and isinstance(v[0], np.ndarray)}
        consts = {k: getattr(lib.types, v.name) if isinstance(v, types.DALIDataType) else v
                  for k, v in kwargs.items() if k not in named}
        return lib.fn.multi_paste(*xs, **named, **consts)

    p = pipe()
    p.build()
    out = p.run()[0]
    return as_numpy_batch(out), out.layout()


def compare(images, **kwargs):
    dali = dali_or_skip()
    ref, ref_layout = run(dali, images, **kwargs)
    got, layout = run(torchdali, images, **kwargs)
    assert layout == ref_layout
    assert_batches_equal(got, ref)
    return got


def random_mosaic(images, out_hw, rng, max_pastes=5):
    """Random in_ids (other samples of the batch too), regions inside their sources and
    anchors inside the canvas; regions overlap freely."""
    n = len(images)
    ids = [rng.integers(0, n, rng.integers(0, max_pastes + 1)).astype(np.int32) for _ in range(n)]
    shapes, in_anchors, out_anchors = [], [], []
    for pasted in ids:
        src = np.array([images[k].shape[:2] for k in pasted], np.int64).reshape(-1, 2)
        size = np.minimum(rng.integers(0, src + 1), out_hw)
        shapes.append(size.astype(np.int32))
        in_anchors.append(rng.integers(0, src - size + 1).astype(np.int32).reshape(-1, 2))
        out_anchors.append(rng.integers(0, np.asarray(out_hw) - size + 1).astype(np.int32).reshape(-1, 2))
    return dict(in_ids=ids, shapes=shapes, in_anchors=in_anchors, out_anchors=out_anchors)


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mosaic_from_other_samples_vs_dali(channels, seed):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 40, (6, 2)) * 2 + 1  # odd sizes
    images = [rng.integers(0, 256, (h, w, channels), dtype=np.uint8) for h, w in sizes]
    out_hw = (37, 51)
    got = compare(images, output_size=list(out_hw), **random_mosaic(images, out_hw, rng))
    assert all(g.shape == out_hw + (channels,) for g in got)


def test_uniform_inputs_give_the_canvas_size_vs_dali():
    images = [RNG.integers(0, 256, (23, 17, 3), dtype=np.uint8) for _ in range(5)]
    got = compare(images, **random_mosaic(images, (23, 17), np.random.default_rng(3)))
    assert [g.shape for g in got] == [(23, 17, 3)] * 5


def test_relative_regions_vs_dali():
    rng = np.random.default_rng(4)
    images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in ((31, 45), (19, 27), (40, 13))]
    floats = lambda *shape: rng.random(shape).astype(np.float32)  # noqa: E731
    half = [floats(2, 2) * 0.5 for _ in images]  # anchors and shapes up to half: regions stay inside
    compare(images, in_ids=ids([1, 2], [0, 0], [2, 1]), in_anchors_rel=half,
            shapes_rel=[floats(2, 2) * 0.5 for _ in images], out_anchors_rel=[floats(2, 2) * 0.5 for _ in images],
            output_size=[29, 33])
    # the full extents: anchor 0 and shape 1 cover the source; out anchor 1 of a 0-size region
    compare(images, in_ids=ids([0], [1], [2]), in_anchors_rel=[np.zeros((1, 2), np.float32)] * 3,
            shapes_rel=[np.ones((1, 2), np.float32)] * 3, output_size=[40, 45])


def test_several_input_batches_vs_dali():
    a = [RNG.integers(0, 256, (15, 21, 3), dtype=np.uint8) for _ in range(3)]
    b = [RNG.integers(0, 256, (15, 21, 3), dtype=np.uint8) for _ in range(3)]
    compare(a, extra=(b,), in_anchors=pairs([[0, 0], [2, 3]], [[1, 1], [0, 0]], [[0, 0], [5, 5]]),
            shapes=pairs([[10, 10], [8, 9]], [[14, 20], [7, 7]], [[3, 4], [10, 16]]),
            out_anchors=pairs([[5, 11], [0, 0]], [[0, 0], [8, 14]], [[12, 17], [2, 3]]))


def test_sequences_from_several_inputs_vs_dali():
    a = [RNG.integers(0, 256, (2, 9, 11, 3), dtype=np.uint8) for _ in range(3)]
    b = [RNG.integers(0, 256, (2, 9, 11, 3), dtype=np.uint8) for _ in range(3)]
    got = compare(a, extra=(b,), layout="FHWC", batch_size=8, in_anchors=pairs([[0, 0], [1, 2]]) * 3,
                  shapes=pairs([[9, 11], [5, 4]]) * 3, out_anchors=pairs([[0, 0], [3, 6]]) * 3)
    for x, y, g in zip(a, b, got):  # every frame alike: frame f of the output from frame f of the inputs
        np.testing.assert_array_equal(g[:, 3:8, 6:10], y[:, 1:6, 2:6])
        np.testing.assert_array_equal(g[:, :3], x[:, :3])


@pytest.mark.parametrize("in_type, dtype", [(np.float32, types.UINT8), (np.uint8, types.FLOAT), (np.int16, None),
                                            (np.int32, types.INT16), (np.float32, types.INT32)])
def test_types_vs_dali(in_type, dtype):
    rng = np.random.default_rng(5)
    values = rng.normal(100, 300, (3, 6, 8, 3))
    values[0, 0, :6, 0] = [2.5, -0.5, 1.5, 254.5, 255.5, -3.5]  # halves round away from zero
    images = [v.astype(in_type) for v in values]
    kwargs = dict(in_ids=ids([0, 2], [1], [2, 0]), shapes=pairs([[6, 8], [2, 3]], [[6, 8]], [[6, 8], [3, 3]]),
                  out_anchors=pairs([[0, 0], [4, 5]], [[0, 0]], [[0, 0], [1, 1]]))
    got = compare(images, **kwargs) if dtype is None else compare(images, dtype=dtype, **kwargs)
    assert got[0].dtype == (images[0].dtype if dtype is None else types.to_numpy_type(dtype))


def test_later_pastes_cover_earlier_ones():
    images = [np.full((4, 4, 1), v, np.uint8) for v in (10, 20, 30)]
    got, layout = run(torchdali, images, in_ids=ids([0, 1, 2], [2, 1], []),
                      shapes=pairs([[4, 4], [3, 3], [2, 2]], [[4, 4], [2, 2]], []),
                      out_anchors=pairs([[0, 0], [1, 1], [2, 2]], [[0, 0], [0, 0]], []), output_size=[5, 5])
    expected = np.zeros((5, 5), np.uint8)
    expected[:4, :4] = 10
    expected[1:4, 1:4] = 20
    expected[2:4, 2:4] = 30
    np.testing.assert_array_equal(got[0][..., 0], expected)
    assert (got[1][:2, :2] == 20).all() and (got[1][2:4, 2:4] == 30).all() and got[1][4:].max() == 0
    assert not got[2].any() and layout == "HWC"


def test_edge_cases_vs_dali():
    images = [RNG.integers(0, 256, (7, 9, 3), dtype=np.uint8) for _ in range(3)]
    compare(images, in_ids=ids([], [], []))  # nothing pasted: zero canvases
    compare(images, in_ids=[2, 0])  # one constant list for every output
    compare(images, in_ids=ids([0], [1], [2]), shapes=pairs([[0, 4]], [[3, 0]], [[0, 0]]))  # empty regions
    compare(images, in_ids=ids([], [], []), output_size=[0, 5])  # empty canvases
    compare(images, layout="", in_ids=ids([1], [2], [0]))  # no layout: HWC
    compare(images, in_ids=ids([0], [1], [2]), output_size=ids([9, 12], [7, 9], [11, 10]))  # per-sample canvas
    mixed = [RNG.integers(0, 256, (7, 9, c), dtype=np.uint8) for c in (1, 3, 3)]
    got = compare(mixed, in_ids=ids([0], [0], []))  # channels come from what is pasted
    assert [g.shape[2] for g in got] == [1, 1, 3]


def test_source_info_names_the_pasted_samples_as_in_dali(tmp_path):
    from PIL import Image

    (tmp_path / "c").mkdir()
    for k in range(3):
        Image.fromarray(np.full((6, 8, 3), 40 * k, np.uint8)).save(tmp_path / "c" / f"{k}.png")

    def infos(lib):
        @lib.pipeline_def(batch_size=3, num_threads=1, device_id=None, seed=1)
        def pipe():
            data, _ = lib.fn.readers.file(file_root=str(tmp_path))
            images = lib.fn.decoders.image(data, device="cpu")
            return lib.fn.multi_paste(images, in_ids=lib.fn.external_source(constant_source(ids([2, 0], [], [1]))))

        p = pipe()
        p.build()
        out = p.run()[0]
        return [out[i].source_info() for i in range(3)]

    got = infos(torchdali)
    assert got == infos(dali_or_skip())
    first, second = got[0].split(";")
    assert first.endswith("2.png") and second.endswith("0.png") and got[1] == "" and got[2].endswith("1.png")


BAD = {
    "id out of the batch": (dict(in_ids=ids([3], [0], [0])), "names sample 3"),
    "negative id": (dict(in_ids=ids([-1], [0], [0])), "names sample -1"),
    "region outside the canvas": (dict(in_ids=[0], out_anchors=pairs([[1, 0]]) * 3), "within the output canvas"),
    "region outside the source": (dict(in_ids=[0], in_anchors=pairs([[1, 0]]) * 3, shapes=pairs([[5, 1]]) * 3),
                                  "within its source"),
    "negative shape": (dict(in_ids=[0], shapes=pairs([[-1, 1]]) * 3), "within its source"),
    "negative anchor": (dict(in_ids=[0], in_anchors=pairs([[-1, 0]]) * 3, shapes=pairs([[1, 1]]) * 3),
                        "within its source"),
    "three coordinates": (dict(in_ids=[0], in_anchors=[np.zeros((1, 3), np.int32)] * 3), "`in_anchors`.*shape"),
    "too many anchors": (dict(in_ids=[0], out_anchors=pairs([[0, 0], [0, 0]]) * 3), "`out_anchors`.*shape"),
    "absolute and relative": (dict(in_ids=[0], shapes=pairs([[1, 1]]) * 3,
                                   shapes_rel=[np.full((1, 2), 0.5, np.float32)] * 3), "cannot be given together"),
    "relative above 1": (dict(in_ids=[0], in_anchors_rel=[np.array([[1.1, 0]], np.float32)] * 3),
                         r"`in_anchors_rel` must be in \[0, 1\]"),
    "one output extent": (dict(in_ids=[0], output_size=[20]), "output_size"),
    "negative output size": (dict(in_ids=[0], output_size=[-1, 3]), "must not be negative"),
    "channels disagree": (dict(in_ids=ids([0, 1], [0], [0])), "different numbers of channels"),
    "integer ids as floats": (dict(in_ids=[np.array([0.0], np.float32)] * 3), "in_ids"),
    "ids with two inputs": (dict(in_ids=[0], extra=("same",)), "exactly one input batch"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_regions_are_errors_as_in_dali(case):
    kwargs, message = BAD[case]
    kwargs = dict(kwargs)
    images = [RNG.integers(0, 256, (5, 7, c), dtype=np.uint8) for c in ((1, 3, 3) if "channels" in case else (3,) * 3)]
    if "extra" in kwargs:
        kwargs["extra"] = (images,)
    with pytest.raises(Exception):
        run(dali_or_skip(), images, **kwargs)
    with pytest.raises((ValueError, TypeError, IndexError), match=f"multi_paste.*{message}"):
        run(torchdali, images, **kwargs)


@pytest.mark.parametrize("images, kwargs, message", [
    ([np.zeros((5, 7, 3), np.float16)] * 2, dict(in_ids=[0]), "FLOAT16 is not supported"),
    ([np.zeros((5, 7, 3), np.uint8)] * 2, dict(in_ids=[0], dtype=types.FLOAT16), "dtype"),
    ([np.zeros((5, 1 + i, 3), np.uint8) for i in range(2)], dict(in_ids=[0]), "one size"),
    ([np.zeros((2, 5, 7, 3), np.uint8)] * 2, dict(in_ids=[0], layout="FHWC"), "sequences"),
    ([np.zeros((3, 5, 7), np.uint8)] * 2, dict(in_ids=[0], layout="CHW"), "layout 'CHW'"),
])
def test_bad_inputs(images, kwargs, message):
    with pytest.raises((ValueError, TypeError), match=f"multi_paste.*{message}"):
        run(torchdali, images, **kwargs)


@requires_cuda
def test_gpu_matches_cpu():
    rng = np.random.default_rng(9)
    images = [rng.integers(0, 256, (int(h), int(w), 3), dtype=np.uint8) for h, w in rng.integers(5, 40, (5, 2))]
    kwargs = dict(output_size=[33, 29], **random_mosaic(images, (33, 29), rng))
    cpu, _ = run(torchdali, images, **kwargs)
    gpu, layout = run(torchdali, images, device="gpu", **kwargs)
    assert layout == "HWC"
    assert_batches_equal(gpu, cpu)
