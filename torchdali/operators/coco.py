"""readers.coco: the images of a COCO dataset (encoded bytes) with their boxes, labels,
polygons or pixelwise masks and ids, in DALI's order.

It is `readers.file` with another list: the entries are the images, an entry's label
indexes its annotations, and reading, sharding, padding, shuffling and checkpoints are
FileReader's. The annotations are parsed once into flat arrays, as DALI's loader keeps
them (and as its preprocessed-annotation files store them, which are read and written
here too); a batch gathers its rows with one index array per output. Pixelwise masks are
made per sample as DALI makes them: polygons rasterized as COCO's rleFrPoly does, one
mask per label, painted in ascending label order.
"""
import dataclasses
import json
import os
import warnings
from typing import List, Optional

import numpy as np
import torch

from ..schema import BOOL, FLOAT, STR, STRS, Arg, register
from ..tensor_list import TensorList
from .base import BatchSpec, map_samples
from .readers import FileReader

# Loader arguments shared with readers.file (sharding, shuffling, padding ...).
_LOADER_ARGS = ("shard_id", "num_shards", "stick_to_shard", "pad_last_batch", "random_shuffle", "initial_fill",
                "shuffle_after_epoch", "shuffle_after_epoch_seed", "dont_use_mmap", "read_ahead", "lazy_init",
                "prefetch_queue_depth", "tensor_init_bytes")

# Arguments that preprocessed annotations already applied (DALI rejects them there).
_APPLIED = ("annotations_file", "skip_empty", "ratio", "ltrb", "images", "size_threshold")


def _polygons_on(args):
    return bool(args.get("polygon_masks") or args.get("masks"))


def _parts(args):
    """The parts of the annotations the outputs need (pixelwise masks are made from polygons)."""
    parts = {"boxes"}
    if _polygons_on(args) or args["pixelwise_masks"]:
        parts.add("polygons")
    if args["pixelwise_masks"]:
        parts.add("pixelwise")
    if args["image_ids"]:
        parts.add("ids")
    return parts


def _num_outputs(args, num_inputs):
    return 3 + 2 * _polygons_on(args) + bool(args.get("pixelwise_masks")) + bool(args.get("image_ids"))


@dataclasses.dataclass
class _Dataset:
    """The parsed annotations, as DALI's loader keeps them: per image (entry) an offset and a
    count into flat arrays of objects, polygons, vertices and RLE masks. Polygon rows are
    (object, first vertex, end vertex), relative to their image."""

    names: List[str]
    offsets: np.ndarray  # int32 [N]
    counts: np.ndarray  # int32 [N]
    boxes: np.ndarray  # float32 [M, 4]
    labels: np.ndarray  # int32 [M]
    ids: Optional[np.ndarray] = None  # int32 [N], the images' ids in the JSON
    polygons: Optional[np.ndarray] = None  # int32 [P, 3]
    poly_offsets: Optional[np.ndarray] = None  # int64 [N]
    poly_counts: Optional[np.ndarray] = None
    vertices: Optional[np.ndarray] = None  # float32 [V, 2]
    vert_offsets: Optional[np.ndarray] = None  # int64 [N]
    vert_counts: Optional[np.ndarray] = None
    rles: Optional[list] = None  # (h, w, counts uint32) per RLE-encoded object
    rle_objects: Optional[np.ndarray] = None  # int32 [R]: the object of each, within its image
    rle_offsets: Optional[np.ndarray] = None  # int64 [N]
    rle_counts: Optional[np.ndarray] = None
    heights: Optional[np.ndarray] = None  # int32 [N]
    widths: Optional[np.ndarray] = None


# DALI's preprocessed-annotation files: (file, field, dtype, values per counted item, columns,
# needed for). Each holds a uint32 count, then the values; empty arrays are not written.
_FILES = (
    ("offsets.dat", "offsets", np.int32, 1, 0, "boxes"),
    ("boxes.dat", "boxes", np.float32, 1, 4, "boxes"),
    ("labels.dat", "labels", np.int32, 1, 0, "boxes"),
    ("counts.dat", "counts", np.int32, 1, 0, "boxes"),
    ("polygon_data.dat", "polygons", np.int32, 3, 3, "polygons"),
    ("polygon_offset.dat", "poly_offsets", np.int64, 1, 0, "polygons"),
    ("polygons_count.dat", "poly_counts", np.int64, 1, 0, "polygons"),
    ("vertices.dat", "vertices", np.float32, 2, 2, "polygons"),
    ("vertices_offset.dat", "vert_offsets", np.int64, 1, 0, "polygons"),
    ("vertices_count.dat", "vert_counts", np.int64, 1, 0, "polygons"),
    ("masks_rles_idx.dat", "rle_objects", np.int32, 1, 0, "pixelwise"),
    ("masks_offset.dat", "rle_offsets", np.int64, 1, 0, "pixelwise"),
    ("mask_count.dat", "rle_counts", np.int64, 1, 0, "pixelwise"),
    ("heights.dat", "heights", np.int32, 1, 0, "pixelwise"),
    ("widths.dat", "widths", np.int32, 1, 0, "pixelwise"),
    ("original_ids.dat", "ids", np.int32, 1, 0, "ids"),
)
_PER_IMAGE = {"offsets", "counts", "poly_offsets", "poly_counts", "vert_offsets", "vert_counts",
              "rle_offsets", "rle_counts", "heights", "widths", "ids"}


