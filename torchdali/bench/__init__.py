"""The main job: torchdali, `torch.utils.data.DataLoader` and NVIDIA DALI side by side, in one
process and one run, on ImageNet's two input stages (train and val; train-2op, the train
stage written with fn.random_resized_crop after the decoder, on request), each timed through its
iterator as a training loop consumes it.

    python -m torchdali.bench [--data DIR] [--num-images 4096] [--batch-size 256] [--epochs 3]
                              [--device auto|cpu|gpu|all] [--systems torchdali,dataloader,dali]
                              [--stages train,val] [--json FILE] [--plot FILE.png]

Without --data it uses a generated set of photo-like JPEGs (made once, then cached).

Under torchrun (`torchrun --nproc_per_node=N -m torchdali.bench ...`) every rank runs the
pipelines on its own GPU over its shard of the set, and the first rank prints the job's
figures; `python -m torchdali.bench.scaling` runs it for several N and compares."""
import argparse
import datetime
import os
import sys

import torch

from ..distributed import threads_per_rank
from ..sample_data import describe_dataset, write_photo_dataset
from .measure import Progress, run_system
from .ranks import Ranks, merge_rows
from .report import MEMORY_NOTE, add_ratios, header, machine, plot, table, versions, write_json
from .stages import DEFAULT_STAGES, STAGES
from .systems import make_systems

SYSTEMS = ("torchdali", "dataloader", "dali")


def _names(allowed, what):
    def parse(text):
        names = [n.strip() for n in text.split(",") if n.strip()]
        unknown = [n for n in names if n not in allowed]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"{what}: {', '.join(unknown) or 'none given'}; "
                                             f"choose from {', '.join(allowed)}")
        return names
    return parse


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m torchdali.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", metavar="DIR", help="an image folder with one sub-folder per class (default: the generated set)")
    p.add_argument("--num-images", metavar="N", type=int, default=4096, help="size of the generated set (default 4096)")
    p.add_argument("--cache", metavar="DIR", default=os.environ.get("TORCHDALI_CACHE", os.path.expanduser("~/.cache/torchdali")),
                   help="where the generated set is kept (default $TORCHDALI_CACHE or ~/.cache/torchdali)")
    p.add_argument("--batch-size", metavar="N", type=int, default=256, help="images a batch (default 256)")
    p.add_argument("--epochs", metavar="N", type=int, default=3, help="timed epochs, after one warm-up epoch (default 3)")
    p.add_argument("--threads", metavar="N", type=int, default=None,
                   help="torchdali's and DALI's threads, the DataLoader's workers (default: the usable "
                        "cores, shared evenly by the ranks of this host under torchrun)")
    p.add_argument("--hw-decoder-load", metavar="F", type=float, default=None,
                   help="the 'mixed' decoders' share of each batch for the hardware JPEG decoder, "
                        "for torchdali and DALI alike (default: each library's own)")
    p.add_argument("--device", choices=("auto", "cpu", "gpu", "all"), default="auto",
                   help="the pipelines' path: gpu (mixed decode), cpu, or all (both); "
                        "auto: gpu when there is a GPU, else cpu")
    p.add_argument("--systems", metavar="LIST", type=_names(SYSTEMS, "unknown system"), default=list(SYSTEMS),
                   help="comma-separated, from: " + ", ".join(SYSTEMS))
    p.add_argument("--stages", metavar="LIST", type=_names(tuple(STAGES), "unknown stage"), default=list(DEFAULT_STAGES),
                   help="comma-separated, from: " + ", ".join(STAGES))
    p.add_argument("--seed", type=int, default=0, help="the pipelines' and the DataLoader's random seed")
    p.add_argument("--json", metavar="FILE", help="write every figure, the machine and versions here")
    p.add_argument("--plot", metavar="FILE.png", help="a bar chart of the rates (needs matplotlib)")
    args = p.parse_args(argv)
    for name in ("num_images", "batch_size", "epochs", "threads"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def dataset(args, ranks):
    """The image folder to read and its description (the first rank of a job generates the
    set, the others wait for it)."""
    if args.data:
        if not os.path.isdir(args.data):
            raise SystemExit(f"--data {args.data}: no such directory")
        return {**describe_dataset(args.data), "source": "--data"}
    root = os.path.join(args.cache, f"photos-{args.num_images}")
    if ranks.first:
        print(f"generated data set: {root} (made once, then cached)", file=sys.stderr, flush=True)
        write_photo_dataset(root, num_images=args.num_images, seed=0)
    ranks.barrier()
    return {**describe_dataset(root), "source": "generated photo-like JPEGs, 4:2:0"}


def main(argv=None):
    """Run the benchmark; returns the result (what --json writes; on the first rank of a
    job, the job's figures, elsewhere this rank's)."""
    args = parse_args(argv)
    ranks = Ranks().start()
    try:
        return _run(args, argv, ranks)
    finally:
        ranks.close()


def _run(args, argv, ranks):
    paths = {"auto": ["gpu" if torch.cuda.is_available() else "cpu"], "all": ["gpu", "cpu"]}.get(
        args.device, [args.device])
    data = dataset(args, ranks)  # before anything touches CUDA: it forks its writers
    settings = {"batch_size": args.batch_size, "epochs": args.epochs, "threads": args.threads or threads_per_rank(),
                "hw_decoder_load": args.hw_decoder_load, "seed": args.seed, "device": args.device,
                "ranks": ranks.world}
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "command": " ".join(["python -m torchdali.bench"] + list(sys.argv[1:] if argv is None else argv)),
              "machine": machine(), "versions": versions(), "data": data, "settings": settings,
              "memory": MEMORY_NOTE, "stages": {}}
    say = print if ranks.first else (lambda *a, **k: None)
    say(header(result), flush=True)
    systems = make_systems(args.systems, paths, settings["threads"])
    progress = Progress(quiet=not ranks.first)
    for stage in args.stages:
        rows = [run_system(system, stage, data, settings, progress, ranks) for system in systems]
        if ranks.world > 1:
            rows = [merge_rows(list(per_rank)) for per_rank in zip(*ranks.gather(rows))]
        add_ratios(rows)
        result["stages"][stage] = {"description": STAGES[stage], "rows": rows}
        say("\n" + table(stage, STAGES[stage], rows), flush=True)
    say(f"\n{MEMORY_NOTE}. × torchdali: images/s over torchdali's on the same path (GPU or CPU).")
    if ranks.first and args.json:
        write_json(result, args.json)
    if ranks.first and args.plot:
        plot(result, args.plot)
    return result
