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

// uint8 RGB HWC images with INTERP_LINEAR, the common case (rotate, warp_affine of decoded
// images), computed with fewer instructions than warp_pixel and the same floats. The kernel
// is bound by instruction issue (Nsight Compute on an H100 and an H200: DRAM 13-20% busy; with
// word loads 85% of issue slots busy, at 190-230 instructions a pixel), so this path cuts
// instructions: the two
// horizontal taps' six bytes of a source row come from two or three aligned 32-bit loads
// instead of six byte loads (a word holding a byte of the image lies in its allocation), the
// inside test compares floats, and the rounding takes three instructions (round_sat).
namespace rgb8 {

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

__device__ __forceinline__ float byte(uint32_t w, int i) { return static_cast<float>((w >> (8 * i)) & 255u); }

// cmn::convert_sat<uint8_t>(v) in three instructions: roundf(v) is floor(v + 0.5) for v >= 0,
// and v + 0.5 rounded down never reaches an integer the exact sum does not; the conversion to
// unsigned saturates (negatives and NaN to 0) and the min caps 255. Equal to convert_sat on
// every one of the 2^32 floats (checked on an H100).
__device__ __forceinline__ uint8_t round_sat(float v) {
  return static_cast<uint8_t>(::min(__float2uint_rz(__fadd_rd(v, 0.5f)), 255u));
}

// warp_pixel's INTERP_LINEAR for uint8 RGB HWC samples; `mx0` and `mx3` are m[0] and m[3]
// times x + 0.5, the terms of the pixel's column; `in_w1` and `in_h1` are in_w - 1 and
// in_h - 1 (exact in float: the host checks the sizes).
template <typename Index>
__device__ __forceinline__ void pixel(const warp::Sample& s, Index x, Index y, float mx0, float mx3,
                                      float in_w1, float in_h1, const float* border) {
  const float fy = static_cast<float>(y) + 0.5f;
  const float sx = warp::add(warp::add(mx0, warp::mul(s.m[1], fy)), s.m[2]) - 0.5f;
  const float sy = warp::add(warp::add(mx3, warp::mul(s.m[4], fy)), s.m[5]) - 0.5f;
  if (!(sx >= 0.f && sy >= 0.f && sx < in_w1 && sy < in_h1)) {  // a tap outside, or NaN
    warp::warp_pixel<uint8_t, uint8_t, Index, 3>(s, x, y, border);
    return;
  }
  const float fx0 = ::floorf(sx), fy0 = ::floorf(sy);
  const float qx = sx - fx0, wx = 1.f - qx, qy = sy - fy0;
  const Index in_w = static_cast<Index>(s.in_w);
  const uint8_t* p = static_cast<const uint8_t*>(s.src) +
                     (static_cast<Index>(fy0) * in_w + static_cast<Index>(fx0)) * 3;
  uint32_t lo0, hi0, lo1, hi1;  // rows r0 and r0 + 1: R G B R' | G' B'
  load_pair(p, lo0, hi0);
  load_pair(p + in_w * 3, lo1, hi1);
  auto blend = [&](float t0, float t1, float t2, float t3) {
    const float top = warp::add(warp::mul(t0, wx), warp::mul(t1, qx));
    const float bottom = warp::add(warp::mul(t2, wx), warp::mul(t3, qx));
    return round_sat(warp::add(top, warp::mul(bottom - top, qy)));
  };
  uint8_t* dst = static_cast<uint8_t*>(s.dst) + (y * static_cast<Index>(s.out_w) + x) * 3;
  dst[0] = blend(byte(lo0, 0), byte(lo0, 3), byte(lo1, 0), byte(lo1, 3));
  dst[1] = blend(byte(lo0, 1), byte(hi0, 0), byte(lo1, 1), byte(hi1, 0));
  dst[2] = blend(byte(lo0, 2), byte(hi0, 1), byte(lo1, 2), byte(hi1, 1));
}

}  // namespace rgb8

