"""Distributed sharding: shard_id/num_shards="auto" and device_id="auto" resolved from
torch.distributed or torchrun's variables, and, in 2 and 3 processes (gloo on CPU; NCCL where 2 GPUs are present), equal
batch counts on every rank under every last-batch policy, disjoint shards, coverage of the
epoch with random_shuffle, and DDP steps of a tiny model that keep the ranks in step."""
import os
import pickle
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

from torchdali import distributed, fn, pipeline_def
from torchdali.plugin.pytorch import DALIIterableDataset, LastBatchPolicy

NUM_FILES = 13
EPOCHS = 3
# (policy, pad_last_batch). Batch counts agree in all; shards are disjoint and cover every
# epoch with FILL or PARTIAL and padding.
CONFIGS = [(LastBatchPolicy.FILL, False), (LastBatchPolicy.FILL, True), (LastBatchPolicy.DROP, False),
           (LastBatchPolicy.DROP, True), (LastBatchPolicy.PARTIAL, True)]


@pipeline_def(batch_size=2, num_threads=1)
def sharded(files, pad):
    _, label = fn.readers.file(files=files, random_shuffle=True, initial_fill=4, pad_last_batch=pad,
                               shard_id="auto", num_shards="auto", name="Reader")
    return label, fn.random.uniform(range=[-1, 1], shape=[4])


@pytest.fixture
def files(tmp_path):
    paths = [str(tmp_path / f"f{i:02d}") for i in range(NUM_FILES)]
    for p in paths:
        open(p, "wb").close()
    return paths


# --- resolution in one process ---

@pytest.fixture
def no_dist_env(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def reader_meta(files, **kwargs):
    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        return fn.readers.file(files=files, name="Reader", **kwargs)[1]

    return pipe().reader_meta("Reader")


def test_auto_without_a_distributed_job_is_rank_0_of_1(files, no_dist_env):
    meta = reader_meta(files, shard_id="auto", num_shards="auto")
    assert (meta["shard_id"], meta["number_of_shards"]) == (0, 1)


def test_auto_from_torchrun_variables(files, no_dist_env):
    no_dist_env.setenv("RANK", "2")
    no_dist_env.setenv("WORLD_SIZE", "3")
    meta = reader_meta(files, shard_id="auto", num_shards="auto")
    assert (meta["shard_id"], meta["number_of_shards"]) == (2, 3)
    meta = reader_meta(files, shard_id="auto", num_shards=4)  # one of them "auto"
    assert (meta["shard_id"], meta["number_of_shards"]) == (2, 4)


@pytest.mark.parametrize("env,kwargs,message", [
    ({"RANK": "1"}, dict(shard_id="auto", num_shards="auto"), "sets RANK but not WORLD_SIZE"),
    ({"RANK": "x", "WORLD_SIZE": "2"}, dict(shard_id="auto"), "RANK='x' is not an integer"),
    ({"RANK": "2", "WORLD_SIZE": "2"}, dict(shard_id="auto"), "RANK=2 must be smaller than WORLD_SIZE=2"),
    ({"RANK": "1", "WORLD_SIZE": "2"}, dict(shard_id="auto", num_shards=1),
     r"readers.file \('Reader'\): shard_id = 1 \('auto'\) must be smaller than num_shards = 1"),
    ({"RANK": "0", "WORLD_SIZE": "2"}, dict(shard_id=3, num_shards="auto"),
     r"shard_id = 3 must be smaller than num_shards = 2 \('auto'\)"),
    ({}, dict(shard_id="first"), "argument 'shard_id' = 'first'"),
    ({}, dict(num_shards=0), "num_shards.*at least 1 or 'auto'"),
])
def test_bad_distributed_arguments_name_them(files, no_dist_env, env, kwargs, message):
    for k, v in env.items():
        no_dist_env.setenv(k, v)
    with pytest.raises((ValueError, TypeError), match=message):
        reader_meta(files, **kwargs)


def test_local_device_id(no_dist_env):
    if not torch.cuda.is_available():
        assert distributed.local_device_id() is None
        return
    assert distributed.local_device_id() == torch.cuda.current_device()
    no_dist_env.setenv("LOCAL_RANK", str(torch.cuda.device_count() - 1))
    assert distributed.local_device_id() == torch.cuda.device_count() - 1
    no_dist_env.setenv("LOCAL_RANK", str(torch.cuda.device_count()))
    with pytest.raises(ValueError, match="LOCAL_RANK"):
        distributed.local_device_id()


def test_unsharded_reader_in_a_distributed_job_warns(files, no_dist_env):
    no_dist_env.setenv("RANK", "0")
    no_dist_env.setenv("WORLD_SIZE", "2")

    @pipeline_def(batch_size=2, num_threads=1)
    def whole():
        return fn.readers.file(files=files)[1]

    with pytest.warns(UserWarning, match="every rank reads the whole dataset"):
        len(DALIIterableDataset(whole, ["label"]))


# --- several processes ---

def _worker(rank, world, tmp, files, backend):
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=f"file://{tmp}/rendezvous", rank=rank, world_size=world,
                            device_id=device if backend == "nccl" else None)
    try:
        result = {"epochs": {}}
        for policy, pad in CONFIGS:
            ds = DALIIterableDataset(sharded, ["label", "x"], last_batch_policy=policy, files=files, pad=pad,
                                     seed=rank + 1)
            result["epochs"][policy, pad] = [[b["label"].flatten().tolist() for b in ds] for _ in range(EPOCHS)]
        result["ddp"] = _ddp_steps(files, rank, device)
        with open(f"{tmp}/rank{rank}.pkl", "wb") as f:
            pickle.dump(result, f)
    finally:
        dist.destroy_process_group()


