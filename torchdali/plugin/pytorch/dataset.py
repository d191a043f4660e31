"""`DALIIterableDataset`: a pipeline as a `torch.utils.data.IterableDataset`, so that it
goes where a `DataLoader` went (`DataLoader(ds, batch_size=None)` or on its own), one
epoch per `iter()`, with `len()`, `set_epoch()` and torchdata's stateful convention
(`state_dict()` / `load_state_dict()`) to resume a job mid-epoch on the same next batch.

It drives a `DALIGenericIterator` over one pipeline (one per process, as in distributed
training). Its state is the iterator's checkpoint (the pipeline's operators and the
iterator's place in the epoch) plus the epoch number."""
import warnings

import torch

from ...distributed import AUTO, local_device_id, rank_and_world_size
from ...pipeline import Pipeline
from .iterator import DALIGenericIterator
from .policy import LastBatchPolicy

_STATE_FORMAT = "torchdali-dataset"


class DALIIterableDataset(torch.utils.data.IterableDataset):
    """Yields, per step, a dict mapping the names of `output_map` to batches [batch, ...].

    `pipeline` is a `@pipeline_def` function, called with `pipeline_kwargs` (and
    `device_id`, `enable_checkpointing=True`) when the data is first needed, or a
    Pipeline (then `load_state_dict()` is not available: it needs to build a new one).
    `reader_name` defaults to the pipeline's only reader; `size`, `last_batch_policy` and
    `last_batch_padded` are DALIGenericIterator's. `device_id="auto"`: LOCAL_RANK (set by
    torchrun), else the current GPU, else None (CPU-only)."""

    def __init__(self, pipeline, output_map, *, reader_name=None, size=-1,
                 last_batch_policy=LastBatchPolicy.FILL, last_batch_padded=False, device_id=AUTO,
                 **pipeline_kwargs):
        super().__init__()
        if isinstance(pipeline, Pipeline):
            if pipeline_kwargs or device_id != AUTO:
                raise ValueError(f"DALIIterableDataset: pipeline arguments {sorted(pipeline_kwargs)}"
                                 f"{' and device_id' if device_id != AUTO else ''} apply to a @pipeline_def "
                                 "function, not to a Pipeline already made")
        elif not getattr(pipeline, "_is_pipeline_def", False):
            raise TypeError(f"DALIIterableDataset: pipeline must be a @pipeline_def function or a Pipeline, "
                            f"got {type(pipeline).__name__}")
        self._pipeline = pipeline
        self._pipeline_kwargs = pipeline_kwargs
        self._device_id = device_id
        self._iterator_args = dict(output_map=list(output_map), reader_name=reader_name, size=size,
                                   last_batch_policy=last_batch_policy, last_batch_padded=last_batch_padded)
        self._it = None
        self._epoch = 0  # the epoch being read (or the next, if not started)
        self._epoch_done = False  # its end was reached: the next iter() starts the following one

    # --- the iterator, made when the data is first needed ---
    def _make_pipeline(self, checkpoint):
        if isinstance(self._pipeline, Pipeline):
            return self._pipeline
        device_id = local_device_id() if self._device_id == AUTO else self._device_id
        return self._pipeline(**self._pipeline_kwargs, device_id=device_id, enable_checkpointing=True,
                              checkpoint=checkpoint)

    def _iterator(self, checkpoint=None):
        if self._it is None:
            pipe = self._make_pipeline(checkpoint)
            args = dict(self._iterator_args)
            if args["reader_name"] is None and args["size"] < 0:
                args["reader_name"] = _only_reader(pipe)
            self._it = DALIGenericIterator([pipe], auto_reset=False, **args)
            _warn_if_unsharded(pipe, args["reader_name"])
        return self._it

    # --- the dataset protocol ---
    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        if info is not None and info.num_workers > 1:
            raise ValueError(f"DALIIterableDataset: DataLoader num_workers={info.num_workers}; use 0 (the "
                             "pipeline has its own threads), else every worker reads the whole dataset")
        it = self._iterator()
        if self._epoch_done:
            it.reset()
            self._epoch += 1
            self._epoch_done = False
        while True:
            try:
                (batch,) = next(it)
            except StopIteration:
                self._epoch_done = True
                return
            yield batch

    def __len__(self):
        """Batches per epoch (the iterator's len())."""
        return len(self._iterator())

    @property
    def epoch(self):
        """The epoch the next `iter()` reads (or goes on reading)."""
        return self._epoch + 1 if self._epoch_done else self._epoch

    def set_epoch(self, epoch):
        """Declare the epoch the next `iter()` reads. The pipeline's readers go from epoch to
        epoch, so this is the current one (nothing to do) or a later one: the epochs before
        it are read and dropped. Going back needs `load_state_dict()`."""
        if epoch < self.epoch:
            raise ValueError(f"DALIIterableDataset.set_epoch({epoch}): the dataset is at epoch {self.epoch} "
                             "and cannot go back; resume an earlier point with load_state_dict()")
        while self.epoch < epoch:
            for _ in self:
                pass

    # --- torchdata's Stateful convention ---
    def state_dict(self):
        """The point after the last batch returned (JSON-serializable)."""
        return {"format": _STATE_FORMAT, "epoch": self._epoch, "epoch_done": self._epoch_done,
                "checkpoint": self._iterator().checkpoints()[0]}

    def load_state_dict(self, state):
        """Resume from `state_dict()`: the next batch is the one that followed it."""
        if isinstance(self._pipeline, Pipeline):
            raise ValueError("DALIIterableDataset.load_state_dict: give the @pipeline_def function instead "
                             "of a Pipeline, so that the dataset can build a pipeline from the checkpoint")
        if not isinstance(state, dict) or state.get("format") != _STATE_FORMAT:
            raise ValueError("DALIIterableDataset.load_state_dict: not a state_dict() of a DALIIterableDataset")
        self._it = None  # drops the current pipeline, if any
        self._iterator(state["checkpoint"])
        self._epoch, self._epoch_done = int(state["epoch"]), bool(state["epoch_done"])


def _only_reader(pipe):
    readers = sorted(pipe.reader_meta())
    if len(readers) != 1:
        raise ValueError(f"DALIIterableDataset: the pipeline has {len(readers)} readers {readers}; "
                         "give reader_name (or size)")
    return readers[0]


def _warn_if_unsharded(pipe, reader_name):
    if reader_name is None:
        return
    _, world = rank_and_world_size()
    if world > 1 and pipe.reader_meta(reader_name)["number_of_shards"] == 1:
        warnings.warn(f"DALIIterableDataset: {world} ranks, but the reader '{reader_name}' is not sharded: "
                      "every rank reads the whole dataset; give it shard_id='auto', num_shards='auto'",
                      stacklevel=3)
