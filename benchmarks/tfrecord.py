"""Records/s of readers.tfrecord alone (no decoding) on torchdali and, when `nvidia.dali` is
importable, on DALI (CPU-only, device_id=None), with the same files, batch size and threads.

Each variant writes TFRecord files of tf.train.Example records, an image-like bytes feature of
the variant's size, an int64 label, a list of 4 floats and a short string, and their index
files (torchdali.tools.tfrecord2idx); then reads them through a pipeline of readers.tfrecord
only: one warm-up epoch, then the best of --epochs epochs. Variants: "large" (~100 KB records,
an image each: reading and copying dominate) and "small" (~1 KB: the per-record work does).
The framing's CRCs are written as zeros: neither reader checks them. --dont-use-mmap and
--random-shuffle (initial_fill 1024) set those arguments of both readers.

    python benchmarks/tfrecord.py [--variants large,small] [--records 4096] [--batch-size 64]
                                  [--threads 2] [--epochs 3] [--files 4] [--dont-use-mmap]
                                  [--random-shuffle] [--profile]

--profile prints, instead of the rates, cProfile's top entries for torchdali's operator run
directly over one epoch (in this thread, without the pipeline's threads)."""
import argparse
import cProfile
import os
import pstats
import struct
import tempfile
import time

import numpy as np

import torchdali
import torchdali.tfrecord as tfrec
from torchdali.tools import tfrecord2idx

VARIANTS = {"large": 100_000, "small": 1_000}  # bytes of the image-like feature


# --- a minimal TFRecord writer ---

