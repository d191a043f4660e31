// torchdali::separable_conv — argument checks, per-sample passes and the 1D convolution
// shared by the CPU (csrc/cpu) and CUDA (csrc/cuda) kernels. Schema and semantics:
// csrc/ops.cpp.
#pragma once

#include <ATen/ATen.h>
#include <c10/macros/Macros.h>

#include <cstdint>
#include <vector>

#include "crop_mirror_normalize.h"  // cmn::convert_sat, cmn::param_device
#include "dispatch.h"
#include "geometry.h"  // geometry::check_images

namespace torchdali {
namespace conv {

constexpr int kMaxAxes = 3;

// One pass of one sample along one spatial axis: the sample seen as [outer, n, inner] and
// convolved along n with the window of 2 * radius + 1 weights at `window_at`.
struct Pass {
  int64_t outer, n, inner;
  int64_t window_at;
  int64_t radius;
};

// Validated arguments: contiguous images and their outputs; `windows` float32 contiguous
// (kept on the CPU when given there); passes[p * n + i] is pass p of sample i, along spatial
// axis num_axes - 1 - p (innermost first, as DALI). Passes before the last write float32
// into a scratch buffer at tmp_at[i] (two alternating halves of tmp_size for 3 axes).
struct Args {
  std::vector<at::Tensor> images, out;
  at::Tensor windows;
  std::vector<Pass> passes;
  std::vector<int64_t> tmp_at;
  int64_t n = 0, num_axes = 0, tmp_size = 0;
};

inline bool is_allowed_input(at::ScalarType t) {
  return t == at::kByte || t == at::kHalf || t == at::kFloat;
}

inline Args prepare(const at::TensorList& images, const at::Tensor& windows,
                    at::IntArrayRef window_sizes, int64_t first_axis, int64_t num_axes,
                    at::ScalarType out_dtype) {
  Args a;
  TORCH_CHECK_VALUE(first_axis >= 0 && first_axis < geometry::kMaxDims, "separable_conv: `first_axis` must be 0 "
                    "to ", geometry::kMaxDims - 1, ", got ", first_axis);
  TORCH_CHECK_VALUE(num_axes >= 1 && num_axes <= kMaxAxes, "separable_conv: `num_axes` must "
                    "be 1 to ", kMaxAxes, ", got ", num_axes);
  a.images = geometry::check_images("separable_conv", images, first_axis + num_axes);
  a.n = static_cast<int64_t>(a.images.size());
  a.num_axes = num_axes;
  const at::Tensor& first = a.images[0];
  TORCH_CHECK_TYPE(is_allowed_input(first.scalar_type()), "separable_conv: `images` must be "
                   "uint8, float16 or float32, got ", first.scalar_type());
  TORCH_CHECK_TYPE(is_allowed_input(out_dtype), "separable_conv: `out_dtype` must be uint8, "
                   "float16 or float32, got ", out_dtype);
  TORCH_CHECK_VALUE(static_cast<int64_t>(window_sizes.size()) == a.n * num_axes,
                    "separable_conv: `window_sizes` must have ", a.n * num_axes, " entries (",
                    num_axes, " per sample), got ", window_sizes.size());
  int64_t total = 0;
  for (size_t k = 0; k < window_sizes.size(); ++k) {
    const int64_t w = window_sizes[k];
    TORCH_CHECK_VALUE(w > 0 && w % 2 == 1, "separable_conv: `window_sizes` must be odd and "
                      "positive; sample ", k / num_axes, ", axis ", k % num_axes, " has ", w);
    total += w;
  }
  TORCH_CHECK_VALUE(windows.dim() == 1 && windows.numel() == total, "separable_conv: "
                    "`windows` must be 1-D with ", total, " weights (the sum of "
                    "`window_sizes`), got shape ", windows.sizes());
  a.windows = windows.to(cmn::param_device(windows, first.device()), at::kFloat).contiguous();

  a.passes.resize(num_axes * a.n);
  int64_t window_at = 0;
  for (int64_t i = 0; i < a.n; ++i) {
    const at::Tensor& im = a.images[i];
    a.out.push_back(at::empty(im.sizes(), im.options().dtype(out_dtype)));
    a.tmp_at.push_back(a.tmp_size);
    a.tmp_size += im.numel();
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < first_axis; ++d) outer *= im.size(d);
    for (int64_t d = first_axis + num_axes; d < im.dim(); ++d) inner *= im.size(d);
    for (int64_t ax = 0; ax < num_axes; ++ax) {
      int64_t before = outer, after = inner;
      for (int64_t d = 0; d < ax; ++d) before *= im.size(first_axis + d);
      for (int64_t d = ax + 1; d < num_axes; ++d) after *= im.size(first_axis + d);
      const int64_t w = window_sizes[i * num_axes + ax];
      a.passes[(num_axes - 1 - ax) * a.n + i] =
          Pass{before, im.size(first_axis + ax), after, window_at, (w - 1) / 2};
      window_at += w;
    }
  }
  return a;
}

// The source index of `i` in [0, n) with reflect-101 borders (DALI's and OpenCV's
// BORDER_REFLECT_101: ... 2 1 | 0 1 2 ... n-1 | n-2 ...), however far outside.
template <typename Index>
C10_HOST_DEVICE inline Index reflect101(Index i, Index n) {
  if (n == 1) return 0;
  const Index period = 2 * (n - 1);
  i = (i < 0 ? -i : i) % period;
  return i >= n ? period - i : i;
}

// acc + w * v, rounded after each step on both CPU and GPU (no fused multiply-add), so the
// CPU and CUDA kernels give the same floats.
C10_HOST_DEVICE inline float mul_add(float acc, float w, float v) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(acc, __fmul_rn(w, v));
#else
  return acc + w * v;
#endif
}

// Output element x of the line at `src` (n elements `inner` apart): sum_k w[k] * src[x + k - r]
// for k = 0..2r, in order; `Index` arithmetic (the CUDA kernel uses 32 bits where it can).
template <typename Src, typename Index>
C10_HOST_DEVICE inline float convolve_at(const Src* src, Index n, Index inner, Index x,
                                         const float* w, Index r) {
  float acc = 0.f;
  if (x >= r && x + r < n) {
    const Src* s = src + (x - r) * inner;
    for (Index k = 0; k <= 2 * r; ++k) acc = mul_add(acc, w[k], static_cast<float>(s[k * inner]));
  } else {
    for (Index k = 0; k <= 2 * r; ++k)
      acc = mul_add(acc, w[k], static_cast<float>(src[reflect101(x + k - r, n) * inner]));
  }
  return acc;
}

}  // namespace conv
}  // namespace torchdali
