"""fn.multi_paste: regions of images pasted onto new zero canvases, in order (a later region
covers an earlier one), as the mosaic and cutmix augmentations need. The regions come from
samples of one batch chosen by `in_ids`, or from the same sample of several batches. Every
region's geometry is computed and checked for the whole batch at once; the pixels are then
one strided copy per region (converted to `dtype` as DALI's ConvertSat does): memory-bound
copies that torch does at full bandwidth on the CPU and the GPU alike."""
import numpy as np
import torch

from .. import types
from ..schema import DTYPE, INTS, ArgType, Arg, register
from ..tensor_list import TensorList
from .base import BatchSpec, Operator
from .conversions import convert_saturate
from .images import refuse_huge_outputs

_F32 = np.float32
_TYPES = (torch.uint8, torch.int16, torch.int32, torch.float32)
_LAYOUTS = {3: "HWC", 4: "FHWC"}
# (absolute argument, relative argument) of each region property
_PAIRS = (("in_anchors", "in_anchors_rel"), ("shapes", "shapes_rel"), ("out_anchors", "out_anchors_rel"))


def _type_name(dtype):
    return types.to_dali_type(dtype).name


def _pairs_of(integer):
    """A constant list of (y, x) pairs, nested or flat, as a flat list."""
    def convert(v):
        a = np.asarray(v, np.float64)
        if a.size % 2 or (a.ndim == 2 and a.shape[1] != 2) or a.ndim > 2:
            raise TypeError("expected (y, x) pairs: a [regions, 2] list")
        if integer and not (a == np.trunc(a)).all():
            raise TypeError("expected integers")
        return [int(x) if integer else float(x) for x in a.reshape(-1)]
    return ArgType("list of int" if integer else "list of float", convert)


def _region_arg(name, integer, doc):
    return Arg(name, _pairs_of(integer), None, doc + " One (y, x) row per pasted region ([regions, 2]).",
               per_sample=True)


