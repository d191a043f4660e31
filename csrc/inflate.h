// torchdali::lz4_decompress — argument checks and the LZ4 block parser shared by the CPU
// (csrc/cpu/inflate.cpp) and CUDA (csrc/cuda/inflate.cu) kernels. Schema: csrc/ops.cpp.
//
// An LZ4 block is a series of sequences: a token byte (high nibble: literal count, low
// nibble: match length - 4; 15 continues in bytes of 255 ...), the literals, then a 2-byte
// little-endian offset back into the output and the match's extra length bytes. The last
// sequence has literals only and ends the block.
#pragma once

#include <ATen/ATen.h>
#include <c10/macros/Macros.h>

#include <cstdint>

namespace torchdali {
namespace lz4 {

// A chunk's status, the op's result.
enum Status : int32_t {
  kDecoded = 0,    // decoded; the output past the decoded bytes is zero
  kTruncated = 1,  // the compressed bytes end inside a sequence (or hold none)
  kBadOffset = 2,  // a match offset of 0, or reaching before the chunk's output
  kOverflow = 3,   // literals or a match would run past the chunk's output
};

// One chunk: compressed bytes [in_offset, in_offset + in_size) of `data`, decoded into bytes
// [out_offset, out_offset + out_size) of `out`. A row of the op's `chunks` tensor.
struct Chunk {
  int64_t in_offset, in_size, out_offset, out_size;
};

// One sequence: `literals` bytes at `literal_at` (in the chunk's input) to copy to the output,
// then `match` bytes copied from `offset` bytes back in the output (none in the last one).
struct Sequence {
  int64_t literal_at, literals, match, offset;
};

// Adds the extra length bytes at `pos` to a nibble of 15; false where the input ends first.
C10_HOST_DEVICE inline bool extend_length(const uint8_t* in, int64_t size, int64_t& pos, int64_t& length) {
  if (length != 15) return true;
  uint8_t more;
  do {
    if (pos >= size) return false;
    more = in[pos++];
    length += more;
  } while (more == 255);
  return true;
}

// Parses the sequence at input position `ip` of a chunk (input of `in_size` bytes, `op` bytes
// of its `out_size` decoded so far) into `s` and moves `ip` past it; the block has ended where
// `ip` then equals `in_size`. Every length and offset is checked against both buffers, so
// copying what it returns never reads or writes outside the chunk.
C10_HOST_DEVICE inline Status next_sequence(const uint8_t* in, int64_t in_size, int64_t& ip, int64_t op,
                                            int64_t out_size, Sequence& s) {
  if (ip >= in_size) return kTruncated;
  const int token = in[ip++];
  s.literals = token >> 4;
  if (!extend_length(in, in_size, ip, s.literals) || s.literals > in_size - ip) return kTruncated;
  if (s.literals > out_size - op) return kOverflow;
  s.literal_at = ip;
  ip += s.literals;
  s.match = s.offset = 0;
  if (ip == in_size) return kDecoded;  // the last sequence: literals only
  if (in_size - ip < 2) return kTruncated;
  s.offset = in[ip] | (in[ip + 1] << 8);
  ip += 2;
  s.match = token & 15;
  if (!extend_length(in, in_size, ip, s.match)) return kTruncated;
  s.match += 4;
  if (s.offset == 0 || s.offset > op + s.literals) return kBadOffset;
  if (s.match > out_size - op - s.literals) return kOverflow;
  return kDecoded;
}

// Checks the op's arguments: `data` and `out` 1-D uint8, contiguous, on one device, `chunks`
// int64 [K, 4] on the CPU with every chunk inside both buffers. Returns `chunks` contiguous.
inline at::Tensor checked_chunks(const at::Tensor& data, const at::Tensor& chunks, const at::Tensor& out) {
  constexpr const char* op = "lz4_decompress";
  TORCH_CHECK_VALUE(data.dim() == 1 && data.scalar_type() == at::kByte, op,
                    ": `data` must be a 1-D uint8 tensor (the compressed bytes), got ", data.sizes(), " ",
                    data.scalar_type());
  TORCH_CHECK_VALUE(out.dim() == 1 && out.scalar_type() == at::kByte && out.is_contiguous(), op,
                    ": `out` must be a contiguous 1-D uint8 tensor, got ", out.sizes(), " ", out.scalar_type());
  TORCH_CHECK_VALUE(out.device() == data.device(), op, ": `data` is on ", data.device(), " but `out` on ",
                    out.device());
  TORCH_CHECK_VALUE(chunks.dim() == 2 && chunks.size(1) == 4 && chunks.scalar_type() == at::kLong &&
                        chunks.is_cpu(),
                    op, ": `chunks` must be an int64 CPU tensor [K, 4] (in_offset, in_size, out_offset, "
                    "out_size), got ", chunks.sizes(), " ", chunks.scalar_type(), " on ", chunks.device());
  at::Tensor table = chunks.contiguous();
  const Chunk* c = reinterpret_cast<const Chunk*>(table.const_data_ptr<int64_t>());
  for (int64_t k = 0; k < table.size(0); ++k) {
    TORCH_CHECK_VALUE(c[k].in_offset >= 0 && c[k].in_size >= 0 && c[k].in_size <= data.numel() - c[k].in_offset,
                      op, ": chunk ", k, "'s input (offset ", c[k].in_offset, ", size ", c[k].in_size,
                      ") lies outside `data` (", data.numel(), " bytes)");
    TORCH_CHECK_VALUE(c[k].out_offset >= 0 && c[k].out_size >= 0 &&
                          c[k].out_size <= out.numel() - c[k].out_offset,
                      op, ": chunk ", k, "'s output (offset ", c[k].out_offset, ", size ", c[k].out_size,
                      ") lies outside `out` (", out.numel(), " bytes)");
  }
  return table;
}

}  // namespace lz4
}  // namespace torchdali
