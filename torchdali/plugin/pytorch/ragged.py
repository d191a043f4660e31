"""`DALIRaggedIterator`: batches whose samples differ in shape, as DALI returns them.

Each output is tagged: DENSE_TAG gives one tensor [batch, ...] (the samples must share a
shape), SPARSE_LIST_TAG a list of per-sample tensors (views, no copy) and SPARSE_COO_TAG
a sparse COO tensor whose row i holds sample i's elements along its first dimension.
Nothing is padded."""
import torch

from .iterator import PipelineIterator, dense_batch, trim
from .policy import LastBatchPolicy


class DALIRaggedIterator(PipelineIterator):
    """Iterates over pipelines like `DALIGenericIterator`, returning each output as a
    dense tensor, a list of tensors or a sparse COO tensor, by its tag in `output_types`
    (all DENSE_TAG when not given)."""

    DENSE_TAG = "dense"
    SPARSE_LIST_TAG = "sparse_list"
    SPARSE_COO_TAG = "sparse_coo"

    def __init__(self, pipelines, output_map, size=-1, reader_name=None, output_types=None,
                 auto_reset=False, fill_last_batch=None, dynamic_shape=False, last_batch_padded=False,
                 last_batch_policy=LastBatchPolicy.FILL, prepare_first_batch=True):
        tags = (self.DENSE_TAG, self.SPARSE_LIST_TAG, self.SPARSE_COO_TAG)
        if output_types is not None:
            bad = [t for t in output_types if t not in tags]
            if bad:
                raise ValueError(f"DALIRaggedIterator: output_types may hold only {tags}; got {bad}")
            if len(output_types) != len(output_map):
                raise ValueError(f"DALIRaggedIterator: output_types has {len(output_types)} tags for "
                                 f"{len(output_map)} outputs in output_map")
        self._output_types = list(output_types) if output_types is not None else [self.DENSE_TAG] * len(output_map)
        super().__init__(pipelines, output_map, size, reader_name, auto_reset, fill_last_batch,
                         last_batch_padded, last_batch_policy, prepare_first_batch)

    def _to_dict(self, outputs, keep, pipe):
        batch = {}
        for name, tag, out in zip(self.output_map, self._output_types, outputs):
            if tag == self.DENSE_TAG:
                batch[name] = dense_batch(self, name, out, keep)
                continue
            samples = trim(out.as_torch_list(), keep)
            batch[name] = samples if tag == self.SPARSE_LIST_TAG else sparse_coo(name, samples, out)
        return batch


def sparse_coo(name, samples, out):
    """Samples as a sparse COO tensor [batch, longest, ...]: element j of sample i (along
    its first dimension) at index (i, j); further dimensions are dense (a hybrid tensor)."""
    if any(s.dim() == 0 for s in samples):
        raise RuntimeError(f"DALIRaggedIterator: output '{name}' has scalar samples; SPARSE_COO_TAG "
                           "needs samples with at least one dimension")
    if not samples:
        dtype = out.sample(0).dtype if len(out) else torch.float32
        return torch.sparse_coo_tensor(torch.zeros(2, 0, dtype=torch.int64), torch.empty(0, dtype=dtype), (0, 0))
    lengths = [s.shape[0] for s in samples]
    rows = torch.repeat_interleave(torch.arange(len(samples)), torch.tensor(lengths))
    cols = torch.cat([torch.arange(n) for n in lengths])
    values = torch.cat(samples)
    size = (len(samples), max(lengths), *values.shape[1:])
    indices = torch.stack([rows, cols]).to(values.device)  # sorted and unique: coalesced
    return torch.sparse_coo_tensor(indices, values, size, is_coalesced=True, check_invariants=False)
