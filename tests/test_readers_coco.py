"""readers.coco: outputs, masks, sharding, preprocessed annotations and errors, compared with
NVIDIA DALI's reader on the same small COCO set where DALI is installed, and checked against
hand-computed values where not."""
import json
import os
import pathlib
import re

import numpy as np
import pytest

import torchdali
from torchdali.operators.base import Args, RunContext

from conftest import as_numpy_batch, dali_or_skip, jpeg, make_reader, photo

# Listed out of id order: labels 40 -> 1, 5 -> 2, 18 -> 3 (77 is not listed: label 0).
CATEGORIES = [{"id": 40, "name": "c"}, {"id": 5, "name": "a"}, {"id": 18, "name": "b"}]
IMAGES = [(7, "b.jpg", 30, 20), (1, "a.jpg", 40, 50), (3, "empty.jpg", 24, 24), (9, "sub/c.jpg", 16, 32),
          (4, "crowd.jpg", 20, 20)]  # (id, file name, height, width)


def rle_string(counts):
    """COCO's compressed RLE string of `counts` (rleToString)."""
    out = []
    for i, c in enumerate(counts):
        x = c - (counts[i - 2] if i > 2 else 0)
        more = True
        while more:
            ch = x & 0x1F
            x >>= 5
            more = x != -1 if ch & 0x10 else x != 0
            out.append(chr((ch | 0x20 if more else ch) + 48))
    return "".join(out)


# Every object has a segmentation: DALI reads uninitialised memory for one without (pixelwise).
ANNOTATIONS = [
    {"image_id": 1, "category_id": 18, "iscrowd": 0, "bbox": [2.5, 3, 20, 10.5],
     "segmentation": [[2.5, 3, 22.5, 3, 22.5, 13.5, 2.5, 13.5]]},
    {"image_id": 1, "category_id": 5, "iscrowd": 1, "bbox": [10, 10, 30, 20],
     "segmentation": {"size": [40, 50], "counts": [410, 5, 35, 6, 34, 7, 1503]}},
    {"image_id": 7, "category_id": 5, "iscrowd": 0, "bbox": [1, 1, 0.05, 4], "segmentation": [[1, 1, 1.05, 1, 1, 5]]},
    {"image_id": 7, "category_id": 40, "iscrowd": 0, "bbox": [0, 0, 19.5, 29.5],
     "segmentation": [[0, 0, 19, 0, 10, 29], [3, 3, 6, 3, 6, 6, 3, 6]]},
    {"image_id": 1, "category_id": 40, "iscrowd": 0, "bbox": [5, 5, 10, 10], "segmentation": [[5, 5, 15, 5, 15, 15]]},
    {"image_id": 9, "category_id": 18, "iscrowd": 0, "bbox": [1, 2, 3, 4], "segmentation": [[1, 2, 4, 2, 4, 6, 1, 6]]},
    {"image_id": 9, "category_id": 77, "iscrowd": 0, "bbox": [8, 4, 6, 5], "segmentation": [[8, 4, 14, 4, 14, 9]]},
    {"image_id": 7, "category_id": 5, "iscrowd": 0, "bbox": [2, 3, 4, 5], "segmentation": []},
    {"image_id": 4, "category_id": 40, "iscrowd": 1, "bbox": [1, 2, 10, 12],
     "segmentation": {"size": [20, 20], "counts": rle_string([45, 3, 17, 4, 16, 5, 15, 6, 289])}},
]


def write_set(root, annotations=ANNOTATIONS, images=IMAGES):
    (root / "images" / "sub").mkdir(parents=True, exist_ok=True)
    for image_id, name, h, w in images:
        (root / "images" / name).write_bytes(bytes(jpeg(photo(h, w, image_id)).numpy()))
    data = {"info": {"year": 2017}, "categories": CATEGORIES, "annotations": annotations,
            "images": [{"id": i, "file_name": n, "height": h, "width": w, "license": 1} for i, n, h, w in images]}
    (root / "annotations.json").write_text(json.dumps(data))
    return dict(file_root=str(root / "images"), annotations_file=str(root / "annotations.json"))


@pytest.fixture
def coco(tmp_path):
    return write_set(tmp_path)


def read(lib, iterations=1, batch_size=3, **kwargs):
    """Per iteration: (the outputs as NumPy arrays, the images' source info, the layouts); and
    the reader's metadata."""
    @lib.pipeline_def(batch_size=batch_size, num_threads=2, device_id=None, seed=5)
    def pipe():
        return tuple(lib.fn.readers.coco(name="R", **kwargs))

    p = pipe()
    p.build()
    out = []
    for _ in range(iterations):
        batch = p.run()
        out.append(([as_numpy_batch(o) for o in batch], [batch[0][i].source_info() for i in range(len(batch[0]))],
                    [o.layout() for o in batch]))
    return out, p.reader_meta("R")


