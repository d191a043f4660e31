// CUDA kernel of torchdali::separable_conv: one launch per pass (spatial axis) for the whole
// batch. The descriptors of all passes and the windows (when given on the CPU) go to the
// device in one asynchronous copy of a pinned table, so a call never waits for the GPU.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "../separable_conv.h"
#include "upload.cuh"

namespace torchdali {
namespace {

struct PassDesc {
  const void* src;
  void* dst;
  conv::Pass pass;
};

constexpr int kThreads = 256;

// blockIdx.y walks samples; threads stride over a sample's outer * n * inner outputs. The
// descriptor is read in place; offsets are `Index` arithmetic (int32_t where it fits).
template <typename Src, typename Dst, typename Index>
__global__ void conv_pass_kernel(const PassDesc* __restrict__ descs,
                                 const float* __restrict__ windows, int64_t n) {
  for (int64_t i = blockIdx.y; i < n; i += gridDim.y) {
    const conv::Pass& s = descs[i].pass;
    const Src* src = static_cast<const Src*>(descs[i].src);
    Dst* dst = static_cast<Dst*>(descs[i].dst);
    const Index len = static_cast<Index>(s.n), inner = static_cast<Index>(s.inner);
    const Index radius = static_cast<Index>(s.radius);
    const Index numel = static_cast<Index>(s.outer) * len * inner;
    const float* w = windows + s.window_at;
    for (Index e = Index(blockIdx.x) * blockDim.x + threadIdx.x; e < numel;
         e += Index(gridDim.x) * blockDim.x) {
      const Index line = e / inner, j = e - line * inner;
      const Index o = line / len, x = line - o * len;
      dst[e] = cmn::convert_sat<Dst>(
          conv::convolve_at<Src, Index>(src + o * len * inner + j, len, inner, x, w, radius));
    }
  }
}

template <typename Src, typename Dst>
void launch(const PassDesc* descs, const float* windows, int64_t n, int64_t max_numel,
            cudaStream_t stream) {
  const dim3 grid(grid_dim(max_numel, kThreads), grid_dim(n, 1));
  dispatch_index(max_numel + int64_t(grid.x) * kThreads, [&](auto index) {
    conv_pass_kernel<Src, Dst, decltype(index)><<<grid, kThreads, 0, stream>>>(descs, windows, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

// --- two axes in one kernel ---

// A sample of a two-axis convolution seen as [outer, h, w * inner]: the innermost axis (w,
// taps `inner` elements apart) is convolved first, then h, as the passes are.
struct Fused2D {
  const void* src;
  void* dst;
  int64_t outer, h, w, inner;
  int64_t wx_at, rx, wy_at, ry;  // the windows (weights at, radius) along w and h
};

constexpr int kTileRows = 16;     // output rows of a block's tile
constexpr int kTileCols = 192;    // output elements of a row of the tile (pixels x inner)
constexpr int kRun = 4;           // outputs a thread computes along a row (and 2 kRun down a column)
constexpr int64_t kFusedSharedBytes = 96 * 1024;

// Floats of shared memory a tile needs with radii rx, ry (input tile with halo, the rows
// after the w pass, and both windows).
inline int64_t fused_shared_floats(int64_t rx, int64_t ry, int64_t inner) {
  const int64_t rows = kTileRows + 2 * ry, in_cols = kTileCols + 2 * rx * inner;
  return rows * in_cols + rows * kTileCols + (2 * rx + 1) + (2 * ry + 1);
}

// One block computes a tile of kTileRows x kTileCols outputs: it loads the tile's input
// with its halo (reflect-101 rows and pixels, as float), convolves its rows along w into
// shared memory, then the columns along h. Each output is computed with the same float
// operations in the same order as by the two passes (bit-identical results); the float
// intermediate never goes to global memory.
template <typename Src, typename Dst>
__global__ void fused_2d_kernel(const Fused2D* __restrict__ descs,
                                const float* __restrict__ windows, int64_t n) {
  extern __shared__ float shared[];
  for (int64_t i = blockIdx.z; i < n; i += gridDim.z) {
    const Fused2D d = descs[i];
    const int64_t row_len = d.w * d.inner, tiles_y = (d.h + kTileRows - 1) / kTileRows;
    // Tile geometry (small: int arithmetic).
    const int inner = static_cast<int>(d.inner), rx = static_cast<int>(d.rx), ry = static_cast<int>(d.ry);
    const int halo = rx * inner, rows = kTileRows + 2 * ry, in_cols = kTileCols + 2 * halo;
    float* in = shared;                   // [rows][in_cols]: the input tile with its halo
    float* mid = in + rows * in_cols;     // [rows][kTileCols]: after the pass along w
    float* wx = mid + rows * kTileCols;   // 2 rx + 1 weights
    float* wy = wx + 2 * rx + 1;          // 2 ry + 1 weights
    for (int64_t ty = blockIdx.y; ty < d.outer * tiles_y; ty += gridDim.y) {
      const int64_t o = ty / tiles_y, y0 = (ty - o * tiles_y) * kTileRows;
      const Src* plane = static_cast<const Src*>(d.src) + o * d.h * row_len;
      Dst* out = static_cast<Dst*>(d.dst) + o * d.h * row_len;
      for (int64_t e0 = int64_t(blockIdx.x) * kTileCols; e0 < row_len;
           e0 += int64_t(gridDim.x) * kTileCols) {
        for (int k = threadIdx.x; k <= 2 * rx; k += blockDim.x) wx[k] = windows[d.wx_at + k];
        for (int k = threadIdx.x; k <= 2 * ry; k += blockDim.x) wy[k] = windows[d.wy_at + k];
        // The input tile: a warp per row, its lanes along the row (reflected rows and pixels
        // outside the sample).
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
        for (int r = warp; r < rows; r += warps) {
          int64_t y = y0 + r - ry;
          if (y < 0 || y >= d.h) y = conv::reflect101<int64_t>(y, d.h);
          const Src* line = plane + y * row_len;
          float* to = in + r * in_cols;
          for (int c = lane; c < in_cols; c += 32) {
            int64_t g = e0 - halo + c;  // element of the row, maybe outside it
            if (g < 0 || g >= row_len) {
              const int64_t x = g >= 0 ? g / inner : -((-g + inner - 1) / inner);
              g = conv::reflect101<int64_t>(x, d.w) * inner + (g - x * inner);
            }
            to[c] = static_cast<float>(line[g]);
          }
        }
        __syncthreads();
        // Along w: a thread computes kRun outputs of one channel of a row, kTileCols / kRun per
        // row, reading each input once for all of them (each output sums its taps in order).
        const int runs = kTileCols / kRun;
        for (int u = threadIdx.x; u < rows * runs; u += blockDim.x) {
          const int r = u / runs, run = u - r * runs;
          const int block = run / inner, ch = run - block * inner;
          const int c0 = block * kRun * inner + ch;
          const float* s = in + r * in_cols + c0;
          float acc[kRun] = {};
          for (int j = 0; j < kRun + 2 * rx; ++j) {
            const float v = s[j * inner];
#pragma unroll
            for (int q = 0; q < kRun; ++q) {
              const int k = j - q;
              if (k >= 0 && k <= 2 * rx) acc[q] = conv::mul_add(acc[q], wx[k], v);
            }
          }
#pragma unroll
          for (int q = 0; q < kRun; ++q) mid[r * kTileCols + c0 + q * inner] = acc[q];
        }
        __syncthreads();
        // Along h: a thread computes 2 kRun outputs down a column, reading each row once.
        constexpr int kDown = 2 * kRun;
        for (int u = threadIdx.x; u < (kTileRows / kDown) * kTileCols; u += blockDim.x) {
          const int part = u / kTileCols, c = u - part * kTileCols, r0 = part * kDown;
          float acc[kDown] = {};
          for (int j = 0; j < kDown + 2 * ry; ++j) {
            const float v = mid[(r0 + j) * kTileCols + c];
#pragma unroll
            for (int q = 0; q < kDown; ++q) {
              const int k = j - q;
              if (k >= 0 && k <= 2 * ry) acc[q] = conv::mul_add(acc[q], wy[k], v);
            }
          }
          if (e0 + c >= row_len) continue;
#pragma unroll
          for (int q = 0; q < kDown; ++q)
            if (y0 + r0 + q < d.h) out[(y0 + r0 + q) * row_len + e0 + c] = cmn::convert_sat<Dst>(acc[q]);
        }
        __syncthreads();
      }
    }
  }
}

// The two-axis convolution in one kernel where every sample's tile fits the shared memory
// (its descriptors and the windows in one upload); false (nothing done) otherwise.
template <typename Src, typename Dst>
bool launch_fused(const conv::Args& a, at::Device device, cudaStream_t stream) {
  if (a.num_axes != 2) return false;
  std::vector<Fused2D> descs;
  int64_t rx_max = 0, ry_max = 0, inner_max = 1, max_cols = 0, max_rows = 0;
  bool runs_fit = true;  // each row of a tile splits into runs of kRun pixels of one channel
  for (int64_t i = 0; i < a.n; ++i) {
    const conv::Pass& pw = a.passes[i];          // pass 0: along w
    const conv::Pass& ph = a.passes[a.n + i];    // pass 1: along h
    descs.push_back(Fused2D{a.images[i].const_data_ptr(), a.out[i].mutable_data_ptr(), ph.outer, ph.n,
                            pw.n, pw.inner, pw.window_at, pw.radius, ph.window_at, ph.radius});
    rx_max = std::max(rx_max, pw.radius);
    ry_max = std::max(ry_max, ph.radius);
    inner_max = std::max(inner_max, pw.inner);
    runs_fit = runs_fit && (kTileCols / kRun) % pw.inner == 0;
    max_cols = std::max(max_cols, pw.n * pw.inner);
    max_rows = std::max(max_rows, ph.outer * ((ph.n + kTileRows - 1) / kTileRows));
  }
  const int64_t bytes = fused_shared_floats(rx_max, ry_max, inner_max) * int64_t(sizeof(float));
  if (bytes > kFusedSharedBytes || max_cols == 0 || !runs_fit) return false;
  if (bytes > 48 * 1024)
    C10_CUDA_CHECK(cudaFuncSetAttribute(fused_2d_kernel<Src, Dst>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(bytes)));
  std::vector<const void*> windows_dev;
  at::Tensor table = upload(descs, {&a.windows}, device, windows_dev);
  const dim3 grid(grid_dim(max_cols, kTileCols), grid_dim(max_rows, 1), grid_dim(a.n, 1));
  fused_2d_kernel<Src, Dst><<<grid, kThreads, bytes, stream>>>(
      reinterpret_cast<const Fused2D*>(table.const_data_ptr()), static_cast<const float*>(windows_dev[0]),
      a.n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return true;
}

std::vector<at::Tensor> separable_conv_cuda(at::TensorList images, const at::Tensor& windows,
                                            at::IntArrayRef window_sizes, int64_t first_axis,
                                            int64_t num_axes, at::ScalarType out_dtype) {
  TORCH_CHECK_VALUE(!images.empty(), "separable_conv: `images` must hold at least one sample");
  const c10::cuda::CUDAGuard guard(images[0].device());
  conv::Args a = conv::prepare(images, windows, window_sizes, first_axis, num_axes, out_dtype);
  const at::Device device = a.images[0].device();
  TORCH_CHECK_VALUE(device.is_cuda(), "separable_conv: CUDA kernel got `images` on ", device);
  int64_t max_numel = 0;
  for (const at::Tensor& im : a.images) max_numel = std::max(max_numel, im.numel());
  if (max_numel == 0) return a.out;
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  bool fused = false;
  dispatch_types<false>("separable_conv", a.images[0].scalar_type(), out_dtype,
                        [&](auto in_tag, auto out_tag) {
    fused = launch_fused<decltype(in_tag), decltype(out_tag)>(a, device, stream);
  });
  if (fused) return a.out;
  const int64_t halves = std::min<int64_t>(a.num_axes - 1, 2);
  const at::Tensor scratch =
      at::empty({halves * a.tmp_size}, at::TensorOptions().dtype(at::kFloat).device(device));
  float* tmp = halves > 0 ? scratch.mutable_data_ptr<float>() : nullptr;

  // Pass p reads the images (p = 0) or scratch half (p - 1) % 2, and writes the outputs (last
  // pass) or scratch half p % 2.
  std::vector<PassDesc> descs(a.passes.size());
  for (int64_t p = 0; p < a.num_axes; ++p) {
    for (int64_t i = 0; i < a.n; ++i) {
      PassDesc& d = descs[p * a.n + i];
      d.pass = a.passes[p * a.n + i];
      d.src = p == 0 ? a.images[i].const_data_ptr()
                     : static_cast<const void*>(tmp + ((p - 1) % 2) * a.tmp_size + a.tmp_at[i]);
      d.dst = p == a.num_axes - 1 ? a.out[i].mutable_data_ptr()
                                  : static_cast<void*>(tmp + (p % 2) * a.tmp_size + a.tmp_at[i]);
    }
  }
  std::vector<const void*> windows_dev;
  at::Tensor table = upload(descs, {&a.windows}, device, windows_dev);
  const auto* dev_descs = reinterpret_cast<const PassDesc*>(table.const_data_ptr());
  const auto* w = static_cast<const float*>(windows_dev[0]);
  dispatch_types<false>("separable_conv", a.images[0].scalar_type(), out_dtype,
                        [&](auto in_tag, auto out_tag) {
    using In = decltype(in_tag);
    using Out = decltype(out_tag);
    for (int64_t p = 0; p < a.num_axes; ++p) {
      const PassDesc* d = dev_descs + p * a.n;
      const bool first = p == 0, last = p == a.num_axes - 1;
      if (first && last) launch<In, Out>(d, w, a.n, max_numel, stream);
      else if (first) launch<In, float>(d, w, a.n, max_numel, stream);
      else if (last) launch<float, Out>(d, w, a.n, max_numel, stream);
      else launch<float, float>(d, w, a.n, max_numel, stream);
    }
  });
  return a.out;
}

}  // namespace
}  // namespace torchdali

TORCH_LIBRARY_IMPL(torchdali, CUDA, m) {
  m.impl("separable_conv", &torchdali::separable_conv_cuda);
}
