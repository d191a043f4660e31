// torchdali::normalize — argument checks and per-sample plans shared by the CPU (csrc/cpu)
// and CUDA (csrc/cuda) kernels. Schema and semantics: csrc/ops.cpp.
#pragma once

#include <ATen/ATen.h>
#include <c10/macros/Macros.h>

#include <cstdint>
#include <vector>

#include "crop_mirror_normalize.h"  // cmn::convert_sat, cmn::param_device
#include "dispatch.h"

namespace torchdali {
namespace normalize {

constexpr int kMaxDims = 8;

// Sample i walked in row-major order over `shape`; the offsets of its mean and inv_std
// values follow their strides, 0 along broadcast dims. Unit dims drop out and adjacent dims
// that broadcast alike merge, so HWC normalized per channel is [H*W, C] with strides (0, 1).
struct Plan {
  int ndim;
  int64_t shape[kMaxDims];
  int64_t mean_stride[kMaxDims];
  int64_t inv_stride[kMaxDims];
  int64_t numel;
};

// Validated arguments: contiguous images, float32 contiguous parameters (one per sample, or
// one shared), kept on the CPU when given there, and one plan per sample.
struct Args {
  std::vector<at::Tensor> images, mean, inv_std, out;
  std::vector<Plan> plans;
  int64_t n = 0;
};

// The element strides of `p` (contiguous) as seen from a sample: 0 where p broadcasts.
inline std::vector<int64_t> broadcast_strides(const at::Tensor& p) {
  std::vector<int64_t> st(p.dim());
  int64_t s = 1;
  for (int64_t d = p.dim() - 1; d >= 0; --d) {
    st[d] = p.size(d) == 1 ? 0 : s;
    s *= p.size(d);
  }
  return st;
}

inline Plan make_plan(const at::Tensor& im, const at::Tensor& mean, const at::Tensor& inv) {
  Plan p{};
  p.numel = im.numel();
  const std::vector<int64_t> ms = broadcast_strides(mean), is = broadcast_strides(inv);
  for (int64_t d = 0; d < im.dim(); ++d) {
    const int64_t ext = im.size(d);
    if (ext == 1) continue;
    const int k = p.ndim - 1;
    if (k >= 0 && p.mean_stride[k] == ms[d] * ext && p.inv_stride[k] == is[d] * ext) {
      p.shape[k] *= ext;
      p.mean_stride[k] = ms[d];
      p.inv_stride[k] = is[d];
      continue;
    }
    p.shape[p.ndim] = ext;
    p.mean_stride[p.ndim] = ms[d];
    p.inv_stride[p.ndim] = is[d];
    ++p.ndim;
  }
  if (p.ndim == 0) {  // one element, or an empty sample's unit dims
    p.ndim = 1;
    p.shape[0] = 1;
  }
  return p;
}

// The offsets in mean and inv_std of the element `idx` (row-major in the plan's shape), in
// `Index` arithmetic (the CUDA kernel uses 32 bits where the sample allows).
template <typename Index>
C10_HOST_DEVICE inline void param_offsets(const Plan& p, Index idx, Index& m, Index& s) {
  m = 0;
  s = 0;
  for (int k = p.ndim - 1; k >= 0; --k) {
    const Index ext = static_cast<Index>(p.shape[k]);
    const Index c = idx % ext;
    m += c * static_cast<Index>(p.mean_stride[k]);
    s += c * static_cast<Index>(p.inv_stride[k]);
    idx /= ext;
  }
}

// (v - mean) * inv_std + shift, rounded after each step on both CPU and GPU (no fused
// multiply-add), so the CPU and CUDA kernels give the same results.
C10_HOST_DEVICE inline float value(float v, float mean, float inv_std, float shift) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(__fmul_rn(__fsub_rn(v, mean), inv_std), shift);
#else
  return (v - mean) * inv_std + shift;
#endif
}

template <typename In, typename Out>
C10_HOST_DEVICE inline Out apply(In v, float mean, float inv_std, float shift) {
  return cmn::convert_sat<Out>(value(static_cast<float>(v), mean, inv_std, shift));
}

inline bool is_allowed_input(at::ScalarType t) {
  return t == at::kByte || t == at::kChar || t == at::kShort || t == at::kInt ||
         t == at::kHalf || t == at::kFloat;
}

// Calls f(In{}, Out{}) for the input dtype (uint8, int8, int16, int32, float16, float32) and
// the output dtype (float32, float16, uint8, int8, int16, int32).
template <typename F>
void dispatch(at::ScalarType in, at::ScalarType out, F&& f) {
  constexpr const char* op = "normalize";
  switch (in) {
    case at::kByte: dispatch_out<true, uint8_t>(op, out, f); return;
    case at::kChar: dispatch_out<true, int8_t>(op, out, f); return;
    case at::kShort: dispatch_out<true, int16_t>(op, out, f); return;
    case at::kInt: dispatch_out<true, int32_t>(op, out, f); return;
    case at::kHalf: dispatch_out<true, at::Half>(op, out, f); return;
    case at::kFloat: dispatch_out<true, float>(op, out, f); return;
    default: TORCH_CHECK_TYPE(false, op, ": unsupported `images` dtype ", in);
  }
}

// `params` (named `name`): 1 tensor shared by all samples or one per sample, each with the
// sample's number of dims and extents 1 or the sample's.
inline std::vector<at::Tensor> check_params(const char* name, const at::TensorList& params,
                                            const std::vector<at::Tensor>& images) {
  const int64_t n = static_cast<int64_t>(images.size());
  const int64_t count = static_cast<int64_t>(params.size());
  TORCH_CHECK_VALUE(count == 1 || count == n, "normalize: `", name, "` must hold 1 tensor "
                    "(shared) or ", n, " (one per sample), got ", count);
  const at::Device device = images[0].device();
  std::vector<at::Tensor> out;
  for (int64_t i = 0; i < n; ++i) {
    const at::Tensor& p = params[count == 1 ? 0 : i];
    const at::Tensor& im = images[i];
    bool ok = p.dim() == im.dim();
    for (int64_t d = 0; ok && d < p.dim(); ++d) ok = p.size(d) == 1 || p.size(d) == im.size(d);
    TORCH_CHECK_VALUE(ok, "normalize: `", name, "` of shape ", p.sizes(), " does not "
                      "broadcast to sample ", i, " of shape ", im.sizes(), " (each extent must "
                      "be 1 or the sample's)");
    if (count == 1 && i > 0) {
      out.push_back(out[0]);
      continue;
    }
    out.push_back(p.to(cmn::param_device(p, device), at::kFloat).contiguous());
  }
  return out;
}

inline Args prepare(const at::TensorList& images, const at::TensorList& mean,
                    const at::TensorList& inv_std, at::ScalarType out_dtype) {
  Args a;
  a.n = static_cast<int64_t>(images.size());
  TORCH_CHECK_VALUE(a.n > 0, "normalize: `images` must hold at least one sample");
  const at::Tensor& first = images[0];
  TORCH_CHECK_TYPE(is_allowed_input(first.scalar_type()), "normalize: `images` must be uint8, "
                   "int8, int16, int32, float16 or float32, got ", first.scalar_type());
  TORCH_CHECK_TYPE(cmn::is_allowed_output(out_dtype), "normalize: `out_dtype` must be "
                   "float32, float16, uint8, int8, int16 or int32, got ", out_dtype);
  for (int64_t i = 0; i < a.n; ++i) {
    const at::Tensor& im = images[i];
    TORCH_CHECK_VALUE(im.dim() <= kMaxDims, "normalize: samples may have at most ", kMaxDims,
                      " dims, sample ", i, " has shape ", im.sizes());
    TORCH_CHECK_TYPE(im.scalar_type() == first.scalar_type(), "normalize: all samples must "
                     "have one dtype; sample 0 is ", first.scalar_type(), ", sample ", i,
                     " is ", im.scalar_type());
    TORCH_CHECK_VALUE(im.device() == first.device(), "normalize: all samples must be on one "
                      "device; sample 0 is on ", first.device(), ", sample ", i, " on ",
                      im.device());
    a.images.push_back(im.contiguous());
    a.out.push_back(at::empty(im.sizes(), im.options().dtype(out_dtype)));
  }
  a.mean = check_params("mean", mean, a.images);
  a.inv_std = check_params("inv_std", inv_std, a.images);
  for (int64_t i = 0; i < a.n; ++i)
    a.plans.push_back(make_plan(a.images[i], a.mean[i], a.inv_std[i]));
  return a;
}

}  // namespace normalize
}  // namespace torchdali
