// torchdali::lz4_decompress on the CPU: a batch's chunks decoded on torchdali's CPU threads
// (parallel.h), a chunk per task, without the GIL. Schema: csrc/ops.cpp; parser: ../inflate.h.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>

#include "../inflate.h"
#include "../parallel.h"

namespace {

using torchdali::lz4::Chunk;
using torchdali::lz4::Sequence;
using torchdali::lz4::Status;

// Decodes one chunk into out[0, out_size); zeroes what the block leaves of it.
Status decode_chunk(const uint8_t* in, int64_t in_size, uint8_t* out, int64_t out_size) {
  int64_t ip = 0, op = 0;
  Sequence s;
  for (;;) {  // a block that ends after a match, not after literals, is truncated
    const Status status = torchdali::lz4::next_sequence(in, in_size, ip, op, out_size, s);
    if (status != torchdali::lz4::kDecoded) return status;
    std::memcpy(out + op, in + s.literal_at, s.literals);
    op += s.literals;
    if (s.match == 0) break;  // the last sequence
    // The match repeats the `offset` bytes before it. Where it overlaps what it writes, each
    // copy doubles the repeated run it may take from (src and dst never overlap).
    for (int64_t copied = 0; copied < s.match;) {
      const int64_t step = std::min(copied + s.offset, s.match - copied);
      std::memcpy(out + op + copied, out + op - s.offset, step);
      copied += step;
    }
    op += s.match;
  }
  if (op < out_size) std::memset(out + op, 0, out_size - op);
  return torchdali::lz4::kDecoded;
}

at::Tensor lz4_decompress_cpu(const at::Tensor& data, const at::Tensor& chunks, at::Tensor& out) {
  TORCH_CHECK_VALUE(data.is_cpu(), "lz4_decompress: the CPU kernel got `data` on ", data.device());
  const at::Tensor table = torchdali::lz4::checked_chunks(data, chunks, out);
  const at::Tensor in = data.contiguous();
  const int64_t n = table.size(0);
  at::Tensor status = at::empty({n}, at::kInt);
  const Chunk* c = reinterpret_cast<const Chunk*>(table.const_data_ptr<int64_t>());
  const uint8_t* src = in.const_data_ptr<uint8_t>();
  uint8_t* dst = out.mutable_data_ptr<uint8_t>();
  int32_t* result = status.mutable_data_ptr<int32_t>();
  torchdali::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k)
      result[k] = decode_chunk(src + c[k].in_offset, c[k].in_size, dst + c[k].out_offset, c[k].out_size);
  });
  return status;
}

}  // namespace

TORCH_LIBRARY_IMPL(torchdali, CPU, m) {
  m.impl("lz4_decompress", &lz4_decompress_cpu);
}
