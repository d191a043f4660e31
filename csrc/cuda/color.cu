// CUDA kernel of torchdali::color_transform: one launch for the whole batch. Per-sample
// pointers and sizes, and the matrices and offsets when given on the CPU, go to the device
// in one asynchronous copy, so a call never waits for the GPU.

// c10's CUDA headers rather than ATen/cuda/CUDAContext.h (see crop_mirror_normalize.cu).
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "../color.h"

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

std::vector<at::Tensor> color_transform_cuda(at::TensorList images, const at::Tensor& matrices,
                                             const at::Tensor& offsets,
                                             at::ScalarType out_dtype) {
  TORCH_CHECK_VALUE(!images.empty(), "color_transform: `images` must hold an image");
  const c10::cuda::CUDAGuard guard(images[0].device());
  color::Args a = color::prepare(images, matrices, offsets, out_dtype);
  TORCH_CHECK_VALUE(a.images[0].is_cuda(), "color_transform: CUDA kernel got `images` on ",
                    a.images[0].device());

  // One pinned table: descriptors, then the parameters that live on the CPU. The caching
  // host allocator keeps it alive until the copy on the current stream has finished.
  std::vector<const at::Tensor*> params = {&a.matrices, &a.offsets};
  auto align8 = [](int64_t b) { return (b + 7) / 8 * 8; };
  std::vector<int64_t> param_at;
  int64_t bytes = align8(a.n * int64_t(sizeof(SampleDesc)));
  for (const at::Tensor* t : params) {
    param_at.push_back(bytes);
    if (t->is_cpu()) bytes += align8(t->nbytes());
  }
  at::Tensor table = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  uint8_t* host = table.data_ptr<uint8_t>();
  auto* desc = reinterpret_cast<SampleDesc*>(host);
  int64_t max_pixels = 0;
  for (int64_t i = 0; i < a.n; ++i) {
    const int64_t pixels = a.images[i].numel() / a.channels;
    desc[i] = SampleDesc{a.images[i].const_data_ptr(), a.out[i].mutable_data_ptr(), pixels};
    max_pixels = std::max(max_pixels, pixels);
  }
  for (size_t k = 0; k < params.size(); ++k)
    if (params[k]->is_cpu())
      std::memcpy(host + param_at[k], params[k]->const_data_ptr(), params[k]->nbytes());
  if (max_pixels == 0) return a.out;
  at::Tensor table_dev = table.to(a.images[0].device(), at::kByte, /*non_blocking=*/true);
  const uint8_t* dev = table_dev.const_data_ptr<uint8_t>();
  auto on_device = [&](size_t k) -> const float* {
    return params[k]->is_cpu() ? reinterpret_cast<const float*>(dev + param_at[k])
                               : params[k]->const_data_ptr<float>();
  };

  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((max_pixels + kBlock - 1) / kBlock,
                                                          4096)),
                  static_cast<unsigned>(std::min<int64_t>(a.n, 65535)));
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  color::dispatch(a.images[0].scalar_type(), out_dtype, [&](auto in_tag, auto out_tag) {
    using In = decltype(in_tag);
    using Out = decltype(out_tag);
    color_kernel<In, Out><<<grid, kBlock, 0, stream>>>(
        reinterpret_cast<const SampleDesc*>(dev), on_device(0), on_device(1), a.n, a.channels);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return a.out;
}

}  // namespace
}  // namespace torchdali

TORCH_LIBRARY_IMPL(torchdali, CUDA, m) {
  m.impl("color_transform", &torchdali::color_transform_cuda);
}
