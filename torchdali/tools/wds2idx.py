"""wds2idx: writes the index file of a WebDataset tar archive, in DALI's format (v1.2), which
`readers.webdataset` (ours or DALI's) reads instead of scanning the archive.

    python -m torchdali.tools.wds2idx ARCHIVE [INDEX]
"""
import argparse
import sys

from ..operators.webdataset import FormatError, format_index, group_samples, scan_members


def default_index_path(archive):
    """ARCHIVE with the extension of its file name replaced by '.idx' (DALI's default)."""
    dot = archive.find(".", archive.rfind("/") + 2)  # a leading dot is not the extension's
    return (archive if dot < 0 else archive[:dot]) + ".idx"


def main(argv=None):
    """The command line: write the index of a WebDataset archive; returns the exit status."""
    parser = argparse.ArgumentParser(prog="wds2idx", description="Write the index file of a WebDataset tar "
                                     "archive for readers.webdataset (DALI's format, v1.2).")
    parser.add_argument("archive", help="the tar file")
    parser.add_argument("index", nargs="?", help="the index file to write (default: the archive's name with "
                        "the extension .idx)")
    args = parser.parse_args(argv)
    index = args.index or default_index_path(args.archive)
    try:
        samples = group_samples(scan_members(args.archive))
        if not samples:
            raise FormatError(f"tar file '{args.archive}' holds no samples")
        text = format_index(samples, args.archive)
        with open(index, "wb") as f:
            f.write(text.encode("utf-8", "surrogateescape"))
    except (FormatError, OSError) as e:
        print(f"wds2idx: {e}", file=sys.stderr)
        return 1
    print(f"{index}: {len(samples)} samples")
    return 0


if __name__ == "__main__":
    sys.exit(main())
