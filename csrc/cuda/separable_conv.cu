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
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
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
