"""Sequences: `per_frame` says that each sample of a batch is a sequence (its layout starts
with 'F'), so that an operator taking it as an argument reads a row per frame; and the helpers
with which operators run sequences as batches of frames and regroup them."""
import dataclasses

import numpy as np
import torch

from ..schema import BOOL, Arg, register
from ..tensor_list import TensorList
from .base import BatchSpec, Operator


def frame_counts(op, inputs, args, n):
    """The frames of each of `n` samples where an input holds sequences or an argument is
    given per frame, else None; a single frame serves any count, other counts must agree."""
    sequences = [(k, b) for k, b in enumerate(inputs) if b.layout().startswith("F")]
    if not sequences and not args.per_frame:
        return None
    counts = args.frame_counts(n)
    for k, batch in sequences:
        rows = np.array([len(s) for s in batch.as_torch_list()], np.int64)
        clash = (rows != 1) & (counts != 1) & (rows != counts)
        if clash.any():
            i = int(np.argmax(clash))
            raise op.error(f"input {k} sample {i} has {rows[i]} frames, the other per-frame values of that sample "
                           f"{counts[i]}; give one count (or 1)", ValueError, sample=i)
        counts = np.maximum(counts, rows)
    return counts


def frames_of(op, k, batch, frames):
    """Input `k` for every frame: a sequence's frames (a single frame serving them all), or
    each sample repeated for each frame of its sequence (`frames`: their counts)."""
    samples = batch.as_torch_list()
    if not batch.layout().startswith("F"):
        rows = np.repeat(np.arange(len(frames)), frames)
        dense = batch.dense_tensor()
        picked = dense[torch.from_numpy(rows).to(dense.device)] if dense is not None else [samples[i] for i in rows]
        return TensorList.make(picked, batch.layout(), device=batch.device)
    for i, (s, f) in enumerate(zip(samples, frames)):
        if len(s) not in (1, f):
            raise op.error(f"input {k} sample {i} has {len(s)} frames, where {f} are wanted; give 1 or {f}",
                           ValueError, sample=i)
    dense = batch.dense_tensor()
    if dense is not None and dense.dim() > 1 and (frames == dense.shape[1]).all():
        return TensorList.make(dense.flatten(0, 1), batch.layout()[1:], device=batch.device)
    picked = [s[j if len(s) > 1 else 0] for s, f in zip(samples, frames) for j in range(f)]
    return TensorList.make(picked, batch.layout()[1:], device=batch.device)


def frame_by_frame(op, step):
    """`step(inputs, args, ctx)` made to run frame by frame where an input holds sequences or an
    argument is given per frame (`ctx.frames`: the counts), each sample's outputs regrouped
    into a sequence."""
    def run(inputs, args, ctx):
        n = len(inputs[0]) if inputs else ctx.batch_size
        frames = frame_counts(op, inputs, args, n)
        if frames is None:
            return step(inputs, args, ctx)
        return run_frames(op, step, inputs, args, ctx, frames)

    return run


def run_frames(op, step, inputs, args, ctx, frames):
    """`step` on every frame of sequences of `frames` frames (inputs and arguments expanded to
    the frames, `ctx.frames` set), each sample's outputs regrouped into a sequence."""
    outs = step([frames_of(op, k, batch, frames) for k, batch in enumerate(inputs)], args.over_frames(frames),
                dataclasses.replace(ctx, batch_size=int(frames.sum()), frames=frames))
    return [as_sequences(out, frames) for out in outs]


def as_sequences(out, frames):
    """A batch of frames (a TensorList) regrouped into sequences of `frames` frames each; the
    layout is 'F' and the frames' ('F' and a '*' per dim where they have none)."""
    dense = out.dense_tensor()
    if dense is not None and (frames == frames[0]).all():
        grouped = dense.unflatten(0, (len(frames), int(frames[0])))
    else:
        samples, starts = out.as_torch_list(), np.concatenate([[0], np.cumsum(frames)])
        grouped = [torch.stack(samples[a:b]) for a, b in zip(starts[:-1], starts[1:])]
    layout = out.layout() or "*" * (grouped[0].dim() - 1 if isinstance(grouped, list) else grouped.dim() - 2)
    return TensorList.make(grouped, "F" + layout, device=out.device)


@register("per_frame", devices=("cpu", "gpu"), inputs=(1, 1), aliases=("PerFrame",), args=[
    Arg("replace", BOOL, False, "A layout that does not start with 'F' gets its first letter replaced by 'F' "
        "(False: such a layout is an error).")])
class PerFrame(Operator):
    """Mark the input as per-frame (a sequence per sample): the layout gets a leading 'F' (no
    layout: 'F' then '*' per further dim); the data are passed on unchanged. Operators that
    take an argument per frame (rotate's angle, warp_affine's matrix, the transforms.*
    arguments) then read sample i's row f for frame f of their input's sequence i."""

    def plan(self, inputs):
        spec = inputs[0]
        layout = None if spec.layout is None else self._marked(spec.layout, spec.ndim)
        return [BatchSpec(spec.device, spec.dtype, spec.ndim, layout)], self.step

    def _marked(self, layout, ndim):
        if layout.startswith("F"):
            return layout
        if not layout:
            if ndim == 0:
                raise self.error("the input samples are scalars; a per-frame input needs a dimension of frames",
                                 ValueError)
            return None if ndim is None else "F" + "*" * (ndim - 1)
        if not self.spec.args["replace"]:
            raise self.error(f"the input layout '{layout}' does not start with 'F' (frames); give a sequence, or "
                             "replace=True to make its first dimension the frames", ValueError)
        return "F" + layout[1:]

    def step(self, inputs, args, ctx):
        batch = inputs[0]
        ndim = batch.sample(0).dim() if len(batch) else 1
        layout = self._marked(batch.layout(), ndim)
        dense = batch.dense_tensor()
        return [TensorList.make(dense if dense is not None else batch.as_torch_list(), layout, device=batch.device,
                                source_info=batch.source_info)]
