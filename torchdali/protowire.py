"""Protocol buffers' wire format, read without protobuf: the walk over a message's fields and
the decoding of packed varints, for the readers of protobuf records (readers.tfrecord's
tf.train.Example, readers.caffe's Datum, readers.caffe2's TensorProtos)."""
import numpy as np


class Malformed(Exception):
    """The bytes are not a valid protobuf message (the reason; the sample, where known)."""

    def __init__(self, reason, sample=None):
        super().__init__(reason)
        self.sample = sample


def varint_end(buf, pos, end):
    """Where the varint at `pos` ends."""
    stop = min(end, pos + 10)
    while pos < stop:
        if buf[pos] < 0x80:
            return pos + 1
        pos += 1
    raise Malformed("a varint is truncated or longer than 10 bytes")


def varint(buf, pos, end):
    """(value, end) of the varint at `pos`."""
    if pos < end and buf[pos] < 0x80:  # the common one-byte varint
        return buf[pos], pos + 1
    stop = varint_end(buf, pos, end)
    value = 0
    for shift, byte in enumerate(buf[pos:stop]):
        value |= (byte & 0x7F) << 7 * shift
    return value, stop


def fields(buf, pos, end):
    """(field number, wire type, start, end) of each field of the message buf[pos:end]: the
    value's bytes (a varint's own bytes, a length-delimited field's payload)."""
    while pos < end:
        key, pos = varint(buf, pos, end)
        wire = key & 7
        if wire == 2:
            length, start = varint(buf, pos, end)
            pos = start + length
        elif wire == 0:
            start, pos = pos, varint_end(buf, pos, end)
        elif wire in (1, 5):
            start, pos = pos, pos + (8 if wire == 1 else 4)
        else:
            raise Malformed(f"field {key >> 3} has the unsupported wire type {wire}")
        if pos > end:
            raise Malformed(f"field {key >> 3} runs past the end of its message")
        yield key >> 3, wire, start, pos


def decode_varints(raw, sizes):
    """Varints back to back in `raw` (uint8), `sizes[k]` bytes of them for sample k, as one
    int64 array and the count per sample."""
    last = raw < 0x80  # the last byte of each varint
    ends = np.cumsum(sizes)
    counted = np.concatenate([[0], np.cumsum(last)])
    counts = counted[ends] - counted[ends - sizes]
    if not len(raw):
        return np.zeros(0, np.int64), counts
    firsts = np.concatenate([[0], np.flatnonzero(last)[:-1] + 1])
    shifts = 7 * (np.arange(len(raw)) - np.repeat(firsts, np.diff(np.append(firsts, len(raw)))))
    if shifts.max() > 63:
        sample = int(np.searchsorted(ends, np.argmax(shifts > 63), side="right"))
        raise Malformed("an int64 varint is longer than 10 bytes", sample)
    parts = (raw & 0x7F).astype(np.uint64) << shifts.astype(np.uint64)
    return np.bitwise_or.reduceat(parts, firsts).view(np.int64), counts