def _varint(n):
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number, payload):
    """A length-delimited field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _example(image, label, floats, text):
    features = {"image": _field(1, _field(1, image)),  # Feature.bytes_list.value
                "label": _field(3, _field(1, _varint(label))),  # Feature.int64_list, packed
                "floats": _field(2, _field(1, struct.pack("<4f", *floats))),  # Feature.float_list, packed
                "text": _field(1, _field(1, text))}
    entries = b"".join(_field(1, _field(1, k.encode()) + _field(2, v)) for k, v in features.items())
    return _field(1, entries)


def write_dataset(folder, records, image_bytes, files, seed=0):
    """`files` TFRecord files of `records` records in all, with their index files; returns
    (paths, index paths)."""
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths, indexes = [], []
    for f in range(files):
        path, index = os.path.join(folder, f"part{f}.tfrecord"), os.path.join(folder, f"part{f}.idx")
        with open(path, "wb") as out:
            for k in range(f * records // files, (f + 1) * records // files):
                size = int(image_bytes * rng.uniform(0.8, 1.2))
                payload = _example(rng.bytes(size), k, rng.random(4).tolist(), f"record {k}".encode())
                out.write(struct.pack("<QI", len(payload), 0) + payload + b"\0\0\0\0")
        tfrecord2idx.write_index(path, index)
        paths.append(path)
        indexes.append(index)
    return paths, indexes


FEATURES = {"image": (True, [], tfrec.string, ""), "label": (True, [1], tfrec.int64, -1),
            "floats": (False, [], tfrec.float32, 0.0), "text": (True, [], tfrec.string, "")}


def features(ns):
    """FEATURES as `ns` (torchdali.tfrecord or nvidia.dali.tfrecord) defines them."""
    return {name: (ns.FixedLenFeature(shape, dtype, default) if fixed else ns.VarLenFeature(dtype, default))
            for name, (fixed, shape, dtype, default) in FEATURES.items()}


def rate(system, paths, indexes, records, batch_size, threads, epochs, reader_args):
    """Best records/s over `epochs` epochs of a pipeline of readers.tfrecord (with
    `reader_args`) on `system` (the torchdali or nvidia.dali module), after a warm-up epoch."""
    ns = system.tfrecord if system is torchdali else __import__("nvidia.dali.tfrecord").dali.tfrecord

    @system.pipeline_def(batch_size=batch_size, num_threads=threads, device_id=None, seed=0)
    def pipe():
        out = system.fn.readers.tfrecord(path=paths, index_path=indexes, features=features(ns), name="R",
                                         **reader_args)
        return tuple(out.values())

    p = pipe()
    p.build()
    iterations = -(-records // batch_size)
    best = 0.0
    for epoch in range(epochs + 1):
        start = time.perf_counter()
        for _ in range(iterations):
            p.run()
        if epoch:
            best = max(best, iterations * batch_size / (time.perf_counter() - start))
    return best


def profile(paths, indexes, records, batch_size, reader_args, top=25):
    """cProfile's top entries (by own time) for torchdali's operator over one epoch."""
    from torchdali import schema
    from torchdali.operators.base import Args, OpSpec, RunContext

    sch = schema.get("readers.tfrecord")
    args = sch.check_args(dict(path=paths, index_path=indexes, features=features(tfrec), **reader_args))
    spec = OpSpec(schema=sch, name="R", device="cpu", args=args, arg_input_names=(),
                  num_outputs=sch.outputs_for(args, 0), seed=0, max_batch_size=batch_size, num_threads=1,
                  device_id=None)
    op = sch.impl(spec)
    iterations = -(-records // batch_size)

    def epoch():
        for i in range(iterations):
            op.run([], Args(op, {}), RunContext(iteration=i, batch_size=batch_size, thread_pool=None))

    epoch()  # warm-up
    prof = cProfile.Profile()
    start = time.perf_counter()
    prof.runcall(epoch)
    seconds = time.perf_counter() - start
    print(f"{iterations * batch_size} records in {seconds:.3f} s under cProfile "
          f"({iterations * batch_size / seconds:.0f} records/s)")
    pstats.Stats(prof).sort_stats("tottime").print_stats(top)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", default="large,small", help=f"comma-separated, of {', '.join(VARIANTS)}")
    p.add_argument("--records", type=int, default=4096, help="records per variant")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--epochs", type=int, default=3, help="timed epochs (after one warm-up epoch)")
    p.add_argument("--files", type=int, default=4, help="TFRecord files per variant")
    p.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "torchdali-tfrecord-bench"),
                   help="where the generated files are kept")
    p.add_argument("--dont-use-mmap", action="store_true", help="read the files instead of mapping them")
    p.add_argument("--random-shuffle", action="store_true", help="shuffle through a buffer of 1024 records")
    p.add_argument("--profile", action="store_true", help="profile torchdali's operator instead")
    args = p.parse_args()
    variants = args.variants.split(",")
    if any(v not in VARIANTS for v in variants):
        p.error(f"--variants: choose among {', '.join(VARIANTS)}")
    for name in ("records", "batch_size", "threads", "epochs", "files"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    reader_args = dict(dont_use_mmap=args.dont_use_mmap, random_shuffle=args.random_shuffle)
    try:
        import nvidia.dali as dali
    except ImportError:
        dali = None
    rows = []
    for variant in variants:
        folder = os.path.join(args.cache, f"{variant}-{args.records}-{args.files}")
        paths, indexes = write_dataset(folder, args.records, VARIANTS[variant], args.files)
        mean = sum(os.path.getsize(path) for path in paths) / args.records
        print(f"{variant}: {args.records} records of {mean / 1000:.1f} KB on average in {args.files} files; "
              f"batch {args.batch_size}, {args.threads} threads, {reader_args}", flush=True)
        if args.profile:
            profile(paths, indexes, args.records, args.batch_size, reader_args)
            continue
        settings = (paths, indexes, args.records, args.batch_size, args.threads, args.epochs, reader_args)
        ours = rate(torchdali, *settings)
        theirs = rate(dali, *settings) if dali is not None else None
        rows.append((variant, mean, ours, theirs))
    if rows:
        print("\n| records | torchdali records/s | DALI records/s | torchdali / DALI |\n| --- | ---: | ---: | ---: |")
        for variant, mean, ours, theirs in rows:
            other = f"{theirs:.0f} | {ours / theirs:.2f}" if theirs else "(not installed) |"
            print(f"| {variant} (~{mean / 1000:.1f} KB) | {ours:.0f} | {other} |")


if __name__ == "__main__":
    main()
