"""decoders.inflate and its kernel torchdali::lz4_decompress against a plain-Python LZ4 block
decoder, on blocks from a plain-Python compressor (always) and from the `lz4` package (where
installed): exact bytes, malformed blocks refused without writing outside their chunk, the
operator's arguments and errors, GPU == CPU. No DALI oracle: DALI has inflate on the GPU only,
and its CPU-only build here cannot run it."""
import numpy as np
import pytest
import torch

import torchdali
from conftest import as_numpy_batch, constant_source, requires_cuda
from torchdali import types
from torchdali.kernels.inflate import DECODED, PROBLEMS, lz4_decompress

DEVICES = ["cpu", pytest.param("cuda", marks=requires_cuda)]


# --- LZ4 blocks: a reference decoder and a compressor --------------------------------------

def lz4_decode(block):
    """The LZ4 block format, decoded the plain way (an IndexError where the block is cut short)."""
    out, i = bytearray(), 0
    while True:
        token = block[i]
        i += 1
        literals, i = _length(block, i, token >> 4)
        if i + literals > len(block):
            raise IndexError("literals past the end")
        out += block[i:i + literals]
        i += literals
        if i == len(block):
            return bytes(out)
        offset = block[i] | block[i + 1] << 8
        match, i = _length(block, i + 2, token & 15)
        if not 0 < offset <= len(out):
            raise ValueError("bad offset")
        for _ in range(match + 4):  # one byte at a time: overlapping matches repeat
            out.append(out[-offset])


def _length(block, i, nibble):
    if nibble == 15:
        while True:
            more = block[i]
            i += 1
            nibble += more
            if more != 255:
                break
    return nibble, i


def lz4_compress(data):
    """A greedy LZ4 block compressor: a match wherever the last place the next 4 bytes occurred is
    at most 65535 bytes back. Runs give overlapping matches (offset < length). As the format asks,
    matches start 12 bytes or more before the end and the last 5 bytes are literals."""
    data, out, seen, anchor, i = bytes(data), bytearray(), {}, 0, 0
    while i + 12 <= len(data):
        j = seen.get(data[i:i + 4])
        seen[data[i:i + 4]] = i
        if j is None or i - j > 65535:
            i += 1
            continue
        length = 4
        while i + length < len(data) - 5 and data[j + length] == data[i + length]:
            length += 1
        _sequence(out, data[anchor:i], i - j, length)
        i = anchor = i + length
    _sequence(out, data[anchor:], 0, 4)
    return bytes(out)


def _sequence(out, literals, offset, match):
    extra = match - 4
    out.append(min(len(literals), 15) << 4 | (min(extra, 15) if offset else 0))
    _more(out, len(literals))
    out += literals
    if offset:
        out += offset.to_bytes(2, "little")
        _more(out, extra)


