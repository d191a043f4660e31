"""box_encoder: a sample's boxes matched to a fixed set of anchors (SSD's default boxes), as
SSD's training needs them. The whole batch is one [N, boxes, anchors] IoU array (the
samples' boxes padded to the batch's most), on the CPU or the GPU alike."""
import numpy as np
import torch

from ..schema import BOOL, FLOAT, FLOATS, REQUIRED, Arg, register
from ..tensor_list import TensorList
from .base import BatchSpec, Operator, shapes_or_none


def _four(v):
    return None if len(v) == 4 else "must have 4 values (x, y, w, h)"


@register("box_encoder", devices=("cpu", "gpu"), inputs=(2, 2), outputs=2, input_names=("boxes", "labels"), args=[
    Arg("anchors", FLOATS, REQUIRED, "The anchors, [l, t, r, b] each, one after another.",
        check=lambda v: None if v and len(v) % 4 == 0 else "must hold 4 values (l, t, r, b) per anchor"),
    Arg("criteria", FLOAT, 0.5, "The IoU above which an anchor matches a box.",
        check=lambda v: None if 0 <= v <= 1 else "must be in [0, 1]"),
    Arg("offset", BOOL, False, "Encode matched boxes as SSD's normalized offsets from their anchors "
        "(and unmatched anchors as zeros) instead of the boxes themselves."),
    Arg("scale", FLOAT, 1.0, "Boxes and anchors are scaled by this before the offsets are taken."),
    Arg("means", FLOATS, [0.0, 0.0, 0.0, 0.0], "The offsets' means (x, y, w, h).", check=_four),
    Arg("stds", FLOATS, [1.0, 1.0, 1.0, 1.0], "The offsets' standard deviations (x, y, w, h).",
        check=lambda v: _four(v) or (None if all(s != 0 for s in v) else "must not be 0")),
])
class BoxEncoder(Operator):
    """Boxes [B, 4] (l, t, r, b) and labels [B] (or [B, 1]) of each sample encoded against
    the anchors: [A, 4] boxes as (center x, center y, w, h) and [A] int32 labels. Each box
    takes the anchor it overlaps most; each other anchor the box it overlaps most, if above
    `criteria`; an unmatched anchor keeps itself and label 0. Ties go to the later index,
    as in DALI."""

    def plan(self, inputs):
        a = self.spec.args
        self.anchors = torch.tensor(a["anchors"], dtype=torch.float32).reshape(-1, 4)
        self.means = torch.tensor(a["means"], dtype=torch.float32)
        self.stds = torch.tensor(a["stds"], dtype=torch.float32)
        device = "cpu" if self.spec.device == "cpu" else "gpu"
        return [BatchSpec(device, torch.float32, 2, ""), BatchSpec(device, torch.int32, 1, "")], self.step

    def step(self, inputs, args, ctx):
        boxes, labels = inputs[0].as_torch_list(), inputs[1].as_torch_list()
        counts = self.check(inputs[0], inputs[1], boxes, labels)
        device = boxes[0].device if boxes else torch.device("cpu")
        anchors = self.anchors.to(device)
        n, a = len(boxes), len(anchors)
        padded = torch.nn.utils.rnn.pad_sequence([b.reshape(-1, 4).float() for b in boxes], batch_first=True)
        names = torch.nn.utils.rnn.pad_sequence([l.reshape(-1).int() for l in labels], batch_first=True)
        if padded.shape[1] == 0:  # no boxes in the batch: one padding row, matched to nothing
            padded, names = padded.new_zeros(n, 1, 4), names.new_zeros(n, 1)
        counts = torch.from_numpy(counts).to(device)
        valid = torch.arange(padded.shape[1], device=device) < counts[:, None]  # [N, B]
        iou = torch.where(valid[:, :, None], box_iou(padded, anchors), -1.0)  # [N, B, A]
        # Each box claims its best anchor (the last of equals) with IoU 2, as in DALI; then each
        # anchor takes its best box (the last of equals), if above the criteria.
        best_anchor = a - 1 - iou.flip(2).argmax(2)
        iou.scatter_(2, best_anchor[:, :, None], torch.where(valid, 2.0, -1.0)[:, :, None])
        best_iou, flipped = iou.flip(1).max(1)
        best_box = padded.shape[1] - 1 - flipped  # [N, A]
        matched = best_iou > args["criteria"]
        chosen = center_wh(padded.gather(1, best_box[:, :, None].expand(n, a, 4)))
        anchor_cwh = center_wh(anchors).expand(n, a, 4)
        if self.spec.args["offset"]:
            out = torch.where(matched[:, :, None], self.offsets(chosen, anchor_cwh), 0.0)
        else:
            out = torch.where(matched[:, :, None], chosen, anchor_cwh)
        out_labels = torch.where(matched, names.gather(1, best_box), 0).int()
        return [TensorList.make(out.contiguous(), device=inputs[0].device),
                TensorList.make(out_labels, device=inputs[0].device)]

    def offsets(self, boxes, anchors):
        """SSD's encoding of center-size `boxes` against `anchors`, normalized."""
        s = self.spec.args["scale"]
        boxes, anchors = boxes * s, anchors * s
        means, stds = self.means.to(boxes.device), self.stds.to(boxes.device)
        xy = (boxes[..., :2] - anchors[..., :2]) / anchors[..., 2:]
        wh = torch.log(boxes[..., 2:] / anchors[..., 2:])
        return (torch.cat([xy, wh], -1) - means) / stds

    def check(self, box_batch, label_batch, boxes, labels):
        """Each sample's number of boxes ([N] int64), once boxes and labels are checked: one
        test over the batch's shapes, and sample by sample only to name what is wrong."""
        box_shapes, label_shapes = shapes_or_none(box_batch), shapes_or_none(label_batch)
        if box_shapes is not None and label_shapes is not None and len(boxes) and box_shapes.shape[1] in (1, 2):
            counts = box_shapes.prod(1) // 4
            box_ok = (box_shapes[:, -1] == 4).all() and (box_shapes.shape[1] == 2 or (box_shapes[:, 0] == 4).all())
            label_ok = label_shapes.shape[1] in (1, 2) and (label_shapes[:, 0] == counts).all() and \
                (label_shapes.shape[1] == 1 or (label_shapes[:, 1] == 1).all())
            types_ok = boxes[0].is_floating_point() and not labels[0].is_floating_point() and \
                labels[0].dtype != torch.bool
            if box_ok and label_ok and types_ok:
                return counts
        if not len(boxes):
            return np.zeros(0, np.int64)
        for i, (b, l) in enumerate(zip(boxes, labels)):
            if b.dim() not in (1, 2) or b.shape[-1] != 4 or (b.dim() == 1 and b.numel() != 4):
                raise self.error(f"sample {i}'s boxes have shape {tuple(b.shape)}; expected [boxes, 4] "
                                 "(l, t, r, b)", ValueError, sample=i)
            if not (b.is_floating_point() and not l.is_floating_point() and l.dtype != torch.bool):
                raise self.error(f"sample {i}: boxes must be float and labels integers, got {b.dtype} and "
                                 f"{l.dtype}", TypeError, sample=i)
            if l.numel() != b.numel() // 4 or l.dim() > 2 or (l.dim() == 2 and l.shape[1] != 1):
                raise self.error(f"sample {i} has {b.numel() // 4} boxes and labels of shape {tuple(l.shape)}; "
                                 "expected one label per box ([boxes] or [boxes, 1])", ValueError, sample=i)
        return np.array([b.numel() // 4 for b in boxes], np.int64)  # valid, of mixed ndim ([4] and [k, 4])


def box_iou(boxes, anchors):
    """IoU of [N, B, 4] boxes with [A, 4] anchors (l, t, r, b) as [N, B, A]; 0 where the
    union is empty."""
    lt = torch.maximum(boxes[:, :, None, :2], anchors[None, None, :, :2])
    rb = torch.minimum(boxes[:, :, None, 2:], anchors[None, None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    union = area(boxes)[:, :, None] + area(anchors)[None, None] - inter
    return torch.where(union > 0, inter / union.clamp(min=np.finfo(np.float32).tiny), 0.0)


def area(ltrb):
    return (ltrb[..., 2] - ltrb[..., 0]) * (ltrb[..., 3] - ltrb[..., 1])


def center_wh(ltrb):
    """(l, t, r, b) boxes as (center x, center y, w, h)."""
    return torch.cat([(ltrb[..., :2] + ltrb[..., 2:]) / 2, ltrb[..., 2:] - ltrb[..., :2]], -1)
