"""folder2wds: converts an image folder (one sub-folder per class, as readers.file reads it)
into WebDataset tar shards for readers.webdataset, each with its index file (wds2idx).

Each sample is two members: `KEY.jpg` (the file's bytes, whatever its format) and `KEY.cls`
(its label as one little-endian int32, read with `dtypes=[types.UINT8, types.INT32]`). Labels
and order are readers.file's: classes by sorted folder name, files by sorted name.

    python -m torchdali.tools.folder2wds FOLDER OUT_DIR [--shard-size 1000]
"""
import argparse
import io
import os
import sys
import tarfile

import numpy as np

from ..operators.webdataset import format_index, group_samples, scan_members


def class_files(root):
    """[(path, label)] of the files under `root`'s class folders, in readers.file's order."""
    classes = sorted(d.name for d in os.scandir(root) if d.is_dir() and not d.name.startswith("."))
    return [(os.path.join(root, c, f), label) for label, c in enumerate(classes)
            for f in sorted(os.listdir(os.path.join(root, c))) if not f.startswith(".")]


def write_shards(root, out_dir, shard_size=1000):
    """Write `root`'s images as shards `shard-NNNNN.tar` (tarfile's default format, PAX) of at
    most `shard_size` samples under `out_dir`, with their `.idx` files; returns the list of
    (tar path, index path)."""
    files = class_files(root)
    if not files:
        raise ValueError(f"no images found under {root!r} (expected one sub-folder per class)")
    os.makedirs(out_dir, exist_ok=True)
    shards = []
    for first in range(0, len(files), shard_size):
        tar_path = os.path.join(out_dir, f"shard-{first // shard_size:05d}.tar")
        with tarfile.open(tar_path, "w") as tar:
            for i, (path, label) in enumerate(files[first:first + shard_size], start=first):
                tar.add(path, arcname=f"{i:08d}.jpg")
                _add_bytes(tar, f"{i:08d}.cls", np.array([label], "<i4").tobytes())
        index_path = tar_path[:-len(".tar")] + ".idx"
        with open(index_path, "w", encoding="utf-8") as f:  # what wds2idx writes
            f.write(format_index(group_samples(scan_members(tar_path)), tar_path))
        shards.append((tar_path, index_path))
    return shards


def _add_bytes(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def main(argv=None):
    """The command line: convert FOLDER into shards in OUT_DIR; returns the exit status."""
    parser = argparse.ArgumentParser(prog="folder2wds", description="Convert an image folder (one sub-folder "
                                     "per class) into indexed WebDataset shards.")
    parser.add_argument("folder")
    parser.add_argument("out_dir")
    parser.add_argument("--shard-size", type=int, default=1000, help="samples per shard (default 1000)")
    args = parser.parse_args(argv)
    if args.shard_size < 1:
        parser.error("--shard-size must be at least 1")
    try:
        shards = write_shards(args.folder, args.out_dir, args.shard_size)
    except (ValueError, OSError) as e:
        print(f"folder2wds: {e}", file=sys.stderr)
        return 1
    print(f"{len(shards)} shards in {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