def _more(out, n):
    if n >= 15:
        n -= 15
        out += b"\xff" * (n // 255) + bytes([n % 255])


def payloads(seed=0):
    """Named byte strings: incompressible and compressible, of odd sizes, runs of every period
    (overlapping matches), long literal runs and matches (length bytes of 255), and empty."""
    g = np.random.default_rng(seed)
    words = [b"inflate", b"lz4", b"chunk", b"sample", b"torchdali", b" "]
    return {
        "empty": b"",
        "one": b"x",
        "random_7": g.bytes(7),
        "random_4099": g.bytes(4099),
        "zeros_70001": bytes(70001),
        "period_3": b"abc" * 1001 + b"z",
        "period_17": bytes(g.integers(0, 256, 17, np.uint8)) * 301,
        "text": b"".join(words[k] for k in g.integers(0, len(words), 3000)),
        "mixed": g.bytes(300) + bytes(5000) + g.bytes(33) + b"ab" * 700 + g.bytes(999),
    }


def lz4_package():
    return pytest.importorskip("lz4.block", reason="the lz4 package is not installed")


COMPRESSORS = ["ours", "lz4_fast", "lz4_high"]


def compress(payload, how):
    if how == "ours":
        return lz4_compress(payload)
    block = lz4_package()
    return block.compress(payload, store_size=False, mode="high_compression" if how == "lz4_high" else "default")


def test_the_compressor_makes_valid_blocks():
    for name, payload in payloads().items():
        block = lz4_compress(payload)
        assert lz4_decode(block) == payload, name
        if name.startswith(("zeros", "period")):
            assert len(block) < len(payload) // 20, name


def test_lz4_package_reads_our_blocks():
    block = lz4_package()
    for name, payload in payloads().items():
        assert block.decompress(lz4_compress(payload), uncompressed_size=len(payload)) == payload, name


# --- the kernel ----------------------------------------------------------------------------

def table(blocks, out_sizes, gap=3):
    """(data, chunks) for `blocks` laid in one buffer with `gap` junk bytes before each, their
    outputs back to back after `gap` untouched bytes each."""
    data, rows, at, out_at = bytearray(), [], 0, 0
    for block, size in zip(blocks, out_sizes):
        data += b"\xee" * gap + block
        at += gap
        out_at += gap
        rows.append((at, len(block), out_at, size))
        at += len(block)
        out_at += size
    chunks = torch.tensor(rows, dtype=torch.int64).reshape(-1, 4)
    return torch.frombuffer(bytearray(data) or bytearray(1), dtype=torch.uint8)[:len(data)], chunks, out_at


def decode(blocks, out_sizes, device="cpu", gap=3):
    """lz4_decompress of `blocks` into outputs of `out_sizes`: (status list, outputs as bytes), and
    asserts the bytes outside the chunks' outputs kept their fill."""
    data, chunks, total = table(blocks, out_sizes, gap)
    out = torch.full((total,), 0xAB, dtype=torch.uint8, device=device)
    status = lz4_decompress(data.to(device), chunks, out)
    assert status.dtype == torch.int32 and status.device == out.device and status.shape == (len(blocks),)
    out = out.cpu()
    inside = torch.zeros(total, dtype=torch.bool)
    for _, _, at, size in chunks.tolist():
        inside[at:at + size] = True
    assert bool((out[~inside] == 0xAB).all()), "wrote outside the chunks' outputs"
    return status.tolist(), [bytes(out[at:at + size].numpy()) for _, _, at, size in chunks.tolist()]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("how", COMPRESSORS)
def test_kernel_decodes_every_payload(how, device):
    items = payloads(seed=1)
    blocks = [compress(p, how) for p in items.values()]
    status, outs = decode(blocks, [len(p) for p in items.values()], device)
    assert status == [DECODED] * len(blocks)
    for name, payload, got in zip(items, items.values(), outs):
        assert got == payload, name


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_zeroes_what_the_block_leaves(device):
    items = list(payloads(seed=2).values())
    status, outs = decode([lz4_compress(p) for p in items], [len(p) + 5 + k for k, p in enumerate(items)], device)
    assert status == [DECODED] * len(items)
    assert outs == [p + bytes(5 + k) for k, p in enumerate(items)]


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_overlapping_matches_of_every_offset(device):
    """A literal run of `offset` bytes and one long match repeating it: offset < length for all."""
    blocks, expected = [], []
    for offset in (1, 2, 3, 5, 31, 32, 33, 63, 64, 100):
        seed = bytes(range(7, 7 + offset))
        out = bytearray()
        _sequence(out, seed, offset, 700)
        _sequence(out, b"end", 0, 4)
        blocks.append(bytes(out))
        expected.append((seed * 800)[:offset + 700] + b"end")
    assert [lz4_decode(b) for b in blocks] == expected
    status, outs = decode(blocks, [len(e) for e in expected], device)
    assert status == [DECODED] * len(blocks) and outs == expected


MALFORMED = [  # (block, output size, status)
    (b"", 4, 1),  # no token
    (b"\x50abc", 8, 1),  # 5 literals, 3 there
    (b"\xf0", 20, 1),  # a literal count of 15 and more, its bytes missing
    (b"\xf0\xff", 400, 1),
    (b"\x10a\x01", 8, 1),  # half an offset
    (b"\x10a\x01\x00", 8, 1),  # ends after a match
    (b"\x1fa\x01\x00", 40, 1),  # a match length of 19 and more, its bytes missing
    (b"\x10a\x00\x00\x00", 8, 2),  # offset 0
    (b"\x10a\x02\x00\x00", 8, 2),  # before the output's start
    (b"\x50abcde", 3, 3),  # literals past the output's end
    (b"\x10a\x01\x00\x00", 4, 3),  # a match past it
    (b"\x10a\x01\x00\x00", 0, 3),
]


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_refuses_malformed_blocks(device):
    status, _ = decode([b for b, _, _ in MALFORMED], [size for _, size, _ in MALFORMED], device)
    assert status == [s for _, _, s in MALFORMED]
    assert set(PROBLEMS) == {1, 2, 3}
    status, outs = decode([b"\x10a\x01\x00\x00"], [5], device)  # the same block where it fits
    assert status == [DECODED] and outs == [b"aaaaa"]


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_survives_cut_and_corrupted_blocks(device):
    """Every prefix of a block, and blocks with random bytes changed: no write outside a chunk's
    output (decode checks), and where the kernel says decoded, the reference agrees."""
    g = np.random.default_rng(5)
    payload = b"abc" * 50 + g.bytes(40) + bytes(300) + b"xyz" * 20
    block = lz4_compress(payload)
    blocks = [block[:k] for k in range(len(block))]
    for _ in range(300):
        bad = bytearray(block)
        bad[g.integers(0, len(bad))] = g.integers(0, 256)
        blocks.append(bytes(bad))
    blocks += [g.bytes(int(g.integers(1, 64))) for _ in range(300)]
    status, outs = decode(blocks, [len(payload)] * len(blocks), device)
    assert set(status) <= {0, 1, 2, 3} and status[:len(block)].count(DECODED) < len(block) // 4
    for b, s, got in zip(blocks, status, outs):
        if s == DECODED:
            ref = lz4_decode(b)
            assert got == ref + bytes(len(payload) - len(ref))
        else:
            with pytest.raises((IndexError, ValueError, AssertionError)):
                ref = lz4_decode(b)
                assert len(ref) <= len(payload)


def test_kernel_checks_its_arguments():
    data, out = torch.zeros(10, dtype=torch.uint8), torch.zeros(8, dtype=torch.uint8)
    bad = [
        ((data, torch.tensor([[0, 11, 0, 4]]), out), r"chunk 0's input \(offset 0, size 11\) lies outside `data`"),
        ((data, torch.tensor([[-1, 2, 0, 4]]), out), r"chunk 0's input \(offset -1, size 2\) lies outside `data`"),
        ((data, torch.tensor([[0, 10, 2 ** 63 - 1, 4]]), out), "chunk 0's output .* lies outside `out`"),
        ((data, torch.tensor([[0, 10, 0, -4]]), out), r"chunk 0's output \(offset 0, size -4\) lies outside `out`"),
        ((data, torch.tensor([[0, 10, 0]]), out), r"`chunks` must be an int64 CPU tensor \[K, 4\]"),
        ((data, torch.tensor([[0, 10, 0, 4]], dtype=torch.int32), out), "`chunks` must be an int64"),
        ((data.view(2, 5), torch.tensor([[0, 10, 0, 4]]), out), "`data` must be a 1-D uint8 tensor"),
        ((data, torch.tensor([[0, 10, 0, 4]]), out.view(torch.int8)), "`out` must be a contiguous 1-D uint8"),
        ((data, torch.tensor([[0, 10, 0, 4]]), torch.zeros(16, dtype=torch.uint8)[::2]), "`out` must be a contiguous"),
    ]
    for args, match in bad:
        with pytest.raises(ValueError, match="lz4_decompress: " + match):
            lz4_decompress(*args)
    assert lz4_decompress(data, torch.zeros(0, 4, dtype=torch.int64), out).shape == (0,)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    blocks = [lz4_compress(p) for p in (b"abc" * 40, b"", b"xyz")]
    data, chunks, total = table(blocks, [120, 0, 3])
    torch.library.opcheck(torch.ops.torchdali.lz4_decompress.default,
                          (data.to(device), chunks, torch.zeros(total, dtype=torch.uint8, device=device)),
                          test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))


