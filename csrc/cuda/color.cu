// CUDA kernel of torchdali::color_transform: one launch for the whole batch. Per-sample
// pointers and sizes, and the matrices and offsets when given on the CPU, go to the device
// in one asynchronous copy, so a call never waits for the GPU.

// c10's CUDA headers rather than ATen/cuda/CUDAContext.h (see crop_mirror_normalize.cu).
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "../color.h"
#include "upload.cuh"

namespace torchdali {
namespace {

struct SampleDesc {
  const void* in;  // channel-last, contiguous
  void* out;
  int64_t pixels;
};

constexpr int kBlock = 256;

// blockIdx.y walks samples; blocks along x stride over a sample's pixels, one thread a pixel.
template <typename In, typename Out>
__global__ void color_kernel(const SampleDesc* __restrict__ samples,
                             const float* __restrict__ matrices,
                             const float* __restrict__ offsets, int64_t n, int64_t channels) {
  for (int64_t i = blockIdx.y; i < n; i += gridDim.y) {
    const SampleDesc s = samples[i];
    const In* src = static_cast<const In*>(s.in);
    Out* dst = static_cast<Out*>(s.out);
    const float* m = matrices + i * channels * channels;
    const float* off = offsets + i * channels;
    for (int64_t p = int64_t(blockIdx.x) * kBlock + threadIdx.x; p < s.pixels;
         p += int64_t(gridDim.x) * kBlock) {
      if (channels == 3)
        color::transform_pixel3<In, Out>(src + p * 3, dst + p * 3, m, off);
      else
        color::transform_pixel<In, Out>(src + p * channels, dst + p * channels, channels, m,
                                        off);
    }
  }
}

color::Args color_transform_cuda_run(at::TensorList images, const at::Tensor& matrices,
                                     const at::Tensor& offsets, at::ScalarType out_dtype,
                                     const at::Tensor& dense_out) {
  TORCH_CHECK_VALUE(!images.empty(), "color_transform: `images` must hold an image");
  const c10::cuda::CUDAGuard guard(images[0].device());
  color::Args a = color::prepare(images, matrices, offsets, out_dtype, dense_out);
  TORCH_CHECK_VALUE(a.images[0].is_cuda(), "color_transform: CUDA kernel got `images` on ",
                    a.images[0].device());
  std::vector<SampleDesc> descs;
  int64_t max_pixels = 0;
  for (int64_t i = 0; i < a.n; ++i) {
    const int64_t pixels = a.images[i].numel() / a.channels;
    descs.push_back(SampleDesc{a.images[i].const_data_ptr(), a.out[i].mutable_data_ptr(), pixels});
    max_pixels = std::max(max_pixels, pixels);
  }
  if (max_pixels == 0) return a;
  std::vector<const void*> params;
  at::Tensor table = upload(descs, {&a.matrices, &a.offsets}, a.images[0].device(), params);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((max_pixels + kBlock - 1) / kBlock,
                                                          4096)),
                  grid_dim(a.n, 1));
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  color::dispatch(a.images[0].scalar_type(), out_dtype, [&](auto in_tag, auto out_tag) {
    using In = decltype(in_tag);
    using Out = decltype(out_tag);
    color_kernel<In, Out><<<grid, kBlock, 0, stream>>>(
        reinterpret_cast<const SampleDesc*>(table.const_data_ptr()),
        static_cast<const float*>(params[0]), static_cast<const float*>(params[1]), a.n,
        a.channels);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return a;
}

std::vector<at::Tensor> color_transform_cuda(at::TensorList images, const at::Tensor& matrices,
                                             const at::Tensor& offsets,
                                             at::ScalarType out_dtype) {
  return color_transform_cuda_run(images, matrices, offsets, out_dtype, at::Tensor()).out;
}

at::Tensor color_transform_dense_cuda(const at::Tensor& images, const at::Tensor& matrices,
                                      const at::Tensor& offsets, at::ScalarType out_dtype) {
  at::Tensor out = dense_output(images, out_dtype);
  color_transform_cuda_run(samples_of("color_transform", images), matrices, offsets, out_dtype,
                           out);
  return out;
}

}  // namespace
}  // namespace torchdali

TORCH_LIBRARY_IMPL(torchdali, CUDA, m) {
  m.impl("color_transform", &torchdali::color_transform_cuda);
  m.impl("color_transform.dense", &torchdali::color_transform_dense_cuda);
}