def assert_same(got, expected):
    assert len(got) == len(expected)
    for (outs, names, layouts), (outs_e, names_e, layouts_e) in zip(got, expected):
        assert names == names_e and layouts == layouts_e
        assert len(outs) == len(outs_e)
        for k, (batch, batch_e) in enumerate(zip(outs, outs_e)):
            for i, (a, b) in enumerate(zip(batch, batch_e)):
                assert a.dtype == b.dtype and a.shape == b.shape, (k, i, a.dtype, b.dtype, a.shape, b.shape)
                np.testing.assert_array_equal(a, b, err_msg=f"output {k} sample {i}")


def make(batch_size=2, **kwargs):
    return make_reader("readers.coco", batch_size, **kwargs)


def step(op, batch_size=2):
    outs = op.run([], Args(op, {}), RunContext(iteration=0, batch_size=batch_size, thread_pool=None))
    return [as_numpy_batch(o) for o in outs], list(outs[0].source_info)


# --- against DALI ---

@pytest.mark.parametrize("kwargs", [
    dict(),
    dict(ltrb=True, ratio=True),
    dict(skip_empty=True, size_threshold=5.0, include_iscrowd=False),
    dict(polygon_masks=True, image_ids=True),
    dict(polygon_masks=True, ratio=True, skip_empty=True),
    dict(pixelwise_masks=True, image_ids=True),
    dict(pixelwise_masks=True, ratio=True, ltrb=True),
    dict(avoid_class_remapping=True, size_threshold=0.0),
    dict(images=["b.jpg", "sub/c.jpg", "not/listed.jpg", "b.jpg"], polygon_masks=True),
])
def test_outputs_match_dali(coco, kwargs):
    dali = dali_or_skip()
    assert_same(read(torchdali, 4, **coco, **kwargs)[0], read(dali, 4, **coco, **kwargs)[0])


def test_legacy_masks_argument_matches_dali(coco):
    dali = dali_or_skip()
    with pytest.warns(DeprecationWarning, match="masks"):
        got = read(torchdali, 2, **coco, masks=True)[0]
    with pytest.warns(DeprecationWarning):  # DALI's
        expected = read(dali, 2, **coco, masks=True)[0]
    assert_same(got, expected)


@pytest.mark.parametrize("num_shards,pad", [(1, False), (3, False), (3, True)])
def test_shards_and_padding_match_dali(coco, num_shards, pad):
    dali = dali_or_skip()
    for shard_id in range(num_shards):
        kwargs = dict(coco, num_shards=num_shards, shard_id=shard_id, pad_last_batch=pad, image_ids=True)
        got, meta = read(torchdali, 5, batch_size=2, **kwargs)
        expected, meta_e = read(dali, 5, batch_size=2, **kwargs)
        assert_same(got, expected)
        assert meta == meta_e


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pixelwise_masks_match_dali_on_random_shapes(tmp_path, seed):
    """Random polygons (in and out of the image, on the rasterizer's half-pixel ties, empty
    ones), uncompressed and compressed RLE masks, overlapping labels."""
    dali = dali_or_skip()
    rng = np.random.default_rng(seed)
    images, annotations = [], []
    for i in range(10):
        h, w = (int(v) for v in rng.integers(1, 48, 2))
        images.append((100 * i + 1, f"i{i}.jpg", h, w))
        for _ in range(int(rng.integers(0, 7))):
            ann = {"image_id": 100 * i + 1, "category_id": int(rng.choice([5, 18, 40, 77])), "iscrowd": 0,
                   "bbox": [1, 1, 2, 2]}
            if rng.random() < 0.6:
                polygons = [rng.uniform(-3, max(h, w) + 3, 2 * int(rng.integers(0, 8))) for _ in range(2)]
                ann["segmentation"] = [(np.round(p * 2) / 2 if rng.random() < 0.5 else p).tolist() for p in polygons]
            else:
                flat = np.zeros(h * w, bool)
                start = int(rng.integers(0, h * w))
                flat[start:start + int(rng.integers(1, h * w + 1))] = True
                flat ^= rng.random(h * w) < 0.1
                counts = np.diff(np.concatenate([[0], np.flatnonzero(flat[1:] != flat[:-1]) + 1, [h * w]]))
                counts = ([0] if flat[0] else []) + counts.tolist()
                ann["segmentation"] = {"size": [h, w], "counts": rle_string(counts) if rng.random() < 0.5 else counts}
            annotations.append(ann)
    kwargs = write_set(tmp_path, annotations, images)
    for ratio in (False, True):
        assert_same(read(torchdali, 4, **kwargs, pixelwise_masks=True, ratio=ratio)[0],
                    read(dali, 4, **kwargs, pixelwise_masks=True, ratio=ratio)[0])