@register(
    "readers.coco", aliases=("readers.COCO", "COCOReader"), deprecated_names=("coco_reader",), outputs=_num_outputs,
    deprecated_args={"meta_files_path": "preprocessed_annotations", "save_img_ids": "image_ids",
                     "dump_meta_files": "save_preprocessed_annotations",
                     "dump_meta_files_path": "save_preprocessed_annotations_dir"},
    args=[
        Arg("file_root", STR, None, "Folder the images' file names are relative to (required)."),
        Arg("annotations_file", STR, "", "The COCO annotations JSON file."),
        Arg("images", STRS, None, "File names (as in the annotations) to read, in this order, duplicates "
            "repeated; by default every image of the annotations, by id."),
        Arg("ltrb", BOOL, False, "Boxes as [left, top, right, bottom] instead of [x, y, width, height]."),
        Arg("ratio", BOOL, False, "Box and polygon coordinates relative to the image's width and height."),
        Arg("size_threshold", FLOAT, 0.1, "Objects whose box is narrower or lower than this (pixels) are ignored."),
        Arg("skip_empty", BOOL, False, "Skip images without objects."),
        Arg("include_iscrowd", BOOL, True, "Include the objects marked iscrowd=1."),
        Arg("avoid_class_remapping", BOOL, False, "Labels are the category ids as given, instead of 1..K in the "
            "order of the annotations' categories."),
        Arg("polygon_masks", BOOL, False, "Also output the objects' polygons: rows (object, first vertex, end "
            "vertex) and the vertices (x, y)."),
        Arg("masks", BOOL, False, "Deprecated: polygon_masks, with the polygons' vertex indices doubled "
            "(coordinate indices)."),
        Arg("pixelwise_masks", BOOL, False, "Also output an int32 HWC mask of labels, from the polygons and RLE "
            "masks."),
        Arg("image_ids", BOOL, False, "Also output each image's id in the annotations (int32, shape (1,))."),
        Arg("preprocessed_annotations", STR, "", "Folder of annotations saved by "
            "save_preprocessed_annotations (DALI's files), read instead of annotations_file."),
        Arg("save_preprocessed_annotations", BOOL, False, "Save the parsed annotations in DALI's binary files."),
        Arg("save_preprocessed_annotations_dir", STR, "", "Folder to save the preprocessed annotations in."),
        Arg("skip_cached_images", BOOL, False, "Not supported, as in DALI (there is no decoder cache).",
            check=lambda v: "is not supported by readers.coco" if v else None),
    ] + [FileReader.schema.args[name] for name in _LOADER_ARGS])
