"""Segmentation operators (`segmentation.*`): random choices within masks, for crops centred
on an object."""
import numpy as np
import torch

from ..schema import BOOL, FLOAT, FLOATS, INT, INTS, STR, Arg, register
from ..tensor_list import TensorList
from .base import BatchSpec, Operator, RandomOperator


@register("segmentation.random_mask_pixel", inputs=(1, 1), args=[
    Arg("foreground", INT, 0, "Nonzero: a foreground pixel (any pixel where the mask has none); 0: any "
        "pixel.", per_sample=True),
    Arg("threshold", FLOAT, 0.0, "Foreground: values above this (unless `value` is given).", per_sample=True),
    Arg("value", INT, None, "Foreground: values equal to this (integer masks); takes the place of "
        "`threshold`.", per_sample=True),
])
class RandomMaskPixel(RandomOperator):
    """The coordinates (int64, one per dimension of the mask, channels included) of a pixel
    drawn uniformly from each mask's foreground or from the whole mask. The batch's masks
    are searched as one array: a cumulative count of the candidates, then one search."""

    def plan(self, inputs):
        return [BatchSpec("cpu", torch.int64, 1, "")], self.step

    def step(self, inputs, args, ctx):
        masks = inputs[0].as_torch_list()
        n = len(masks)
        if n == 0:
            return [TensorList.make([], device="cpu")]
        ndim = self.check_rank(masks)
        sizes = np.array([m.numel() for m in masks])
        if (sizes == 0).any():
            i = int(np.argmax(sizes == 0))
            raise self.error(f"sample {i} is empty {tuple(masks[i].shape)}: there is no pixel to choose",
                             ValueError, sample=i)
        flat = torch.cat([m.reshape(-1) for m in masks])
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])

        def per_element(values):  # a value per sample, repeated over its elements
            return torch.from_numpy(np.repeat(values, sizes))

        if args.batch("value") is not None:
            found = flat == per_element(np.broadcast_to(np.asarray(args.batch("value"), np.int64), (n,)))
        else:
            found = flat.double() > per_element(np.broadcast_to(np.asarray(args.batch("threshold"), np.float64), (n,)))
        found_counts = np.add.reduceat(found.numpy().astype(np.int64), starts)
        wanted = np.broadcast_to(np.asarray(args.batch("foreground")), (n,)) != 0
        use_found = wanted & (found_counts > 0)
        candidates = torch.where(per_element(use_found), found, True)
        counts = np.where(use_found, found_counts, sizes)
        ranks = self.rng.integers(0, counts)  # the chosen candidate of each sample
        before = np.concatenate([[0], np.cumsum(counts)[:-1]])
        running = torch.cumsum(candidates, 0).numpy()
        index = np.searchsorted(running, before + ranks + 1) - starts  # within each sample
        shapes = np.array([m.shape for m in masks], np.int64).reshape(n, ndim)
        strides = np.concatenate([np.cumprod(shapes[:, :0:-1], 1)[:, ::-1], np.ones((n, 1), np.int64)], 1)
        coords = (index[:, None] // strides) % shapes
        return [TensorList.make(torch.from_numpy(coords.astype(np.int64)), device="cpu")]


def _formats(args, num_inputs):
    return 1 + (args.get("format") != "box") + bool(args.get("output_class"))


def _non_negative(v):
    return None if all(w >= 0 for w in v) else "weights must not be negative"


@register("segmentation.random_object_bbox", inputs=(1, 1), outputs=_formats,
          aliases=("segmentation.RandomObjectBBox",), args=[
    Arg("format", STR, "anchor_shape", "The outputs: 'anchor_shape' (two), 'start_end' (start and one past the "
        "end) or 'box' (one: starts then ends).", choices=("anchor_shape", "start_end", "box")),
    Arg("background", INT, None, "The background label (default 0, or, where `classes` holds 0, one less than "
        "the least class).", per_sample=True),
    Arg("classes", INTS, None, "The labels that are foreground (default: all but the background).",
        per_sample=True),
    Arg("class_weights", FLOATS, None, "Relative probabilities of the classes (without `classes`: of labels "
        "0, 1, 2 ... skipping the background).", per_sample=True, check=_non_negative),
    Arg("foreground_prob", FLOAT, 1.0, "The probability of an object's box (else the whole input).",
        per_sample=True),
    Arg("k_largest", INT, None, "Choose among the k largest boxes (by volume) only.",
        check=lambda v: None if v >= 1 else "must be at least 1"),
    Arg("threshold", INTS, None, "The least extent of a box in each axis (one value: all axes); a class "
        "without such a box is not chosen.", per_sample=True),
    Arg("ignore_class", BOOL, False, "Choose among all objects alike, not a class first (not with `classes`, "
        "`class_weights` or `output_class`)."),
    Arg("output_class", BOOL, False, "Also output the chosen object's label (the background where none)."),
    Arg("cache_objects", BOOL, False, "Accepted for compatibility: the objects are found anew each time."),
])
class RandomObjectBBox(RandomOperator):
    """The bounding box (int32) of an object drawn from each label mask (integer or bool, 1
    to 6 dims): with probability `foreground_prob` a class is drawn by weight among the
    classes with an object (over `threshold`), then one of its objects, uniformly or among
    the `k_largest`; else, or without one, the whole input. Objects are connected regions
    of one label (neighbours along the axes), found for the whole batch at once."""

    def plan(self, inputs):
        a = self.spec.args
        given = set(self.spec.arg_input_names) | {k for k in ("classes", "class_weights") if a.get(k) is not None}
        if a["ignore_class"] and (given & {"classes", "class_weights"} or a["output_class"]):
            raise self.error("`classes`, `class_weights` and `output_class` cannot be used with `ignore_class`",
                             ValueError)
        box = BatchSpec("cpu", torch.int32, 1, "")
        specs = [box] * (2 if a["format"] != "box" else 1)
        return specs + [BatchSpec("cpu", torch.int32, 0, "")] * a["output_class"], self.step

    def step(self, inputs, args, ctx):
        batch = inputs[0]
        n = len(batch)
        if n == 0:
            return [TensorList.make([], device="cpu")] * self.spec.num_outputs
        shapes = self.check_masks(batch)
        ndim = shapes.shape[1]
        info = [self.class_info(args, i) for i in range(n)]
        background = np.array([bg for bg, _, _ in info], np.int64)
        lo, hi = np.zeros((n, ndim), np.int64), shapes.copy()
        label = background.copy()
        chosen = np.flatnonzero(self.rng.random(n) < np.broadcast_to(args.batch("foreground_prob"), (n,)))
        if len(chosen):
            samples = batch.as_torch_list()
            flat = torch.cat([samples[i].reshape(-1) for i in chosen]).numpy().astype(np.int64)
            objects = find_objects(flat, shapes[chosen], background[chosen])
            bounds = np.searchsorted(objects[0], np.arange(len(chosen) + 1))
            least = self.thresholds(args, n, ndim)
            for k, i in enumerate(chosen):
                part = slice(bounds[k], bounds[k + 1])
                picked = self.pick(objects[1][part], objects[2][part], objects[3][part], least[i], info[i])
                if picked is not None:
                    lo[i], hi[i], label[i] = picked
        return self.outputs(lo, hi, label)

    def check_masks(self, batch):
        """The masks' shapes [N, ndim]; an error for a type or a number of dims DALI refuses."""
        try:
            shapes = batch.sample_shapes()
        except ValueError as e:
            raise self.error(f"the masks {e}", ValueError) from None
        dtype = batch.as_torch_list()[0].dtype
        if dtype.is_floating_point or dtype.is_complex:
            raise self.error(f"the masks must hold integer labels (or bool), got {dtype}", TypeError)
        if not 1 <= shapes.shape[1] <= 6:
            raise self.error(f"the masks have {shapes.shape[1]} dims; 1 to 6 are supported", ValueError)
        return shapes

    def class_info(self, args, i):
        """(background, classes, weights) of sample i as DALI settles them: a background given
        and also a class is an error; one not given moves below the least class; weights
        without classes name labels 0, 1, 2 ... skipping the background. None: not given."""
        bg, classes, weights = (args.sample(k, i) for k in ("background", "classes", "class_weights"))
        background = 0 if bg is None else bg
        if self.spec.args["ignore_class"]:
            return background, None, None
        if classes is not None:
            if weights is not None and len(weights) != len(classes):
                raise self.error(f"sample {i}: `classes` has {len(classes)} values and `class_weights` "
                                 f"{len(weights)}; they must match", ValueError, sample=i)
            if background in classes:
                if bg is not None:
                    raise self.error(f"sample {i}: class {background} is also the `background`", ValueError, sample=i)
                background = min(classes) - 1
        elif weights is not None:
            labels = np.arange(len(weights) + 1)
            classes = labels[labels != background][:len(weights)].tolist()
        return background, classes, weights

    def thresholds(self, args, n, ndim):
        """The least extents [n, ndim] (zeros where not given)."""
        least = args.rows("threshold", n)
        if least is None:
            return np.zeros((n, ndim), np.int64)
        if least.shape[1] not in (1, ndim):
            raise self.error(f"argument 'threshold' has {least.shape[1]} values; the masks have {ndim} dims",
                             ValueError)
        return np.broadcast_to(least, (n, ndim))

    def pick(self, labels, lo, hi, least, info):
        """(lo, hi, label) of the object drawn among a sample's objects (their labels and
        boxes, in the order of their first pixel), or None where none qualifies."""
        background, classes, weights = info
        big = ((hi - lo) >= least).all(1)
        label = background
        if not self.spec.args["ignore_class"]:
            label = self.draw_class(labels[big], classes, weights)
            if label is None:
                return None
        candidates = np.flatnonzero(big & ((labels == label) | self.spec.args["ignore_class"]))
        if not len(candidates):
            return None
        k = self.spec.args["k_largest"]
        if k is not None and k < len(candidates):
            volume = (hi[candidates] - lo[candidates]).prod(1)
            candidates = candidates[np.argsort(-volume, kind="stable")[:k]]
        j = candidates[self.rng.integers(len(candidates))]
        return lo[j], hi[j], label

    def draw_class(self, found, classes, weights):
        """A class drawn by weight among those with an object in `found` (the labels of the
        objects over the threshold), or None. DALI draws again after a class without one;
        leaving those out at once gives the same distribution."""
        classes = np.unique(found) if classes is None else np.asarray(classes, np.int64)
        w = np.ones(len(classes)) if weights is None else np.asarray(weights, np.float64)
        w = np.where(np.isin(classes, found), w, 0.0)
        if w.sum() <= 0:
            return None
        return int(classes[self.rng.choice(len(classes), p=w / w.sum())])

    def outputs(self, lo, hi, label):
        fmt = self.spec.args["format"]
        if fmt == "box":
            boxes = [np.concatenate([lo, hi], 1)]
        else:
            boxes = [lo, hi - lo if fmt == "anchor_shape" else hi]
        out = [TensorList.make(torch.from_numpy(b.astype(np.int32))) for b in boxes]
        if self.spec.args["output_class"]:
            out.append(TensorList.make(torch.from_numpy(label.astype(np.int32))))
        return out


def find_objects(flat, shapes, background):
    """The connected regions of equal labels (neighbours along the axes; the background of
    each sample left out) of masks laid back to back in `flat` with shapes [N, ndim]:
    (sample [R], label [R], lo [R, ndim], hi [R, ndim] one past the end), ordered by sample
    and then by each region's first pixel, as DALI numbers them. Runs along the last axis
    are the nodes of a union-find over the batch, merged by pointer jumping."""
    n, ndim = shapes.shape
    sizes = shapes.prod(1)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    strides = np.concatenate([np.cumprod(shapes[:, :0:-1], 1)[:, ::-1], np.ones((n, 1), np.int64)], 1)
    sample_of = np.repeat(np.arange(n), sizes)
    idx = np.flatnonzero(flat != background[sample_of])  # the foreground pixels
    s = sample_of[idx]
    local = idx - offsets[s]
    value = flat[idx]
    continues = (local % shapes[s, -1] > 0) & (flat[np.maximum(idx - 1, 0)] == value)
    starts = np.flatnonzero(~continues)  # where each run begins, in idx
    run = np.cumsum(~continues) - 1  # each pixel's run
    pairs = touching_runs(flat, idx, local, value, s, shapes, strides, run)
    regions, region = np.unique(merge_runs(*pairs, len(starts)), return_inverse=True)
    first = (local[starts, None] // strides[s[starts]]) % shapes[s[starts]]
    last = first.copy()
    last[:, -1] += np.diff(np.append(starts, len(idx))) - 1
    lo = np.full((ndim, len(regions)), np.iinfo(np.int64).max)
    hi = np.full((ndim, len(regions)), -1)
    for d in range(ndim):
        np.minimum.at(lo[d], region, first[:, d])
        np.maximum.at(hi[d], region, last[:, d])
    head = starts[regions]  # each region's first run starts at its first pixel
    return s[head], value[head], lo.T, hi.T + 1


def touching_runs(flat, idx, local, value, s, shapes, strides, run):
    """Pairs of runs (a, b) that touch along an axis other than the last with equal labels
    (pixels `idx`, of samples `s`); a pair repeated by the next pixel of the row is left out."""
    run_at = np.zeros(len(flat), np.int64)
    run_at[idx] = run
    a, b = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for d in range(shapes.shape[1] - 1):
        stride = strides[s, d]
        block = stride * shapes[s, d]
        inside = local % block < block - stride  # not in the last slice along d
        nb = idx[inside] + stride[inside]
        same = flat[nb] == value[inside]
        here, there = run[inside][same], run_at[nb[same]]
        fresh = np.ones(len(here), bool)
        fresh[1:] = (here[1:] != here[:-1]) | (there[1:] != there[:-1])
        a.append(here[fresh])
        b.append(there[fresh])
    return np.concatenate(a), np.concatenate(b)


def merge_runs(a, b, count):
    """Each run's region: the least run joined to it through the pairs (a, b). Each round
    hooks every root to the least root it touches, then jumps pointers until each run
    points at its root, and drops the pairs that became one; the roots of a region at least
    halve each round."""
    parent = np.arange(count)
    while len(a):
        ra, rb = parent[a], parent[b]
        apart = ra != rb
        a, b, ra, rb = a[apart], b[apart], ra[apart], rb[apart]
        np.minimum.at(parent, np.maximum(ra, rb), np.minimum(ra, rb))
        while True:
            up = parent[parent]
            if (up == parent).all():
                break
            parent = up
    return parent


@register("segmentation.select_masks", inputs=(3, 3), outputs=2, input_names=("mask_ids", "polygons", "vertices"),
          args=[Arg("reindex_masks", BOOL, False, "Number the selected masks 0, 1, 2 ... in the order of "
                    "`mask_ids` instead of keeping their ids.")])
class SelectMasks(Operator):
    """The polygons of the masks `mask_ids` (int32 [k]) picks, in that order, from polygons
    (int32 [P, 3]: mask id, first vertex, one past the last) and vertices ([V, D], any
    type), as COCO's reader gives them: one polygon per mask (the last one of its id, as
    DALI keeps it) and its vertices, renumbered from 0. The batch is gathered at once."""

    def plan(self, inputs):
        return [BatchSpec("cpu", torch.int32, 2, ""), BatchSpec("cpu", inputs[2].dtype, 2, "")], self.step

    def step(self, inputs, args, ctx):
        ids_batch, poly_batch, vert_batch = inputs
        if len(ids_batch) == 0:
            return [TensorList.make([], device="cpu"), TensorList.make([], device="cpu")]
        counts, polygons, poly_sample, vert_shapes = self.check(ids_batch, poly_batch, vert_batch)
        ids = torch.cat([t.reshape(-1) for t in ids_batch.as_torch_list()]).numpy().astype(np.int64)
        id_sample = np.repeat(np.arange(len(counts)), counts)
        wanted = _mask_keys(id_sample, ids)
        self.check_unique(wanted, id_sample, ids)
        rows = self.find_polygons(wanted, _mask_keys(poly_sample, polygons[:, 0]), polygons, poly_sample,
                                  vert_shapes[:, 0], id_sample, ids)
        start, length = polygons[rows, 1], polygons[rows, 2] - polygons[rows, 1]
        per_sample = np.bincount(id_sample, weights=length, minlength=len(counts)).astype(np.int64)
        out_start = np.cumsum(length) - length - (np.cumsum(per_sample) - per_sample)[id_sample]
        new_ids = np.arange(len(ids)) - (np.cumsum(counts) - counts)[id_sample] if args["reindex_masks"] else ids
        out_poly = np.stack([new_ids, out_start, out_start + length], 1).astype(np.int32)
        poly_shapes = np.stack([counts, np.full_like(counts, 3)], 1)
        return [TensorList.from_flat(torch.from_numpy(out_poly.reshape(-1)), poly_shapes),
                self.vertices(vert_batch, vert_shapes, id_sample, start, length, per_sample)]

    def check(self, ids_batch, poly_batch, vert_batch):
        """(masks selected per sample, all polygons [P, 3] int64, each one's sample, the
        vertices' shapes [N, 2]) once the inputs are checked as DALI does."""
        for name, batch, ndim in (("mask_ids", ids_batch, 1), ("polygons", poly_batch, 2), ("vertices", vert_batch, 2)):
            samples = batch.as_torch_list()
            bad = [i for i, t in enumerate(samples) if t.dim() != ndim]
            if bad:
                raise self.error(f"input '{name}' sample {bad[0]} has shape {tuple(samples[bad[0]].shape)}; "
                                 f"expected {ndim} dims", ValueError, sample=bad[0])
            if name != "vertices" and samples[0].dtype != torch.int32:
                raise self.error(f"input '{name}' must be int32, got {samples[0].dtype}", TypeError)
        poly_shapes = poly_batch.sample_shapes()
        if (poly_shapes[:, 1] != 3).any():
            i = int(np.argmax(poly_shapes[:, 1] != 3))
            raise self.error(f"input 'polygons' sample {i} has shape {tuple(poly_shapes[i].tolist())}; expected "
                             "[polygons, 3] (mask id, first vertex, one past the last)", ValueError, sample=i)
        polygons = torch.cat([t.reshape(-1, 3) for t in poly_batch.as_torch_list()]).numpy().astype(np.int64)
        poly_sample = np.repeat(np.arange(len(poly_shapes)), poly_shapes[:, 0])
        return ids_batch.sample_shapes()[:, 0], polygons, poly_sample, vert_batch.sample_shapes()

    def check_unique(self, wanted, id_sample, ids):
        _, first, seen = np.unique(wanted, return_index=True, return_counts=True)
        if (seen > 1).any():
            j = first[np.argmax(seen > 1)]
            raise self.error(f"sample {id_sample[j]}: mask id {ids[j]} is repeated in `mask_ids`", ValueError,
                             sample=int(id_sample[j]))

    def find_polygons(self, wanted, keys, polygons, poly_sample, num_vertices, id_sample, ids):
        """The row of each wanted mask's polygon (the last with its id), once the polygons of
        the wanted masks are checked to lie within their vertices."""
        chosen = np.flatnonzero(np.isin(keys, wanted))
        start, end = polygons[chosen, 1], polygons[chosen, 2]
        bad = (start < 0) | (end > num_vertices[poly_sample[chosen]]) | (end < start)
        if bad.any():
            r = chosen[np.argmax(bad)]
            i = int(poly_sample[r])
            raise self.error(f"sample {i}: the polygon of mask {polygons[r, 0]} spans vertices [{polygons[r, 1]}, "
                             f"{polygons[r, 2]}), not within the {num_vertices[i]} vertices", ValueError, sample=i)
        order = np.lexsort((np.arange(len(keys)), keys))
        at = np.searchsorted(keys[order], wanted, side="right") - 1
        missing = (at < 0) | (keys[order][np.maximum(at, 0)] != wanted)
        if missing.any():
            j = int(np.argmax(missing))
            raise self.error(f"sample {id_sample[j]}: mask id {ids[j]} has no polygon", ValueError,
                             sample=int(id_sample[j]))
        return order[at]

    def vertices(self, batch, shapes, id_sample, start, length, per_sample):
        """The selected polygons' vertices, sample by sample, gathered as one index array."""
        flat = batch.flat()[0]
        width = shapes[:, 1]
        base = np.concatenate([[0], np.cumsum(shapes.prod(1))])[id_sample] + start * width[id_sample]
        sizes = length * width[id_sample]
        index = np.arange(sizes.sum()) - np.repeat(np.cumsum(sizes) - sizes - base, sizes)
        return TensorList.from_flat(flat[torch.from_numpy(index)], np.stack([per_sample, width], 1))


def _mask_keys(sample, mask_id):
    """One int64 key per (sample, mask id)."""
    return sample.astype(np.int64) * (1 << 32) + (mask_id + (1 << 31))
