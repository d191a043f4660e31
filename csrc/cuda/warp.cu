// CUDA kernel of torchdali::warp_affine (list and dense outputs): one launch per batch. The
// per-sample descriptors and the border values go to the device in one asynchronous copy of
// a pinned table, so a call never waits for the GPU.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
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

// Images: blockIdx.z walks samples; a block of kTileW x kBlockH threads takes a tile of
// kTileW x kTileH output pixels (a thread, kTileH / kBlockH of a column's pixels), so the
// source pixels its rows read (a rotated stretch of the image) are shared in cache.
constexpr int kTileW = 32, kTileH = 32, kBlockH = 8;

template <typename In, typename Out, typename Index, int kChannels>
__global__ void warp_image_kernel(const warp::Sample* __restrict__ samples,
                                  const float* __restrict__ border, int64_t n) {
  for (int64_t i = blockIdx.z; i < n; i += gridDim.z) {
    const warp::Sample s = samples[i];
    const Index out_h = static_cast<Index>(s.out_h), out_w = static_cast<Index>(s.out_w);
    for (Index y0 = Index(blockIdx.y) * kTileH; y0 < out_h; y0 += Index(gridDim.y) * kTileH)
      for (Index x = Index(blockIdx.x) * kTileW + threadIdx.x; x < out_w; x += Index(gridDim.x) * kTileW)
        for (Index y = y0 + threadIdx.y; y < out_h && y < y0 + kTileH; y += kBlockH)
          warp::warp_pixel<In, Out, Index, kChannels>(s, x, y, border);
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
  bool rgb = true;
  for (const warp::Sample& s : a.samples) {
    max_rows = std::max(max_rows, s.out_d * s.out_h);
    max_w = std::max(max_w, s.out_w);
    // Offsets stay below the larger of the two samples' sizes; coordinates below a tile grid's
    // stride past the output's extents.
    max_index = std::max({max_index, s.in_d * s.in_h * s.in_w * s.channels,
                          s.out_d * s.out_h * s.out_w * s.channels, s.out_w + 65535 * kTileW,
                          s.out_h + 65535 * kTileH});
    rgb = rgb && s.channels == 3;
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
    const dim3 grid(grid_dim(max_w, kTileW), grid_dim(max_rows, kTileH), grid_dim(a.n, 1));
    const dim3 block(kTileW, kBlockH);
    dispatch_index(max_index, [&](auto index) {
      using Index = decltype(index);
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
