// CUDA kernel of torchdali::warp_affine (list and dense outputs): one launch per batch. The
// per-sample descriptors and the border values go to the device in one asynchronous copy of
// a pinned table, so a call never waits for the GPU.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "../warp.h"
#include "upload.cuh"

namespace torchdali {
namespace {

constexpr int kThreads = 256;

// Volumes: blockIdx.z walks samples, blockIdx.y output rows (depth x height), x the voxels of
// a row.
template <typename In, typename Out>
__global__ void warp_volume_kernel(const warp::Sample* __restrict__ samples,
                                   const float* __restrict__ border, int64_t n) {
  for (int64_t i = blockIdx.z; i < n; i += gridDim.z) {
    const warp::Sample s = samples[i];
    for (int64_t row = blockIdx.y; row < s.out_d * s.out_h; row += gridDim.y)
      for (int64_t x = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; x < s.out_w;
           x += int64_t(gridDim.x) * blockDim.x)
        warp::warp_voxel<In, Out>(s, x, row % s.out_h, row / s.out_h, border);
  }
}

// Images: blockIdx.z walks samples; a block of 32 x 8 threads takes a tile of 32 x 32 output
// pixels, each warp a patch of 16 x 2 pixels at a time (a thread keeps its column), so the
// source pixels a tile reads (a rotated stretch of the image) are shared in cache.
constexpr int kTile = 32, kPatchW = 16, kBlockH = 8;

template <typename In, typename Out, typename Index, int kChannels>
__global__ void warp_image_kernel(const warp::Sample* __restrict__ samples,
                                  const float* __restrict__ border, int64_t n) {
  const Index column = (threadIdx.y % 2) * kPatchW + threadIdx.x % kPatchW;
  const Index first_row = (threadIdx.y / 2) * 2 + threadIdx.x / kPatchW;
  for (int64_t i = blockIdx.z; i < n; i += gridDim.z) {
    const warp::Sample s = samples[i];
    const Index out_h = static_cast<Index>(s.out_h), out_w = static_cast<Index>(s.out_w);
    for (Index y0 = Index(blockIdx.y) * kTile; y0 < out_h; y0 += Index(gridDim.y) * kTile)
      for (Index x = Index(blockIdx.x) * kTile + column; x < out_w; x += Index(gridDim.x) * kTile)
        for (Index y = y0 + first_row; y < out_h && y < y0 + kTile; y += kBlockH)
          warp::warp_pixel<In, Out, Index, kChannels>(s, x, y, border);
  }
}

// uint8 RGB HWC images with INTERP_LINEAR, the common case (rotate, warp_affine of decoded
// images): the same floats as warp_pixel in fewer instructions, since the kernel is bound by
// instruction issue (Nsight Compute, H100: 83% of issue slots busy, DRAM a third busy). A
// thread keeps its column's terms and computes 8 pixels of it; the block is 4 warps held to
// 32 registers a thread, so that an SM holds 64 warps to hide the loads' latency (at 54
// registers, 32 warps, the kernel ran 1.4x slower); the two horizontal taps' six bytes of a
// source row come from two or three aligned 32-bit loads; floors and the rounding to bytes are
// float additions (magic numbers) instead of conversions; a pixel whose four taps all lie
// outside the image takes the fill directly.
namespace rgb8 {

constexpr int kWarps = 4, kRows = kTile / kWarps;  // a block covers 4 rows at a time: 8 a thread
constexpr float kTwo23 = 8388608.f;                      // 2^23: floats from here on are integers

// Bytes p[0..5] (two RGB pixels side by side): p[0..3] in `lo`, p[4..5] in the low half of `hi`.
__device__ __forceinline__ void load_pair(const uint8_t* p, uint32_t& lo, uint32_t& hi) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uint32_t* w = reinterpret_cast<const uint32_t*>(a & ~uintptr_t(3));
  const unsigned k = a & 3;
  const uint32_t w0 = __ldg(w), w1 = __ldg(w + 1), w2 = k == 3 ? __ldg(w + 2) : 0u;
  const unsigned select = 0x3210u + 0x1111u * k;  // bytes k..k+3 of the pair of words
  lo = __byte_perm(w0, w1, select);
  hi = __byte_perm(w1, w2, select);
}

// Bytes 0 and 3 of a word as floats: the conversion instruction selects either byte itself.
__device__ __forceinline__ float byte0(uint32_t w) { return static_cast<float>(w & 255u); }
__device__ __forceinline__ float byte3(uint32_t w) { return static_cast<float>(w >> 24); }

// floor(v) for 0 <= v < 2^23, as a float (`f`) and an integer: v + 2^23 rounded down is
// 2^23 + floor(v), whose low mantissa bits are the integer.
__device__ __forceinline__ int floor_small(float v, float& f) {
  const float t = __fadd_rd(v, kTwo23);
  f = t - kTwo23;
  return __float_as_int(t) - __float_as_int(kTwo23);
}

// cmn::convert_sat<uint8_t>(v) for -0.5 < v < 255.5 (every blend of four bytes with weights
// in [0, 1], rounding errors included) as the low byte of the result: v + 0.5 rounded down
// never passes an integer the exact sum does not, and adding 2^23 rounded down then leaves
// floor(v + 0.5) = roundf(v) in the low mantissa bits.
__device__ __forceinline__ uint32_t round_byte(float v) {
  return __float_as_uint(__fadd_rd(__fadd_rd(v, 0.5f), kTwo23));
}

// What a thread's pixels share: its column's terms of the matrix product, the sample's
// matrix and extents as floats, and the border (fill) bytes.
struct Column {
  float mx0, mx3;          // m[0] and m[3] times x + 0.5
  float m1, m2, m4, m5;
  float last_x, last_y;    // in_w - 1, in_h - 1: the fast path's bounds
  float in_w, in_h;
  uint32_t fill;           // the LINEAR border value's three bytes, when there is a fill
  bool has_fill;
};

// warp_pixel's INTERP_LINEAR for the pixels the fast path leaves, those with a tap outside the
// image (`sx`, `sy`: the source point less 0.5): such a tap reads the fill, or without fill
// the nearest edge pixel. warp_pixel itself, inlined into each of the kernel's eight pixels,
// made the kernel too large for the instruction cache (1.6x slower).
template <typename Index>
__device__ __forceinline__ void edge_pixel(const warp::Sample& s, const Column& c, float sx,
                                           float sy, uint8_t* dst) {
  sx = warp::limit(sx), sy = warp::limit(sy);
  const float fx0 = ::floorf(sx), fy0 = ::floorf(sy);
  const Index c0 = static_cast<Index>(fx0), r0 = static_cast<Index>(fy0);
  const float qx = sx - fx0, wx = 1.f - qx, qy = sy - fy0;
  const Index in_w = static_cast<Index>(s.in_w), in_h = static_cast<Index>(s.in_h);
  float t[4][3];  // taps (r0, c0), (r0, c0 + 1), (r0 + 1, c0), (r0 + 1, c0 + 1)
  for (int k = 0; k < 4; ++k) {
    const Index r = r0 + (k >> 1), col = c0 + (k & 1);
    const bool fill = c.has_fill && !(col >= 0 && col < in_w && r >= 0 && r < in_h);
    const uint8_t* p = static_cast<const uint8_t*>(s.src) +
                       (warp::clamp_index(r, in_h) * in_w + warp::clamp_index(col, in_w)) * 3;
    for (int ch = 0; ch < 3; ++ch)
      t[k][ch] = static_cast<float>(fill ? (c.fill >> (8 * ch)) & 255u : p[ch]);
  }
  for (int ch = 0; ch < 3; ++ch) {
    const float top = warp::add(warp::mul(t[0][ch], wx), warp::mul(t[1][ch], qx));
    const float bottom = warp::add(warp::mul(t[2][ch], wx), warp::mul(t[3][ch], qx));
    dst[ch] = round_byte(warp::add(top, warp::mul(bottom - top, qy)));
  }
}

// warp_pixel's INTERP_LINEAR for uint8 RGB HWC samples, output pixel (x, y), fy = y + 0.5.
template <typename Index>
__device__ __forceinline__ void pixel(const warp::Sample& s, const Column& c, float fy,
                                      uint8_t* dst) {
  const float sx = warp::add(warp::add(c.mx0, warp::mul(c.m1, fy)), c.m2) - 0.5f;
  const float sy = warp::add(warp::add(c.mx3, warp::mul(c.m4, fy)), c.m5) - 0.5f;
  // All four taps inside: 0 <= sx < in_w - 1 and likewise sy, compared as the floats' bits
  // (negative floats and NaN have bits above any positive float's; sx is never -0).
  if (__float_as_uint(sx) < __float_as_uint(c.last_x) && __float_as_uint(sy) < __float_as_uint(c.last_y)) {
    float fx0, fy0;
    const Index c0 = floor_small(sx, fx0), r0 = floor_small(sy, fy0);
    const float qx = sx - fx0, wx = 1.f - qx, qy = sy - fy0;
    const Index in_w = static_cast<Index>(s.in_w);
    const uint8_t* p = static_cast<const uint8_t*>(s.src) + (r0 * in_w + c0) * 3;
    float t[2][6];  // rows r0 and r0 + 1: R G B of the left tap, then of the right tap
    for (int r = 0; r < 2; ++r) {
      uint32_t lo, hi;  // R G B R' | G' B'
      load_pair(p + r * in_w * 3, lo, hi);
      const uint32_t g = __byte_perm(lo, hi, 0x4001u), b = __byte_perm(lo, hi, 0x5002u);
      t[r][0] = byte0(lo), t[r][3] = byte3(lo);  // g and b: G G' and B B' at bytes 0 and 3
      t[r][1] = byte0(g), t[r][4] = byte3(g);
      t[r][2] = byte0(b), t[r][5] = byte3(b);
    }
    auto blend = [&](int ch) {
      const float top = warp::add(warp::mul(t[0][ch], wx), warp::mul(t[0][ch + 3], qx));
      const float bottom = warp::add(warp::mul(t[1][ch], wx), warp::mul(t[1][ch + 3], qx));
      return round_byte(warp::add(top, warp::mul(bottom - top, qy)));
    };
    dst[0] = blend(0);
    dst[1] = blend(1);
    dst[2] = blend(2);
    return;
  }
  // All four taps outside (NaN is not): the blend of four equal bytes is that byte.
  if (c.has_fill && (sx < -1.f || sy < -1.f || sx >= c.in_w || sy >= c.in_h)) {
    dst[0] = c.fill, dst[1] = c.fill >> 8, dst[2] = c.fill >> 16;
    return;
  }
  edge_pixel<Index>(s, c, sx, sy, dst);
}

// blockIdx.z: sample `first` + z; blockIdx.x and y: a tile of 32 x 32 output pixels; warps of
// 16 x 2 pixels (a rotated stretch of the source shared in cache).
template <typename Index>
__global__ void __launch_bounds__(32 * kWarps, sizeof(Index) == 4 ? 64 / kWarps : 32 / kWarps)
    kernel(const warp::Sample* __restrict__ samples, const float* __restrict__ border,
           uint32_t fill, int64_t first) {
  const warp::Sample s = samples[first + blockIdx.z];
  const Index out_w = static_cast<Index>(s.out_w), out_h = static_cast<Index>(s.out_h);
  const Index x = Index(blockIdx.x) * kTile + (threadIdx.y % 2) * kPatchW + threadIdx.x % kPatchW;
  const Index y0 = Index(blockIdx.y) * kTile + (threadIdx.y / 2) * 2 + threadIdx.x / kPatchW;
  if (x >= out_w || y0 >= out_h) return;
  const float fx = static_cast<float>(x) + 0.5f;
  const Index in_w = static_cast<Index>(s.in_w), in_h = static_cast<Index>(s.in_h);
  const Column c{warp::mul(s.m[0], fx), warp::mul(s.m[3], fx), s.m[1], s.m[2], s.m[4], s.m[5],
                 static_cast<float>(in_w - 1), static_cast<float>(in_h - 1),
                 static_cast<float>(in_w), static_cast<float>(in_h), fill, border != nullptr};
  uint8_t* dst = static_cast<uint8_t*>(s.dst) + (y0 * out_w + x) * 3;
  float fy = static_cast<float>(y0) + 0.5f;
  // The tile's rows as a loop that makes one trip, its body unrolled (a loop's counters would
  // not fit 32 registers): the same eight pixels written as a straight unrolled run compiled
  // to a kernel 1.1x slower (H100, same run: 39% against 43% of a device copy).
  for (Index y = y0; y < out_h;) {
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
      if (y + kWarps * j < out_h) pixel<Index>(s, c, fy, dst);
      fy += static_cast<float>(kWarps);
      dst += kWarps * out_w * 3;
    }
    y += kWarps * kRows;
    if (y >= y0 + kTile) break;
  }
}

}  // namespace rgb8