def _ddp_steps(files, rank, device, steps=3):
    """Losses of a few DDP steps on the dataset's batches, and the parameters after them."""
    torch.manual_seed(rank)  # DDP broadcasts rank 0's parameters at construction
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Linear(4, 3).to(device), device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    ds = DALIIterableDataset(sharded, ["label", "x"], files=files, pad=False, seed=rank + 1)
    losses = []
    for step, batch in zip(range(steps), ds):
        x, label = batch["x"].to(device), batch["label"].flatten().long().to(device) % 3
        loss = torch.nn.functional.cross_entropy(model(x), label)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {"losses": losses, "params": [p.detach().cpu() for p in model.parameters()]}


@pytest.mark.parametrize("backend,world", [
    ("gloo", 2), ("gloo", 3),
    pytest.param("nccl", 2, marks=pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs"))])
def test_ranks_stay_in_step(files, tmp_path, backend, world, no_dist_env):
    torch.multiprocessing.spawn(_worker, args=(world, str(tmp_path), files, backend), nprocs=world)
    results = []
    for r in range(world):
        with open(tmp_path / f"rank{r}.pkl", "rb") as f:
            results.append(pickle.load(f))
    everything = set(range(NUM_FILES))
    for (policy, pad), per_rank in ((c, [r["epochs"][c] for r in results]) for c in CONFIGS):
        for epoch in range(EPOCHS):
            batches = [rank_epochs[epoch] for rank_epochs in per_rank]
            where = f"{policy.name} pad={pad} epoch {epoch}"
            assert len({len(b) for b in batches}) == 1, f"{where}: batch counts {[len(b) for b in batches]}"
            samples = [sum(b, []) for b in batches]
            # Without padding a shard's last batch borrows from the next epoch; DROP leaves the
            # readers shifted by the dropped samples, so later epochs' shards may overlap (both as DALI).
            if not pad or policy == LastBatchPolicy.DROP and epoch:
                continue
            assert all(set(a).isdisjoint(b) for i, a in enumerate(samples) for b in samples[i + 1:]), where
            union = set().union(*samples)
            if policy == LastBatchPolicy.DROP:
                assert len(union) == world * len(batches[0]) * 2, where
            else:
                assert union == everything, where
            if policy == LastBatchPolicy.PARTIAL:
                assert sorted(sum(samples, [])) == sorted(everything), where
    ddp = [r["ddp"] for r in results]
    assert all(len(d["losses"]) == 3 and all(map(torch.isfinite, map(torch.tensor, d["losses"]))) for d in ddp)
    for d in ddp[1:]:
        assert all(torch.equal(a, b) for a, b in zip(d["params"], ddp[0]["params"]))
    assert not all(torch.equal(a, b) for a, b in zip(ddp[0]["params"], _initial_params()))


def _initial_params():
    torch.manual_seed(0)
    return list(torch.nn.Linear(4, 3).parameters())


def test_ddp_example_runs_with_torchrun(tmp_path, no_dist_env):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root, CUDA_VISIBLE_DEVICES="")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           os.path.join(root, "examples", "ddp_train.py"), "--max-steps", "3", "--batch-size", "4",
           "--num-images", "32", "--image-size", "32", "--data-dir", str(tmp_path / "data")]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:  # timed out: end torchrun and its workers
            os.killpg(proc.pid, 9)
    assert proc.returncode == 0, out[-4000:]
    assert "done: 3 steps" in out and "losses finite and parameters identical on every rank" in out


def test_threads_per_rank_share_the_cores(no_dist_env):
    cores = len(os.sched_getaffinity(0))
    assert distributed.threads_per_rank() == cores
    no_dist_env.setenv("LOCAL_WORLD_SIZE", "2")
    assert distributed.threads_per_rank() == max(1, cores // 2)
    no_dist_env.setenv("LOCAL_WORLD_SIZE", str(4 * cores))
    assert distributed.threads_per_rank() == 1


def _check_training(rank, tmp, bad):
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "ddp_train", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "ddp_train.py"))
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/rendezvous", rank=rank, world_size=2)
    try:
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 2)
        losses = torch.tensor([1.0, 0.5])
        if rank == 1 and bad == "params":
            model.bias.data[0] += 1e-6
        if rank == 1 and bad == "loss":
            losses[1] = float("nan")
        try:
            example.check_training(losses, model, torch.device("cpu"))
            outcome = "ok"
        except SystemExit as e:
            outcome = str(e)
        with open(f"{tmp}/check{rank}.txt", "w") as f:
            f.write(outcome)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("bad,message", [(None, "ok"), ("params", "the ranks' parameters differ after training"),
                                         ("loss", "a rank saw a loss that is not finite")])
def test_the_ddp_examples_check_fails_on_every_rank(tmp_path, no_dist_env, bad, message):
    torch.multiprocessing.spawn(_check_training, args=(str(tmp_path), bad), nprocs=2)
    assert [(tmp_path / f"check{r}.txt").read_text() for r in range(2)] == [message, message]
