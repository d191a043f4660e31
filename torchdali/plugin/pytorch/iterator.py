"""DALI's PyTorch iterators: `DALIGenericIterator` and `DALIClassificationIterator`.

An iterator drives one pipeline per GPU (or a single CPU pipeline) and returns, per step,
a list with one dict per pipeline mapping output names to torch tensors. The pipelines'
outputs are torch tensors already: dense batches are handed over as they are (no copy),
and GPU outputs are made ready for the consumer's current CUDA stream (it waits on the
pipeline's stream; the caching allocator keeps the memory while the consumer uses it).
Every iteration's outputs are new tensors, so a batch kept by the user is never
overwritten by later iterations.
"""
import warnings

import torch

from .epoch import EpochCounter
from .policy import LastBatchPolicy

_STATE_FORMAT = "torchdali-iterator"

_AUTO_RESET = {False: False, None: False, "no": False, "off": False, True: True, "yes": True, "on": True}


def _auto_reset_flag(value):
    try:
        return _AUTO_RESET[value]
    except (KeyError, TypeError):
        raise ValueError(f"auto_reset must be True, False, None, 'yes', 'no', 'on' or 'off'; "
                         f"got {value!r}") from None


def _check_output_map(cls, output_map, pipes):
    names = list(output_map)
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        raise ValueError(f"{cls}: output_map names must be distinct; repeated: {dups}")
    for i, p in enumerate(pipes):
        if p.num_outputs != len(names):
            raise ValueError(f"{cls}: output_map has {len(names)} names {names} but pipeline {i} "
                             f"has {p.num_outputs} outputs")
    return names


