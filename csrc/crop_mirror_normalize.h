// torchdali::crop_mirror_normalize — argument checks and per-pixel math shared by the
// CPU (csrc/cpu) and CUDA (csrc/cuda) kernels. Schema and semantics: csrc/ops.cpp.
#pragma once

#include <ATen/ATen.h>
#include <c10/macros/Macros.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "dispatch.h"
#include "samples.h"

namespace torchdali {
namespace cmn {

// Float to output type the way DALI's ConvertSat does it: round to nearest with ties away
// from zero (roundf on both CPU and CUDA; DALI casts 2.5 to 3 and -0.5 to -1) and saturate
// to the type's range; NaN becomes 0.
template <typename T>
C10_HOST_DEVICE inline T convert_sat(float v) {
  if constexpr (std::is_integral_v<T>) {
    constexpr float lo = static_cast<float>(std::numeric_limits<T>::min());
    constexpr float hi = static_cast<float>(std::numeric_limits<T>::max());
    if (!(v == v)) return T(0);
    if (v <= lo) return std::numeric_limits<T>::min();
    if (v >= hi) return std::numeric_limits<T>::max();  // int32: hi rounds up to 2^31
    return static_cast<T>(::roundf(v));
  } else {
    return static_cast<T>(v);
  }
}

// Everything a kernel needs, validated and normalized: `mean`/`inv_std` are float32 [C],
// `fill` float32 [out_channels], `anchors` int64 [N, 2], `mirror` uint8 [N], all contiguous.
// These small parameters stay on the CPU when given there (the CUDA kernel uploads them in
// one copy, without waiting for the GPU) and otherwise move to the images' device.
struct Args {
  Samples images;
  at::Tensor anchors, mirror, mean, inv_std, fill;
  int64_t n = 0, channels = 0;
  bool in_chw = false;
  at::Tensor out;
};

// Where a pixel's channels are in an input image: channel c of pixel (y, x) is at
// (y * W + x) * px + c * ch.
struct InputStrides {
  int64_t px, ch;
};

C10_HOST_DEVICE inline InputStrides input_strides(bool in_chw, int64_t h, int64_t w,
                                                  int64_t channels) {
  return in_chw ? InputStrides{1, h * w} : InputStrides{channels, 1};
}

inline bool is_allowed_input(at::ScalarType t) {
  return t == at::kByte || t == at::kHalf || t == at::kFloat;
}

inline bool is_allowed_output(at::ScalarType t) {
  return t == at::kFloat || t == at::kHalf || t == at::kByte || t == at::kChar ||
         t == at::kShort || t == at::kInt;
}

// Where a small parameter is kept: on the CPU if given there, else on the images' device.
inline at::Device param_device(const at::Tensor& t, const at::Device& images_device) {
  return t.is_cpu() ? t.device() : images_device;
}

// A per-channel parameter of length 1 or `c` as a contiguous float32 [c] tensor.
inline at::Tensor per_channel(const at::Tensor& t, const char* name, int64_t c,
                              const at::Device& device) {
  TORCH_CHECK_VALUE(t.dim() == 1 && (t.size(0) == 1 || t.size(0) == c),
                    "crop_mirror_normalize: `", name, "` must have 1 or ", c,
                    " (the number of channels) elements, got shape ", t.sizes());
  return t.to(param_device(t, device), at::kFloat).expand({c}).contiguous();
}

inline Args prepare(Samples images, const at::Tensor& anchors, const at::Tensor& mirror,
                    const at::Tensor& mean, const at::Tensor& inv_std, int64_t crop_h,
                    int64_t crop_w, at::ScalarType out_dtype, bool out_chw, int64_t out_channels,
                    const at::Tensor& fill, bool in_chw) {
  Args a;
  a.images = std::move(images);
  a.n = a.images.size();
  a.in_chw = in_chw;
  const char* layout = in_chw ? "CHW" : "HWC";
  const int cdim = in_chw ? 0 : 2;
  TORCH_CHECK_VALUE(a.images.dim(0) == 3, "crop_mirror_normalize: `images` must be ", layout,
                    " (3 dims), sample 0 has shape ", a.images.sizes(0));
  const at::ScalarType dtype = a.images.dtype(0);
  TORCH_CHECK_TYPE(is_allowed_input(dtype),
                   "crop_mirror_normalize: `images` must be uint8, float16 or float32, got ",
                   dtype);
  a.channels = a.images.size(0, cdim);
  TORCH_CHECK_VALUE(a.channels > 0, "crop_mirror_normalize: `images` must have channels");
  const at::Device device = a.images.device(0);
  for (int64_t i = 0; i < a.n; ++i) {
    const at::IntArrayRef shape = a.images.sizes(i);
    TORCH_CHECK_VALUE(shape.size() == 3, "crop_mirror_normalize: `images` must be ", layout,
                      " (3 dims), sample ", i, " has shape ", shape);
    TORCH_CHECK_VALUE(shape[cdim] == a.channels,
                      "crop_mirror_normalize: all `images` must have the same number of "
                      "channels; sample 0 has ", a.channels, ", sample ", i, " has ",
                      shape[cdim]);
    TORCH_CHECK_TYPE(a.images.dtype(i) == dtype,
                     "crop_mirror_normalize: all `images` must have the same dtype; sample 0 "
                     "is ", dtype, ", sample ", i, " is ", a.images.dtype(i));
    TORCH_CHECK_VALUE(a.images.device(i) == device, "crop_mirror_normalize: all `images` must "
                      "be on one device; sample 0 is on ", device, ", sample ", i, " on ",
                      a.images.device(i));
  }
  TORCH_CHECK_VALUE(crop_h > 0 && crop_w > 0, "crop_mirror_normalize: `crop_h` and `crop_w` "
                    "must be positive, got crop_h=", crop_h, ", crop_w=", crop_w);
  // The output's size in 64 bits (it is allocated, then indexed, with int64 arithmetic).
  TORCH_CHECK_VALUE(static_cast<double>(a.n) * static_cast<double>(crop_h) * static_cast<double>(crop_w) *
                            static_cast<double>(std::max<int64_t>(out_channels, 1)) < 0x1p62,
                    "crop_mirror_normalize: an output of ", a.n, " x ", crop_h, " x ", crop_w, " x ", out_channels,
                    " elements (`crop_h`, `crop_w`) is too large to address");
  TORCH_CHECK_VALUE(out_channels >= a.channels, "crop_mirror_normalize: `out_channels` (",
                    out_channels, ") must be >= the number of input channels (", a.channels,
                    ")");
  TORCH_CHECK_TYPE(is_allowed_output(out_dtype), "crop_mirror_normalize: `out_dtype` must be "
                   "float32, float16, uint8, int8, int16 or int32, got ", out_dtype);
  TORCH_CHECK_VALUE(anchors.dim() == 2 && anchors.size(0) == a.n && anchors.size(1) == 2,
                    "crop_mirror_normalize: `anchors` must have shape [", a.n, ", 2], got ",
                    anchors.sizes());
  TORCH_CHECK_TYPE(!at::isFloatingType(anchors.scalar_type()) &&
                       !at::isComplexType(anchors.scalar_type()),
                   "crop_mirror_normalize: `anchors` must be an integer tensor, got ",
                   anchors.scalar_type());
  TORCH_CHECK_VALUE(mirror.dim() == 1 && mirror.size(0) == a.n,
                    "crop_mirror_normalize: `mirror` must have shape [", a.n, "], got ",
                    mirror.sizes());
  a.anchors = anchors.to(param_device(anchors, device), at::kLong).contiguous();
  a.mirror = mirror.ne(0).to(param_device(mirror, device), at::kByte).contiguous();
  a.mean = per_channel(mean, "mean", a.channels, device);
  a.inv_std = per_channel(inv_std, "inv_std", a.channels, device);

  // fill: one value for every channel, one per output channel, or one per input channel
  // (then the padded channels get 0).
  TORCH_CHECK_VALUE(fill.dim() == 1 && (fill.size(0) == 1 || fill.size(0) == a.channels ||
                                        fill.size(0) == out_channels),
                    "crop_mirror_normalize: `fill` must have 1, ", a.channels, " or ",
                    out_channels, " elements, got shape ", fill.sizes());
  at::Tensor f = fill.to(param_device(fill, device), at::kFloat);
  if (f.size(0) == 1) {
    f = f.expand({out_channels});
  } else if (f.size(0) < out_channels) {
    f = at::cat({f, at::zeros({out_channels - f.size(0)}, f.options())});
  }
  a.fill = f.contiguous();

  std::vector<int64_t> shape = out_chw
      ? std::vector<int64_t>{a.n, out_channels, crop_h, crop_w}
      : std::vector<int64_t>{a.n, crop_h, crop_w, out_channels};
  a.out = at::empty(shape, a.images.options().dtype(out_dtype));
  return a;
}

// Calls f(In{}, Out{}) with the C++ types of the input and output dtypes.
template <typename F>
void dispatch(at::ScalarType in, at::ScalarType out, F&& f) {
  dispatch_types<true>("crop_mirror_normalize", in, out, f);
}

// The height and width of input image i.
inline int64_t image_h(const Args& a, int64_t i) { return a.images.size(i, a.in_chw ? 1 : 0); }
inline int64_t image_w(const Args& a, int64_t i) { return a.images.size(i, a.in_chw ? 2 : 1); }

// Writes one output pixel (all out_channels channels). `in_px` is the input pixel or null
// when it lies outside the image, `in_cstride` the input's channel stride; `cstride` is the
// output's channel stride.
template <typename In, typename Out, typename Index>
C10_HOST_DEVICE inline void write_pixel(const In* in_px, Index in_cstride, Out* out_px,
                                        Index cstride, Index channels, Index out_channels,
                                        const float* mean, const float* inv_std,
                                        const float* fill, float scale, float shift) {
  if (in_px == nullptr) {
    for (Index c = 0; c < out_channels; ++c) out_px[c * cstride] = convert_sat<Out>(fill[c]);
    return;
  }
  for (Index c = 0; c < channels; ++c) {
    float v = (static_cast<float>(in_px[c * in_cstride]) - mean[c]) * inv_std[c] * scale + shift;
    out_px[c * cstride] = convert_sat<Out>(v);
  }
  for (Index c = channels; c < out_channels; ++c)
    out_px[c * cstride] = convert_sat<Out>(fill[c]);
}

}  // namespace cmn
}  // namespace torchdali
