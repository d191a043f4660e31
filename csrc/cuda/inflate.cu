// CUDA kernel of torchdali::lz4_decompress: one launch for the batch, one warp per chunk.
// Lane 0 parses the sequences (../inflate.h) and hands each to the warp, which copies its
// literals and match cooperatively. The chunk table goes to the device in one asynchronous
// copy (upload.cuh), so a call never waits for the GPU.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <vector>

#include "../inflate.h"
#include "upload.cuh"

namespace torchdali {
namespace {

using lz4::Chunk;
using lz4::Sequence;

constexpr int kWarp = 32, kWarpsPerBlock = 4;
constexpr unsigned kAll = 0xffffffffu;

// Warp w of the grid decodes chunks w, w + (all warps), ...; lane 0 writes each status.
__global__ void lz4_kernel(const Chunk* __restrict__ chunks, int64_t n, const uint8_t* __restrict__ data,
                           uint8_t* __restrict__ out, int32_t* __restrict__ status) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = int64_t(gridDim.x) * kWarpsPerBlock;
  for (int64_t k = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp; k < n; k += warps) {
    const Chunk c = chunks[k];
    const uint8_t* in = data + c.in_offset;
    uint8_t* dst = out + c.out_offset;
    int64_t ip = 0, op = 0;  // ip: lane 0's alone
    int result = lz4::kDecoded;
    for (;;) {
      Sequence s{0, 0, 0, 0};
      if (lane == 0) result = lz4::next_sequence(in, c.in_size, ip, op, c.out_size, s);
      result = __shfl_sync(kAll, result, 0);
      if (result != lz4::kDecoded) break;
      const int64_t literal_at = __shfl_sync(kAll, s.literal_at, 0);
      const int64_t literals = __shfl_sync(kAll, s.literals, 0);
      const int64_t match = __shfl_sync(kAll, s.match, 0);
      const int64_t offset = __shfl_sync(kAll, s.offset, 0);
      for (int64_t i = lane; i < literals; i += kWarp) dst[op + i] = in[literal_at + i];
      op += literals;
      if (match == 0) break;  // the last sequence
      __syncwarp();  // the literals, which the match may copy, visible to every lane
      // The match repeats the `offset` bytes before it: its byte i is byte i % offset of them,
      // all written before the match, so the lanes copy in any order (overlapping or not).
      const uint8_t* from = dst + op - offset;
      const int64_t step = kWarp % offset;
      int64_t j = lane % offset;  // i % offset, kept without a division per byte
      for (int64_t i = lane; i < match; i += kWarp) {
        dst[op + i] = from[j];
        j += step;
        if (j >= offset) j -= offset;
      }
      op += match;
      __syncwarp();
    }
    if (result == lz4::kDecoded)
      for (int64_t i = op + lane; i < c.out_size; i += kWarp) dst[i] = 0;
    if (lane == 0) status[k] = result;
  }
}

at::Tensor lz4_decompress_cuda(const at::Tensor& data, const at::Tensor& chunks, at::Tensor& out) {
  TORCH_CHECK_VALUE(data.is_cuda(), "lz4_decompress: the CUDA kernel got `data` on ", data.device());
  const c10::cuda::CUDAGuard guard(data.device());
  const at::Tensor table = lz4::checked_chunks(data, chunks, out);
  const at::Tensor in = data.contiguous();
  const int64_t n = table.size(0);
  at::Tensor status = at::empty({n}, data.options().dtype(at::kInt));
  if (n == 0) return status;
  const Chunk* c = reinterpret_cast<const Chunk*>(table.const_data_ptr<int64_t>());
  const std::vector<Chunk> descs(c, c + n);
  std::vector<const void*> unused;
  const at::Tensor dev = upload(descs, {}, data.device(), unused);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  lz4_kernel<<<grid_dim(n, kWarpsPerBlock), kWarp * kWarpsPerBlock, 0, stream>>>(
      reinterpret_cast<const Chunk*>(dev.const_data_ptr()), n, in.const_data_ptr<uint8_t>(),
      out.mutable_data_ptr<uint8_t>(), status.mutable_data_ptr<int32_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return status;
}

}  // namespace
}  // namespace torchdali

TORCH_LIBRARY_IMPL(torchdali, CUDA, m) {
  m.impl("lz4_decompress", &torchdali::lz4_decompress_cuda);
}
