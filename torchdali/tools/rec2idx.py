"""rec2idx: writes the index `readers.mxnet` needs for MXNet RecordIO files, as DALI's script
of that name does, without MXNet.

    python -m torchdali.tools.rec2idx <rec file> [<rec file> ...] <index file>

The index is a text file with one '<key>\\t<offset>' line per record, keys counting from 0.
readers.mxnet takes one index for all its files, whose offsets count on through the files
in the order given as if they were one (for a single file this is im2rec's .idx, keys
aside). A record is framed as MXNet writes it: the magic number 0xced7230a, a length word
(a 3-bit continuation flag above a 29-bit length), the data padded to 4 bytes; a record
split into parts (flags 1, 2 ..., 3) is one record. A file that ends inside a record or
holds something else is an error naming the file and the offset.
"""
import argparse
import struct
import sys

from .. import storage

MAGIC = 0xCED7230A
_FRAME = 8


def record_offsets(path):
    """The offset of each record of RecordIO file `path`, in order; a ValueError naming the
    file and the offset of a part that is not a RecordIO part or is cut short."""
    total = storage.size(path)
    offsets, offset, inside = [], 0, False
    with storage.open_stream(path) as f:
        while offset < total:
            f.seek(offset)
            frame = f.read(_FRAME)
            if len(frame) < _FRAME:
                raise ValueError(f"'{path}' is not a valid RecordIO file: it ends inside the part at offset {offset}")
            magic, word = struct.unpack("<II", frame)
            flag, length = word >> 29, word & ((1 << 29) - 1)
            if magic != MAGIC:
                raise ValueError(f"'{path}' is not a valid RecordIO file: no magic number at offset {offset} "
                                 f"(0x{magic:08x}, expected 0x{MAGIC:08x})")
            if inside != (flag in (2, 3)):
                raise ValueError(f"'{path}' is not a valid RecordIO file: the part at offset {offset} has the "
                                 f"continuation flag {flag}" + (" inside a split record" if inside else ""))
            if not inside:
                offsets.append(offset)
            inside = flag in (1, 2)
            if offset + _FRAME + length > total:
                raise ValueError(f"'{path}' is not a valid RecordIO file: the part at offset {offset} needs "
                                 f"{_FRAME + length} bytes, {total - offset} are left")
            offset += _FRAME + -(-length // 4) * 4  # parts are padded to 4 bytes
    if inside:
        raise ValueError(f"'{path}' is not a valid RecordIO file: it ends inside a split record")
    return offsets


def write_index(rec_paths, index_path):
    """Write the index of the RecordIO files `rec_paths` (one path or a list) to the local
    file `index_path`, offsets counting on through the files; returns the number of records."""
    lines, base = [], 0
    for path in [rec_paths] if isinstance(rec_paths, str) else rec_paths:
        lines += [base + o for o in record_offsets(path)]
        base += storage.size(path)
    with open(index_path, "w") as out:
        out.write("".join(f"{key}\t{offset}\n" for key, offset in enumerate(lines)))
    return len(lines)


def main(argv=None):
    """The command line: write the index of RecordIO files; returns the exit status."""
    parser = argparse.ArgumentParser(prog="rec2idx", description="Write the index file of MXNet RecordIO files "
                                     "(one 'key<TAB>offset' line per record, offsets counting on through the "
                                     "files) for readers.mxnet.")
    parser.add_argument("rec", nargs="+", help="the RecordIO files to index, in the order the reader takes them")
    parser.add_argument("index", help="the index file to write")
    args = parser.parse_args(argv)
    try:
        write_index(args.rec, args.index)
    except (OSError, ValueError) as e:
        print(f"rec2idx: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
