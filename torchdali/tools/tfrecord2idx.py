"""tfrecord2idx: writes the index `readers.tfrecord` needs, as DALI's script of that name does.

    python -m torchdali.tools.tfrecord2idx <tfrecord file> <index file>

The index is a text file with one line per record: its offset in the file and its size in
bytes (the framing included), separated by a space. A record's framing is a little-endian
uint64 length, a 4-byte CRC of it, the payload of that length and a 4-byte CRC of the
payload; the CRCs are not checked (neither DALI's script nor its reader checks them).
Unlike DALI's script, a truncated last record is an error instead of a bogus index line,
and no TensorFlow is needed for any file system.
"""
import argparse
import struct
import sys

from .. import storage

_HEADER = 12  # uint64 length + its CRC
_FRAMING = 16  # the header + the payload's CRC


def record_spans(path):
    """(offset, size) of each record of TFRecord file `path`, in order; a ValueError naming
    the file and the offset of a record that is cut short."""
    total = storage.size(path)
    spans = []
    with storage.open_stream(path) as f:
        offset = 0
        while offset < total:
            f.seek(offset)
            header = f.read(_HEADER)
            if len(header) < _HEADER:
                raise ValueError(f"'{path}' is not a valid TFRecord file: the record at offset {offset} is "
                                 f"truncated ({total - offset} bytes left, a header takes {_HEADER})")
            size = struct.unpack("<Q", header[:8])[0] + _FRAMING
            if offset + size > total:
                raise ValueError(f"'{path}' is not a valid TFRecord file: the record at offset {offset} needs "
                                 f"{size} bytes, {total - offset} are left")
            spans.append((offset, size))
            offset += size
    return spans


def write_index(tfrecord_path, index_path):
    """Write the index of `tfrecord_path` to the local file `index_path`; returns the
    number of records."""
    spans = record_spans(tfrecord_path)
    with open(index_path, "w") as out:
        out.write("".join(f"{offset} {size}\n" for offset, size in spans))
    return len(spans)


def main(argv=None):
    """The command line: write the index of a TFRecord file; returns the exit status."""
    parser = argparse.ArgumentParser(prog="tfrecord2idx", description="Write the index file of a TFRecord file "
                                     "(one 'offset size' line per record) for readers.tfrecord.")
    parser.add_argument("tfrecord", help="the TFRecord file to index")
    parser.add_argument("index", help="the index file to write")
    args = parser.parse_args(argv)
    try:
        write_index(args.tfrecord, args.index)
    except (OSError, ValueError) as e:
        print(f"tfrecord2idx: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
