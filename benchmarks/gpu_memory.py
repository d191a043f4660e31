"""Where a pipeline's GPU memory goes: runs a stage of the main benchmark (torchdali, 'mixed'
decode) for a few epochs under torch's allocator history and prints, by the torchdali line
that asked for it, what was live at the peak of allocated memory and what made the
allocator reserve more (its segments). The benchmark's GPU column counts reserved memory:
reserved above the allocated peak is the caching allocator's slack.

    python benchmarks/gpu_memory.py [--stage val] [--batch-size 256] [--epochs 2] [--data DIR] [--num-images N]
"""
import argparse
import collections
import os

import torch

import torchdali
from torchdali.bench.stages import define_pipeline
from torchdali.plugin.pytorch import DALIGenericIterator
from torchdali.sample_data import write_photo_dataset

MIB = 2 ** 20


def site(frames):
    """The innermost torchdali frame of an allocation, as 'file:line (function)'."""
    for f in frames:
        if "torchdali" in f["filename"] and "benchmarks" not in f["filename"]:
            return f"{f['filename'].split('torchdali/')[-1]}:{f['line']} ({f['name']})"
    return "elsewhere"


def breakdown(trace):
    """(live bytes by site at the allocated peak, peak bytes, reserved bytes by site)."""
    live, where, total = collections.Counter(), {}, 0
    peak, at_peak = 0, collections.Counter()
    reserved = collections.Counter()
    for e in trace:
        action = e["action"]
        if action == "alloc":
            where[e["addr"]] = (site(e["frames"]), e["size"])
            live[where[e["addr"]][0]] += e["size"]
            total += e["size"]
            if total > peak:
                peak, at_peak = total, live.copy()
        elif action == "free_completed" and e["addr"] in where:
            s, size = where.pop(e["addr"])
            live[s] -= size
            total -= size
        elif action == "segment_alloc":
            reserved[site(e["frames"])] += e["size"]
        elif action == "segment_free":
            reserved[site(e["frames"])] -= e["size"]
    return at_peak, peak, reserved


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stage", default="val")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--data", default=os.path.expanduser("~/.cache/torchdali/photos-4096"),
                   help="the generated photo set, made there if missing (the main benchmark's default)")
    p.add_argument("--num-images", type=int, default=4096)
    args = p.parse_args()
    data = write_photo_dataset(args.data, num_images=args.num_images)
    torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="python")
    pipe = define_pipeline(torchdali, args.stage)(data, True, batch_size=args.batch_size, num_threads=args.threads,
                                                  device_id=torch.cuda.current_device(), seed=0)
    pipe.build()
    loader = DALIGenericIterator([pipe], ["images", "labels"], reader_name="Reader", auto_reset=True)
    for _ in range(args.epochs):
        for _ in loader:
            pass
    torch.cuda.synchronize()
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    at_peak, peak, reserved = breakdown(snapshot["device_traces"][torch.cuda.current_device()])
    print(f"{args.stage}, batch {args.batch_size}: allocated peak {torch.cuda.max_memory_allocated() / MIB:.1f} MiB, "
          f"reserved peak {torch.cuda.max_memory_reserved() / MIB:.1f} MiB, now reserved "
          f"{torch.cuda.memory_reserved() / MIB:.1f} MiB in {len(snapshot['segments'])} segments")
    print(f"live at the allocated peak ({peak / MIB:.1f} MiB, traced):")
    for s, b in at_peak.most_common(12):
        print(f"  {b / MIB:9.1f} MiB  {s}")
    print("reserved (segments made, less those freed):")
    for s, b in reserved.most_common(12):
        print(f"  {b / MIB:9.1f} MiB  {s}")
    sizes = collections.Counter()
    for seg in snapshot["segments"]:
        sizes[(seg["segment_type"], seg["total_size"] // MIB)] += 1
    print("segments (pool, MiB: count):", ", ".join(f"{t} {m}: {c}" for (t, m), c in sorted(sizes.items())))


if __name__ == "__main__":
    main()
