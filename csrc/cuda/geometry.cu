// CUDA kernels of torchdali::flip and torchdali::transpose: one launch per batch. The
// per-sample descriptors (and flags given on the CPU) go to the device in one asynchronous
// copy of a pinned table, so a call never waits for the GPU.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "../geometry.h"
#include "upload.cuh"

namespace torchdali {
namespace {

constexpr int kThreads = 256;

// --- byte runs staged in shared memory (flip, transpose) ---
//
// flip and transpose move runs of bytes: a block loads a run of the input into shared memory
// as whole 4-byte words, then writes the output's runs as 4-byte words whose bytes it picks
// from the staged input. Reads and writes are coalesced words whatever the pixel size (3-byte
// RGB pixels included); a word's bytes are found by counting on from its first byte's place.

constexpr int kStageThreads = 256;
constexpr int kStageBytes = 8192;  // the input a block stages at once
constexpr int64_t kShortDim = 16;  // transposes with a side this short are staged
// Room for the staged bytes, plus a word of slack per staged run (runs start mid-word).
constexpr int kStageWords = kStageBytes / 4 + 2 * kShortDim;

// Stages bytes [src, src + len) at `stage` as the whole words that hold them; returns where
// the run's first byte lands (its offset within its word). The words read past the run's ends
// hold some of its bytes, so they lie within its allocation.
__device__ inline int stage_run(uint32_t* stage, const uint8_t* src, int len) {
  const int shift = static_cast<int>(reinterpret_cast<uintptr_t>(src) & 3);
  const uint32_t* words = reinterpret_cast<const uint32_t*>(src - shift);
  const int n = (shift + len + 3) >> 2;
  for (int k = threadIdx.x; k < n; k += blockDim.x) stage[k] = __ldg(words + k);
  return shift;
}

// Writes bytes [dst, dst + len): aligned words word_at(j) (bytes j..j+3, little-endian) and,
// at unaligned ends, single bytes byte_at(j).
template <typename WordAt, typename ByteAt>
__device__ inline void write_run(uint8_t* dst, int len, WordAt word_at, ByteAt byte_at) {
  const int head = min(len, static_cast<int>((4 - (reinterpret_cast<uintptr_t>(dst) & 3)) & 3));
  const int words = (len - head) >> 2;
  for (int j = threadIdx.x; j < head; j += blockDim.x) dst[j] = byte_at(j);
  uint32_t* out = reinterpret_cast<uint32_t*>(dst + head);
  for (int k = threadIdx.x; k < words; k += blockDim.x) out[k] = word_at(head + 4 * k);
  for (int j = head + 4 * words + threadIdx.x; j < len; j += blockDim.x) dst[j] = byte_at(j);
}

// Division of small numbers (below 2^16) by a divisor fixed for a whole segment: a multiply
// by the divisor's rounded-up reciprocal, exact in that range.
struct SmallDivisor {
  uint32_t d, m;
  __device__ explicit SmallDivisor(int divisor)
      : d(static_cast<uint32_t>(divisor)), m(divisor > 1 ? 0xFFFFFFFFu / d + 1 : 0) {}
  __device__ int div(int j) const { return d == 1 ? j : static_cast<int>(__umulhi(static_cast<uint32_t>(j), m)); }
};

// --- flip ---

struct FlipDesc {
  const void* src;
  void* dst;
  geometry::FlipDims d;
};

// A stretch of a sample's output plane (rows [y0, y0 + rows) of one `outer` index) that a
// block stages at once: whole rows; or, where a row is longer than the stage, pixels
// [x0, x0 + pixels) of row y0; or, where a pixel is, bytes [c0, c0 + bytes) of pixel x0.
// Its source is one run too: the mirrored rows and pixels where the sample flips.
struct FlipSegment {
  int64_t y0, x0, c0;
  int rows, pixels, bytes;  // pixels: of each row; bytes: of each pixel
};

// Segments per plane (h rows of w pixels of `pixel` bytes).
__host__ __device__ inline int64_t flip_segments(int64_t h, int64_t w, int64_t pixel) {
  if (h * w * pixel == 0) return 0;
  if (w * pixel <= kStageBytes) return (h + kStageBytes / (w * pixel) - 1) / (kStageBytes / (w * pixel));
  if (pixel * 2 <= kStageBytes) return h * ((w + kStageBytes / pixel - 1) / (kStageBytes / pixel));
  return h * w * ((pixel + kStageBytes - 1) / kStageBytes);
}

__device__ inline FlipSegment flip_segment(int64_t g, int64_t h, int64_t w, int64_t pixel) {
  if (w * pixel <= kStageBytes) {
    const int64_t per = kStageBytes / (w * pixel), y0 = g * per;
    return {y0, 0, 0, static_cast<int>(per < h - y0 ? per : h - y0), static_cast<int>(w),
            static_cast<int>(pixel)};
  }
  if (pixel * 2 <= kStageBytes) {
    const int64_t per = kStageBytes / pixel, pieces = (w + per - 1) / per, x0 = (g % pieces) * per;
    return {g / pieces, x0, 0, 1, static_cast<int>(per < w - x0 ? per : w - x0),
            static_cast<int>(pixel)};
  }
  const int64_t pieces = (pixel + kStageBytes - 1) / kStageBytes, c0 = (g % pieces) * kStageBytes;
  const int64_t left = pixel - c0;
  return {g / (pieces * w), (g / pieces) % w, c0, 1, 1,
          static_cast<int>(left < kStageBytes ? left : kStageBytes)};
}

// blockIdx.z walks samples, blockIdx.y planes (the dims before H), x a plane's segments.
// Output byte j of a segment is byte c of pixel p of its row q, read from the staged pixel
// (q, p) or its mirror.
__global__ void flip_kernel(const FlipDesc* __restrict__ descs, const uint8_t* __restrict__ hflags,
                            const uint8_t* __restrict__ vflags, int64_t n, int elem_bytes) {
  __shared__ uint32_t stage[kStageWords];
  const uint8_t* staged = reinterpret_cast<const uint8_t*>(stage);
  for (int64_t i = blockIdx.z; i < n; i += gridDim.z) {
    const FlipDesc& s = descs[i];
    const bool hf = hflags[i] != 0, vf = vflags[i] != 0;
    const int64_t h = s.d.h, w = s.d.w, pixel = s.d.inner * elem_bytes, row = w * pixel;
    const int64_t segments = flip_segments(h, w, pixel);
    for (int64_t o = blockIdx.y; o < s.d.outer; o += gridDim.y) {
      const uint8_t* src = static_cast<const uint8_t*>(s.src) + o * h * row;
      uint8_t* dst = static_cast<uint8_t*>(s.dst) + o * h * row;
      for (int64_t g = blockIdx.x; g < segments; g += gridDim.x) {
        const FlipSegment seg = flip_segment(g, h, w, pixel);
        const int64_t from_y = vf ? h - seg.y0 - seg.rows : seg.y0;
        const int64_t from_x = hf ? w - seg.x0 - seg.pixels : seg.x0;
        const int np = seg.pixels, nb = seg.bytes, len = seg.rows * np * nb;
        __syncthreads();  // the previous segment's writers are done with the stage
        const int shift = stage_run(stage, src + from_y * row + from_x * pixel + seg.c0, len);
        __syncthreads();
        uint8_t* out = dst + seg.y0 * row + seg.x0 * pixel + seg.c0;
        if (!hf && !vf) {  // a copy: each output word from the two staged words it straddles
          auto byte_at = [&](int j) { return staged[shift + j]; };
          auto word_at = [&](int j) {
            const int b = shift + j;
            return __funnelshift_r(stage[b >> 2], stage[(b >> 2) + 1], 8 * (b & 3));
          };
          write_run(out, len, word_at, byte_at);
          continue;
        }
        auto at = [&](int q, int p, int c) {
          return staged[shift + ((vf ? seg.rows - 1 - q : q) * np + (hf ? np - 1 - p : p)) * nb + c];
        };
        const SmallDivisor per_row(np * nb), per_pixel(nb);
        auto word_at = [&](int j) {
          const int q0 = per_row.div(j), k = j - q0 * np * nb, p0 = per_pixel.div(k);
          int q = q0, p = p0, c = k - p0 * nb;
          uint32_t word = 0;
          for (int b = 0; b < 4; ++b) {
            word |= static_cast<uint32_t>(at(q, p, c)) << (8 * b);
            if (++c == nb) {
              c = 0;
              if (++p == np) p = 0, ++q;
            }
          }
          return word;
        };
        auto byte_at = [&](int j) {
          const int q = per_row.div(j), k = j - q * np * nb, p = per_pixel.div(k);
          return at(q, p, k - p * nb);
        };
        write_run(out, len, word_at, byte_at);
      }
    }
  }
}

void flip_cuda_run(at::TensorList images, const at::Tensor& horizontal,
                   const at::Tensor& vertical, int64_t height_dim, const at::Tensor& dense_out,
                   std::vector<at::Tensor>& outs) {
  TORCH_CHECK_VALUE(!images.empty(), "flip: `images` must hold at least one sample");
  const c10::cuda::CUDAGuard guard(images[0].device());
  geometry::FlipArgs a =
      geometry::flip_prepare(images, horizontal, vertical, height_dim, dense_out);
  TORCH_CHECK_VALUE(a.images[0].is_cuda(), "flip: CUDA kernel got `images` on ",
                    a.images[0].device());
  outs = a.outs;
  const int64_t n = static_cast<int64_t>(a.images.size());
  const int64_t elem_bytes = a.images[0].element_size();
  std::vector<FlipDesc> descs;
  int64_t max_outer = 0, max_segments = 0;
  for (int64_t i = 0; i < n; ++i) {
    descs.push_back(FlipDesc{a.images[i].const_data_ptr(), a.outs[i].data_ptr(),
                             geometry::flip_dims(a.images[i], height_dim)});
    const geometry::FlipDims& d = descs.back().d;
    if (d.outer * d.h * d.w * d.inner == 0) continue;
    max_outer = std::max(max_outer, d.outer);
    max_segments = std::max(max_segments, flip_segments(d.h, d.w, d.inner * elem_bytes));
  }
  if (max_segments == 0) return;
  std::vector<const void*> flags;
  at::Tensor table = upload(descs, {&a.horizontal, &a.vertical}, a.images[0].device(), flags);
  const dim3 grid(grid_dim(max_segments, 1), grid_dim(max_outer, 1), grid_dim(n, 1));
  flip_kernel<<<grid, kStageThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const FlipDesc*>(table.const_data_ptr()),
      static_cast<const uint8_t*>(flags[0]), static_cast<const uint8_t*>(flags[1]), n,
      static_cast<int>(elem_bytes));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

std::vector<at::Tensor> flip_cuda(at::TensorList images, const at::Tensor& horizontal,
                                  const at::Tensor& vertical, int64_t height_dim) {
  std::vector<at::Tensor> outs;
  flip_cuda_run(images, horizontal, vertical, height_dim, at::Tensor(), outs);
  return outs;
}

at::Tensor flip_dense_cuda(const at::Tensor& images, const at::Tensor& horizontal,
                           const at::Tensor& vertical, int64_t height_dim) {
  at::Tensor out = dense_output(images, images.scalar_type());
  std::vector<at::Tensor> outs;
  flip_cuda_run(samples_of("flip", images), horizontal, vertical, height_dim, out, outs);
  return out;
}

// --- transpose ---

struct TransposeDesc {
  const void* src;
  void* dst;
  geometry::TransposePlan plan;
};

// blockIdx.y walks samples; threads stride over the output elements, written in order. The
// descriptor is read in place (a copy of its plan would live in local memory).
template <typename T, typename Index>
__global__ void transpose_kernel(const TransposeDesc* __restrict__ descs, int64_t n) {
  for (int64_t i = blockIdx.y; i < n; i += gridDim.y) {
    const TransposeDesc& s = descs[i];
    const T* src = static_cast<const T*>(s.src);
    T* dst = static_cast<T*>(s.dst);
    const Index numel = static_cast<Index>(s.plan.numel);
    for (Index e = Index(blockIdx.x) * blockDim.x + threadIdx.x; e < numel;
         e += Index(gridDim.x) * blockDim.x)
      dst[e] = src[geometry::transpose_src<Index>(s.plan, e)];
  }
}

// A transpose whose plan is a 2-D matrix with a short side (HWC <-> CHW: the channels), the
// output [rows, cols] being the contiguous input [cols, rows] transposed.
inline bool short_plan(const geometry::TransposePlan& p) {
  return p.ndim == 2 && std::min(p.shape[0], p.shape[1]) <= kShortDim && p.src_stride[0] == 1 &&
         p.src_stride[1] == p.shape[0];
}

// Elements of the long side a block takes at once: its staged bytes fill the stage.
__host__ __device__ inline int64_t transpose_tile(int64_t short_side, int64_t elem_bytes) {
  return kStageBytes / (short_side * elem_bytes) / 4 * 4;
}

// Short plans: blockIdx.y walks samples, x the tiles of the long side. Where the rows are
// short (HWC -> CHW), a tile's input is one run (tile x R elements) and its output R runs
// (one per row); where the columns are short (CHW -> HWC), the other way round.
__global__ void transpose_tile_kernel(const TransposeDesc* __restrict__ descs, int64_t n,
                                      int elem_log2) {
  __shared__ uint32_t stage[kStageWords];
  const uint8_t* staged = reinterpret_cast<const uint8_t*>(stage);
  const int eb = 1 << elem_log2, emask = eb - 1;
  for (int64_t i = blockIdx.y; i < n; i += gridDim.y) {
    const TransposeDesc& s = descs[i];
    const auto* src = static_cast<const uint8_t*>(s.src);
    auto* dst = static_cast<uint8_t*>(s.dst);
    const int64_t rows = s.plan.shape[0], cols = s.plan.shape[1];
    const bool short_rows = rows <= cols;
    const int r = static_cast<int>(short_rows ? rows : cols);
    const int64_t along = short_rows ? cols : rows, tile = transpose_tile(r, eb);
    for (int64_t t0 = int64_t(blockIdx.x) * tile; t0 < along; t0 += int64_t(gridDim.x) * tile) {
      const int nt = static_cast<int>(tile < along - t0 ? tile : along - t0);
      __syncthreads();  // the previous tile's writers are done with the stage
      if (short_rows) {  // input [along, r] -> output rows a: [a, t0 .. t0 + nt)
        const int shift = stage_run(stage, src + t0 * r * eb, nt * r * eb);
        __syncthreads();
        for (int a = 0; a < r; ++a) {
          auto byte_at = [&](int j) { return staged[shift + ((j >> elem_log2) * r + a) * eb + (j & emask)]; };
          auto word_at = [&](int j) {
            uint32_t word = 0;
            for (int b = 0; b < 4; ++b) word |= static_cast<uint32_t>(byte_at(j + b)) << (8 * b);
            return word;
          };
          write_run(dst + (a * along + t0) * eb, nt * eb, word_at, byte_at);
        }
      } else {  // input rows k: [k, t0 .. t0 + nt), staged one after another -> output [t0.., r]
        const int run_words = (nt * eb + 3) / 4 + 1;
        for (int k = 0; k < r; ++k) stage_run(stage + k * run_words, src + (k * along + t0) * eb, nt * eb);
        __syncthreads();
        auto at = [&](int e, int k, int q) {  // byte q of element e of staged run k
          const int shift = static_cast<int>(reinterpret_cast<uintptr_t>(src + (k * along + t0) * eb) & 3);
          return staged[4 * k * run_words + shift + e * eb + q];
        };
        auto byte_at = [&](int j) {
          const int e = j >> elem_log2;
          return at(e / r, e % r, j & emask);
        };
        auto word_at = [&](int j) {
          int e = j >> elem_log2, q = j & emask, a = e / r, k = e - a * r;
          uint32_t word = 0;
          for (int b = 0; b < 4; ++b) {
            word |= static_cast<uint32_t>(at(a, k, q)) << (8 * b);
            if (++q == eb) {
              q = 0;
              if (++k == r) k = 0, ++a;
            }
          }
          return word;
        };
        write_run(dst + t0 * r * eb, nt * r * eb, word_at, byte_at);
      }
    }
  }
}

std::vector<at::Tensor> transpose_cuda(at::TensorList images, at::IntArrayRef perm) {
  TORCH_CHECK_VALUE(!images.empty(), "transpose: `images` must hold at least one sample");
  const c10::cuda::CUDAGuard guard(images[0].device());
  std::vector<at::Tensor> ins = geometry::check_images("transpose", images, 1);
  TORCH_CHECK_VALUE(ins[0].is_cuda(), "transpose: CUDA kernel got `images` on ",
                    ins[0].device());
  const std::vector<int64_t> p(perm.begin(), perm.end());
  geometry::check_perm(p, ins[0].dim());
  const int64_t n = static_cast<int64_t>(ins.size()), eb = ins[0].element_size();
  std::vector<at::Tensor> outs;
  std::vector<TransposeDesc> descs;
  int64_t max_numel = 0, max_tiles = 0;
  bool all_short = true;
  for (const at::Tensor& im : ins) {
    outs.push_back(at::empty(geometry::transpose_shape(im, p), im.options()));
    descs.push_back(TransposeDesc{im.const_data_ptr(), outs.back().data_ptr(),
                                  geometry::transpose_plan(im, p)});
    const geometry::TransposePlan& plan = descs.back().plan;
    max_numel = std::max(max_numel, im.numel());
    all_short = all_short && short_plan(plan);
    if (all_short) {
      const int64_t r = std::min(plan.shape[0], plan.shape[1]);
      const int64_t tile = transpose_tile(r, eb);
      max_tiles = std::max(max_tiles, (std::max(plan.shape[0], plan.shape[1]) + tile - 1) / tile);
    }
  }
  if (max_numel == 0) return outs;
  std::vector<const void*> unused;
  at::Tensor table = upload(descs, {}, ins[0].device(), unused);
  const auto* table_dev = reinterpret_cast<const TransposeDesc*>(table.const_data_ptr());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  if (all_short) {
    const int elem_log2 = eb == 1 ? 0 : eb == 2 ? 1 : eb == 4 ? 2 : 3;
    transpose_tile_kernel<<<dim3(grid_dim(max_tiles, 1), grid_dim(n, 1)), kStageThreads, 0, stream>>>(
        table_dev, n, elem_log2);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return outs;
  }
  const dim3 grid(grid_dim(max_numel, kThreads), grid_dim(n, 1));
  // Index math stays below numel + a thread grid's stride.
  const int64_t max_index = max_numel + int64_t(grid.x) * kThreads;
  geometry::dispatch_elem("transpose", ins[0], [&](auto tag) {
    dispatch_index(max_index, [&](auto index) {
      transpose_kernel<decltype(tag), decltype(index)><<<grid, kThreads, 0, stream>>>(table_dev, n);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  return outs;
}

// --- gather_windows ---

struct WindowDesc {
  const void* src;
  geometry::WindowCopy c;
};

// blockIdx.z walks samples, blockIdx.y a window's rows, x the elements of a row.
template <typename T, typename Index>
__global__ void gather_windows_kernel(const WindowDesc* __restrict__ descs, int64_t n,
                                      T* __restrict__ out) {
  for (int64_t i = blockIdx.z; i < n; i += gridDim.z) {
    const geometry::WindowCopy c = descs[i].c;
    const T* src = static_cast<const T*>(descs[i].src) + c.start;
    T* dst = out + c.dst;
    const Index row_len = static_cast<Index>(c.row_len);
    for (Index r = blockIdx.y; r < c.rows; r += gridDim.y)
      for (Index e = Index(blockIdx.x) * blockDim.x + threadIdx.x; e < row_len;
           e += Index(gridDim.x) * blockDim.x)
        dst[int64_t(r) * row_len + e] = src[int64_t(r) * c.pitch + e];
  }
}

at::Tensor gather_windows_cuda(at::TensorList images, const at::Tensor& windows) {
  std::vector<at::Tensor> ins = geometry::check_images("gather_windows", images, 2);
  const c10::cuda::CUDAGuard guard(ins[0].device());
  TORCH_CHECK_VALUE(ins[0].is_cuda(), "gather_windows: CUDA kernel got `images` on ",
                    ins[0].device());
  int64_t total = 0;
  const std::vector<geometry::WindowCopy> copies = geometry::window_copies(ins, windows, total);
  at::Tensor out = at::empty({total}, ins[0].options());
  std::vector<WindowDesc> descs;
  int64_t max_rows = 0, max_row_len = 0;
  for (size_t i = 0; i < ins.size(); ++i) {
    descs.push_back(WindowDesc{ins[i].const_data_ptr(), copies[i]});
    max_rows = std::max(max_rows, copies[i].rows);
    max_row_len = std::max(max_row_len, copies[i].row_len);
  }
  if (total == 0) return out;
  std::vector<const void*> unused;
  at::Tensor table = upload(descs, {}, out.device(), unused);
  const int64_t n = static_cast<int64_t>(ins.size());
  const dim3 grid(grid_dim(max_row_len, kThreads), grid_dim(max_rows, 1), grid_dim(n, 1));
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int64_t max_index = std::max(max_rows + grid.y, max_row_len + int64_t(grid.x) * kThreads);
  geometry::dispatch_elem("gather_windows", ins[0], [&](auto tag) {
    using T = decltype(tag);
    dispatch_index(max_index, [&](auto index) {
      gather_windows_kernel<T, decltype(index)><<<grid, kThreads, 0, stream>>>(
          reinterpret_cast<const WindowDesc*>(table.const_data_ptr()), n,
          static_cast<T*>(out.data_ptr()));
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  return out;
}

}  // namespace
}  // namespace torchdali

TORCH_LIBRARY_IMPL(torchdali, CUDA, m) {
  m.impl("gather_windows", &torchdali::gather_windows_cuda);
  m.impl("flip", &torchdali::flip_cuda);
  m.impl("flip.dense", &torchdali::flip_dense_cuda);
  m.impl("transpose", &torchdali::transpose_cuda);
}
