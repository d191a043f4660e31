// CUDA kernel of torchdali::crop_mirror_normalize: one launch for the whole batch.
// Per-sample pointers and sizes, and the small parameters given on the CPU, go to the
// device in one asynchronous copy (upload.cuh), so a call never waits for the GPU.

// c10's CUDA headers rather than ATen/cuda/CUDAContext.h, which also wants the cuBLAS and
// cuSPARSE headers that a minimal CUDA toolkit lacks.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "../crop_mirror_normalize.h"
#include "upload.cuh"

namespace torchdali {
namespace {

struct SampleDesc {
  const void* data;  // HWC or CHW, contiguous
  int64_t h, w;
};

constexpr int kTileW = 32, kTileH = 8, kRowsPerThread = 4;

// blockIdx.z walks samples, each block a 32x8 tile of output pixels; a thread writes all
// channels of one pixel, so in CHW output a warp writes 32 adjacent values per channel.
// `Index` is int32_t where every offset fits (cheaper arithmetic); three channels, the
// common case, get loops of constant length.
template <typename In, typename Out, typename Index>
__global__ void cmn_kernel(const SampleDesc* __restrict__ samples,
                           const int64_t* __restrict__ anchors,
                           const uint8_t* __restrict__ mirror, const float* __restrict__ mean,
                           const float* __restrict__ inv_std, const float* __restrict__ fill,
                           Out* __restrict__ out, int64_t n, Index crop_h, Index crop_w,
                           Index channels, Index out_channels, bool out_chw, bool in_chw,
                           float scale, float shift) {
  const Index plane = crop_h * crop_w;
  const Index px_stride = out_chw ? 1 : out_channels;
  const Index c_stride = out_chw ? plane : 1;
  const bool rgb = channels == 3 && out_channels == 3;
  for (int64_t i = blockIdx.z; i < n; i += gridDim.z) {
    const SampleDesc& s = samples[i];
    const Index h = static_cast<Index>(s.h), w = static_cast<Index>(s.w);
    const In* src = static_cast<const In*>(s.data);
    const cmn::InputStrides in = cmn::input_strides(in_chw, s.h, s.w, channels);
    const Index in_px = static_cast<Index>(in.px), in_ch = static_cast<Index>(in.ch);
    const Index ay = static_cast<Index>(anchors[2 * i]), ax = static_cast<Index>(anchors[2 * i + 1]);
    const bool flip = mirror[i] != 0;
    Out* dst = out + i * int64_t(plane) * out_channels;
    for (Index y = Index(blockIdx.y) * kTileH + threadIdx.y; y < crop_h;
         y += Index(gridDim.y) * kTileH) {
      const Index iy = ay + y;
      const bool row_in = iy >= 0 && iy < h;
      for (Index x = Index(blockIdx.x) * kTileW + threadIdx.x; x < crop_w;
           x += Index(gridDim.x) * kTileW) {
        const Index ix = ax + (flip ? crop_w - 1 - x : x);
        const In* px = (row_in && ix >= 0 && ix < w) ? src + (iy * w + ix) * in_px : nullptr;
        Out* o = dst + (y * crop_w + x) * px_stride;
        if (rgb)
          cmn::write_pixel<In, Out>(px, in_ch, o, c_stride, Index(3), Index(3), mean, inv_std,
                                    fill, scale, shift);
        else
          cmn::write_pixel<In, Out>(px, in_ch, o, c_stride, channels, out_channels, mean,
                                    inv_std, fill, scale, shift);
      }
    }
  }
}

at::Tensor crop_mirror_normalize_cuda_run(Samples samples, const at::Tensor& anchors,
                                      const at::Tensor& mirror, const at::Tensor& mean,
                                      const at::Tensor& inv_std, int64_t crop_h, int64_t crop_w,
                                      at::ScalarType out_dtype, bool out_chw, int64_t out_channels,
                                      double scale, double shift, const at::Tensor& fill,
                                      bool in_chw) {
  const c10::cuda::CUDAGuard guard(samples.device(0));
  cmn::Args a = cmn::prepare(std::move(samples), anchors, mirror, mean, inv_std, crop_h, crop_w,
                             out_dtype, out_chw, out_channels, fill, in_chw);
  TORCH_CHECK_VALUE(a.out.is_cuda(), "crop_mirror_normalize: CUDA kernel got `images` on ",
                    a.out.device());

  std::vector<SampleDesc> descs;
  for (int64_t i = 0; i < a.n; ++i)
    descs.push_back(SampleDesc{a.images.data(i), cmn::image_h(a, i), cmn::image_w(a, i)});
  std::vector<const void*> params;
  at::Tensor table = upload(descs, {&a.anchors, &a.mirror, &a.mean, &a.inv_std, &a.fill},
                            a.out.device(), params);

  const dim3 block(kTileW, kTileH);
  // A thread writes kRowsPerThread rows (the y loop strides by the grid): fewer, longer
  // blocks for the same work.
  const dim3 grid(grid_dim(crop_w, kTileW), grid_dim(crop_h, kTileH * kRowsPerThread),
                  grid_dim(a.n, 1));
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();  // what at::cuda:: returns
  // Offsets within a sample: of its input pixels, and of its output (anchors may lie a crop
  // size outside the image).
  int64_t max_index = (crop_h + 64) * (crop_w + 64) * out_channels;
  for (const SampleDesc& d : descs)
    max_index = std::max(max_index, (d.h + crop_h) * (d.w + crop_w) * a.channels);
  cmn::dispatch(a.images.dtype(0), out_dtype, [&](auto in_tag, auto out_tag) {
    dispatch_index(max_index, [&](auto index) {
      using In = decltype(in_tag);
      using Out = decltype(out_tag);
      using Index = decltype(index);
      cmn_kernel<In, Out, Index><<<grid, block, 0, stream>>>(
          reinterpret_cast<const SampleDesc*>(table.const_data_ptr()),
          static_cast<const int64_t*>(params[0]), static_cast<const uint8_t*>(params[1]),
          static_cast<const float*>(params[2]), static_cast<const float*>(params[3]),
          static_cast<const float*>(params[4]), a.out.mutable_data_ptr<Out>(), a.n,
          Index(crop_h), Index(crop_w), Index(a.channels), Index(out_channels), out_chw,
          in_chw, static_cast<float>(scale), static_cast<float>(shift));
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  return a.out;
}

// crop_mirror_normalize (`images` a list) and crop_mirror_normalize.dense_in (a dense batch).
template <typename Images>
at::Tensor crop_mirror_normalize_cuda(Images images, const at::Tensor& anchors,
                                      const at::Tensor& mirror, const at::Tensor& mean,
                                      const at::Tensor& inv_std, int64_t crop_h, int64_t crop_w,
                                      at::ScalarType out_dtype, bool out_chw, int64_t out_channels,
                                      double scale, double shift, const at::Tensor& fill,
                                      bool in_chw) {
  return crop_mirror_normalize_cuda_run(Samples("crop_mirror_normalize", images), anchors, mirror, mean,
                                        inv_std, crop_h, crop_w, out_dtype, out_chw, out_channels,
                                        scale, shift, fill, in_chw);
}

// crop_mirror_normalize.flat_in: the samples back to back in one buffer, with their shapes.
at::Tensor crop_mirror_normalize_flat_cuda(const at::Tensor& images, const at::Tensor& shapes,
                                           const at::Tensor& anchors, const at::Tensor& mirror,
                                           const at::Tensor& mean, const at::Tensor& inv_std,
                                           int64_t crop_h, int64_t crop_w, at::ScalarType out_dtype,
                                           bool out_chw, int64_t out_channels, double scale,
                                           double shift, const at::Tensor& fill, bool in_chw) {
  return crop_mirror_normalize_cuda_run(Samples("crop_mirror_normalize", images, shapes), anchors, mirror,
                                        mean, inv_std, crop_h, crop_w, out_dtype, out_chw,
                                        out_channels, scale, shift, fill, in_chw);
}

}  // namespace
}  // namespace torchdali

TORCH_LIBRARY_IMPL(torchdali, CUDA, m) {
  m.impl("crop_mirror_normalize", &torchdali::crop_mirror_normalize_cuda<at::TensorList>);
  m.impl("crop_mirror_normalize.dense_in",
         &torchdali::crop_mirror_normalize_cuda<const at::Tensor&>);
  m.impl("crop_mirror_normalize.flat_in", &torchdali::crop_mirror_normalize_flat_cuda);
}
