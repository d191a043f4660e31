"""Draws the benchmark's bar chart for the documentation site (docs/images/benchmark.png):
images/s per system, a panel per stage, torchdali's bars in orange.

The figures come from the README's headline run (the train and val tables under
"### On a GPU machine"), so the chart always shows what the README reports; or, with
--json, from a file that `python -m torchdali.bench --json FILE` wrote. The drawing is the
benchmark's own (`--plot`, torchdali/bench/report.py).

    python benchmarks/chart.py                         # README -> docs/images/benchmark.png
    python benchmarks/chart.py --json run.json --out chart.png
"""
import argparse
import json
import os
import re
import sys

from torchdali.bench.report import plot

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECTION = "### On a GPU machine"


def section(text, heading):
    """The lines of the README section that starts at `heading`, up to the next heading."""
    lines = text.splitlines()
    start = lines.index(heading) + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("#")), len(lines))
    return lines[start:end]


def stage_tables(lines):
    """{stage: [row dict]} of the tables in `lines`, each named by the "stage: ..." line above
    it; only the first table of a stage counts."""
    stages, stage = {}, None
    for i, line in enumerate(lines):
        named = re.match(r"^(\w[\w-]*): \S", line)
        if named:
            stage = named.group(1)
        elif line.startswith("|") and stage:
            if stage not in stages:
                stages[stage] = table_rows(lines[i + 2:])  # past the header and its rule
            stage = None
    return stages


def table_rows(lines):
    """The rows of the Markdown table body at the start of `lines`, in the form the
    benchmark's JSON gives them (label, system, path, images_per_s, ratio)."""
    rows = []
    for line in lines:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        label = cells[0]
        rows.append({"label": label, "system": label.split(",")[0],
                     "path": "gpu" if "GPU" in label else "cpu",
                     "images_per_s": float(cells[1].replace(",", "")),
                     "ratio": float(cells[3].rstrip("×"))})
    return rows


def from_readme(path):
    """A result, as the benchmark's JSON holds one, of the README's headline run."""
    with open(path, encoding="utf-8") as f:
        lines = section(f.read(), SECTION)
    machine = re.search(r"One (NVIDIA \S+) with (\d+) CPU cores, (\d{4}-\d\d-\d\d)", " ".join(lines))
    batch = re.search(r"--batch-size (\d+)", " ".join(lines))
    if not machine or not batch:
        raise ValueError(f"{path}: '{SECTION}' no longer names the machine, date and batch size as expected")
    stages = stage_tables(lines)
    if not stages:
        raise ValueError(f"{path}: no stage tables under '{SECTION}'")
    return {"machine": {"gpu": machine.group(1), "cpu_cores": int(machine.group(2))},
            "date": machine.group(3), "settings": {"batch_size": int(batch.group(1))},
            "stages": {name: {"rows": rows} for name, rows in stages.items()}}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="FILE", help="a run's figures (python -m torchdali.bench --json FILE)")
    parser.add_argument("--readme", default=os.path.join(ROOT, "README.md"))
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "images", "benchmark.png"))
    args = parser.parse_args(argv)
    if args.json:
        with open(args.json) as f:
            result = json.load(f)
    else:
        result = from_readme(args.readme)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    if not plot(result, args.out):
        return 1
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
