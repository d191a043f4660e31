"""What the benchmark reports: the machine and versions, a table per stage (Markdown, so
it pastes into a README), the JSON file and the bar chart."""
import importlib
import json
import os
import platform
import sys

import torch

MEMORY_NOTE = ("GPU MiB: peak device memory in use above the level before the system started "
               "(cudaMemGetInfo: every allocator, nvJPEG's and DALI's included; the largest GPU of a "
               "job); host MiB: peak PSS of the process and its worker processes above that level "
               "(summed over a job's ranks); CPU cores used: the process's CPU time over the timed "
               "epochs' wall time (summed over ranks); host CPU busy: of all the host's cores")


def machine():
    """The GPU, the CPU and its cores, the memory."""
    info = {"gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "cpu": platform.processor() or platform.machine(), "cpu_cores": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
        with open("/proc/meminfo") as f:
            info["memory_gib"] = round(int(f.readline().split()[1]) / (1 << 20), 1)
    except (OSError, StopIteration):
        pass
    if hasattr(os, "sched_getaffinity"):
        info["cpu_cores_usable"] = len(os.sched_getaffinity(0))
    return info


def versions():
    """Python, torch (and its CUDA), torchvision, NVIDIA DALI, torchdali; None where absent."""
    found = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda}
    for name, module in (("torchvision", "torchvision"), ("dali", "nvidia.dali"), ("torchdali", "torchdali")):
        try:
            found[name] = importlib.import_module(module).__version__
        except Exception:  # noqa: BLE001 - absent or broken: the report says so by None
            found[name] = None
    return found


def add_ratios(rows):
    """Each row's rate over torchdali's on the same path (GPU or CPU), where both ran."""
    reference = {r["path"]: r for r in rows if r["system"].startswith("torchdali") and "images_per_s" in r}
    for row in rows:
        ref = reference.get(row["path"])
        if "images_per_s" in row and ref is not None:
            row["ratio"] = round(row["images_per_s"] / ref["images_per_s"], 3)
            row["ratio_to"] = ref["system"]


def header(result):
    data, m, v, s = result["data"], result["machine"], result["versions"], result["settings"]
    names = {"torch": "torch", "torchvision": "torchvision", "dali": "DALI", "torchdali": "torchdali"}
    return "\n".join([
        f"run: {result['date']}, {result['command']}",
        f"data: {data['images']:,} images in {data['classes']} classes ({data['source']}), mean "
        f"{data['mean_width']:.0f}×{data['mean_height']:.0f} px, {data['mean_kib']:.1f} KiB",
        f"machine: {m['gpu'] or 'no GPU'}; {m['cpu']}, {m['cpu_cores']} CPU cores",
        "versions: " + ", ".join(f"{name} {v[key] or '–'}" for key, name in names.items()),
        (f"{s['ranks']} ranks (torchrun), each on its own GPU and shard, batch {s['batch_size']} and "
         f"{s['threads']} threads a rank" if s.get("ranks", 1) > 1 else
         f"batch {s['batch_size']}, {s['threads']} threads / workers")
        + (f", hw_decoder_load {s['hw_decoder_load']}" if s.get("hw_decoder_load") is not None else "")
        + f", median of {s['epochs']} epochs after a warm-up epoch"])


def table(stage, description, rows):
    """A stage's rows as a Markdown table; a job of several ranks adds the rate per rank (per
    GPU) and how busy the host's CPUs were."""
    job = any(r.get("ranks", 1) > 1 for r in rows)
    columns = ["system", "images/s"] + (["per rank"] if job else []) + [
        "epochs, min–max", "× torchdali", "GPU MiB", "host MiB", "CPU cores used"] + (["host CPU busy"] if job else [])
    lines = [f"{stage}: {description}", "", "| " + " | ".join(columns) + " |",
             "| --- |" + " ---: |" * (len(columns) - 1)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['label']} | {r['error']} |" + " |" * (len(columns) - 2))
            continue
        epochs = r["epoch_images_per_s"]
        cells = [r["label"], f"{r['images_per_s']:,.0f}"]
        if job:
            cells.append(f"{r['images_per_s'] / r['ranks']:,.0f}")
        cells += [f"{min(epochs):,.0f}–{max(epochs):,.0f}", f"{r['ratio']:.2f}×" if "ratio" in r else "–",
                  _mib(r["gpu_mib"]), _mib(r["host_mib"]), _number(r.get("cpu_cores_used"), "{:.1f}")]
        if job:
            cells.append(_number(r.get("host_cpu_busy"), "{:.0%}"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _number(value, form):
    return "–" if value is None else form.format(value)


def _mib(value):
    return _number(value, "{:,.0f}")


def write_json(result, path):
    with open(path, "w") as f:
        json.dump(result, f, indent=2)


def plot(result, path):
    """A bar chart of images/s per system, one panel per stage; False (and why, on stderr)
    when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"--plot {path}: matplotlib is not installed (pip install matplotlib); "
              "the table and the JSON have every figure", file=sys.stderr)
        return False
    stages = result["stages"]
    fig, axes = plt.subplots(1, len(stages), figsize=(6 * len(stages), 3.5), squeeze=False)
    for ax, (stage, entry) in zip(axes[0], stages.items()):
        rows = entry["rows"]
        rates = [r.get("images_per_s", 0) for r in rows]
        bars = ax.barh([r["label"] for r in rows], rates,
                       color=["tab:orange" if r["system"].startswith("torchdali") else "tab:gray" for r in rows])
        for bar, r in zip(bars, rows):
            text = f" {r['images_per_s']:,.0f}" + (f" ({r['ratio']:.2f}×)" if "ratio" in r else "") \
                if "images_per_s" in r else " not run"
            ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, text, va="center", fontsize=8)
        ax.invert_yaxis()
        ax.set_title(stage)
        ax.set_xlabel("images/s")
        ax.set_xlim(0, max(rates + [1]) * 1.35)
        ax.locator_params(axis="x", nbins=5)
        ax.xaxis.set_major_formatter(lambda value, _: f"{value:,.0f}")
    fig.suptitle(f"{result['machine']['gpu'] or 'CPU only'}, {result['machine']['cpu_cores']} cores, "
                 f"batch {result['settings']['batch_size']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
