// CUDA kernel of torchdali::normalize: one launch for the whole batch. The per-sample plans
// and all mean / inv_std values (concatenated into one float buffer) go to the device in one
// asynchronous copy of a pinned table when given on the CPU, so a call never waits for the GPU.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "../normalize.h"
#include "upload.cuh"

namespace torchdali {
namespace {

struct NormalizeDesc {
  const void* src;
  void* dst;
  int64_t mean_at, inv_at;  // offsets of the sample's mean and inv_std in the parameter buffer
  normalize::Plan plan;
};

constexpr int kThreads = 256;

// blockIdx.y walks samples; threads stride over a sample's elements, one element each. The
// descriptor is read in place (a copy of its plan would live in local memory).
template <typename In, typename Out, typename Index>
__global__ void normalize_kernel(const NormalizeDesc* __restrict__ descs,
                                 const float* __restrict__ params, int64_t n, float shift) {
  for (int64_t i = blockIdx.y; i < n; i += gridDim.y) {
    const NormalizeDesc& s = descs[i];
    const In* src = static_cast<const In*>(s.src);
    Out* dst = static_cast<Out*>(s.dst);
    const Index numel = static_cast<Index>(s.plan.numel);
    for (Index e = Index(blockIdx.x) * blockDim.x + threadIdx.x; e < numel;
         e += Index(gridDim.x) * blockDim.x) {
      Index m, v;
      normalize::param_offsets<Index>(s.plan, e, m, v);
      dst[e] = normalize::apply<In, Out>(src[e], params[s.mean_at + m], params[s.inv_at + v],
                                         shift);
    }
  }
}

// All distinct parameter tensors in one flat float32 buffer (on the CPU when all are there,
// else on the device), with each sample's offsets recorded in its descriptor.
at::Tensor gather_params(const normalize::Args& a, std::vector<NormalizeDesc>& descs) {
  std::vector<at::Tensor> parts;
  bool all_cpu = true;
  int64_t at_elem = 0;
  auto place = [&](const std::vector<at::Tensor>& ps, int64_t i) {
    if (i > 0 && ps[i].is_same(ps[i - 1])) return -1L;  // shared: same offset as before
    parts.push_back(ps[i].reshape({-1}));
    all_cpu = all_cpu && ps[i].is_cpu();
    const int64_t off = at_elem;
    at_elem += ps[i].numel();
    return off;
  };
  for (int64_t i = 0; i < a.n; ++i) {
    const int64_t m = place(a.mean, i), v = place(a.inv_std, i);
    descs[i].mean_at = m >= 0 ? m : descs[i - 1].mean_at;
    descs[i].inv_at = v >= 0 ? v : descs[i - 1].inv_at;
  }
  const at::Device device = all_cpu ? at::Device(at::kCPU) : a.images[0].device();
  for (at::Tensor& p : parts) p = p.to(device);
  return at::cat(parts);
}

std::vector<at::Tensor> normalize_cuda(at::TensorList images, at::TensorList mean,
                                       at::TensorList inv_std, double shift,
                                       at::ScalarType out_dtype) {
  TORCH_CHECK_VALUE(!images.empty(), "normalize: `images` must hold at least one sample");
  const c10::cuda::CUDAGuard guard(images[0].device());
  normalize::Args a = normalize::prepare(images, mean, inv_std, out_dtype);
  TORCH_CHECK_VALUE(a.images[0].is_cuda(), "normalize: CUDA kernel got `images` on ",
                    a.images[0].device());
  std::vector<NormalizeDesc> descs(a.n);
  int64_t max_numel = 0;
  for (int64_t i = 0; i < a.n; ++i) {
    descs[i].src = a.images[i].const_data_ptr();
    descs[i].dst = a.out[i].mutable_data_ptr();
    descs[i].plan = a.plans[i];
    max_numel = std::max(max_numel, a.images[i].numel());
  }
  if (max_numel == 0) return a.out;
  const at::Tensor params = gather_params(a, descs);
  std::vector<const void*> params_dev;
  at::Tensor table = upload(descs, {&params}, a.images[0].device(), params_dev);
  const dim3 grid(grid_dim(max_numel, kThreads), grid_dim(a.n, 1));
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  // Index math stays below numel + a grid's stride; parameter offsets below their count.
  const int64_t max_index = std::max(max_numel + int64_t(grid.x) * kThreads, params.numel());
  normalize::dispatch(a.images[0].scalar_type(), out_dtype, [&](auto in_tag, auto out_tag) {
    dispatch_index(max_index, [&](auto index) {
      normalize_kernel<decltype(in_tag), decltype(out_tag), decltype(index)>
          <<<grid, kThreads, 0, stream>>>(
              reinterpret_cast<const NormalizeDesc*>(table.const_data_ptr()),
              static_cast<const float*>(params_dev[0]), a.n, static_cast<float>(shift));
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  return a.out;
}

}  // namespace
}  // namespace torchdali

TORCH_LIBRARY_IMPL(torchdali, CUDA, m) {
  m.impl("normalize", &torchdali::normalize_cuda);
}