class PipelineIterator:
    """What all the iterators share: argument checks, scheduling, epoch accounting, reset.

    Subclasses turn one pipeline's outputs into a dict with `_to_dict(outputs, keep, p)`."""

    def __init__(self, pipelines, output_map, size=-1, reader_name=None, auto_reset=False,
                 fill_last_batch=None, last_batch_padded=False, last_batch_policy=LastBatchPolicy.FILL,
                 prepare_first_batch=True):
        cls = type(self).__name__
        if pipelines is None or isinstance(pipelines, (list, tuple)) and not pipelines:
            raise ValueError(f"{cls}: give at least one pipeline")
        self._pipes = list(pipelines) if isinstance(pipelines, (list, tuple)) else [pipelines]
        self._num_gpus = len(self._pipes)
        sizes = [p.max_batch_size for p in self._pipes]
        if len(set(sizes)) > 1:
            raise ValueError(f"{cls}: all pipelines must have the same batch size; got {sizes}")
        self.batch_size = sizes[0]
        self._auto_reset = _auto_reset_flag(auto_reset)
        policy = self._policy(cls, fill_last_batch, last_batch_policy)
        self._check_size(cls, size, reader_name, last_batch_padded)
        if size < 0 and not reader_name:  # run until the pipeline stops: nothing to trim
            policy, last_batch_padded = LastBatchPolicy.FILL, False
        if size > 0 and not reader_name:
            warnings.warn("Please set `reader_name` and don't set last_batch_padded and size manually "
                          "whenever possible. This may lead, in some situations, to missing some samples "
                          "or returning duplicated ones. Check the Sharding section of the documentation "
                          "for more details.", Warning, stacklevel=3)
        for p in self._pipes:
            p.build()
        self.output_map = _check_output_map(cls, output_map, self._pipes)
        self._reader_name = reader_name
        metas = self._reader_metas(cls) if reader_name else None
        self._epochs = EpochCounter(self.batch_size, self._num_gpus, int(size), policy,
                                    last_batch_padded, metas)
        self._prepare_first_batch = prepare_first_batch
        self._start()

    def _start(self):
        """Take the epoch state from checkpoints the pipelines were restored from, if any,
        and prepare the first batch if asked to."""
        self._checkpointing = self._restore_epochs(type(self).__name__)
        self._ever_scheduled = False
        self._ever_consumed = False
        self._first_batch = None
        if self._prepare_first_batch:
            try:
                self._first_batch = self._next_batches()
            except StopIteration:
                self._report_no_data()

    def _restore_epochs(self, cls):
        """With checkpointing, take the epoch state from the checkpoint the pipelines were
        restored from, and note the checkpoints of the start (before any batch is taken)."""
        enabled = {p.config.enable_checkpointing for p in self._pipes}
        if len(enabled) > 1:
            raise ValueError(f"{cls}: enable_checkpointing must be the same in every pipeline")
        if not enabled.pop():
            return False
        restored = [p.is_restored_from_checkpoint for p in self._pipes]
        if any(restored):
            data = [p.restored_iterator_data for p in self._pipes]
            if not all(restored) or any(d != data[0] for d in data):
                raise ValueError(f"{cls}: the pipelines must all be restored from checkpoints taken "
                                 "together (one iterator's checkpoints())")
            if data[0] is not None:
                self._epochs.load_state_dict(data[0])
        self._initial_checkpoints = self._take_checkpoints()
        return True

    def _take_checkpoints(self):
        state = self._epochs.state_dict()
        return [p.checkpoint(iterator_data=state) for p in self._pipes]

    def checkpoints(self):
        """One checkpoint per pipeline, holding the pipeline's state and this iterator's
        place in the epoch: build the pipelines with `checkpoint=` and wrap them in a new
        iterator with the same arguments to resume on the next batch (DALI's API)."""
        if not self._checkpointing:
            raise ValueError(f"{type(self).__name__}: checkpoints() needs pipelines built with "
                             "enable_checkpointing=True")
        return self._take_checkpoints() if self._ever_consumed else list(self._initial_checkpoints)

    # --- torchdata's Stateful convention ---
    def state_dict(self):
        """This iterator's place (after the last batch it returned) and its pipelines'
        states, JSON-serializable: checkpoints() in a dict."""
        return {"format": _STATE_FORMAT, "checkpoints": self.checkpoints()}

    def load_state_dict(self, state):
        """Go back (or forward) to `state_dict()`'s point: the pipelines drop what they
        prefetched and take the saved states, and the next batch is the one that followed."""
        cls = type(self).__name__
        if not isinstance(state, dict) or state.get("format") != _STATE_FORMAT:
            raise ValueError(f"{cls}.load_state_dict: not a state_dict() of a torchdali iterator")
        checkpoints = state.get("checkpoints")
        if not isinstance(checkpoints, list) or len(checkpoints) != self._num_gpus:
            raise ValueError(f"{cls}.load_state_dict: the state holds "
                             f"{len(checkpoints) if isinstance(checkpoints, list) else 'no'} checkpoints "
                             f"for {self._num_gpus} pipelines")
        if not self._checkpointing:
            raise ValueError(f"{cls}.load_state_dict: needs pipelines built with enable_checkpointing=True")
        for p, checkpoint in zip(self._pipes, checkpoints):
            p.check_checkpoint(checkpoint)  # every one fits before any pipeline moves
        try:
            for p, checkpoint in zip(self._pipes, checkpoints):
                p.restore_checkpoint(checkpoint)
        except ValueError:
            self._ever_scheduled = False  # the pipelines dropped what they had scheduled
            raise
        self._start()

    @staticmethod
    def _policy(cls, fill_last_batch, last_batch_policy):
        if fill_last_batch is not None:
            warnings.warn("Please do not use `fill_last_batch` and use `last_batch_policy` instead.",
                          Warning, stacklevel=4)
            return LastBatchPolicy.FILL if fill_last_batch else LastBatchPolicy.PARTIAL
        if type(last_batch_policy) is not LastBatchPolicy:
            raise ValueError(f"{cls}: last_batch_policy must be a {LastBatchPolicy.__module__}.LastBatchPolicy, "
                             f"got {last_batch_policy!r}")
        return last_batch_policy

    def _check_size(self, cls, size, reader_name, last_batch_padded):
        if size == 0:
            raise ValueError(f"{cls}: size cannot be 0")
        if reader_name and size > 0:
            raise ValueError(f"{cls}: give size or reader_name, not both (size={size}, "
                             f"reader_name={reader_name!r})")
        if reader_name and last_batch_padded:
            raise ValueError(f"{cls}: last_batch_padded comes from the reader's pad_last_batch when "
                             "reader_name is given; do not set it")
        if size < 0 and not reader_name and self._num_gpus > 1:
            raise ValueError(f"{cls}: with several pipelines, give size or reader_name")

    def _reader_metas(self, cls):
        metas = []
        for i, p in enumerate(self._pipes):
            try:
                metas.append(p.reader_meta(self._reader_name))
            except ValueError as e:
                raise ValueError(f"{cls}: pipeline {i}: {e}") from None
        for key, what in (("epoch_size", "size"), ("number_of_shards", "num_shards")):
            if len({m[key] for m in metas}) > 1:
                raise ValueError(f"{cls}: the reader '{self._reader_name}' must have the same {what} in "
                                 f"every pipeline; got {[m[key] for m in metas]}")
        for key in ("pad_last_batch", "stick_to_shard"):
            if len({bool(m[key]) for m in metas}) > 1:
                raise ValueError(f"{cls}: the reader '{self._reader_name}' must have {key} set in all "
                                 f"pipelines or in none; got {[m[key] for m in metas]}")
        return metas

    def _report_no_data(self):
        if not all(p.is_restored_from_checkpoint for p in self._pipes):
            raise RuntimeError("It seems that there is no data in the pipeline. This may happen if "
                               "`last_batch_policy` is set to PARTIAL and the requested batch size is "
                               "greater than the shard size.")

    # --- one step ---
    def _schedule_runs(self):
        self._ever_scheduled = True
        for p in self._pipes:
            p.schedule_run()

    def _fetch(self):
        """The next outputs of every pipeline; StopIteration at the end of the epoch."""
        if not self._ever_scheduled:
            self._schedule_runs()
        if self._epochs.finished():
            self._end_iteration()
        outputs = []
        try:
            for p in self._pipes:
                outputs.append(p.share_outputs(self._consumer_stream(p)))
        except StopIteration:
            if self._epochs.size < 0 and self._auto_reset:
                self.reset()
            raise
        if self._reader_name or self._epochs.size != -1:
            for i, outs in enumerate(outputs):
                for name, out in zip(self.output_map, outs):
                    if len(out) != self.batch_size:
                        raise RuntimeError(
                            f"{type(self).__name__}: pipeline {i} output '{name}' has {len(out)} samples, "
                            f"not the batch size {self.batch_size}; a variable batch size is not supported "
                            "with reader_name or size")
        return outputs

    @staticmethod
    def _consumer_stream(p):
        """The caller's current stream on the pipeline's GPU; None for CPU-only pipelines."""
        if p.output_stream() is None:
            return None
        return torch.cuda.current_stream(p.output_stream().device)

    def _end_iteration(self):
        if self._auto_reset:
            self.reset()
        raise StopIteration

    def _next_batches(self):
        """The next step: a list of per-pipeline dicts of output name -> batch (fewer
        dicts than pipelines only for a PARTIAL last batch without a reader name)."""
        outputs = self._fetch()
        self._schedule_runs()
        if self._epochs.advance():
            self._end_iteration()
        keep = self._epochs.keep()
        if keep is None:
            keep = [None] * self._num_gpus
        return [self._to_dict(outs, n, p) for outs, n, p in zip(outputs, keep, self._pipes)]

    def _to_dict(self, outputs, keep, pipe):
        raise NotImplementedError

    # --- Python's iterator protocol ---
    def __next__(self):
        self._ever_consumed = True
        if self._first_batch is not None:
            batch, self._first_batch = self._first_batch, None
            return batch
        return self._next_batches()

    def next(self):
        """The next batch (as `next(iterator)`)."""
        return self.__next__()

    def __iter__(self):
        # A fresh iterator or one not yet read from is not reset, so nothing is skipped.
        if self._epochs.counter != 0 and self._ever_consumed:
            self.reset()
        return self

    def reset(self):
        """Start the next epoch. Only at the end of an epoch; ignored (with a warning) before."""
        epochs = self._epochs
        if epochs.policy == LastBatchPolicy.DROP and epochs.advance(dry_run=True) and not epochs.finished():
            # The incomplete last batch is still in the pipeline: take it out and drop it.
            self._fetch()
            self._schedule_runs()
            epochs.advance()
        if not (epochs.finished() or epochs.size < 0):
            warnings.warn("DALI iterator does not support resetting while epoch is not finished. Ignoring...",
                          RuntimeWarning, stacklevel=2)
            return
        epochs.next_epoch()
        for p in self._pipes:
            p.reset()
            if p.empty():
                p.schedule_run()

    @property
    def size(self):
        return self._epochs.size

    @property
    def _size(self):
        return self._epochs.size

    @property
    def _counter(self):
        return self._epochs.counter

    def __len__(self):
        return len(self._epochs)


