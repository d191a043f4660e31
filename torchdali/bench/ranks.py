"""The benchmark as one rank of a job started by torchrun: each rank runs every system on
its own GPU (LOCAL_RANK) over its shard of the data, the ranks start each epoch together,
and the first rank merges their rows into the job's: images of all ranks over the slowest
rank's time, as data-parallel training, whose steps wait for every rank, would see them.

Outside torchrun it is rank 0 of 1, and the benchmark runs as it always did."""
import datetime
import statistics

import torch
import torch.distributed as dist

from ..distributed import local_ranks, rank_and_world_size


class Ranks:
    """This process's place in the job, and the job's barriers and gathering (gloo, so they
    neither touch the GPUs nor wait for their streams)."""

    def __init__(self):
        self.rank, self.world = rank_and_world_size()
        self.local_rank, self.local_world = local_ranks()

    @property
    def first(self):
        return self.rank == 0

    def start(self):
        """Join the job (several ranks) and take this rank's GPU; returns self."""
        if self.world > 1 and not dist.is_initialized():
            dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=10))
        if torch.cuda.is_available():
            torch.cuda.set_device(self.local_rank % torch.cuda.device_count())
        return self

    def barrier(self):
        if self.world > 1:
            dist.barrier()

    def gather(self, value):
        """Every rank's `value`, in rank order (on every rank)."""
        if self.world == 1:
            return [value]
        values = [None] * self.world
        dist.all_gather_object(values, value)
        return values

    def epoch_size(self, size, epoch):
        """Samples this rank's iterator gives in `epoch` (0: the first) out of `size`: the shard
        the reader is on, as DALI splits and iterates it (shards move on by one each epoch;
        the padding that keeps the ranks' steps equal is not returned)."""
        shard = (self.rank + epoch) % self.world
        return size * (shard + 1) // self.world - size * shard // self.world

    def close(self):
        if self.world > 1 and dist.is_initialized():
            dist.destroy_process_group()


def merge_rows(rows):
    """One system's rows from every rank (in rank order) as the job's row: per timed epoch,
    the images of all ranks over the slowest rank's seconds; the median of those; per-rank
    rates, the cores all ranks used, the largest GPU peak (each rank has its GPU) and the
    sum of the host peaks. The first failing rank's
    error stands for the job."""
    first = rows[0]
    failed = next((r for r in rows if "error" in r), None)
    if failed is not None:
        rank = rows.index(failed)
        return {**{k: first[k] for k in ("system", "label", "path")}, "ranks": len(rows),
                "error": failed["error"] if failed["error"].startswith("not run") else f"rank {rank}: {failed['error']}",
                **({"traceback": failed["traceback"]} if "traceback" in failed else {})}
    epochs = zip(*(zip(r["epoch_images"], r["epoch_seconds"]) for r in rows))
    rates = [sum(images for images, _ in epoch) / max(seconds for _, seconds in epoch) for epoch in epochs]
    merged = {k: first[k] for k in ("system", "label", "path", "batch_shape")}
    largest = lambda key: None if first.get(key) is None else max(r[key] for r in rows)  # noqa: E731
    total = lambda key: None if first.get(key) is None else round(sum(r[key] for r in rows), 1)  # noqa: E731
    merged.update({
        "ranks": len(rows),
        "images_per_s": round(statistics.median(rates), 1),
        "epoch_images_per_s": [round(r, 1) for r in rates],
        "rank_images_per_s": [r["images_per_s"] for r in rows],
        "cpu_cores_used": None if first["cpu_cores_used"] is None else round(sum(r["cpu_cores_used"] for r in rows), 2),
        "host_cpu_busy": first["host_cpu_busy"],
        "setup_s": largest("setup_s"), "gpu_mib": largest("gpu_mib"), "gpu_torch_peak_mib": largest("gpu_torch_peak_mib"),
        "gpu_torch_reserved_peak_mib": largest("gpu_torch_reserved_peak_mib"),
        "host_mib": total("host_mib"), "host_start_mib": total("host_start_mib")})
    return merged
