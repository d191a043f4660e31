"""Scaling across the GPUs of one host: the benchmark under torchrun with 1, 2, 4 ... ranks
(one pipeline per GPU, each rank on its shard), and how the job's images/s grow with them.

    python -m torchdali.bench.scaling [--ranks 1,2,4] [--project 8] [--json FILE]
                                      [any option of python -m torchdali.bench]

Every rank decodes as many images in each run: with N ranks the timed epochs are N times as
many (`--epochs` gives the one-rank count). Scaling efficiency is the job's images/s over N
times the one-rank figure of the same system. Where fewer ranks ran than `--project`, a
projection to that many is printed from the largest run: its rate per rank, limited by the
cores a rank would have on a host with this one's cores per GPU, if the rank used more."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m torchdali.bench.scaling", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    gpus = torch.cuda.device_count()
    default = [n for n in (1, 2, 4, 8) if n <= max(gpus, 2)]
    p.add_argument("--ranks", metavar="LIST", default=",".join(map(str, default)),
                   help="comma-separated rank counts (default: 1, 2, 4, 8 up to the GPU count)")
    p.add_argument("--epochs", metavar="N", type=int, default=3, help="timed epochs of the one-rank run (default 3)")
    p.add_argument("--project", metavar="N", type=int, default=8,
                   help="project the total to this many ranks when fewer ran (default 8)")
    p.add_argument("--json", metavar="FILE", help="write every run's figures and the comparison here")
    args, bench_args = p.parse_known_args(argv)
    try:
        args.ranks = sorted({int(n) for n in args.ranks.split(",") if n.strip()})
    except ValueError:
        p.error(f"--ranks {args.ranks}: not a comma-separated list of integers")
    if not args.ranks or args.ranks[0] < 1:
        p.error("--ranks: give rank counts of at least 1")
    if gpus and args.ranks[-1] > gpus and "cpu" not in bench_args:
        p.error(f"--ranks {args.ranks[-1]}: this host has {gpus} GPUs")
    if "--json" in bench_args or "--plot" in bench_args:
        p.error("--json belongs to the comparison here; --plot is not available for scaling")
    return args, bench_args


def run(ranks, epochs, bench_args, folder):
    """One torchrun job of `ranks` ranks; its result as the benchmark's --json writes it."""
    out = os.path.join(folder, f"ranks-{ranks}.json")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}",
           "-m", "torchdali.bench", "--epochs", str(epochs * ranks), "--json", out, *bench_args]
    print(f"\n$ {' '.join(cmd[1:])}", flush=True)
    subprocess.run(cmd, check=True)
    with open(out) as f:
        return json.load(f)


def compare(results):
    """{stage: [row]}: each system's job figures per rank count, with the scaling efficiency
    against its one-rank figure."""
    stages = {}
    for result in results:
        settings = result["settings"]
        for stage, entry in result["stages"].items():
            stages.setdefault(stage, []).extend({
                "system": row["system"], "label": row["label"], "ranks": settings["ranks"],
                "threads": settings["threads"], "images_per_s": row["images_per_s"],
                "per_rank": round(row["images_per_s"] / settings["ranks"], 1), "ratio": row.get("ratio"),
                "cpu_cores_used": row.get("cpu_cores_used"), "host_cpu_busy": row.get("host_cpu_busy")}
                for row in entry["rows"] if "images_per_s" in row)
    for rows in stages.values():
        order = list(dict.fromkeys(r["system"] for r in rows))
        rows.sort(key=lambda r: (order.index(r["system"]), r["ranks"]))
        one = {r["system"]: r["images_per_s"] for r in rows if r["ranks"] == 1}
        for r in rows:
            r["efficiency"] = round(r["images_per_s"] / (r["ranks"] * one[r["system"]]), 3) if r["system"] in one else None
    return stages


def project(rows, ranks, cores_per_gpu):
    """Each system's total at `ranks` ranks from its largest run: the rate per rank, times
    the share of the cores it used that a rank would have (at most 1)."""
    largest = {}
    for row in rows:
        if row["ranks"] >= largest.get(row["system"], {"ranks": 0})["ranks"]:
            largest[row["system"]] = row
    projected = []
    for row in largest.values():
        cores = None if row["cpu_cores_used"] is None else row["cpu_cores_used"] / row["ranks"]
        limit = 1.0 if not cores else min(1.0, cores_per_gpu / cores)
        projected.append({"system": row["system"], "label": row["label"], "from_ranks": row["ranks"],
                          "cores_per_rank": None if cores is None else round(cores, 2),
                          "images_per_s": round(ranks * row["per_rank"] * limit, 1)})
    return projected


def table(stage, rows):
    lines = [f"{stage}:", "", "| system | ranks | threads a rank | images/s | per rank | scaling efficiency "
             "| × torchdali | CPU cores used | host CPU busy |", "| --- |" + " ---: |" * 8]
    for r in rows:
        efficiency = "–" if r["efficiency"] is None else f"{r['efficiency']:.0%}"
        ratio = "–" if r["ratio"] is None else f"{r['ratio']:.2f}×"
        cores = "–" if r["cpu_cores_used"] is None else f"{r['cpu_cores_used']:.1f}"
        busy = "–" if r["host_cpu_busy"] is None else f"{r['host_cpu_busy']:.0%}"
        lines.append(f"| {r['label']} | {r['ranks']} | {r['threads']} | {r['images_per_s']:,.0f} | "
                     f"{r['per_rank']:,.0f} | {efficiency} | {ratio} | {cores} | {busy} |")
    return "\n".join(lines)


def main(argv=None):
    args, bench_args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="torchdali-scaling-") as folder:
        results = [run(n, args.epochs, bench_args, folder) for n in args.ranks]
    machine = results[0]["machine"]
    gpus = torch.cuda.device_count()
    cores_per_gpu = (machine.get("cpu_cores_usable") or machine["cpu_cores"]) / max(gpus or args.ranks[-1], 1)
    stages = compare(results)
    summary = {"machine": machine, "ranks": args.ranks, "stages": stages, "runs": results, "projection": {}}
    print(f"\nmachine: {machine['gpu'] or 'no GPU'}, {gpus} GPUs; {machine['cpu']}, {machine['cpu_cores']} CPU cores")
    for stage, rows in stages.items():
        print("\n" + table(stage, rows))
        if args.ranks[-1] < args.project:
            projected = project(rows, args.project, cores_per_gpu)
            summary["projection"][stage] = projected
            print(f"\nProjection, not a measurement: {args.project} ranks at the rate per rank of the "
                  f"largest run, on a host with {cores_per_gpu:g} cores a GPU (as this one):")
            for p in projected:
                print(f"- {p['label']}: {p['images_per_s']:,.0f} images/s (from {p['from_ranks']} ranks; "
                      f"{p['cores_per_rank']} cores a rank)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    return summary


if __name__ == "__main__":
    main()