@requires_cuda
def test_kernel_gpu_matches_cpu():
    g = np.random.default_rng(9)
    items = list(payloads(seed=3).values()) * 5
    blocks = [lz4_compress(p) for p in items] + [b for b, _, _ in MALFORMED]
    sizes = [len(p) + int(g.integers(0, 3)) for p in items] + [size for _, size, _ in MALFORMED]
    assert decode(blocks, sizes, "cpu", gap=1) == decode(blocks, sizes, "cuda", gap=1)


# --- the operator --------------------------------------------------------------------------

def inflate(samples, device="cpu", arg_inputs=None, op="decoders.inflate", **kwargs):
    """One iteration of fn.decoders.inflate over `samples` (bytes each); returns the outputs as
    NumPy arrays and their layout."""
    samples = [np.frombuffer(s, np.uint8).copy() for s in samples]

    @torchdali.pipeline_def(batch_size=len(samples), num_threads=2, device_id=None if device == "cpu" else 0)
    def pipe():
        x = torchdali.fn.external_source(constant_source(samples))
        named = {name: torchdali.fn.external_source(constant_source(v)) for name, v in (arg_inputs or {}).items()}
        fn = torchdali.fn
        for part in op.split("."):
            fn = getattr(fn, part)
        return fn(x.gpu() if device == "gpu" else x, **kwargs, **named)

    p = pipe()
    p.build()
    out = p.run()[0]
    return as_numpy_batch(out), out.layout()