@pytest.mark.parametrize("kwargs", [dict(), dict(polygon_masks=True, ratio=True),
                                    dict(pixelwise_masks=True, image_ids=True, ltrb=True, skip_empty=True)])
def test_preprocessed_annotations_interoperate_with_dali(coco, tmp_path, kwargs):
    dali = dali_or_skip()
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    theirs.mkdir()
    for lib, folder in ((torchdali, ours), (dali, theirs)):
        read(lib, **coco, **kwargs, save_preprocessed_annotations=True, save_preprocessed_annotations_dir=str(folder))
    assert sorted(os.listdir(ours)) == sorted(os.listdir(theirs))
    for name in os.listdir(ours):
        assert (ours / name).read_bytes() == (theirs / name).read_bytes(), name
    outputs = {k: v for k, v in kwargs.items() if k in ("polygon_masks", "pixelwise_masks", "image_ids")}
    for folder in (ours, theirs):
        load = dict(file_root=coco["file_root"], preprocessed_annotations=str(folder), **outputs)
        assert_same(read(torchdali, 3, **load)[0], read(dali, 3, **load)[0])


# --- without DALI ---

def test_outputs_types_shapes_and_values(coco):
    outs, names = step(make(batch_size=5, **coco, polygon_masks=True, image_ids=True), 5)
    images, boxes, labels, polygons, vertices, ids = outs
    assert names == ["a.jpg", "empty.jpg", "crowd.jpg", "b.jpg", "sub/c.jpg"]  # by image id
    assert [i.tolist() for i in ids] == [[1], [3], [4], [7], [9]] and ids[0].dtype == np.int32
    assert all(i.dtype == np.uint8 and i.ndim == 1 for i in images)
    assert bytes(images[0]) == (pathlib.Path(coco["file_root"]) / "a.jpg").read_bytes()
    np.testing.assert_array_equal(boxes[0], np.float32([[2.5, 3, 20, 10.5], [10, 10, 30, 20], [5, 5, 10, 10]]))
    assert [lab.tolist() for lab in labels] == [[3, 2, 1], [], [1], [1, 2], [3, 0]]  # the tiny box is gone
    assert boxes[1].shape == (0, 4) and boxes[1].dtype == np.float32 and labels[1].dtype == np.int32
    assert polygons[0].tolist() == [[0, 0, 4], [2, 4, 7]]  # the crowd object has an RLE mask, no polygon
    assert polygons[3].tolist() == [[0, 0, 3], [0, 3, 7]]  # two polygons of one object; none for []
    assert polygons[1].shape == (0, 3) and vertices[1].shape == (0, 2) and vertices[0].dtype == np.float32
    assert polygons[0].dtype == np.int32
    np.testing.assert_array_equal(vertices[4], [[1, 2], [4, 2], [4, 6], [1, 6], [8, 4], [14, 4], [14, 9]])
    outs, _ = step(make(batch_size=1, **coco, ltrb=True, ratio=True), 1)
    np.testing.assert_allclose(outs[1][0][0], [2.5 / 50, 3 / 40, 22.5 / 50, 13.5 / 40], rtol=1e-6)
    labels = step(make(batch_size=5, **coco, avoid_class_remapping=True), 5)[0][2]
    assert [lab.tolist() for lab in labels] == [[18, 5, 40], [], [40], [40, 5], [18, 77]]


def test_pipeline_outputs_and_ops_classes(coco):
    assert torchdali.ops.readers.COCO.schema is torchdali.ops.COCOReader.schema
    (outs, names, layouts), = read(torchdali, **coco, pixelwise_masks=True)[0]
    assert len(outs) == 4 and layouts == ["", "", "", "HWC"]
    assert [m.shape for m in outs[3]] == [(40, 50, 1), (24, 24, 1), (20, 20, 1)]
    assert all(m.dtype == np.int32 for m in outs[3]) and not outs[3][1].any()  # no object: all background

    @torchdali.pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        return tuple(torchdali.ops.COCOReader(**coco, save_img_ids=True)())

    with pytest.warns(DeprecationWarning, match="save_img_ids"):
        p = pipe()
    p.build()
    assert [i.tolist() for i in as_numpy_batch(p.run()[3])] == [[1], [3]]