class CocoReader(FileReader):
    """Reads a COCO dataset: the images (encoded, 1D uint8), their boxes (float32 [M, 4]) and
    labels (int32 [M]), then as asked the polygons (int32 [P, 3]) and vertices (float32
    [V, 2]) or a pixelwise mask (int32 HWC), and the image ids (int32 (1,)); shards, pads
    and shuffles as readers.file does."""

    def __init__(self, spec):
        self.want = _parts(spec.args)  # before FileReader's __init__ parses the annotations
        super().__init__(spec)

    def _check_args(self, a):
        if a["file_root"] is None:
            raise self.error("file_root is required", ValueError)
        if not a["annotations_file"] and not a["preprocessed_annotations"]:
            raise self.error("give annotations_file or preprocessed_annotations", ValueError)
        if _polygons_on(a) and a["pixelwise_masks"]:
            raise self.error("pixelwise_masks and polygon_masks are mutually exclusive", ValueError)
        if a["save_preprocessed_annotations"] and not a["save_preprocessed_annotations_dir"]:
            raise self.error("save_preprocessed_annotations needs save_preprocessed_annotations_dir", ValueError)
        if a["preprocessed_annotations"]:
            for name in _APPLIED:
                if a[name] != self.spec.schema.args[name].default:
                    raise self.error(f"{name} is not supported when reading preprocessed_annotations "
                                     "(they were saved with it applied)", ValueError)
        if a["masks"]:
            warnings.warn("readers.coco: 'masks' is deprecated; use polygon_masks (its polygons count "
                          "vertices, not coordinates)", DeprecationWarning, stacklevel=2)

    def _list_entries(self):
        """Parse (or load) the annotations; the entries are the images, labelled by index."""
        a = self.spec.args
        if a["preprocessed_annotations"]:
            data = _load(self, a["preprocessed_annotations"])
        else:
            data = _parse(self, a)
        if a["save_preprocessed_annotations"]:
            _save(self, data, a["save_preprocessed_annotations_dir"])
        if not data.names:
            source = a["preprocessed_annotations"] or a["annotations_file"]
            raise self.error(f"no images found in '{source}'" + (" (with skip_empty)" if a["skip_empty"] else ""),
                             ValueError)
        self.data = data
        return a["file_root"], [(name, i) for i, name in enumerate(data.names)]

    def plan(self, inputs):
        specs = [BatchSpec("cpu", torch.uint8, 1, ""), BatchSpec("cpu", torch.float32, 2, ""),
                 BatchSpec("cpu", torch.int32, 1, "")]
        if _polygons_on(self.spec.args):
            specs += [BatchSpec("cpu", torch.int32, 2, ""), BatchSpec("cpu", torch.float32, 2, "")]
        if "pixelwise" in self.want:
            specs.append(BatchSpec("cpu", torch.int32, 3, "HWC"))
        if "ids" in self.want:
            specs.append(BatchSpec("cpu", torch.int32, 1, ""))
        return specs, self.run

    def run(self, inputs, args, ctx):
        if self.entries is None:
            self._prepare()
        picks = self._next_batch(ctx.batch_size)
        d, at = self.data, np.array(picks, np.int64)
        outs = [self._read(picks), _rows(d.boxes, d.offsets, d.counts, at), _rows(d.labels, d.offsets, d.counts, at)]
        if _polygons_on(self.spec.args):
            polygons = _gather(d.polygons, d.poly_offsets, d.poly_counts, at)
            if self.spec.args["masks"]:  # the legacy format counts coordinates
                polygons[0][:, 1:] *= 2
            outs += [_batch(*polygons), _rows(d.vertices, d.vert_offsets, d.vert_counts, at)]
        if "pixelwise" in self.want:
            ratio = self.spec.args["ratio"]
            masks = map_samples(lambda i, e: torch.from_numpy(_pixelwise(d, e, ratio)), picks, ctx)
            outs.append(TensorList.make(masks, "HWC", device="cpu"))
        if "ids" in self.want:
            outs.append(TensorList.make(torch.from_numpy(d.ids[at]).reshape(-1, 1), device="cpu"))
        return outs


# --- batches ---

def _gather(data, offsets, counts, at):
    """Rows offsets[e] : offsets[e] + counts[e] of `data` for each entry e of `at`, back to
    back (a copy), and their counts."""
    n = counts[at].astype(np.int64)
    first = offsets[at].astype(np.int64)
    index = np.arange(n.sum()) + np.repeat(first - (np.cumsum(n) - n), n)
    return data[index], n


def _batch(rows, n):
    shapes = np.column_stack([n] + [np.full_like(n, k) for k in rows.shape[1:]])
    return TensorList.from_flat(torch.from_numpy(rows).reshape(-1), shapes, device="cpu")


def _rows(data, offsets, counts, at):
    return _batch(*_gather(data, offsets, counts, at))


# --- the annotations file ---

class _Json:
    """Checked reads of the annotations' fields; errors name the file and the entry."""

    def __init__(self, op, path):
        self.op, self.path = op, path

    def error(self, where, msg):
        return self.op.error(f"annotations_file '{self.path}': {where}: {msg}", ValueError)

    def int(self, obj, key, where, default=None):
        v = obj.get(key, default)
        whole = isinstance(v, int) and not isinstance(v, bool) or isinstance(v, float) and v.is_integer()
        if not whole or not -2**31 <= v < 2**31:
            raise self.error(where, f"'{key}' must be a 32-bit integer, got {v!r}")
        return int(v)

    def numbers(self, v, where, what):
        if not isinstance(v, list) or any(isinstance(x, bool) or not isinstance(x, (int, float)) for x in v):
            raise self.error(where, f"{what} must be a list of numbers, got {v!r}")
        return v