OP_DEVICES = ["cpu", pytest.param("gpu", marks=requires_cuda)]
ALL_TYPES = [np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64,
             np.float32, np.float16]


def arrays(shape, dtype, n=3, seed=0):
    g = np.random.default_rng(seed)
    return [(g.integers(0, 3, shape) * (k + 1)).astype(dtype) for k in range(n)]  # compressible


@pytest.mark.parametrize("device", OP_DEVICES)
@pytest.mark.parametrize("dtype", ALL_TYPES, ids=lambda t: np.dtype(t).name)
def test_decodes_samples_of_every_type(dtype, device):
    want = arrays((5, 7, 3), dtype)
    got, layout = inflate([lz4_compress(a.tobytes()) for a in want], device, shape=[5, 7, 3],
                          dtype=types.to_dali_type(np.dtype(dtype)), layout="HWC")
    assert layout == "HWC"
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape and np.array_equal(g, w)


@pytest.mark.parametrize("how", COMPRESSORS)
def test_decodes_blocks_of_either_compressor(how):
    items = list(payloads(seed=4).values())[1:]
    got, layout = inflate([compress(p, how) for p in items], arg_inputs={"shape": [np.array([len(p)]) for p in items]})
    assert layout == "" and [g.tobytes() for g in got] == items


def test_default_type_shape_as_a_scalar_and_zero_tail():
    got, _ = inflate([lz4_compress(b"abcdef"), lz4_compress(b"xy")], shape=8)
    assert [g.dtype for g in got] == [np.uint8] * 2 and [g.tobytes() for g in got] == [b"abcdef\0\0", b"xy" + bytes(6)]
    got, _ = inflate([lz4_compress(b"\x07")], shape=[])  # a scalar
    assert got[0].shape == () and got[0] == 7


def frames(n, shape, dtype, seed):
    return arrays(shape, dtype, n, seed)


def sequence_sample(parts, pad=b""):
    """Compressed frames back to back (each followed by `pad`): the sample, offsets, sizes."""
    blocks = [lz4_compress(p.tobytes()) for p in parts]
    sizes = [len(b) for b in blocks]
    offsets = list(np.cumsum([0] + [s + len(pad) for s in sizes])[:-1])
    return b"".join(b + pad for b in blocks), offsets, sizes