def test_known_pixelwise_masks(tmp_path):
    """A rectangle as COCO rasterizes it; overlapping labels (a later label wins, except in
    the last run of the column-major scan); an image whose smallest label has no mask."""
    annotations = [
        {"image_id": 1, "category_id": 40, "bbox": [2, 1, 4, 3], "segmentation": [[2, 1, 6, 1, 6, 4, 2, 4]]},
        {"image_id": 2, "category_id": 40, "bbox": [0, 0, 5, 4], "segmentation": [[-1, -1, 6, -1, 6, 5, -1, 5]]},
        {"image_id": 2, "category_id": 18, "bbox": [3, 0, 2, 4], "segmentation": [[3.5, -1, 6, -1, 6, 5, 3.5, 5]]},
        {"image_id": 2, "category_id": 5, "bbox": [1, 0, 2, 4], "segmentation": [[1.5, -1, 3.5, -1, 3.5, 5, 1.5, 5]]},
        {"image_id": 3, "category_id": 5, "bbox": [0, 0, 5, 4], "segmentation": {"size": [4, 5], "counts": [5, 3, 12]}},
        {"image_id": 4, "category_id": 5, "bbox": [0, 0, 5, 4], "segmentation": {"size": [4, 5], "counts": [5, 3, 12]}},
        {"image_id": 4, "category_id": 40, "bbox": [0, 0, 5, 4], "segmentation": []},
        {"image_id": 5, "category_id": 18, "bbox": [0, 0, 5, 4], "segmentation": {"size": [4, 5], "counts": "234N6"}},
    ]
    kwargs = write_set(tmp_path, annotations, [(k, f"{k}.jpg", 6 if k == 1 else 4, 8 if k == 1 else 5)
                                               for k in range(1, 6)])
    masks = step(make(batch_size=5, **kwargs, pixelwise_masks=True), 5)[0][3]
    rectangle = np.zeros((6, 8), np.int32)
    rectangle[1:4, 2:6] = 1
    np.testing.assert_array_equal(masks[0][..., 0], rectangle)
    np.testing.assert_array_equal(masks[1][..., 0], [[1, 1, 2, 2, 1]] * 4)  # label 3 lies in the last run
    runs = np.zeros(20, np.int32)
    runs[5:8] = 2
    np.testing.assert_array_equal(masks[2][..., 0], runs.reshape(5, 4).T)  # column-major RLE
    assert not masks[3].any()  # label 1 has no mask
    runs = np.zeros(20, np.int32)
    runs[[2, 3, 4, 9]] = 3
    np.testing.assert_array_equal(masks[4][..., 0], runs.reshape(5, 4).T)  # "234N6": counts [2, 3, 4, 1, 10]


def test_preprocessed_annotations_round_trip(coco, tmp_path):
    outputs = dict(pixelwise_masks=True, image_ids=True)
    expected = read(torchdali, 3, **coco, **outputs, skip_empty=True, save_preprocessed_annotations=True,
                    save_preprocessed_annotations_dir=str(tmp_path / "pre"))[0]
    assert (tmp_path / "pre" / "filenames.dat").read_text().split() == ["a.jpg", "crowd.jpg", "b.jpg", "sub/c.jpg"]
    got = read(torchdali, 3, file_root=coco["file_root"], preprocessed_annotations=str(tmp_path / "pre"), **outputs)
    assert_same(got[0], expected)
    make(**coco, save_preprocessed_annotations=True, save_preprocessed_annotations_dir=str(tmp_path / "plain"))
    assert not (tmp_path / "plain" / "vertices.dat").exists()
    with pytest.raises(ValueError, match="plain' has no polygon_offset.dat"):
        make(file_root=coco["file_root"], preprocessed_annotations=str(tmp_path / "plain"), polygon_masks=True)
    (tmp_path / "pre" / "boxes.dat").write_bytes((tmp_path / "pre" / "boxes.dat").read_bytes()[:-4])
    with pytest.raises(ValueError, match="boxes.dat' is truncated"):
        make(file_root=coco["file_root"], preprocessed_annotations=str(tmp_path / "pre"))