def _read_json(op, path):
    try:
        with open(path, "rb") as f:
            data = json.load(f)
    except OSError as e:
        raise op.error(f"cannot open annotations_file '{path}': {e.strerror}", ValueError) from None
    except ValueError as e:  # not JSON, or not UTF-8
        raise op.error(f"annotations_file '{path}' is not valid JSON: {e}", ValueError) from None
    if not isinstance(data, dict):
        raise op.error(f"annotations_file '{path}' must hold a JSON object (images, annotations, categories)",
                       ValueError)
    return data


def _entries(data, key):
    """(index, object) of the list `key`, skipping what is not an object, as DALI does."""
    items = data.get(key, [])
    return [(i, x) for i, x in enumerate(items if isinstance(items, list) else []) if isinstance(x, dict)]


def _categories(js, data):
    """Category id -> its label: 1, 2 ... in the order listed (DALI's remapping)."""
    remap = {}
    for new, (i, cat) in enumerate(_entries(data, "categories"), 1):
        remap.setdefault(js.int(cat, "id", f"categories[{i}]"), new)
    return remap


def _image_infos(js, data, need_size):
    """(id, file name, width, height) of each image."""
    infos = []
    for i, im in _entries(data, "images"):
        where = f"images[{i}]"
        name = im.get("file_name")
        if not isinstance(name, str):
            raise js.error(where, f"'file_name' must be a string, got {name!r}")
        size = (js.int(im, "width", where), js.int(im, "height", where)) if need_size else (0, 0)
        infos.append((js.int(im, "id", where), name) + size)
    return infos


def _segmentation(js, ann, where, rle, image_size):
    """An object's polygons (float32 coordinate arrays) and RLE mask ((h, w, counts) or None)."""
    seg = ann.get("segmentation")
    if rle and isinstance(seg, dict):
        return [], _rle(js, seg, where, image_size)
    if not isinstance(seg, list):
        return [], None
    polygons = []
    for k, coords in enumerate(seg):
        js.numbers(coords, where, f"segmentation[{k}]")
        if len(coords) % 2:
            raise js.error(where, f"segmentation[{k}] has an odd number of coordinates ({len(coords)})")
        polygons.append(np.array(coords, np.float32))
    return polygons, None


def _rle(js, seg, where, image_size):
    """An RLE mask's (h, w, counts): uncompressed counts or COCO's compressed string."""
    size, counts = seg.get("size"), seg.get("counts")
    if not (isinstance(size, list) and len(size) >= 2 and all(isinstance(v, int) and v > 0 for v in size[:2])):
        raise js.error(where, f"the RLE segmentation needs a 'size' [height, width], got {size!r}")
    h, w = size[:2]
    if isinstance(counts, str) and counts:
        counts = _rle_from_string(js, counts, where)
    elif isinstance(counts, list) and counts:
        if any(isinstance(c, bool) or not isinstance(c, int) or not 0 <= c < 2**32 for c in counts):
            raise js.error(where, "the RLE 'counts' must be non-negative integers")
        counts = np.array(counts, np.uint32)
    else:
        raise js.error(where, f"the RLE segmentation has no valid 'counts' (got {counts!r})")
    _check_rle(js.error, where, h, w, counts, image_size)
    return h, w, counts


def _check_rle(error, where, h, w, counts, image_size):
    if image_size is not None and (h, w) != image_size:
        raise error(where, f"the RLE mask is {h}x{w}, the image {image_size[0]}x{image_size[1]}")
    if int(counts.sum(dtype=np.int64)) != h * w:
        raise error(where, f"the RLE counts sum to {int(counts.sum(dtype=np.int64))}, not {h}x{w} = {h * w}")


def _rle_from_string(js, text, where):
    """COCO's rleFrString: counts packed 5 bits a character (from '0'), a sixth bit marking
    that more follow, sign-extended; from the third on, deltas from the count two before."""
    raw, counts, p = text.encode(), [], 0
    while p < len(raw):
        x = k = 0
        more = True
        while more:
            if p >= len(raw):
                raise js.error(where, f"the RLE string {text!r} is truncated")
            c = raw[p] - 48 if raw[p] < 128 else raw[p] - 304  # C's signed char, minus '0'
            x |= (c & 0x1F) << 5 * k
            more = bool(c & 0x20)
            p, k = p + 1, k + 1
            if not more and c & 0x10:
                x |= -1 << 5 * k
        if len(counts) > 2:
            x += counts[-2]
        counts.append(x & 0xFFFFFFFF)
    return np.array(counts, np.uint32)