// Images: blockIdx.z walks samples; a block of 32 x 8 threads takes a tile of 32 x 32 output
// pixels, each warp a patch of 16 x 2 pixels at a time (a thread keeps its column), so the
// source pixels a tile reads (a rotated stretch of the image) are shared in cache; a 16 x 2
// patch reads a more compact stretch than a row of 32 (measured faster on an H200).
constexpr int kTile = 32, kPatchW = 16, kBlockH = 8;

template <typename In, typename Out, typename Index, int kChannels, bool kRgb8>
__global__ void warp_image_kernel(const warp::Sample* __restrict__ samples,
                                  const float* __restrict__ border, int64_t n) {
  const Index column = (threadIdx.y % 2) * kPatchW + threadIdx.x % kPatchW;
  const Index first_row = (threadIdx.y / 2) * 2 + threadIdx.x / kPatchW;
  for (int64_t i = blockIdx.z; i < n; i += gridDim.z) {
    const warp::Sample s = samples[i];
    const Index out_h = static_cast<Index>(s.out_h), out_w = static_cast<Index>(s.out_w);
    const bool fast = kRgb8 && s.interp == warp::kLinear;
    const float in_w1 = static_cast<float>(s.in_w - 1), in_h1 = static_cast<float>(s.in_h - 1);
    for (Index y0 = Index(blockIdx.y) * kTile; y0 < out_h; y0 += Index(gridDim.y) * kTile)
      for (Index x = Index(blockIdx.x) * kTile + column; x < out_w; x += Index(gridDim.x) * kTile) {
        const float fx = static_cast<float>(x) + 0.5f;
        const float mx0 = warp::mul(s.m[0], fx), mx3 = warp::mul(s.m[3], fx);
        for (Index y = y0 + first_row; y < out_h && y < y0 + kTile; y += kBlockH) {
          if constexpr (kRgb8) {
            if (fast) {
              rgb8::pixel<Index>(s, x, y, mx0, mx3, in_w1, in_h1, border);
              continue;
            }
          }
          warp::warp_pixel<In, Out, Index, kChannels>(s, x, y, border);
        }
      }
  }
}

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
  bool rgb = true, hwc = true;
  for (const warp::Sample& s : a.samples) {
    max_rows = std::max(max_rows, s.out_d * s.out_h);
    max_w = std::max(max_w, s.out_w);
    // Offsets stay below the larger of the two samples' sizes; coordinates below a tile grid's
    // stride past the output's extents.
    max_index = std::max({max_index, s.in_d * s.in_h * s.in_w * s.channels,
                          s.out_d * s.out_h * s.out_w * s.channels, s.out_w + 65535 * kTile,
                          s.out_h + 65535 * kTile});
    rgb = rgb && s.channels == 3;
    hwc = hwc && s.in_pixel_stride == 3 && s.in_channel_stride == 1 && s.out_pixel_stride == 3 &&
          s.out_channel_stride == 1 && std::max(s.in_w, s.in_h) < (int64_t(1) << 24);
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
    const dim3 grid(grid_dim(max_w, kTile), grid_dim(max_rows, kTile), grid_dim(a.n, 1));
    const dim3 block(32, kBlockH);
    dispatch_index(max_index, [&](auto index) {
      using Index = decltype(index);
      constexpr bool kBytes = std::is_same_v<In, uint8_t> && std::is_same_v<Out, uint8_t>;
      if (kBytes && rgb && hwc) {
        warp_image_kernel<In, Out, Index, 3, kBytes><<<grid, block, 0, stream>>>(table_dev, border_dev, a.n);
      } else if (rgb) {
        warp_image_kernel<In, Out, Index, 3, false><<<grid, block, 0, stream>>>(table_dev, border_dev, a.n);
      } else {
        warp_image_kernel<In, Out, Index, 0, false><<<grid, block, 0, stream>>>(table_dev, border_dev, a.n);
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