def test_epochs_shuffling_and_checkpoints(coco):
    op = make(batch_size=2, **coco, random_shuffle=True, initial_fill=3)
    assert op.meta()["epoch_size"] == 5
    seen = [n for _ in range(5) for n in step(op)[1]]
    assert sorted(seen) == sorted(2 * [name for _, name, _, _ in IMAGES])  # two epochs, each image twice
    state = json.loads(json.dumps(op.state_dict()))
    expected = [step(op) for _ in range(4)]
    fresh = make(batch_size=2, **coco, random_shuffle=True, initial_fill=3)
    fresh.load_state_dict(state)
    for (outs, names), (outs_e, names_e) in zip([step(fresh) for _ in range(4)], expected):
        assert names == names_e and all(np.array_equal(a, b) for o, e in zip(outs, outs_e) for a, b in zip(o, e))


def test_lazy_init_parses_at_the_first_run(tmp_path):
    kwargs = write_set(tmp_path)
    later = tmp_path / "later.json"
    op = make(**dict(kwargs, annotations_file=str(later)), lazy_init=True)
    (tmp_path / "annotations.json").rename(later)
    assert step(op)[1] == ["a.jpg", "empty.jpg"]


# --- errors ---

@pytest.mark.parametrize("kwargs,message", [
    (dict(annotations_file="a.json"), "file_root is required"),
    (dict(file_root="."), "annotations_file or preprocessed_annotations"),
    (dict(file_root=".", annotations_file="a.json", polygon_masks=True, pixelwise_masks=True), "mutually exclusive"),
    (dict(file_root=".", preprocessed_annotations="p", ratio=True), "ratio is not supported"),
    (dict(file_root=".", preprocessed_annotations="p", annotations_file="a.json"), "annotations_file is not"),
    (dict(file_root=".", annotations_file="a.json", save_preprocessed_annotations=True), "needs save_preprocessed"),
    (dict(file_root=".", annotations_file="a.json", skip_cached_images=True), "'skip_cached_images'.*not supported"),
    (dict(file_root=".", annotations_file="a.json", random_shuffle=True, shuffle_after_epoch=True), "cannot both"),
])
def test_argument_errors(kwargs, message):
    with pytest.raises(ValueError, match=f"readers.coco.*{message}"):
        make(**kwargs)


def test_num_shards_above_the_number_of_images(coco):
    with pytest.raises(ValueError, match="num_shards = 6 is larger"):
        make(**coco, num_shards=6)


def broken(tmp_path, text):
    (tmp_path / "bad.json").write_text(text)
    return dict(file_root=str(tmp_path), annotations_file=str(tmp_path / "bad.json"))


def test_annotation_file_errors_name_the_file(tmp_path):
    with pytest.raises(ValueError, match=re.escape(f"cannot open annotations_file '{tmp_path}/none.json'")):
        make(file_root=str(tmp_path), annotations_file=str(tmp_path / "none.json"))
    with pytest.raises(ValueError, match=re.escape(f"'{tmp_path}/bad.json' is not valid JSON")):
        make(**broken(tmp_path, '{"images": [1, 2'))
    with pytest.raises(ValueError, match="no images found in"):
        make(**broken(tmp_path, "{}"))
    image = '"images": [{"id": 1, "file_name": "a.jpg", "width": 4, "height": 3}]'
    for annotation, message in [
            ('{"image_id": 1, "category_id": 1, "bbox": [1, 2, 3]}', "'bbox' must hold 4"),
            ('{"image_id": "1", "category_id": 1, "bbox": [1, 2, 3, 4]}', "'image_id' must be a 32-bit integer"),
            ('{"image_id": 1, "category_id": 1, "bbox": [1, 2, 3, 4], "segmentation": [[1, 2, 3]]}',
             r"segmentation\[0\] has an odd number"),
            ('{"image_id": 1, "category_id": 1, "bbox": [1, 2, 3, 4], "segmentation": '
             '{"size": [3, 4], "counts": [5, 2]}}', "the RLE counts sum to 7, not 3x4"),
            ('{"image_id": 1, "category_id": 1, "bbox": [1, 2, 3, 4], "segmentation": '
             '{"size": [4, 4], "counts": [16]}}', "the RLE mask is 4x4, the image 3x4")]:
        with pytest.raises(ValueError, match=rf"readers.coco.*bad.json': annotations\[0\]: {message}"):
            make(**broken(tmp_path, f'{{{image}, "annotations": [{annotation}]}}'), pixelwise_masks=True)


def test_missing_image_is_named(coco):
    os.remove(os.path.join(coco["file_root"], "crowd.jpg"))
    op = make(batch_size=3, **coco)
    with pytest.raises(RuntimeError, match=re.escape(os.path.join(coco["file_root"], "crowd.jpg"))):
        step(op, 3)