def _annotations(js, data, a, segmentation, rle, sizes):
    """The kept objects: image ids, category ids, boxes (float32, ltrb if asked), polygons, RLEs."""
    image_ids, categories, boxes, polygons, rles, keep = [], [], [], [], [], []
    for i, ann in _entries(data, "annotations"):
        where = f"annotations[{i}]"
        image_id = js.int(ann, "image_id", where)
        box = js.numbers(ann.get("bbox"), where, "'bbox'")
        if len(box) != 4:
            raise js.error(where, f"'bbox' must hold 4 values, got {len(box)}")
        crowd = js.int(ann, "iscrowd", where, 0)
        image_ids.append(image_id)
        categories.append(js.int(ann, "category_id", where))
        boxes.append(box)
        keep.append(crowd == 0 or a["include_iscrowd"])
        polys, mask = _segmentation(js, ann, where, rle, sizes.get(image_id)) if segmentation else ([], None)
        polygons.append(polys)
        rles.append(mask)
    boxes = np.array(boxes, np.float32).reshape(-1, 4)
    threshold = np.float32(a["size_threshold"])
    kept = np.flatnonzero(np.array(keep, bool) & (boxes[:, 2] >= threshold) & (boxes[:, 3] >= threshold))
    boxes = boxes[kept]
    if a["ltrb"]:
        boxes[:, 2:] += boxes[:, :2]
    return (np.array(image_ids, np.int64)[kept], np.array(categories, np.int64)[kept], boxes,
            [polygons[k] for k in kept], [rles[k] for k in kept])


def _parse(op, a):
    """The dataset of an annotations file, as DALI's loader builds it."""
    path = a["annotations_file"]
    js = _Json(op, path)
    data = _read_json(op, path)
    pixelwise = a["pixelwise_masks"]
    names, by_name = _chosen_images(a, _image_infos(js, data, a["ratio"] or pixelwise))
    sizes = {info[0]: (info[3], info[2]) for info in by_name.values()} if pixelwise else {}
    segmentation = _polygons_on(a) or pixelwise
    image_ids, categories, boxes, polygons, rles = _annotations(js, data, a, segmentation, pixelwise, sizes)
    images, objects = _objects(a, names, by_name, image_ids)
    counts = np.array([len(o) for o in objects], np.int64)
    obj = np.array([k for o in objects for k in o], np.int64)
    if a["avoid_class_remapping"]:
        labels = categories[obj]
    else:
        remap = _categories(js, data)
        labels = np.array([remap.get(c, 0) for c in categories[obj].tolist()], np.int64)
    widths = np.array([info[2] for info in images], np.int32)
    heights = np.array([info[3] for info in images], np.int32)
    boxes = boxes[obj]
    if a["ratio"]:
        boxes /= np.repeat(np.stack([widths, heights] * 2, 1).astype(np.float32), counts, 0)
    d = _Dataset(names=[info[1] for info in images], offsets=(np.cumsum(counts) - counts).astype(np.int32),
                 counts=counts.astype(np.int32), boxes=boxes, labels=labels.astype(np.int32),
                 ids=np.array([info[0] for info in images], np.int32), heights=heights, widths=widths)
    if segmentation:
        _add_polygons(d, [polygons[k] for k in obj])
        if a["ratio"]:
            d.vertices = _relative(d)
    if pixelwise:
        _add_rles(d, [rles[k] for k in obj])
    return d


def _chosen_images(a, infos):
    """The file names to read (`images`, else all by id) and the info of each name (the last
    one listed under it)."""
    names = a["images"]
    if names is None:
        infos.sort(key=lambda info: info[0])
        names = [info[1] for info in infos]
    wanted = set(names)
    return names, {info[1]: info for info in infos if info[1] in wanted}


def _objects(a, names, by_name, image_ids):
    """The images read (names not in the annotations are left out, as DALI does) and the
    indices of each one's objects, in the annotations' order; without the empty ones with
    skip_empty."""
    by_image = {info[0]: [] for info in by_name.values()}
    for k, image_id in enumerate(image_ids.tolist()):
        if image_id in by_image:
            by_image[image_id].append(k)
    images = [by_name[n] for n in names if n in by_name]
    objects = [by_image[info[0]] for info in images]
    if a["skip_empty"]:
        keep = [k for k, o in enumerate(objects) if o]
        images, objects = [images[k] for k in keep], [objects[k] for k in keep]
    return images, objects