class DALIGenericIterator(PipelineIterator):
    """Iterates over pipelines, returning per step a list of dicts (one per pipeline)
    that map the names of `output_map` to torch tensors [batch, ...].

    Outputs must be dense (all samples of one shape); use `DALIRaggedIterator` otherwise.
    `dynamic_shape` is accepted for compatibility only."""

    def __init__(self, pipelines, output_map, size=-1, reader_name=None, auto_reset=False,
                 fill_last_batch=None, dynamic_shape=False, last_batch_padded=False,
                 last_batch_policy=LastBatchPolicy.FILL, prepare_first_batch=True):
        super().__init__(pipelines, output_map, size, reader_name, auto_reset, fill_last_batch,
                         last_batch_padded, last_batch_policy, prepare_first_batch)

    def _to_dict(self, outputs, keep, pipe):
        return {name: dense_batch(self, name, out, keep) for name, out in zip(self.output_map, outputs)}


def dense_batch(it, name, out, keep):
    """Output `name` (a TensorList) as one tensor [batch, ...]: the pipeline's own tensor
    when it was produced dense, so no copy."""
    if not out.is_dense_tensor():
        shapes = sorted({tuple(s) for s in out.shape()})
        raise RuntimeError(f"{type(it).__name__}: output '{name}' is not dense (sample shapes "
                           f"{shapes[:4]}{' ...' if len(shapes) > 4 else ''}); use DALIRaggedIterator "
                           "or make the samples one shape (e.g. resize, crop or pad)")
    return trim(out.as_torch(), keep)


def trim(batch, keep):
    """The first `keep` samples of a batch (a view or a shorter list); all of it if None."""
    return batch if keep is None else batch[:keep]


class DALIClassificationIterator(DALIGenericIterator):
    """`DALIGenericIterator` with the outputs named "data" and "label"."""

    def __init__(self, pipelines, size=-1, reader_name=None, auto_reset=False, fill_last_batch=None,
                 dynamic_shape=False, last_batch_padded=False, last_batch_policy=LastBatchPolicy.FILL,
                 prepare_first_batch=True):
        super().__init__(pipelines, ["data", "label"], size, reader_name=reader_name,
                         auto_reset=auto_reset, fill_last_batch=fill_last_batch,
                         dynamic_shape=dynamic_shape, last_batch_padded=last_batch_padded,
                         last_batch_policy=last_batch_policy, prepare_first_batch=prepare_first_batch)
