"""Where this process stands in a distributed job: its rank, the number of ranks and its
local GPU, from `torch.distributed` when it is initialised, else from the `RANK`,
`WORLD_SIZE` and `LOCAL_RANK` variables that torchrun sets. Readers resolve
`shard_id="auto"` / `num_shards="auto"` with it, the dataset adapter `device_id="auto"`.

Outside any distributed job (no process group, no variables) a process is rank 0 of 1,
so a training script written for torchrun also runs as a plain `python script.py`."""
import os

import torch

from .settings import int_variable

AUTO = "auto"


def rank_and_world_size():
    """(rank, world size) of this process: torch.distributed's, else RANK/WORLD_SIZE, else (0, 1)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    rank, world = int_variable("RANK", 0), int_variable("WORLD_SIZE", 1)
    if (rank is None) != (world is None):
        have, missing = ("RANK", "WORLD_SIZE") if world is None else ("WORLD_SIZE", "RANK")
        raise ValueError(f"the environment sets {have} but not {missing}; set both (torchrun does) "
                         "or give shard_id and num_shards")
    if rank is None:
        return 0, 1
    if rank >= world:
        raise ValueError(f"the environment variable RANK={rank} must be smaller than WORLD_SIZE={world}")
    return rank, world


def resolve_shards(shard_id, num_shards, who="readers"):
    """`shard_id` and `num_shards` with "auto" replaced by this process's rank and world
    size; an error naming `who` and both values when the shard does not exist."""
    rank, world = (None, None)
    if AUTO in (shard_id, num_shards):
        rank, world = rank_and_world_size()
    sid = rank if shard_id == AUTO else shard_id
    num = world if num_shards == AUTO else num_shards
    if sid >= num:
        def shown(arg, value):
            return f"{value} ('auto')" if arg == AUTO else f"{value}"
        raise ValueError(f"{who}: shard_id = {shown(shard_id, sid)} must be smaller than "
                         f"num_shards = {shown(num_shards, num)}")
    return sid, num


def local_ranks():
    """(local rank, ranks on this host): LOCAL_RANK / LOCAL_WORLD_SIZE as torchrun sets them,
    else (0, 1)."""
    local, ranks = int_variable("LOCAL_RANK", 0), int_variable("LOCAL_WORLD_SIZE", 1)
    return local or 0, ranks or 1


def threads_per_rank():
    """CPU threads for this process's pipeline: the cores it may run on, shared evenly by the
    ranks of this host (each rank of torchrun --nproc_per_node=N gets 1/N of them)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores // local_ranks()[1])


def local_device_id():
    """The GPU of this process: LOCAL_RANK (torchrun), else the current CUDA device; None
    without CUDA (a CPU-only pipeline)."""
    if not torch.cuda.is_available():
        return None
    local = int_variable("LOCAL_RANK", 0)
    if local is None:
        return torch.cuda.current_device()
    if local >= torch.cuda.device_count():
        raise ValueError(f"LOCAL_RANK={local} but only {torch.cuda.device_count()} GPUs are visible")
    return local