def _per_image(d, item_image, sizes):
    """Offsets and counts per image of items (polygons, vertices ...) listed image by image."""
    counts = np.bincount(item_image, weights=sizes, minlength=len(d.names)).astype(np.int64)
    return np.cumsum(counts) - counts, counts


def _add_polygons(d, polygons):
    """Polygon rows and vertices of the objects (`polygons`: per object, its coordinate arrays)."""
    object_image = np.repeat(np.arange(len(d.names)), d.counts)
    per_object = np.array([len(p) for p in polygons], np.int64)
    lengths = np.array([len(c) // 2 for p in polygons for c in p], np.int64)
    poly_object = np.repeat(np.arange(len(polygons)), per_object)
    poly_image = object_image[poly_object]
    d.poly_offsets, d.poly_counts = _per_image(d, poly_image, None)
    d.vert_offsets, d.vert_counts = _per_image(d, poly_image, lengths)
    end = np.cumsum(lengths) - d.vert_offsets[poly_image]
    d.polygons = np.stack([poly_object - d.offsets[poly_image], end - lengths, end], 1).astype(np.int32)
    flat = [c for p in polygons for c in p]
    d.vertices = (np.concatenate(flat) if flat else np.zeros(0, np.float32)).reshape(-1, 2)


def _relative(d):
    """The vertices relative to their image's width and height."""
    vertex_image = np.repeat(np.arange(len(d.names)), d.vert_counts)
    return d.vertices / np.stack([d.widths, d.heights], 1).astype(np.float32)[vertex_image]


def _add_rles(d, rles):
    """The RLE masks of the objects (None where an object has polygons)."""
    object_image = np.repeat(np.arange(len(d.names)), d.counts)
    which = np.array([k for k, r in enumerate(rles) if r is not None], np.int64)
    d.rles = [rles[k] for k in which]
    d.rle_objects = (which - d.offsets[object_image[which]]).astype(np.int32)
    d.rle_offsets, d.rle_counts = _per_image(d, object_image[which], None)


# --- DALI's preprocessed-annotation files ---

def _save(op, d, folder):
    """`d` as DALI saves it: per array a file of a uint32 count and the values (none for an
    empty array), the file names one a line."""
    try:
        os.makedirs(folder, exist_ok=True)
        for name, field, dtype, unit, _, group in _FILES:
            values = getattr(d, field)
            if group in op.want and values is not None and values.size:
                with open(os.path.join(folder, name), "wb") as f:
                    f.write(np.uint32(values.size // unit).tobytes() + values.astype(dtype).tobytes())
        if "pixelwise" in op.want and d.rles:
            with open(os.path.join(folder, "masks_rles.dat"), "wb") as f:
                f.write(np.uint32(len(d.rles)).tobytes())
                for h, w, counts in d.rles:
                    f.write(np.array([h, w, len(counts)], np.uint64).tobytes() + counts.tobytes())
        if d.names:
            with open(os.path.join(folder, "filenames.dat"), "wb") as f:
                f.write(b"".join(os.fsencode(name) + b"\n" for name in d.names))
    except OSError as e:
        raise op.error(f"cannot save the preprocessed annotations in '{folder}': {e}", ValueError) from None


class _Reader:
    """Reads DALI's preprocessed-annotation files of one folder; errors name the file."""

    def __init__(self, op, folder):
        self.op, self.folder = op, folder

    def bytes(self, name):
        """The file's contents, or None where it is absent (DALI's files of empty arrays)."""
        try:
            with open(os.path.join(self.folder, name), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise self.op.error(f"cannot read '{os.path.join(self.folder, name)}': {e.strerror}", ValueError) from None

    def truncated(self, name):
        return self.op.error(f"'{os.path.join(self.folder, name)}' is truncated", ValueError)

    def array(self, name, dtype, unit):
        """A count-prefixed array, or None."""
        raw = self.bytes(name)
        if raw is None:
            return None
        dtype = np.dtype(dtype)
        count = int(np.frombuffer(raw, np.uint32, 1)[0]) * unit if len(raw) >= 4 else -1
        if count < 0 or len(raw) < 4 + count * dtype.itemsize:
            raise self.truncated(name)
        return np.frombuffer(raw, dtype, count, 4).copy()

    def rles(self):
        """The RLE masks: a count, then per mask (h, w, m) as uint64 and m uint32 counts."""
        name = "masks_rles.dat"
        raw = self.bytes(name) or bytes(4)
        if len(raw) < 4:
            raise self.truncated(name)
        out, at = [], 4
        for _ in range(int(np.frombuffer(raw, np.uint32, 1)[0])):
            if len(raw) < at + 24:
                raise self.truncated(name)
            h, w, m = np.frombuffer(raw, np.uint64, 3, at).tolist()
            if len(raw) < at + 24 + 4 * m:
                raise self.truncated(name)
            out.append((h, w, np.frombuffer(raw, np.uint32, m, at + 24).copy()))
            at += 24 + 4 * m
        return out


def _load(op, folder):
    """The dataset saved in `folder` by save_preprocessed_annotations (here or by DALI)."""
    r = _Reader(op, folder)
    names = [os.fsdecode(n) for n in (r.bytes("filenames.dat") or b"").split()]  # DALI reads words
    fields = {}
    for name, field, dtype, unit, cols, group in _FILES:
        if group not in op.want:
            continue
        values = r.array(name, dtype, unit)
        if values is None and field in _PER_IMAGE and names:
            raise op.error(f"preprocessed_annotations '{folder}' has no {name}: save them with the outputs "
                           "read here (polygon_masks, pixelwise_masks, image_ids)", ValueError)
        values = np.zeros(0, dtype) if values is None else values
        if field in _PER_IMAGE and len(values) != len(names):
            raise op.error(f"'{os.path.join(folder, name)}' has {len(values)} entries for {len(names)} images "
                           "in filenames.dat", ValueError)
        fields[field] = values.reshape(-1, cols) if cols else values
    d = _Dataset(names=names, **fields)
    if "pixelwise" in op.want:
        d.rles = r.rles()
        for e in range(len(names)):
            for k in range(d.rle_offsets[e], d.rle_offsets[e] + d.rle_counts[e]):
                h, w, counts = d.rles[k]
                _check_rle(lambda where, msg: op.error(f"'{folder}': {where}: {msg}", ValueError),
                           f"the RLE mask {k} of '{names[e]}'", h, w, counts, (d.heights[e], d.widths[e]))
    return d


# --- pixelwise masks ---

def _pixelwise(d, e, ratio):
    """Image e's int32 [h, w, 1] mask of labels, as DALI makes it: a mask per label (the union
    of its polygons, else its last RLE mask), painted in ascending label order. Where a label
    covers an earlier one, it wins, except in the last run of the column-major scan (after the
    last run boundary of any mask painted so far), where the earlier one stays; and where the
    smallest label has no mask at all, the result is empty. These follow DALI's merge of the
    run-length encodings. A mask is kept as the span of pixels from its first to its last."""
    h, w = int(d.heights[e]), int(d.widths[e])
    labels = d.labels[d.offsets[e]:d.offsets[e] + d.counts[e]]
    out = np.zeros(h * w, np.int32)
    masks = _label_masks(d, e, labels, h, w, ratio)
    order = np.unique(labels).tolist()
    if order and order[0] in masks:
        boundary = 0
        for label in order:
            if label not in masks:
                continue
            lo, span, last = masks[label]
            boundary = max(boundary, last)
            painted = out[lo:lo + len(span)]
            cut = min(max(boundary - lo, 0), len(span))
            span[cut:] &= painted[cut:] == 0
            painted[span] = label
    return np.ascontiguousarray(out.reshape(w, h).T)[:, :, None]


def _label_masks(d, e, labels, h, w, ratio):
    """label -> (first pixel, the mask from there to its last pixel (column-major bool), the
    start of its last run): the union of the label's polygons, else its last RLE mask."""
    polygons, _ = _gather(d.polygons, d.poly_offsets, d.poly_counts, np.array([e]))
    vertices, _ = _gather(d.vertices, d.vert_offsets, d.vert_counts, np.array([e]))
    if ratio:  # back to pixels, as DALI does (in float32)
        vertices = vertices * np.array([w, h], np.float32)
    poly_label = labels[polygons[:, 0]]
    poly, pos = _polygon_runs(vertices, polygons, h, w)
    masks = {}
    for label in np.unique(poly_label).tolist():
        mine = poly_label[poly] == label
        masks[label] = _union(pos[mine], _run_starts(poly[mine]), h * w)
    with_polygons = set(masks)
    for k in range(d.rle_offsets[e], d.rle_offsets[e] + d.rle_counts[e]):
        label = int(labels[d.rle_objects[k]])
        if label not in with_polygons:
            masks[label] = _rle_span(d.rles[k][2].astype(np.int64), h * w)
    return masks


def _run_starts(poly):
    """Whether each boundary (sorted by polygon, then position) opens a run of its polygon."""
    first = np.searchsorted(poly, poly, side="left")
    return (np.arange(len(poly)) - first) % 2 == 0


def _union(pos, opens, total):
    """The union of runs [open, close) given by their boundaries (a run left open ends at
    total), as _label_masks gives it."""
    if not opens.any():
        return 0, np.zeros(0, bool), 0
    lo, closes = int(pos[opens].min()), pos[~opens]
    hi = total if opens.sum() > len(closes) else int(closes.max())
    n = hi - lo
    cover = np.bincount(pos[opens] - lo, minlength=n + 1) - np.bincount(closes - lo, minlength=n + 1)
    span = np.cumsum(cover[:n]) > 0
    changes = np.flatnonzero(span[1:] != span[:-1])
    return lo, span, hi if hi < total else lo + (int(changes[-1]) + 1 if changes.size else 0)


def _rle_span(counts, total):
    """An RLE mask (runs alternately clear and set), as _label_masks gives it; its run
    boundaries are the counts' sums, as given (zero-length runs included)."""
    ends = np.cumsum(counts)
    inner = ends[ends < total]
    last = int(inner[-1]) if inner.size else 0
    set_runs = np.flatnonzero((np.arange(len(counts)) % 2 == 1) & (counts > 0))
    if not set_runs.size:
        return 0, np.zeros(0, bool), last
    first, end = set_runs[0], set_runs[-1] + 1
    span = np.repeat(np.arange(first, end) % 2 == 1, counts[first:end])
    return int(ends[first] - counts[first]), span, last


def _polygon_runs(vertices, polygons, h, w):
    """COCO's rleFrPoly for every polygon at once: (polygon, position) of each run boundary of
    the polygons' masks (column-major positions; those toggled an odd number of times),
    sorted by polygon then position."""
    edge, u, v = _edge_points(vertices, polygons)
    poly = _edge_polygons(polygons)[edge]
    step = np.flatnonzero((poly[1:] == poly[:-1]) & (u[1:] != u[:-1])) + 1
    xd = (np.where(u[step] < u[step - 1], u[step], u[step] - 1) + 0.5) / 5 - 0.5
    yd = (np.minimum(v[step], v[step - 1]) + 0.5) / 5 - 0.5
    ok = (np.floor(xd) == xd) & (xd >= 0) & (xd <= w - 1)
    pos = xd[ok].astype(np.int64) * h + np.ceil(np.clip(yd[ok], 0, h)).astype(np.int64)
    poly = poly[step][ok]
    key, times = np.unique(poly * (h * w + 1) + pos, return_counts=True)
    key = key[(times % 2 == 1) & (key % (h * w + 1) < h * w)]
    return key // (h * w + 1), key % (h * w + 1)


def _edge_polygons(polygons):
    n = (polygons[:, 2] - polygons[:, 1]).astype(np.int64)
    return np.repeat(np.arange(len(polygons)), n)


def _edge_points(vertices, polygons):
    """The points rleFrPoly draws along each edge of the closed polygons, on the 5x upsampled
    grid with C's rounding: (edge, u, v) per point, in drawing order."""
    first = polygons[:, 1].astype(np.int64)
    n = polygons[:, 2].astype(np.int64) - first
    start = np.arange(n.sum()) + np.repeat(first - (np.cumsum(n) - n), n)
    end = start + 1
    end[np.cumsum(n)[n > 0] - 1] = first[n > 0]  # each polygon closes on its first vertex
    grid = np.trunc(5.0 * vertices.astype(np.float64) + 0.5).astype(np.int64)  # C's (int)(5 x + .5)
    x0, y0, x1, y1 = grid[start, 0], grid[start, 1], grid[end, 0], grid[end, 1]
    dx, dy = np.abs(x1 - x0), np.abs(y1 - y0)
    wide = dx >= dy
    flip = np.where(wide, x0 > x1, y0 > y1)
    xs, ys = np.where(flip, x1, x0), np.where(flip, y1, y0)
    xe, ye = np.where(flip, x0, x1), np.where(flip, y0, y1)
    steps = np.maximum(dx, dy)
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = np.where(steps == 0, 0.0, np.where(wide, (ye - ys) / dx, (xe - xs) / dy))
    edge = np.repeat(np.arange(len(steps)), steps + 1)
    d = np.arange(edge.size) - np.repeat(np.cumsum(steps + 1) - (steps + 1), steps + 1)
    t = np.where(flip[edge], steps[edge] - d, d)
    wide = wide[edge]
    across = np.trunc(np.where(wide, ys[edge], xs[edge]) + slope[edge] * t + 0.5).astype(np.int64)
    return edge, np.where(wide, t + xs[edge], across), np.where(wide, across, t + ys[edge])