@pytest.mark.parametrize("given", ["offsets", "sizes", "both"])
@pytest.mark.parametrize("device", OP_DEVICES)
def test_sequences_of_chunks(given, device):
    seqs = [frames(n, (4, 6), np.int16, seed=n) for n in (3, 1, 5)]
    pad = b"\x99\x98" if given == "both" else b""  # gaps between chunks only where both tell where they lie
    made = [sequence_sample(s, pad) for s in seqs]
    args = {"offsets": {"chunk_offsets": [np.array(m[1], np.int32) for m in made]},
            "sizes": {"chunk_sizes": [np.array(m[2], np.int32) for m in made]}}
    args["both"] = {**args["offsets"], **args["sizes"]}
    got, layout = inflate([m[0] for m in made], device, arg_inputs=args[given], shape=[4, 6], dtype=types.INT16,
                          layout="HW")
    assert layout == "FHW"
    for g, s in zip(got, seqs):
        assert g.shape == (len(s), 4, 6) and np.array_equal(g, np.stack(s))


def test_constant_chunk_arguments_sequence_axis_name_and_no_layout():
    seqs = [frames(2, (3,), np.uint8, seed=k) for k in range(2)]
    blocks = [[lz4_compress(f.tobytes()) for f in s] for s in seqs]
    assert len({len(b) for bs in blocks for b in bs}) == 1, "the test wants blocks of one size"
    size = len(blocks[0][0])
    samples = [b"".join(bs) for bs in blocks]
    got, layout = inflate(samples, shape=[3], chunk_sizes=[size, size], layout="W", sequence_axis_name="T")
    assert layout == "TW" and all(np.array_equal(g, np.stack(s)) for g, s in zip(got, seqs))
    got, layout = inflate(samples, shape=[3], chunk_offsets=[0, size])
    assert layout == "" and all(np.array_equal(g, np.stack(s)) for g, s in zip(got, seqs))
    got, _ = inflate(samples, shape=[3], chunk_offsets=[size])  # the second chunk only
    assert all(np.array_equal(g, s[1][None]) for g, s in zip(got, seqs))
    got, _ = inflate(samples, shape=[3], chunk_offsets=[])  # no chunks
    assert [g.shape for g in got] == [(0, 3)] * 2


def test_shape_per_sample():
    want = [np.arange(k * 6, dtype=np.float32).reshape(k, 6) for k in (1, 4, 2)]
    got, _ = inflate([lz4_compress(w.tobytes()) for w in want], arg_inputs={"shape": [np.array(w.shape) for w in want]},
                     dtype=types.FLOAT, algorithm="lz4")
    assert all(np.array_equal(g, w) for g, w in zip(got, want))


def test_the_deprecated_name_warns_and_decodes():
    with pytest.warns(DeprecationWarning, match="experimental.inflate` is now deprecated"):
        got, _ = inflate([lz4_compress(b"hello")], op="experimental.inflate", shape=[5])
    assert got[0].tobytes() == b"hello"