@register("multi_paste", devices=("cpu", "gpu"), inputs=(1, 64), args=[
    Arg("in_ids", INTS, None, "Indices of the samples of the (one) input batch pasted into each output sample; "
        "without it, the same sample of each input batch is pasted.", per_sample=True),
    _region_arg("in_anchors", True, "Top-left corner of each region in its source (default 0)."),
    _region_arg("in_anchors_rel", False, "in_anchors relative to the source's size (0..1, rounded down)."),
    _region_arg("shapes", True, "Size of each region (default: from the anchor to the source's end)."),
    _region_arg("shapes_rel", False, "shapes relative to the source's size (0..1, rounded up)."),
    _region_arg("out_anchors", True, "Top-left corner of each region on the canvas (default 0)."),
    _region_arg("out_anchors_rel", False, "out_anchors relative to the canvas size (0..1, rounded down)."),
    Arg("output_size", INTS, None, "The canvas (height, width); by default the inputs' common size.",
        per_sample=True),
    Arg("dtype", DTYPE, None, "Output type; the input's if not set.",
        choices=(types.UINT8, types.INT16, types.INT32, types.FLOAT)),
])
class MultiPaste(Operator):
    """Paste regions of HWC images (FHWC sequences: every frame alike) onto zero canvases of
    `output_size`, each region at its out_anchor, later regions over earlier ones."""

    def plan(self, inputs):
        first = inputs[0]
        for k, spec in enumerate(inputs):
            self._check_spec(k, spec, first)
        given = lambda name: self.spec.args.get(name) is not None or name in self.spec.arg_input_names  # noqa: E731
        self._ids = given("in_ids")
        if self._ids and len(inputs) > 1:
            raise self.error(f"with `in_ids`, the operator takes exactly one input batch; got {len(inputs)}",
                             ValueError)
        for absolute, relative in _PAIRS:
            if given(absolute) and given(relative):
                raise self.error(f"`{absolute}` and `{relative}` cannot be given together", ValueError)
        self._given = [a if given(a) else r if given(r) else None for a, r in _PAIRS]
        dtype = self.spec.args["dtype"]
        self._dtype = None if dtype is None else types.to_torch_type(dtype)
        layout = first.layout or (_LAYOUTS.get(first.ndim) if first.ndim else None)
        return [BatchSpec(first.device, self._dtype or first.dtype, first.ndim, layout)], self.step

    def _check_spec(self, k, spec, first):
        """Build time: what is known of input k must fit (and agree with input 0)."""
        if spec.layout and spec.layout not in _LAYOUTS.values():
            raise self.error(f"input {k} has layout '{spec.layout}'; give HWC images or FHWC sequences", ValueError)
        if spec.ndim is not None and spec.ndim not in _LAYOUTS:
            raise self.error(f"input {k} has samples of {spec.ndim} dims; give HWC images or FHWC sequences",
                             ValueError)
        if spec.dtype is not None and spec.dtype not in _TYPES:
            raise self._type_error(spec.dtype, "input")
        for what in ("device", "dtype", "ndim"):
            a, b = getattr(first, what), getattr(spec, what)
            if a is not None and b is not None and a != b:
                raise self.error(f"all inputs must have one {what}: input 0 has {a}, input {k} has {b}", ValueError)

    def _type_error(self, dtype, what):
        names = ", ".join(_type_name(t) for t in _TYPES)
        return self.error(f"{what} type {_type_name(dtype)} is not supported; supported: {names}", TypeError)

    def step(self, inputs, args, ctx):
        n = len(inputs[0])
        if n == 0:
            return [inputs[0]]
        shapes = self._input_shapes(inputs)  # [inputs, n, ndim]
        in_dtype = inputs[0].as_torch_list()[0].dtype
        out_dtype = self._dtype or in_dtype
        owner, src_input, src_sample = self._sources(args, inputs, n, shapes.shape[2])
        counts = np.bincount(owner, minlength=n)
        src = shapes[src_input, src_sample]  # [P, ndim]: each region's source shape
        out_hw = self._output_size(args, shapes, n)
        out_shapes = self._output_shapes(shapes[0], out_hw, owner, src, counts)
        anchor, size, out_anchor = self._geometry(args, counts, owner, src[:, -3:-1].astype(np.int64), out_hw)
        outs = self._canvases(out_shapes, out_dtype, inputs[0].as_torch_list()[0].device)
        samples = [b.as_torch_list() for b in inputs]
        regions = np.concatenate([owner[:, None], src_input[:, None], src_sample[:, None], anchor, size, out_anchor],
                                 axis=1).tolist()
        for i, k, s, ay, ax, h, w, oy, ox in regions:
            region = samples[k][s][..., ay:ay + h, ax:ax + w, :]
            outs[i][..., oy:oy + h, ox:ox + w, :].copy_(convert_saturate(region, out_dtype))
        layout = inputs[0].layout() or _LAYOUTS[shapes.shape[2]]
        return [TensorList.make(outs, layout, device=inputs[0].device,
                                source_info=self._source_info(inputs, owner, src_input, src_sample, n))]

    def _input_shapes(self, inputs):
        """The samples' shapes as one [inputs, n, ndim] int64 array; errors for samples that are
        not HWC / FHWC of one rank and a supported type, or inputs that disagree."""
        ndim, dtype, out = None, None, []
        for k, batch in enumerate(inputs):
            try:
                shapes = batch.sample_shapes()
            except ValueError:
                raise self.error(f"the samples of input {k} differ in their number of dims", ValueError) from None
            if shapes.shape[1] not in _LAYOUTS or (ndim is not None and shapes.shape[1] != ndim):
                raise self.error(f"input {k} has samples of {shapes.shape[1]} dims; all inputs must be HWC images "
                                 "or all FHWC sequences", ValueError)
            t = batch.as_torch_list()[0].dtype
            if t not in _TYPES:
                raise self._type_error(t, "input")
            if dtype is not None and t != dtype:
                raise self.error(f"all input batches must have one type: input 0 is {_type_name(dtype)}, "
                                 f"input {k} is {_type_name(t)}", TypeError)
            if len(batch) != len(inputs[0]):
                raise self.error(f"input {k} has {len(batch)} samples, input 0 has {len(inputs[0])}", ValueError)
            ndim, dtype = shapes.shape[1], t
            out.append(shapes)
        return np.stack(out)

    def _sources(self, args, inputs, n, ndim):
        """Each region's (output sample, input batch, sample), [P] int64 each, in paste order."""
        if not self._ids:
            m = len(inputs)
            return np.repeat(np.arange(n), m), np.tile(np.arange(m), n), np.repeat(np.arange(n), m)
        if ndim == 4:
            raise self.error("`in_ids` with sequences (FHWC) is not supported (DALI indexes their frames, not the "
                             "samples); give the sequences as separate inputs instead", ValueError)
        if args.is_per_sample("in_ids"):
            ids = []
            for i, t in enumerate(args.given("in_ids").as_torch_list()):
                if t.dim() > 1 or t.is_floating_point() or t.dtype == torch.bool:
                    raise self.error(f"argument input 'in_ids' sample {i} must be a 1D list of integers, got "
                                     f"{tuple(t.shape)} {t.dtype}", TypeError, sample=i)
                ids.append(t.reshape(-1).numpy().astype(np.int64))
        else:
            ids = [np.asarray(args["in_ids"], np.int64)] * n
        counts = np.array([len(v) for v in ids])
        flat = np.concatenate(ids) if ids else np.zeros(0, np.int64)
        owner = np.repeat(np.arange(n), counts)
        bad = (flat < 0) | (flat >= n)
        if bad.any():
            p = int(np.argmax(bad))
            raise self.error(f"`in_ids` of output sample {owner[p]} names sample {flat[p]}; the input batch has "
                             f"{n} samples (ids 0..{n - 1})", IndexError, sample=int(owner[p]))
        return owner, np.zeros_like(flat), flat

    def _output_size(self, args, shapes, n):
        """The canvases' (height, width), [n, 2] int64."""
        if self.spec.args.get("output_size") is None and not args.is_per_sample("output_size"):
            hw = shapes[:, :, -3:-1].reshape(-1, 2)
            differ = (hw != hw[0]).any(axis=1)
            if differ.any():
                k = int(np.argmax(differ))
                raise self.error(f"without `output_size`, all input samples must have one size; got "
                                 f"{tuple(hw[0].tolist())} and {tuple(hw[k].tolist())} (input {k // n}, sample "
                                 f"{k % n})", ValueError)
            return np.broadcast_to(hw[0], (n, 2)).astype(np.int64)
        size = args.rows("output_size", n)
        if size.shape[1] < 2:
            raise self.error(f"`output_size` must be (height, width), got {size.shape[1]} value(s)", ValueError)
        size = size[:, :2].astype(np.int64)  # DALI accepts (and ignores) a channel count after them
        bad = (size < 0).any(axis=1)
        if bad.any():
            i = int(np.argmax(bad))
            raise self.error(f"`output_size` must not be negative, got {size[i].tolist()} for sample {i}",
                             ValueError, sample=i)
        refuse_huge_outputs(self, size, ["output_size"])
        return size

    def _output_shapes(self, shapes0, out_hw, owner, src, counts):
        """[n, ndim] output shapes: the canvas, the frames of input 0's sample, and the channels of
        the regions pasted (which must agree), or of input 0's sample where none is."""
        n, ndim = shapes0.shape
        channels = shapes0[:, -1].copy()
        pasted = counts > 0
        if pasted.any():
            starts = (np.cumsum(counts) - counts)[pasted]
            lo, hi = np.minimum.reduceat(src[:, -1], starts), np.maximum.reduceat(src[:, -1], starts)
            if (lo != hi).any():
                i = int(np.flatnonzero(pasted)[np.argmax(lo != hi)])
                raise self.error(f"the regions pasted into output sample {i} have different numbers of channels "
                                 f"({lo[lo != hi][0]} and {hi[lo != hi][0]}); they must agree", ValueError, sample=i)
            channels[pasted] = lo
        if ndim == 4:
            wrong = src[:, 0] != shapes0[owner, 0]
            if wrong.any():
                p = int(np.argmax(wrong))
                i = int(owner[p])
                raise self.error(f"output sample {i}: a pasted sequence has {src[p, 0]} frames, input 0's sample has "
                                 f"{shapes0[i, 0]}; they must agree", ValueError, sample=i)
        return np.concatenate([shapes0[:, :ndim - 3], out_hw, channels[:, None]], axis=1)

    def _geometry(self, args, counts, owner, src_hw, out_hw):
        """Each region's input anchor, size and output anchor ([P, 2] int64 each), checked to lie
        within its source and its canvas."""
        in_name, shape_name, out_name = self._given
        anchor = self._coords(args, in_name, counts, src_hw, np.floor)
        size = self._coords(args, shape_name, counts, src_hw, np.ceil)
        if size is None:
            size = src_hw - (0 if anchor is None else anchor)
        anchor = np.zeros_like(src_hw) if anchor is None else anchor
        out_anchor = self._coords(args, out_name, counts, out_hw[owner], np.floor)
        out_anchor = np.zeros_like(src_hw) if out_anchor is None else out_anchor
        self._check_within(counts, (anchor >= 0) & (size >= 0) & (anchor + size <= src_hw),
                           "within its source", anchor, size, src_hw, "input anchor", "input shape")
        self._check_within(counts, (out_anchor >= 0) & (out_anchor + size <= out_hw[owner]),
                           "within the output canvas", out_anchor, size, out_hw[owner], "output anchor",
                           "output size (output_size)")
        return anchor, size, out_anchor

    def _coords(self, args, name, counts, extent, rounding):
        """Argument `name` for every region as [P, 2] int64: absolute, or relative to `extent`
        ([P, 2]) and rounded (in float32, as DALI); None where not given."""
        if name is None:
            return None
        rows = self._rows(args, name, counts)
        if not name.endswith("_rel"):
            return rows.astype(np.int64)
        bad = ~((rows >= 0) & (rows <= 1)).all(axis=1)
        if bad.any():
            p = int(np.argmax(bad))
            i, j = self._region(counts, p)
            raise self.error(f"`{name}` must be in [0, 1], got {np.round(rows[p], 6).tolist()} for region {j} of "
                             f"output sample {i}", ValueError, sample=i)
        return rounding(extent.astype(_F32) * rows.astype(_F32)).astype(np.int64)

    def _rows(self, args, name, counts):
        """The [regions, 2] rows of `name` for all output samples, one after another ([P, 2])."""
        n = len(counts)
        if args.is_per_sample(name):
            values = []
            for i, t in enumerate(args.given(name).as_torch_list()):
                if not name.endswith("_rel") and (t.is_floating_point() or t.dtype == torch.bool):
                    raise self.error(f"argument input '{name}' must hold integers, got {t.dtype}", TypeError,
                                     sample=i)
                values.append(t.numpy())
        else:
            values = [np.asarray(args[name], np.float64).reshape(-1, 2)] * n
        for i, v in enumerate(values):
            if v.shape != (counts[i], 2):
                raise self.error(f"`{name}` for output sample {i} must have shape ({counts[i]}, 2): a (y, x) row "
                                 f"for each of its {counts[i]} pasted regions; got {tuple(v.shape)}", ValueError,
                                 sample=i)
        return np.concatenate([np.asarray(v, np.float64) for v in values]) if values else np.zeros((0, 2))

    def _check_within(self, counts, ok, where, anchor, size, extent, anchor_name, extent_name):
        """An error naming the first region whose `ok` row is not all true."""
        bad = ~ok.all(axis=1)
        if bad.any():
            p = int(np.argmax(bad))
            i, j = self._region(counts, p)
            raise self.error(f"region {j} pasted into output sample {i} must lie {where}: {anchor_name} "
                             f"{tuple(anchor[p].tolist())}, region shape {tuple(size[p].tolist())}, {extent_name} "
                             f"{tuple(extent[p].tolist())}", ValueError, sample=i)

    @staticmethod
    def _region(counts, p):
        """(output sample, region index in it) of region p."""
        ends = np.cumsum(counts)
        i = int(np.searchsorted(ends, p, side="right"))
        return i, int(p - (ends[i] - counts[i]))

    @staticmethod
    def _canvases(out_shapes, dtype, device):
        """Zero canvases: one [n, ...] tensor when they have one shape, else one per sample."""
        if (out_shapes == out_shapes[0]).all():
            return torch.zeros([len(out_shapes)] + out_shapes[0].tolist(), dtype=dtype, device=device)
        return [torch.zeros(s, dtype=dtype, device=device) for s in out_shapes.tolist()]

    @staticmethod
    def _source_info(inputs, owner, src_input, src_sample, n):
        """Each output's sources' source_info, joined with ';' as in DALI; None if no input has any."""
        infos = [b.source_info for b in inputs]
        if not any(infos):
            return None
        out = [[] for _ in range(n)]
        for i, k, s in zip(owner.tolist(), src_input.tolist(), src_sample.tolist()):
            info = infos[k][s] if infos[k] else ""
            if info:
                out[i].append(info)
        return [";".join(parts) for parts in out]
