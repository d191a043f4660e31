// torchdali::color_transform — argument checks and per-pixel math shared by the CPU
// (csrc/cpu) and CUDA (csrc/cuda) kernels. Schema and semantics: csrc/ops.cpp.
#pragma once

#include <ATen/ATen.h>
#include <c10/macros/Macros.h>

#include <cstdint>
#include <vector>

#include "crop_mirror_normalize.h"  // cmn::convert_sat: DALI's rounding and saturation

#include "dense.h"
#include "dispatch.h"

namespace torchdali {
namespace color {

// Validated, normalized arguments: `matrices` float32 [N, C, C], `offsets` float32 [N, C],
// both contiguous, kept on the CPU when given there (the CUDA kernel uploads them in one
// copy) and otherwise on the images' device. `out[i]` has images[i]'s shape.
struct Args {
  std::vector<at::Tensor> images, out;
  at::Tensor matrices, offsets;
  int64_t n = 0, channels = 0;
};

inline bool is_allowed_input(at::ScalarType t) {
  return t == at::kByte || t == at::kHalf || t == at::kFloat;
}

inline bool is_allowed_output(at::ScalarType t) {
  return t == at::kFloat || t == at::kHalf || t == at::kByte || t == at::kChar ||
         t == at::kShort || t == at::kInt;
}

// Checks the arguments; the outputs are views of `dense_out` when it is defined
// (color_transform.dense).
inline Args prepare(const at::TensorList& images, const at::Tensor& matrices,
                    const at::Tensor& offsets, at::ScalarType out_dtype,
                    const at::Tensor& dense_out = at::Tensor()) {
  Args a;
  a.n = static_cast<int64_t>(images.size());
  TORCH_CHECK_VALUE(a.n > 0, "color_transform: `images` must hold at least one image");
  const at::Tensor& first = images[0];
  TORCH_CHECK_VALUE(first.dim() >= 2, "color_transform: `images` must be channel-last (HWC), "
                    "sample 0 has shape ", first.sizes());
  TORCH_CHECK_TYPE(is_allowed_input(first.scalar_type()),
                   "color_transform: `images` must be uint8, float16 or float32, got ",
                   first.scalar_type());
  TORCH_CHECK_TYPE(is_allowed_output(out_dtype), "color_transform: `out_dtype` must be "
                   "float32, float16, uint8, int8, int16 or int32, got ", out_dtype);
  a.channels = first.size(-1);
  TORCH_CHECK_VALUE(a.channels > 0, "color_transform: `images` must have channels");
  const at::Device device = first.device();
  a.images.reserve(a.n);
  a.out.reserve(a.n);
  for (int64_t i = 0; i < a.n; ++i) {
    const at::Tensor& im = images[i];
    TORCH_CHECK_VALUE(im.dim() >= 2, "color_transform: `images` must be channel-last (HWC), "
                      "sample ", i, " has shape ", im.sizes());
    TORCH_CHECK_VALUE(im.size(-1) == a.channels, "color_transform: all `images` must have "
                      "the same number of channels; sample 0 has ", a.channels, ", sample ",
                      i, " has ", im.size(-1));
    TORCH_CHECK_TYPE(im.scalar_type() == first.scalar_type(),
                     "color_transform: all `images` must have the same dtype; sample 0 is ",
                     first.scalar_type(), ", sample ", i, " is ", im.scalar_type());
    TORCH_CHECK_VALUE(im.device() == device, "color_transform: all `images` must be on one "
                      "device; sample 0 is on ", device, ", sample ", i, " on ", im.device());
    a.images.push_back(im.contiguous());
    a.out.push_back(sample_output(dense_out, i, im, out_dtype));
  }
  const int64_t c = a.channels;
  TORCH_CHECK_VALUE(matrices.dim() == 3 && matrices.size(0) == a.n && matrices.size(1) == c &&
                        matrices.size(2) == c,
                    "color_transform: `matrices` must have shape [", a.n, ", ", c, ", ", c,
                    "], got ", matrices.sizes());
  TORCH_CHECK_VALUE(offsets.dim() == 2 && offsets.size(0) == a.n && offsets.size(1) == c,
                    "color_transform: `offsets` must have shape [", a.n, ", ", c, "], got ",
                    offsets.sizes());
  a.matrices = matrices.to(cmn::param_device(matrices, device), at::kFloat).contiguous();
  a.offsets = offsets.to(cmn::param_device(offsets, device), at::kFloat).contiguous();
  return a;
}

// Calls f(In{}, Out{}) with the C++ types of the input and output dtypes.
template <typename F>
void dispatch(at::ScalarType in, at::ScalarType out, F&& f) {
  dispatch_types<true>("color_transform", in, out, f);
}

// One pixel: out[c] = offset[c] + sum_k matrix[c][k] * in[k], rounded and saturated.
template <typename In, typename Out>
C10_HOST_DEVICE inline void transform_pixel(const In* in, Out* out, int64_t channels,
                                            const float* matrix, const float* offset) {
  for (int64_t c = 0; c < channels; ++c) {
    float v = offset[c];
    for (int64_t k = 0; k < channels; ++k)
      v += matrix[c * channels + k] * static_cast<float>(in[k]);
    out[c] = cmn::convert_sat<Out>(v);
  }
}

// The common 3-channel case, with the input pixel read once into registers.
template <typename In, typename Out>
C10_HOST_DEVICE inline void transform_pixel3(const In* in, Out* out, const float* m,
                                             const float* offset) {
  const float r = static_cast<float>(in[0]), g = static_cast<float>(in[1]),
              b = static_cast<float>(in[2]);
  out[0] = cmn::convert_sat<Out>(offset[0] + m[0] * r + m[1] * g + m[2] * b);
  out[1] = cmn::convert_sat<Out>(offset[1] + m[3] * r + m[4] * g + m[5] * b);
  out[2] = cmn::convert_sat<Out>(offset[2] + m[6] * r + m[7] * g + m[8] * b);
}

}  // namespace color
}  // namespace torchdali
