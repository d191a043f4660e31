"""random_bbox_crop: a random crop window that keeps a sample's bounding boxes in view (SSD's
training crop), and the boxes mapped into it. The window is only planned here: its anchor
and shape go to `slice`. Attempts are arrays: each round draws `num_attempts` windows for
every sample still without one and measures them against all its boxes at once."""
import numpy as np
import torch

from ..schema import BOOL, FLOAT, FLOATS, INT, INTS, LAYOUT, STR, Arg, register
from ..tensor_list import TensorList
from .base import BatchSpec, RandomOperator

MAX_ROUNDS = 1000  # without total_num_attempts, DALI would try forever; we stop and warn


def _num_outputs(args, num_inputs):
    return 3 + (num_inputs > 1) + bool(args.get("output_bbox_indices"))


def _ranges(v):
    if len(v) % 2 or not v:
        return "must hold (min, max) pairs"
    if any(lo < 0 or lo > hi for lo, hi in zip(v[::2], v[1::2])):
        return "each range must have 0 <= min <= max"
    return None


@register("random_bbox_crop", inputs=(1, 2), outputs=_num_outputs, aliases=("RandomBBoxCrop",),
          input_names=("boxes", "labels"), args=[
    Arg("thresholds", FLOATS, [0.0], "The overlaps to choose from, one per round; a window is valid when its "
        "overlap with the boxes reaches the chosen one.",
        check=lambda v: None if v and all(0 <= t <= 1 for t in v) else "must be values in [0, 1]"),
    Arg("threshold_type", STR, "iou", "The overlap: 'iou' (intersection over union with the window) or "
        "'overlap' (the part of the box inside the window).", choices=("iou", "overlap")),
    Arg("all_boxes_above_threshold", BOOL, True, "Every box must reach the threshold (else one is enough)."),
    Arg("allow_no_crop", BOOL, True, "Not cropping is one more choice beside the thresholds."),
    Arg("aspect_ratio", FLOATS, [1.0, 1.0], "The window's width / height range, relative to the image's "
        "(absolute with `input_shape`); 3-D: three ranges (x/y, x/z, y/z) or one for all.", check=_ranges),
    Arg("scaling", FLOATS, [1.0, 1.0], "The range of the window's extent in each dimension, relative to the "
        "image's.", check=lambda v: _ranges(v) or (None if len(v) == 2 else "must be one (min, max) range")),
    Arg("num_attempts", INT, 1, "Windows drawn for each chosen threshold.",
        check=lambda v: None if 0 < v <= 10**6 else "must be in [1, 1,000,000]"),
    Arg("total_num_attempts", INT, None, "Windows drawn in all before the best one so far is taken "
        f"(default: up to {MAX_ROUNDS:,} rounds).", check=lambda v: None if v > 0 else "must be positive"),
    Arg("bbox_layout", LAYOUT, "", "The boxes' coordinates: a permutation of 'xyXY' (start, end) or 'xyWH' "
        "(start, size), 3-D 'xyzXYZ' or 'xyzWHD'; by default from `ltrb`."),
    Arg("ltrb", BOOL, True, "Deprecated for `bbox_layout`: True is 'xyXY', False 'xyWH'."),
    Arg("bbox_prune_threshold", FLOAT, None, "Keep a box when at least this part of its area is inside the "
        "window (and some is); without it, when its center is.",
        check=lambda v: None if 0 <= v <= 1 else "must be in [0, 1]"),
    Arg("crop_shape", INTS, None, "A fixed window shape (absolute, in `shape_layout` order), with "
        "`input_shape`; not with `aspect_ratio`, `scaling` or `allow_no_crop`.", per_sample=True),
    Arg("input_shape", INTS, None, "The image's shape (with `crop_shape`).", per_sample=True),
    Arg("shape_layout", LAYOUT, "", "The order of `crop_shape` and `input_shape`: a permutation of 'WH' "
        "('WHD'), the default."),
    Arg("output_bbox_indices", BOOL, False, "Also output the kept boxes' indices in the input."),
    Arg("quiet", BOOL, False, "No warning when no valid window was found and the best one is used."),
])
class RandomBBoxCrop(RandomOperator):
    """A window per sample (anchor and shape, relative, or absolute with `crop_shape`),
    drawn until one reaches a threshold (chosen at random from `thresholds`, or no crop),
    with the boxes kept in it mapped to its coordinates (clipped to it), their labels and,
    on request, their indices. Each round takes the first valid window of its draws."""

    def plan(self, inputs):
        a = self.spec.args
        self.fixed = a["crop_shape"] is not None or "crop_shape" in self.spec.arg_input_names
        if self.fixed != (a["input_shape"] is not None or "input_shape" in self.spec.arg_input_names):
            raise self.error("give `crop_shape` and `input_shape` together", ValueError)
        # With a fixed crop_shape, not cropping is never a choice (DALI turns its default off).
        no_crop = a["allow_no_crop"] and not self.fixed
        self.thresholds = np.array(list(a["thresholds"]) + ([np.nan] if no_crop else []))  # nan: no crop
        specs = [BatchSpec("cpu", torch.float32, 1, ""), BatchSpec("cpu", torch.float32, 1, ""),
                 BatchSpec("cpu", torch.float32, 2, "")]
        if len(inputs) > 1:
            specs.append(BatchSpec("cpu", inputs[1].dtype, inputs[1].ndim, inputs[1].layout))
        if a["output_bbox_indices"]:
            specs.append(BatchSpec("cpu", torch.int32, 1, ""))
        return specs, self.step

    def layout(self, d):
        """(whether the boxes give ends (else sizes), the columns of their starts, the
        columns of their ends or sizes), each in x, y(, z) order."""
        a = self.spec.args
        axes = "xyz"[:d]
        ends, sizes = axes + axes.upper(), axes + "WHD"[:d]
        layout = str(a["bbox_layout"]) or (ends if a["ltrb"] else sizes)
        if sorted(layout) not in (sorted(ends), sorted(sizes)):
            raise self.error(f"argument 'bbox_layout' is '{layout}' for boxes of {2 * d} coordinates; expected a "
                             f"permutation of '{ends}' or '{sizes}'", ValueError)
        with_ends = sorted(layout) == sorted(ends)
        second = axes.upper() if with_ends else "WHD"[:d]
        return with_ends, [layout.index(c) for c in axes], [layout.index(c) for c in second]

    def step(self, inputs, args, ctx):
        n = len(inputs[0])
        d, counts = self.dims(inputs[0])
        with_ends, start_at, second_at = self.layout(d)
        flat = torch.cat([b.reshape(-1, 2 * d) for b in inputs[0].as_torch_list()]).double().numpy() \
            if n else np.zeros((0, 2 * d))
        width = max(int(counts.max()) if n else 0, 1)  # the batch's boxes padded to [N, width, d]
        valid = np.arange(width) < counts[:, None]
        box_lo, box_hi = np.zeros((n, width, d)), np.zeros((n, width, d))
        box_lo[valid] = flat[:, start_at]
        box_hi[valid] = flat[:, second_at] + (0 if with_ends else flat[:, start_at])
        outside = ((box_lo < 0) | (box_hi > 1) | (box_lo > box_hi)).any(-1) & valid
        if outside.any():
            i, k = (int(v[0]) for v in np.nonzero(outside))
            raise self.error(f"sample {i}, box {k}: {flat[np.cumsum(counts)[i] - counts[i] + k].tolist()} is not "
                             "within [0, 1] with its start before its end (relative coordinates)", ValueError,
                             sample=i)
        sizes = self.fixed_sizes(args, n, d) if self.fixed else None
        crop_lo, crop_hi, no_crop, anchors, found = self.find_windows(box_lo, box_hi, valid, d, sizes)
        if not found.all() and not self.spec.args["quiet"]:
            ctx.warn(f"random_bbox_crop: no valid window found for sample(s) {np.flatnonzero(~found).tolist()} "
                     "within the attempts allowed; the best window so far is used")
        keep = self.kept(box_lo, box_hi, valid, crop_lo, crop_hi) | (no_crop[:, None] & valid)
        extent = crop_hi - crop_lo
        new_lo = np.where(no_crop[:, None, None], box_lo, np.clip((box_lo - crop_lo[:, None]) / extent[:, None], 0, 1))
        new_hi = np.where(no_crop[:, None, None], box_hi, np.clip((box_hi - crop_lo[:, None]) / extent[:, None], 0, 1))
        out = np.zeros((n, width, 2 * d))
        out[:, :, start_at] = new_lo
        out[:, :, second_at] = new_hi if with_ends else new_hi - new_lo
        kept_counts = keep.sum(1).tolist()
        sample, box = np.nonzero(keep)  # the kept boxes, sample by sample
        if self.fixed:
            anchor, shape = anchors, sizes[0]
        else:
            anchor, shape = crop_lo, extent
        outputs = [TensorList.make(torch.from_numpy(anchor.astype(np.float32))),
                   TensorList.make(torch.from_numpy(shape.astype(np.float32))),
                   TensorList.make(list(torch.from_numpy(out[keep].astype(np.float32)).split(kept_counts)))]
        if len(inputs) > 1:
            outputs.append(self.labels(inputs[1], counts, sample, box, kept_counts))
        if self.spec.args["output_bbox_indices"]:
            outputs.append(TensorList.make(list(torch.from_numpy(box.astype(np.int32)).split(kept_counts))))
        return outputs

    def labels(self, batch, counts, sample, box, kept_counts):
        """The kept boxes' labels (rows of the labels input)."""
        shapes = batch.sample_shapes()
        bad = (shapes.shape[1] == 0) or (shapes[:, 0] != counts).any()
        if bad:
            i = 0 if shapes.shape[1] == 0 else int(np.argmax(shapes[:, 0] != counts))
            raise self.error(f"sample {i} has {counts[i]} boxes and labels of shape {tuple(shapes[i].tolist())}; "
                             "expected one label (row) per box", ValueError, sample=i)
        starts = np.cumsum(counts) - counts
        rows = torch.cat(batch.as_torch_list())[torch.from_numpy(starts[sample] + box)]
        return TensorList.make(list(rows.split(kept_counts)), batch.layout())

    def dims(self, batch):
        """(the boxes' dimensions, 2 or 3, and each sample's number of boxes); an error naming
        the first sample whose boxes are not float [boxes, 4] or [boxes, 6] like sample 0's."""
        try:
            shapes = batch.sample_shapes()
        except ValueError:
            shapes = np.zeros((len(batch), 0), np.int64)
        if len(batch) == 0:
            return 2, np.zeros(0, np.int64)
        bad = np.ones(len(batch), bool) if shapes.shape[1] != 2 else \
            (shapes[:, 1] != shapes[0, 1]) | ~np.isin(shapes[:, 1], (4, 6))
        if bad.any() or not batch.as_torch_list()[0].is_floating_point():
            i = int(np.argmax(bad)) if bad.any() else 0
            raise self.error(f"sample {i}'s boxes have shape {tuple(batch.sample(i).shape)} "
                             f"({batch.sample(i).dtype}); expected float [boxes, 4] (2-D) or [boxes, 6] (3-D), one "
                             "number of coordinates for the batch", ValueError, sample=i)
        return int(shapes[0, 1]) // 2, shapes[:, 0]

    def find_windows(self, box_lo, box_hi, valid, d, sizes):
        """Each sample's window: relative lo and hi [n, d], whether it is no crop, the
        absolute anchors with `crop_shape` (`sizes`: fixed_sizes, else None), and whether
        it is valid (else the best one found)."""
        n = len(valid)
        a = self.spec.args
        crop_lo, crop_hi = np.zeros((n, d)), np.ones((n, d))
        no_crop, found = np.zeros(n, bool), np.zeros(n, bool)
        best = np.full(n, -np.inf)
        anchors = np.zeros((n, d)) if self.fixed else None
        attempts = a["num_attempts"]
        rounds = MAX_ROUNDS if a["total_num_attempts"] is None else -(-a["total_num_attempts"] // attempts)
        left = np.arange(n)  # the samples without a valid window yet
        for _ in range(rounds):
            if not len(left):
                break
            threshold = self.thresholds[self.rng.integers(0, len(self.thresholds), len(left))]
            stop = np.isnan(threshold)
            no_crop[left[stop]] = found[left[stop]] = True
            crop_lo[left[stop]], crop_hi[left[stop]] = 0.0, 1.0
            left, threshold = left[~stop], threshold[~stop]
            if not len(left):
                break
            lo, hi, drawn = self.draw(left, attempts, d, sizes)  # [m, A, d]
            metric, keeps = self.measure(box_lo[left], box_hi[left], valid[left], lo, hi)  # [m, A]
            ok = (metric >= threshold[:, None]) & keeps
            has = ok.any(1)
            pick = np.where(has, ok.argmax(1), metric.argmax(1))  # the first valid, else the best
            take = has | (metric.max(1) > best[left])
            rows, picked = left[take], pick[take]
            crop_lo[rows], crop_hi[rows] = lo[take, picked], hi[take, picked]
            if anchors is not None:
                anchors[rows] = drawn[take, picked]
            best[rows] = metric[take, picked]
            found[left[has]] = True
            left = left[~has]
        return crop_lo, crop_hi, no_crop, anchors, found

    def fixed_sizes(self, args, n, d):
        """([n, d] crop shapes, [n, d] input shapes) in x, y(, z) order, checked."""
        order = str(self.spec.args["shape_layout"]) or "WHD"[:d]
        if sorted(order) != sorted("WHD"[:d]):
            raise self.error(f"argument 'shape_layout' is '{order}'; expected a permutation of '{'WHD'[:d]}'",
                             ValueError)
        perm = [order.index(c) for c in "WHD"[:d]]
        crop, whole = (args.rows(name, n) for name in ("crop_shape", "input_shape"))
        for name, v in (("crop_shape", crop), ("input_shape", whole)):
            if v.shape[1] != d:
                raise self.error(f"argument '{name}' has {v.shape[1]} values; the boxes are {d}-D", ValueError)
        crop, whole = crop[:, perm], whole[:, perm]
        bad = ((crop > whole) | (crop <= 0)).any(1)
        if bad.any():
            i = int(np.argmax(bad))
            raise self.error(f"sample {i}: `crop_shape` {crop[i].astype(int).tolist()} must be positive and fit in "
                             f"`input_shape` {whole[i].astype(int).tolist()}", ValueError, sample=i)
        return crop, whole

    def draw(self, rows, attempts, d, sizes):
        """[m, A, d] window lo and hi (relative) for samples `rows`, and the absolute anchors
        with fixed sizes (else None). Windows outside the aspect-ratio range get hi = lo
        (an empty window, never valid)."""
        m = len(rows)
        if sizes is not None:
            crop, whole = sizes[0][rows][:, None], sizes[1][rows][:, None]
            anchor = np.floor(self.rng.random((m, attempts, d)) * (whole - crop + 1))
            return anchor / whole, (anchor + crop) / whole, anchor
        scale = self.spec.args["scaling"]
        shape = self.rng.uniform(scale[0], scale[1], (m, attempts, d))
        shape = self.fix_aspect_ratios(shape)
        ok = self.valid_aspect(shape)
        lo = self.rng.random((m, attempts, d)) * (1 - shape)
        return lo, np.where(ok[..., None], lo + shape, lo), None

    def ratio_ranges(self, d):
        """(pairs (i, j) of dims, [pairs, 2] ranges of shape[i] / shape[j])."""
        ar = np.asarray(self.spec.args["aspect_ratio"], np.float64).reshape(-1, 2)
        pairs = [(i, j) for i in range(d) for j in range(i + 1, d)]
        return pairs, ar[np.arange(len(pairs)) % len(ar)]

    def fix_aspect_ratios(self, shape):
        """Where a range is one value, the window's extents made to match it (in a random order
        of the dims, as DALI), the largest extent kept."""
        d = shape.shape[-1]
        pairs, ranges = self.ratio_ranges(d)
        fixed = {pair: r[0] for pair, r in zip(pairs, ranges) if r[0] == r[1]}
        if not fixed:
            return shape
        largest = shape.max(-1, keepdims=True)
        order = np.argsort(self.rng.random(shape.shape), -1)  # a random order of the dims per window
        shape = shape.copy()
        for i0 in range(d):
            for i1 in range(i0 + 1, d):
                d0, d1 = order[..., i0], order[..., i1]
                for (p, q), ratio in fixed.items():  # shape[p] / shape[q] = ratio
                    for a, b, factor in ((p, q, 1 / ratio), (q, p, ratio)):
                        here = (d0 == a) & (d1 == b)
                        base = np.take_along_axis(shape, d0[..., None], -1)[..., 0]
                        np.put_along_axis(shape, d1[..., None], np.where(here, base * factor,
                                          np.take_along_axis(shape, d1[..., None], -1)[..., 0])[..., None], -1)
        return largest * shape / shape.max(-1, keepdims=True)

    def valid_aspect(self, shape):
        pairs, ranges = self.ratio_ranges(shape.shape[-1])
        ok = np.ones(shape.shape[:-1], bool)
        with np.errstate(divide="ignore", invalid="ignore"):
            for (i, j), (lo, hi) in zip(pairs, ranges):
                ratio = shape[..., i] / shape[..., j]
                ok &= (ratio >= lo) & (ratio <= hi)
        return ok

    def measure(self, box_lo, box_hi, valid, lo, hi):
        """[m, A] overlap metric of each window (min or max over the boxes; inf without
        boxes), and whether it keeps at least one box (or there is none)."""
        b_lo, b_hi = box_lo[:, None], box_hi[:, None]  # [m, 1, B, d]
        w_lo, w_hi = lo[:, :, None], hi[:, :, None]  # [m, A, 1, d]
        inter = intersection(b_lo, b_hi, w_lo, w_hi)  # [m, A, B]
        box_area = (b_hi - b_lo).prod(-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            if self.spec.args["threshold_type"] == "overlap":
                metric = np.where(box_area > 0, inter / box_area, 0.0)
            else:
                union = box_area + (w_hi - w_lo).prod(-1) - inter
                metric = np.where(union > 0, inter / union, 0.0)
        v = valid[:, None]
        if self.spec.args["all_boxes_above_threshold"]:
            reduced = np.where(v, metric, np.inf).min(-1)
        else:
            reduced = np.where(v, metric, -np.inf).max(-1)
        reduced = np.where(v.any(-1), reduced, np.inf)  # no boxes: every threshold is reached
        kept = self.kept(b_lo, b_hi, v, w_lo[..., 0, :], w_hi[..., 0, :], inter)
        empty = (hi <= lo).any(-1)  # outside the aspect-ratio range
        keeps = kept.any(-1) | ~v.any(-1)  # a sample without boxes takes any window (DALI would try forever)
        return np.where(empty, -np.inf, reduced), keeps & ~empty

    def kept(self, box_lo, box_hi, valid, lo, hi, inter=None):
        """Which boxes ([..., B]) a window (lo, hi: [..., d]) keeps; `inter`: their
        intersections, where already known."""
        w_lo, w_hi = lo[..., None, :], hi[..., None, :]
        prune = self.spec.args["bbox_prune_threshold"]
        if prune is None:
            center = (box_lo + box_hi) / 2
            inside = ((center >= w_lo) & (center <= w_hi)).all(-1)
        else:
            inter = intersection(box_lo, box_hi, w_lo, w_hi) if inter is None else inter
            area = (box_hi - box_lo).prod(-1)
            with np.errstate(divide="ignore", invalid="ignore"):
                part = np.where(area > 0, inter / area, 0.0)
            inside = (part >= prune) & (inter > 0)
        return inside & valid


def intersection(a_lo, a_hi, b_lo, b_hi):
    """The volumes of the boxes' intersections (broadcast over leading dims)."""
    return np.clip(np.minimum(a_hi, b_hi) - np.maximum(a_lo, b_lo), 0, None).prod(-1)