std::vector<at::Tensor> run(const at::TensorList& images, const at::Tensor& matrices,
                            at::IntArrayRef out_sizes, at::IntArrayRef interp,
                            const std::optional<at::Tensor>& fill, at::ScalarType out_dtype,
                            bool chw, bool dense, at::Tensor* batch) {
  TORCH_CHECK_VALUE(!images.empty(), "warp_affine: `images` must hold at least one image");
  const c10::cuda::CUDAGuard guard(images[0].device());
  warp::Args a = warp::prepare(images, matrices, out_sizes, interp, fill, out_dtype, chw);
  TORCH_CHECK_VALUE(a.images[0].is_cuda(), "warp_affine: CUDA kernel got `images` on ",
                    a.images[0].device());
  std::vector<at::Tensor> outs = warp::allocate(a, dense, batch);
  int64_t max_rows = 0, max_w = 0, max_index = 0;
  bool rgb = true, rgb8 = true;
  for (const warp::Sample& s : a.samples) {
    max_rows = std::max(max_rows, s.out_d * s.out_h);
    max_w = std::max(max_w, s.out_w);
    // Offsets stay below the larger of the two samples' sizes; coordinates below a tile grid's
    // stride past the output's extents.
    max_index = std::max({max_index, s.in_d * s.in_h * s.in_w * s.channels,
                          s.out_d * s.out_h * s.out_w * s.channels, s.out_w + 65535 * kTile,
                          s.out_h + 65535 * kTile});
    rgb = rgb && s.channels == 3;
    // rgb8's path: INTERP_LINEAR, HWC, extents whose floors it takes by adding 2^23, a grid of
    // one tile row per blockIdx.y.
    rgb8 = rgb8 && s.interp == warp::kLinear && s.in_pixel_stride == 3 && s.in_channel_stride == 1 && s.out_pixel_stride == 3 &&
           s.out_channel_stride == 1 && std::max(s.in_w, s.in_h) < (int64_t(1) << 23) &&
           s.out_h <= int64_t(65535) * kTile;
  }
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  warp::dispatch(a.images[0].scalar_type(), out_dtype, [&](auto in, auto out) {
    using In = decltype(in);
    using Out = decltype(out);
    at::Tensor border;
    if (a.fill.defined()) border = warp::border_table<In, Out>(a.fill);
    std::vector<const at::Tensor*> extra;
    if (border.defined()) extra.push_back(&border);
    std::vector<const void*> extra_dev;
    at::Tensor table = upload(a.samples, extra, a.images[0].device(), extra_dev);
    const auto* table_dev = reinterpret_cast<const warp::Sample*>(table.const_data_ptr());
    const float* border_dev = border.defined() ? static_cast<const float*>(extra_dev[0]) : nullptr;
    if (a.ndim == 3) {
      const dim3 grid(grid_dim(max_w, kThreads), grid_dim(max_rows, 1), grid_dim(a.n, 1));
      warp_volume_kernel<In, Out><<<grid, kThreads, 0, stream>>>(table_dev, border_dev, a.n);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      return;
    }
    dispatch_index(max_index, [&](auto index) {
      using Index = decltype(index);
      if constexpr (std::is_same_v<In, uint8_t> && std::is_same_v<Out, uint8_t>) {
        if (rgb && rgb8) {
          uint32_t fill = 0;  // the LINEAR border bytes (whole numbers in 0..255: uint8 values)
          if (border.defined())
            for (int ch = 0; ch < 3; ++ch)
              fill |= static_cast<uint32_t>(border.const_data_ptr<float>()[3 + ch]) << (8 * ch);
          const dim3 block(32, rgb8::kWarps);
          for (int64_t first = 0; first < a.n; first += 65535) {  // blockIdx.z: 65535 samples a launch
            const dim3 grid((max_w + kTile - 1) / kTile, (max_rows + kTile - 1) / kTile,
                            static_cast<unsigned>(std::min<int64_t>(a.n - first, 65535)));
            rgb8::kernel<Index><<<grid, block, 0, stream>>>(table_dev, border_dev, fill, first);
            C10_CUDA_KERNEL_LAUNCH_CHECK();
          }
          return;
        }
      }
      const dim3 grid(grid_dim(max_w, kTile), grid_dim(max_rows, kTile), grid_dim(a.n, 1));
      const dim3 block(32, kBlockH);
      if (rgb) {
        warp_image_kernel<In, Out, Index, 3><<<grid, block, 0, stream>>>(table_dev, border_dev, a.n);
      } else {
        warp_image_kernel<In, Out, Index, 0><<<grid, block, 0, stream>>>(table_dev, border_dev, a.n);
      }
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  return outs;
}

std::vector<at::Tensor> warp_affine_cuda(at::TensorList images, const at::Tensor& matrices,
                                         at::IntArrayRef out_sizes, at::IntArrayRef interp,
                                         const std::optional<at::Tensor>& fill,
                                         at::ScalarType out_dtype, bool chw) {
  return run(images, matrices, out_sizes, interp, fill, out_dtype, chw, false, nullptr);
}

at::Tensor warp_affine_dense_cuda(at::TensorList images, const at::Tensor& matrices,
                                  at::IntArrayRef out_sizes, at::IntArrayRef interp,
                                  const std::optional<at::Tensor>& fill,
                                  at::ScalarType out_dtype, bool chw) {
  at::Tensor batch;
  run(images, matrices, out_sizes, interp, fill, out_dtype, chw, true, &batch);
  return batch;
}

}  // namespace
}  // namespace torchdali

TORCH_LIBRARY_IMPL(torchdali, CUDA, m) {
  m.impl("warp_affine", &torchdali::warp_affine_cuda);
  m.impl("warp_affine.dense", &torchdali::warp_affine_dense_cuda);
}
