"""Epoch accounting of the iterators: how many samples an epoch returns, where it ends and
how much of its last batch is kept, counted exactly as DALI's iterators count.

Without a reader name, `size` is the epoch size over all pipelines together. With one, the
sizes come from the readers' metadata: each pipeline reads one shard, shards may differ by
one sample, and a reader that does not pad runs on into the next epoch's data, so where
each pipeline starts inside its shard changes from epoch to epoch."""
import math

import numpy as np

from .policy import LastBatchPolicy


class EpochCounter:
    """Counts the samples returned in the current epoch (`counter`) against `size`."""

    def __init__(self, batch_size, num_pipelines, size, policy, padded, metas=None):
        self.batch_size = batch_size
        self.num_pipelines = num_pipelines
        self.size = size
        self.policy = policy
        self.padded = padded
        self.counter = 0
        self.by_reader = metas is not None
        if self.by_reader:
            self._from_reader(metas)

    def _from_reader(self, metas):
        m = metas[0]
        self.size_no_pad = m["epoch_size"]
        self.num_shards = m["number_of_shards"]
        self.padded = bool(m["pad_last_batch"])
        self.stick = bool(m["stick_to_shard"])
        self.shard_ids = np.array([meta["shard_id"] for meta in metas], dtype=np.int64)
        if self.policy == LastBatchPolicy.DROP:
            self.size = self.size_no_pad // self.num_shards
        elif self.padded:
            self.size = m["epoch_size_padded"] // self.num_shards
        else:  # whole batches covering the largest shard
            largest = math.ceil(self.size_no_pad / self.num_shards)
            self.size = math.ceil(largest / self.batch_size) * self.batch_size
        shards = np.arange(self.num_shards, dtype=np.int64)
        # Per shard: how far into it the epoch starts, and how many samples it has (rolled
        # as the pipelines move from shard to shard).
        self.start_in_shard = np.zeros(self.num_shards, dtype=np.int64)
        starts = shards * self.size_no_pad // self.num_shards
        self.shard_sizes = (shards + 1) * self.size_no_pad // self.num_shards - starts
        self.initial_shard_sizes = self.shard_sizes.copy()

    def finished(self):
        """The epoch has returned all its batches."""
        return self.size > 0 and self.counter >= self.size

    def advance(self, dry_run=False):
        """Count one more batch from every pipeline; True if, under DROP, that batch
        runs past the end of the epoch (it is then not returned)."""
        if self.by_reader:
            counter = self.counter + self.batch_size
            should_end = self.policy == LastBatchPolicy.DROP and \
                bool(np.any(self.start_in_shard + counter > self.shard_sizes))
        else:
            counter = self.counter + self.num_pipelines * self.batch_size
            should_end = self.policy == LastBatchPolicy.DROP and counter > self.size
        if not dry_run:
            self.counter = counter
        return should_end

    def keep(self):
        """Samples to keep of the batch just counted, one count per dict to return (fewer
        dicts than pipelines at a PARTIAL end without a reader), or None to keep all."""
        if self.policy != LastBatchPolicy.PARTIAL:
            return None
        if self.by_reader:
            left = self.batch_size - (self.counter - self.initial_shard_sizes[self.shard_ids])
            return [int(n) for n in left] if np.any(left < self.batch_size) else None
        if self.size <= 0 or self.counter <= self.size:
            return None
        missing = self.counter - self.size
        wanted = self.num_pipelines * self.batch_size - missing
        last = wanted % self.batch_size or self.batch_size
        return [self.batch_size] * (math.ceil(wanted / self.batch_size) - 1) + [last]

    def next_epoch(self):
        """Start counting the next epoch (the iterator's reset())."""
        carry_over = self.policy == LastBatchPolicy.FILL and not self.padded
        if carry_over and self.by_reader:
            self._carry_over_by_shard()
        elif carry_over:
            self.counter %= self.size
        else:
            self.counter = 0
        if not self.by_reader:
            return
        if not self.stick:
            self.shard_ids = (self.shard_ids + 1) % self.num_shards
        if carry_over:
            self._resize_after_carry_over()

    def _carry_over_by_shard(self):
        # The batch that completed the epoch read into the next one: note, per shard, how
        # far, so that the next epoch still returns each shard whole.
        self.counter -= self.start_in_shard.min()
        self.start_in_shard = self.start_in_shard + self.counter - self.shard_sizes
        self.counter = int(self.start_in_shard.min())

    def _resize_after_carry_over(self):
        if not self.stick:
            self.shard_sizes = np.roll(self.shard_sizes, 1)
        remaining = self.shard_sizes - self.start_in_shard
        self.size = math.ceil(remaining.max() / self.batch_size) * self.batch_size
        if self.size == 0:  # the epoch was entirely read ahead: skip to the following one
            self.start_in_shard = np.zeros(self.num_shards, dtype=np.int64)
            self.counter = 0
            self.shard_sizes = np.roll(self.shard_sizes, 1)
            self.size = math.ceil(self.shard_sizes.max() / self.batch_size) * self.batch_size

    _STATE = ("counter", "size", "start_in_shard", "shard_sizes", "shard_ids")

    def state_dict(self):
        """Where the epoch stands (JSON-serializable), for the iterator's checkpoints."""
        return {k: np.asarray(getattr(self, k)).tolist() for k in self._STATE if hasattr(self, k)}

    def load_state_dict(self, state):
        for k, v in state.items():
            if k not in self._STATE:
                raise ValueError(f"iterator checkpoint: unknown field {k!r}")
            setattr(self, k, np.asarray(v, dtype=np.int64) if isinstance(v, list) else int(v))

    def __len__(self):
        per_step = self.batch_size if self.by_reader else self.num_pipelines * self.batch_size
        if self.policy == LastBatchPolicy.DROP:
            return self.size // per_step
        return math.ceil(self.size / per_step)
