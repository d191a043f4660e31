"""The main job: torchdali, `torch.utils.data.DataLoader` and NVIDIA DALI side by side, in one
process and one run, on ImageNet's two input stages (train and val), each timed through its
iterator as a training loop consumes it.

    python -m torchdali.bench [--data DIR] [--num-images 4096] [--batch-size 256] [--epochs 3]
                              [--device auto|cpu|gpu|all] [--systems torchdali,dataloader,dali]
                              [--stages train,val] [--json FILE] [--plot FILE.png]

Without --data it uses a generated set of photo-like JPEGs (made once, then cached)."""
import argparse
import datetime
import os
import sys

import torch

from ..sample_data import describe_dataset, write_photo_dataset
from .measure import Progress, run_system
from .report import MEMORY_NOTE, add_ratios, header, machine, plot, table, versions, write_json
from .stages import STAGES
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
    p.add_argument("--threads", metavar="N", type=int, default=os.cpu_count() or 2,
                   help="torchdali's and DALI's threads, the DataLoader's workers (default: the CPU count)")
    p.add_argument("--device", choices=("auto", "cpu", "gpu", "all"), default="auto",
                   help="the pipelines' path: gpu (mixed decode), cpu, or all (both); "
                        "auto: gpu when there is a GPU, else cpu")
    p.add_argument("--systems", metavar="LIST", type=_names(SYSTEMS, "unknown system"), default=list(SYSTEMS),
                   help="comma-separated, from: " + ", ".join(SYSTEMS))
    p.add_argument("--stages", metavar="LIST", type=_names(tuple(STAGES), "unknown stage"), default=list(STAGES),
                   help="comma-separated, from: " + ", ".join(STAGES))
    p.add_argument("--seed", type=int, default=0, help="the pipelines' and the DataLoader's random seed")
    p.add_argument("--json", metavar="FILE", help="write every figure, the machine and versions here")
    p.add_argument("--plot", metavar="FILE.png", help="a bar chart of the rates (needs matplotlib)")
    args = p.parse_args(argv)
    for name in ("num_images", "batch_size", "epochs", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def dataset(args):
    """The image folder to read and its description."""
    if args.data:
        if not os.path.isdir(args.data):
            raise SystemExit(f"--data {args.data}: no such directory")
        return {**describe_dataset(args.data), "source": "--data"}
    root = os.path.join(args.cache, f"photos-{args.num_images}")
    print(f"generated data set: {root} (made once, then cached)", file=sys.stderr, flush=True)
    write_photo_dataset(root, num_images=args.num_images, seed=0)
    return {**describe_dataset(root), "source": "generated photo-like JPEGs, 4:2:0"}


def main(argv=None):
    """Run the benchmark; returns the result (what --json writes)."""
    args = parse_args(argv)
    paths = {"auto": ["gpu" if torch.cuda.is_available() else "cpu"], "all": ["gpu", "cpu"]}.get(
        args.device, [args.device])
    data = dataset(args)  # before anything touches CUDA: it forks its writers
    settings = {"batch_size": args.batch_size, "epochs": args.epochs, "threads": args.threads,
                "seed": args.seed, "device": args.device}
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "command": " ".join(["python -m torchdali.bench"] + list(sys.argv[1:] if argv is None else argv)),
              "machine": machine(), "versions": versions(), "data": data, "settings": settings,
              "memory": MEMORY_NOTE, "stages": {}}
    print(header(result), flush=True)
    systems = make_systems(args.systems, paths, args.threads)
    progress = Progress()
    for stage in args.stages:
        rows = [run_system(system, stage, data, settings, progress) for system in systems]
        add_ratios(rows)
        result["stages"][stage] = {"description": STAGES[stage], "rows": rows}
        print("\n" + table(stage, STAGES[stage], rows), flush=True)
    print(f"\n{MEMORY_NOTE}. × torchdali: images/s over torchdali's on the same path (GPU or CPU).")
    if args.json:
        write_json(result, args.json)
    if args.plot:
        plot(result, args.plot)
    return result
