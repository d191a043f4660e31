"""bbox_rotate: bounding boxes moved with their image as fn.rotate turns it, so that they stay
on their objects; boxes that the kept canvas cuts off are dropped with their labels. All the
batch's boxes are one float32 array, computed in DALI's order of float32 operations."""
import numpy as np
import torch

from ..schema import BOOL, FLOAT, FLOATS, INTS, LAYOUT, REQUIRED, STR, Arg, register
from ..tensor_list import TensorList
from .base import BatchSpec, Operator, shapes_or_none
from .warp import _D2R, rotated_canvas

_F32 = np.float32


@register("bbox_rotate", inputs=(1, 2), outputs=lambda args, num_inputs: num_inputs, aliases=("BBoxRotate",),
          input_names=("bboxes", "labels"), args=[
    Arg("angle", FLOAT, REQUIRED, "The image's rotation in degrees, counter-clockwise (as fn.rotate's).",
        per_sample=True, check=lambda v: None if np.isfinite(v) else "must be a finite number"),
    Arg("input_shape", INTS, REQUIRED, "The image's shape (before the rotation), in `shape_layout` order.",
        per_sample=True),
    Arg("shape_layout", LAYOUT, "HW", "The meaning of `input_shape`'s values: holds 'H' and 'W' (e.g. 'HWC')."),
    Arg("bbox_layout", LAYOUT, "xyXY", "The boxes: 'xyXY' (corners) or 'xyWH' (corner and size).",
        choices=("xyXY", "xyWH")),
    Arg("bbox_normalized", BOOL, True, "The boxes are relative to the image's size (else in pixels)."),
    Arg("keep_size", BOOL, False, "The rotated image keeps its size (fn.rotate's keep_size); not with `size`."),
    Arg("size", FLOATS, None, "The rotated image's size (height, width), as given to fn.rotate; by default "
        "the canvas that holds the whole rotated image, as fn.rotate makes it.", per_sample=True),
    Arg("mode", STR, "expand", "'expand': boxes around the rotated boxes; 'fixed': the boxes keep their width "
        "and height (swapped past 45 degrees); 'halfway': between the two.", choices=("expand", "halfway", "fixed")),
    Arg("remove_threshold", FLOAT, 0.1, "Drop a box when less than this part of its area stays on the canvas "
        "(a box of no area is always dropped).", check=lambda v: None if 0 <= v <= 1 else "must be in [0, 1]"),
])
class BBoxRotate(Operator):
    """Boxes [k, 4] (float32) rotated about the image's centre by `angle` and placed on the
    rotated image's canvas: the box around each rotated box (or a smaller one, by `mode`),
    clipped to the canvas; boxes keeping less than `remove_threshold` of their area are
    dropped, with their labels ([k] or [k, 1] int32, the second input)."""

    def plan(self, inputs):
        a = self.spec.args
        layout = str(a["shape_layout"])
        if "W" not in layout or "H" not in layout:
            raise self.error(f"argument 'shape_layout' is '{layout}'; it must hold 'W' and 'H'", ValueError)
        given_size = a.get("size") is not None or "size" in self.spec.arg_input_names
        if a["keep_size"] and given_size:
            raise self.error("`keep_size` cannot be used with `size`", ValueError)
        specs = [BatchSpec("cpu", torch.float32, 2, "")]
        if len(inputs) > 1:
            specs.append(BatchSpec("cpu", torch.int32, inputs[1].ndim, inputs[1].layout))
        return specs, self.step

    def step(self, inputs, args, ctx):
        n = len(inputs[0])
        if n == 0:
            return [TensorList.make([], device="cpu") for _ in inputs]
        counts = self.check_boxes(inputs[0])
        if len(inputs) > 1:
            self.check_labels(inputs[1], counts)
        boxes = torch.cat([b.reshape(-1, 4) for b in inputs[0].as_torch_list()]).numpy()
        sample = np.repeat(np.arange(n), counts)
        angle = np.broadcast_to(np.asarray(args.batch("angle"), _F32), (n,))
        image_wh = self.image_sizes(args, n)
        canvas_wh = self.canvas_sizes(args, n, image_wh, angle)
        out, keep = self.rotate(boxes, angle[sample], image_wh[sample].astype(_F32), canvas_wh[sample].astype(_F32))
        kept = np.bincount(sample[keep], minlength=n).tolist()
        outputs = [TensorList.make(list(torch.from_numpy(out[keep]).split(kept)))]
        if len(inputs) > 1:
            labels = inputs[1].as_torch_list()
            rows = torch.cat([t.reshape(-1) for t in labels])[torch.from_numpy(np.flatnonzero(keep))]
            rows = rows.reshape(-1, 1) if labels[0].dim() == 2 else rows
            outputs.append(TensorList.make(list(rows.split(kept)), inputs[1].layout()))
        return outputs

    def check_boxes(self, batch):
        """Each sample's number of boxes: one test over the batch's shapes, and sample by
        sample only to name one that is not float32 [boxes, 4]."""
        shapes = shapes_or_none(batch)
        if shapes is not None and shapes.shape[1] == 2 and (shapes[:, 1] == 4).all() and \
                batch.sample(0).dtype == torch.float32:
            return shapes[:, 0]
        i, b = next((i, b) for i, b in enumerate(batch.as_torch_list())
                    if b.dim() != 2 or b.shape[1] != 4 or b.dtype != torch.float32)
        raise self.error(f"sample {i}'s boxes have shape {tuple(b.shape)} ({b.dtype}); expected float32 "
                         "[boxes, 4]", ValueError, sample=i)

    def check_labels(self, batch, counts):
        """An error naming a sample whose labels are not int32 [boxes] or [boxes, 1]."""
        shapes = shapes_or_none(batch)
        if shapes is not None and shapes.shape[1] in (1, 2) and (shapes[:, 0] == counts).all() and \
                (shapes.shape[1] == 1 or (shapes[:, 1] == 1).all()) and batch.sample(0).dtype == torch.int32:
            return
        i, t = next((i, t) for i, t in enumerate(batch.as_torch_list())
                    if t.dtype != torch.int32 or t.shape[1:] not in ((), (1,)) or len(t) != counts[i]
                    or t.dim() != batch.sample(0).dim())
        raise self.error(f"sample {i} has {counts[i]} boxes and labels of shape {tuple(t.shape)} ({t.dtype}); "
                         "expected int32 [boxes] or [boxes, 1]", ValueError, sample=i)

    def image_sizes(self, args, n):
        """The images' (width, height) [n, 2] read from `input_shape` by `shape_layout`."""
        layout = str(self.spec.args["shape_layout"])
        shape = args.rows("input_shape", n)
        if shape.shape[1] <= max(layout.index("W"), layout.index("H")):
            raise self.error(f"argument 'input_shape' has {shape.shape[1]} values; `shape_layout` '{layout}' needs "
                             f"{max(layout.index('W'), layout.index('H')) + 1}", ValueError)
        return shape[:, [layout.index("W"), layout.index("H")]].astype(np.int64)

    def canvas_sizes(self, args, n, image_wh, angle):
        """The rotated images' (width, height) [n, 2], as fn.rotate sizes them."""
        if self.spec.args["keep_size"]:
            return image_wh
        size = args.rows("size", n)
        if size is None:
            return rotated_canvas(image_wh[:, ::-1], angle)[:, ::-1]
        if size.shape[1] != 2:
            raise self.error(f"argument 'size' has {size.shape[1]} values; expected 2 (height, width)", ValueError)
        return np.floor(size[:, ::-1]).astype(np.int64)

    def rotate(self, boxes, angle, image_wh, canvas_wh):
        """The boxes [B, 4] rotated onto their canvases, in the input's layout and
        normalization, and which are kept."""
        a = self.spec.args
        ltrb = a["bbox_layout"] == "xyXY"
        x1, y1, x2, y2 = boxes.T
        if not ltrb:
            x2, y2 = x1 + x2, y1 + y2
        xs, ys = np.stack([x1, x2, x1, x2], 1), np.stack([y1, y1, y2, y2], 1)
        w, h = image_wh[:, :1], image_wh[:, 1:]
        if a["bbox_normalized"]:
            xs, ys = (xs - _F32(0.5)) * w, (ys - _F32(0.5)) * h
        else:
            xs, ys = xs - w / _F32(2), ys - h / _F32(2)
        old_w, old_h = xs[:, 1] - xs[:, 0], ys[:, 2] - ys[:, 0]
        rad = (angle * _D2R).astype(np.float64)
        c, s = np.cos(rad).astype(_F32)[:, None], np.sin(rad).astype(_F32)[:, None]
        xs, ys = xs * c + ys * s, -xs * s + ys * c
        xs, ys = xs + canvas_wh[:, :1] / _F32(2), ys + canvas_wh[:, 1:] / _F32(2)
        out = np.stack([xs.min(1), ys.min(1), xs.max(1), ys.max(1)], 1)
        if a["mode"] != "expand":
            out = shrink(out, old_w, old_h, a["mode"] == "halfway")
        out, keep = clip(out, canvas_wh, a["remove_threshold"])
        if not ltrb:
            out[:, 2:] -= out[:, :2]
        if a["bbox_normalized"]:
            out *= np.tile(_F32(1) / canvas_wh, 2)
        return out, keep


def shrink(boxes, old_w, old_h, halfway):
    """The rotated boxes brought back to their old width and height (swapped where the
    rotation turned a wide box tall), or halfway there."""
    new_w, new_h = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    swapped = (old_w < old_h) ^ (new_w < new_h)
    dw = (new_w - np.where(swapped, old_h, old_w)) * _F32(0.5)
    dh = (new_h - np.where(swapped, old_w, old_h)) * _F32(0.5)
    if halfway:
        dw, dh = dw * _F32(0.5), dh * _F32(0.5)
    return boxes + np.stack([dw, dh, -dw, -dh], 1)


def clip(boxes, canvas_wh, threshold):
    """The boxes clipped to their canvases, and which keep at least `threshold` of their
    area (not a box of no area: 0 / 0 is no part)."""
    old = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    hi = np.tile(canvas_wh, 2)
    boxes = np.clip(boxes, _F32(0), hi)
    new = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    with np.errstate(divide="ignore", invalid="ignore"):
        return boxes, new / old >= _F32(threshold)