BLOCK = lz4_compress(b"abcdefgh" * 4)  # 32 bytes
BAD_ARGS = [  # (samples, kwargs, arg_inputs, error, message)
    ([BLOCK], dict(shape=[-1]), None, ValueError, "non-negative"),
    ([BLOCK], dict(shape=[32], dtype=types.FLOAT64), None, ValueError, "dtype"),
    ([BLOCK], dict(shape=[32], algorithm="zstd"), None, ValueError, "only 'LZ4'"),
    ([BLOCK], dict(shape=[32], sequence_axis_name="FF"), None, ValueError, "single character"),
    ([BLOCK], dict(shape=[4, 8], layout="HWC"), None, ValueError, "layout 'HWC' has 3 dims but the output shape"),
    ([BLOCK, b""], dict(shape=[32]), None, ValueError, "input sample 1 is empty"),
    ([BLOCK], dict(shape=[32], chunk_offsets=[-1]), None, ValueError, "must be non-negative; got -1 for sample 0"),
    ([BLOCK], dict(shape=[32], chunk_offsets=[len(BLOCK)]), None, ValueError, "points past its last byte"),
    ([BLOCK], dict(shape=[32], chunk_sizes=[0]), None, ValueError, "chunk_sizes must be positive"),
    ([BLOCK], dict(shape=[32], chunk_sizes=[len(BLOCK) + 1]), None, ValueError, "exceeds the sample's"),
    ([BLOCK], dict(shape=[32], chunk_offsets=[0, 1], chunk_sizes=[2]), None, ValueError,
     "sample 0 has 2 chunk_offsets but 1 chunk_sizes"),
    ([BLOCK], dict(shape=[32], chunk_offsets=[2], chunk_sizes=[len(BLOCK) - 1]), None, ValueError,
     "runs past the sample's end"),
    ([BLOCK], dict(shape=[32], chunk_offsets=[3, 3]), None, ValueError, "must be strictly increasing"),
    ([BLOCK, BLOCK], dict(shape=[32], chunk_sizes=[len(BLOCK) // 2 + 1] * 2), None, ValueError,
     f"chunk_sizes of sample 0 add up to {len(BLOCK) // 2 * 2 + 2} bytes, more than the sample's {len(BLOCK)}"),
    ([BLOCK, BLOCK], dict(), {"shape": [np.array([32]), np.array([4, 8])]}, ValueError,
     "different number of extents per sample"),
    ([BLOCK], dict(shape=[2 ** 40, 2 ** 40]), None, ValueError, "would take more than 2\\^62 bytes"),
    ([BLOCK, BLOCK[:-3]], dict(shape=[32]), None, RuntimeError, "sample 1: its LZ4 data is truncated"),
    ([BLOCK, BLOCK], dict(shape=[4], dtype=types.INT32), None, RuntimeError,
     r"sample 0: its LZ4 data expands to more bytes than the output holds \(16 bytes: shape \[4\] of INT32\); "
     "check the `shape` and `dtype`"),
    ([BLOCK + b"\x10a\x09\x00\x00"], dict(shape=[32], chunk_sizes=[len(BLOCK), 5]), None, RuntimeError,
     "sample 0, chunk 1: its LZ4 data is corrupt"),
]


@pytest.mark.parametrize("device", OP_DEVICES)
@pytest.mark.parametrize("samples,kwargs,arg_inputs,error,message", BAD_ARGS)
def test_errors_name_the_operator_and_the_problem(samples, kwargs, arg_inputs, error, message, device):
    with pytest.raises(error, match=message) as info:
        inflate(samples, device, arg_inputs=arg_inputs, **kwargs)
    assert "decoders.inflate" in str(info.value)


def test_input_must_be_1d_bytes():
    for samples, error, message in [([np.zeros(4, np.int32)], TypeError, "1D tensor of bytes \\(uint8\\)"),
                                    ([np.zeros((2, 2), np.uint8)], ValueError, "got 2 dims")]:
        @torchdali.pipeline_def(batch_size=1, num_threads=1, device_id=None)
        def pipe():
            return torchdali.fn.decoders.inflate(torchdali.fn.external_source(constant_source(samples)), shape=[4])

        with pytest.raises(error, match=message):
            p = pipe()
            p.build()
            p.run()


@requires_cuda
@pytest.mark.parametrize("given", [None, "chunk_sizes"])
def test_gpu_matches_cpu(given):
    seqs = [frames(n, (9, 5, 3), np.float16, seed=n) for n in (2, 3, 1, 4)]
    made = [sequence_sample(s) for s in seqs]
    samples = [m[0] for m in made] if given else [lz4_compress(np.stack(s).tobytes()) for s in seqs]
    arg_inputs = {"chunk_sizes": [np.array(m[2]) for m in made]} if given else \
        {"shape": [np.array((len(s), 9, 5, 3)) for s in seqs]}
    shape = {"shape": [9, 5, 3]} if given else {}
    cpu = inflate(samples, "cpu", arg_inputs=arg_inputs, dtype=types.FLOAT16, **shape)
    gpu = inflate(samples, "gpu", arg_inputs=arg_inputs, dtype=types.FLOAT16, **shape)
    assert cpu[1] == gpu[1] and all(np.array_equal(c, g) for c, g in zip(cpu[0], gpu[0]))
