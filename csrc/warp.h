// torchdali::warp_affine — argument checks, per-sample geometry and the per-pixel sampling
// shared by the CPU (csrc/cpu) and CUDA (csrc/cuda) kernels, for 2D images and 3D volumes.
// Schema and semantics: csrc/ops.cpp.
//
// Sampling follows DALI's warp kernels (kernels/imgproc/warp, sampler.h): output pixel (x, y)
// reads the source at p = M * (x + 0.5, y + 0.5, 1), in coordinates where pixel (c, r) covers
// [c, c + 1) x [r, r + 1). INTERP_NN takes pixel floor(p); INTERP_LINEAR blends the four
// pixels around p - 0.5 with DALI's float arithmetic. Source pixels outside the image are the
// border value (fill) or, without fill, the nearest edge pixel (DALI's BorderClamp). Volumes
// likewise, with voxel (x, y, z), a 3x4 matrix and the eight voxels around p - 0.5.
#pragma once

#include <ATen/ATen.h>
#include <c10/macros/Macros.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include "crop_mirror_normalize.h"
#include "dispatch.h"

namespace torchdali {
namespace warp {

// DALI's DALIInterpType values that its warp operators accept.
enum Interp : int32_t { kNN = 0, kLinear = 1 };

// One sample: where it is, its geometry and its output-to-input matrix (2x3 for images, 3x4
// for volumes, row by row). Element (z, r, c, ch) of the source is at
// src + ((z * in_h + r) * in_w + c) * in_pixel_stride + ch * in_channel_stride (HWC / DHWC:
// strides C and 1; CHW / CDHW: 1 and D * H * W); images have depth 1. Likewise the output.
struct Sample {
  const void* src;
  void* dst;
  int64_t in_d, in_h, in_w, out_d, out_h, out_w;
  int64_t in_pixel_stride, in_channel_stride, out_pixel_stride, out_channel_stride;
  int64_t channels;
  float m[12];
  int32_t interp;
};

// a * b and a + b without contraction into an FMA, so that the CPU and CUDA kernels compute
// the same floats (nvcc contracts by default; the x86-64 host build has no FMA).
C10_HOST_DEVICE inline float mul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

C10_HOST_DEVICE inline float add(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// Source coordinates far outside any image are pulled in to +-2^30 so that they convert to
// indices without overflow (NaN from an overflowing matrix product goes to -2^30); every
// tap stays outside, so the result is unchanged.
C10_HOST_DEVICE inline float limit(float v) {
  constexpr float kFar = 1073741824.f;
  return ::fminf(::fmaxf(v, -kFar), kFar);
}

template <typename Index>
C10_HOST_DEVICE inline Index clamp_index(Index v, Index size) {
  return v < 0 ? 0 : (v >= size ? size - 1 : v);
}

// The source point of output pixel x of a row: m x (x + 0.5, y + 0.5, 1), given the row's
// terms px_y = m[1] * (y + 0.5) and py_y = m[4] * (y + 0.5) (a row computes them once).
template <typename Index>
C10_HOST_DEVICE inline void source_point(const Sample& s, Index x, float px_y, float py_y,
                                         float& px, float& py) {
  const float fx = static_cast<float>(x) + 0.5f;
  px = add(add(mul(s.m[0], fx), px_y), s.m[2]);
  py = add(add(mul(s.m[3], fx), py_y), s.m[5]);
}

// A pixel INTERP_NN copies, in the output type: exact where the types agree (an int32 label
// map keeps values that float32 would round), else converted as DALI's ConvertSat does.
template <typename Out, typename In>
C10_HOST_DEVICE inline Out nn_value(In v) {
  if constexpr (std::is_same_v<In, Out>) {
    return v;
  } else {
    return cmn::convert_sat<Out>(static_cast<float>(v));
  }
}

// Writes output pixel (x, y) of sample `s`, all channels. `border`: nullptr to clamp to the
// edge, else 2 * channels floats: the value INTERP_NN writes outside the image, then the
// value INTERP_LINEAR reads there (see border_table). Offsets are in `Index` arithmetic (the
// CUDA kernel uses 32 bits where the sample allows); kChannels > 0 fixes the channel count.
template <typename In, typename Out, typename Index = int64_t, int kChannels = 0>
C10_HOST_DEVICE inline void warp_pixel(const Sample& s, Index x, Index y, const float* border) {
  const In* src = static_cast<const In*>(s.src);
  const Index in_w = static_cast<Index>(s.in_w), in_h = static_cast<Index>(s.in_h);
  const Index channels = kChannels > 0 ? kChannels : static_cast<Index>(s.channels);
  const Index ps = static_cast<Index>(s.in_pixel_stride), cs = static_cast<Index>(s.in_channel_stride);
  const Index ocs = static_cast<Index>(s.out_channel_stride);
  Out* dst = static_cast<Out*>(s.dst) + (y * static_cast<Index>(s.out_w) + x) * static_cast<Index>(s.out_pixel_stride);
  const float fy = static_cast<float>(y) + 0.5f;
  float px, py;
  source_point(s, x, mul(s.m[1], fy), mul(s.m[4], fy), px, py);
  if (s.interp == kNN) {
    const Index c0 = static_cast<Index>(::floorf(limit(px)));
    const Index r0 = static_cast<Index>(::floorf(limit(py)));
    const bool inside = c0 >= 0 && c0 < in_w && r0 >= 0 && r0 < in_h;
    if (!inside && border != nullptr) {
      for (Index ch = 0; ch < channels; ++ch) dst[ch * ocs] = cmn::convert_sat<Out>(border[ch]);
      return;
    }
    const In* p = src + (clamp_index(r0, in_h) * in_w + clamp_index(c0, in_w)) * ps;
    for (Index ch = 0; ch < channels; ++ch) dst[ch * ocs] = nn_value<Out>(p[ch * cs]);
    return;
  }
  const float sx = limit(px - 0.5f), sy = limit(py - 0.5f);
  const float fx0 = ::floorf(sx), fy0 = ::floorf(sy);
  const Index c0 = static_cast<Index>(fx0), r0 = static_cast<Index>(fy0);
  const float qx = sx - fx0, wx = 1.f - qx, qy = sy - fy0;
  // The four taps (r0, c0), (r0, c0+1), (r0+1, c0), (r0+1, c0+1): element offsets, or -1
  // where the tap reads the border value.
  // DALI's blend of the four taps' values, converted to the output type.
  auto blend = [&](float t0, float t1, float t2, float t3) {
    const float top = add(mul(t0, wx), mul(t1, qx)), bottom = add(mul(t2, wx), mul(t3, qx));
    return cmn::convert_sat<Out>(add(top, mul(bottom - top, qy)));
  };
  if (c0 >= 0 && r0 >= 0 && c0 + 1 < in_w && r0 + 1 < in_h) {  // all inside: most pixels
    const In* p = src + (r0 * in_w + c0) * ps;
    const Index below = in_w * ps;
    for (Index ch = 0; ch < channels; ++ch) {
      const In* q = p + ch * cs;
      dst[ch * ocs] = blend(static_cast<float>(q[0]), static_cast<float>(q[ps]), static_cast<float>(q[below]),
                            static_cast<float>(q[below + ps]));
    }
    return;
  }
  Index off[4];
  for (int k = 0; k < 4; ++k) {
    const Index r = r0 + (k >> 1), c = c0 + (k & 1);
    const bool inside = c >= 0 && c < in_w && r >= 0 && r < in_h;
    if (!inside && border != nullptr) {
      off[k] = -1;
      continue;
    }
    off[k] = (clamp_index(r, in_h) * in_w + clamp_index(c, in_w)) * ps;
  }
  const float* fill = border == nullptr ? nullptr : border + channels;
  for (Index ch = 0; ch < channels; ++ch) {
    float t[4];
    for (int k = 0; k < 4; ++k)
      t[k] = off[k] < 0 ? fill[ch] : static_cast<float>(src[off[k] + ch * cs]);
    dst[ch * ocs] = blend(t[0], t[1], t[2], t[3]);
  }
}

// The source point of output voxel (x, y, z) of a volume, as DALI's affine mapping computes it:
// each coordinate is ((m3 + m0 x) + m1 y) + m2 z at the voxel's centre.
C10_HOST_DEVICE inline void source_point_3d(const Sample& s, int64_t x, int64_t y, int64_t z,
                                            float p[3]) {
  const float f[3] = {static_cast<float>(x) + 0.5f, static_cast<float>(y) + 0.5f,
                      static_cast<float>(z) + 0.5f};
  for (int k = 0; k < 3; ++k) {
    const float* row = s.m + 4 * k;
    p[k] = limit(add(add(add(row[3], mul(row[0], f[0])), mul(row[1], f[1])), mul(row[2], f[2])));
  }
}

// Writes output voxel (x, y, z) of volume `s`, all channels (`border` as for warp_pixel).
// INTERP_LINEAR blends the eight voxels around p - 0.5 as DALI's 3D sampler does: along x,
// then y (weighted sums), then a lerp along z.
template <typename In, typename Out>
C10_HOST_DEVICE inline void warp_voxel(const Sample& s, int64_t x, int64_t y, int64_t z,
                                       const float* border) {
  const In* src = static_cast<const In*>(s.src);
  Out* dst = static_cast<Out*>(s.dst) + ((z * s.out_h + y) * s.out_w + x) * s.out_pixel_stride;
  float p[3];
  source_point_3d(s, x, y, z, p);
  const int64_t cs = s.in_channel_stride, ocs = s.out_channel_stride;
  const int64_t size[3] = {s.in_w, s.in_h, s.in_d};
  if (s.interp == kNN) {
    int64_t i[3];
    bool inside = true;
    for (int k = 0; k < 3; ++k) {
      i[k] = static_cast<int64_t>(::floorf(p[k]));
      inside = inside && i[k] >= 0 && i[k] < size[k];
    }
    if (!inside && border != nullptr) {
      for (int64_t ch = 0; ch < s.channels; ++ch)
        dst[ch * ocs] = cmn::convert_sat<Out>(border[ch]);
      return;
    }
    const In* v = src + ((clamp_index(i[2], s.in_d) * s.in_h + clamp_index(i[1], s.in_h)) * s.in_w +
                         clamp_index(i[0], s.in_w)) * s.in_pixel_stride;
    for (int64_t ch = 0; ch < s.channels; ++ch) dst[ch * ocs] = nn_value<Out>(v[ch * cs]);
    return;
  }
  int64_t i0[3];
  float q[3];
  for (int k = 0; k < 3; ++k) {
    const float sp = p[k] - 0.5f, f0 = ::floorf(sp);
    i0[k] = static_cast<int64_t>(f0);
    q[k] = sp - f0;
  }
  // The eight taps, tap k at (x0 + (k & 1), y0 + (k >> 1 & 1), z0 + (k >> 2)): element
  // offsets, or -1 where the tap reads the border value.
  int64_t off[8];
  for (int k = 0; k < 8; ++k) {
    const int64_t c = i0[0] + (k & 1), r = i0[1] + ((k >> 1) & 1), d = i0[2] + (k >> 2);
    const bool inside = c >= 0 && c < s.in_w && r >= 0 && r < s.in_h && d >= 0 && d < s.in_d;
    if (!inside && border != nullptr) {
      off[k] = -1;
      continue;
    }
    off[k] = ((clamp_index(d, s.in_d) * s.in_h + clamp_index(r, s.in_h)) * s.in_w +
              clamp_index(c, s.in_w)) * s.in_pixel_stride;
  }
  const float* fill = border == nullptr ? nullptr : border + s.channels;
  const float px = 1.f - q[0], py = 1.f - q[1];
  for (int64_t ch = 0; ch < s.channels; ++ch) {
    float t[8];
    for (int k = 0; k < 8; ++k)
      t[k] = off[k] < 0 ? fill[ch] : static_cast<float>(src[off[k] + ch * cs]);
    const float s00 = add(mul(t[0], px), mul(t[1], q[0])), s01 = add(mul(t[2], px), mul(t[3], q[0]));
    const float s10 = add(mul(t[4], px), mul(t[5], q[0])), s11 = add(mul(t[6], px), mul(t[7], q[0]));
    const float s0 = add(mul(s00, py), mul(s01, q[1])), s1 = add(mul(s10, py), mul(s11, q[1]));
    dst[ch * ocs] = cmn::convert_sat<Out>(add(s0, mul(s1 - s0, q[2])));
  }
}

// The border values for In -> Out, as DALI forms them: fill_value is converted to the output
// type; INTERP_NN writes that, INTERP_LINEAR converts it to the input type and blends it.
// Returns float32 [2 * C] on the CPU: the NN values, then the LINEAR values.
template <typename In, typename Out>
at::Tensor border_table(const at::Tensor& fill) {
  const int64_t c = fill.numel();
  at::Tensor table = at::empty({2 * c}, at::TensorOptions().dtype(at::kFloat));
  const float* f = fill.const_data_ptr<float>();
  float* t = table.data_ptr<float>();
  for (int64_t k = 0; k < c; ++k) {
    const float out = static_cast<float>(cmn::convert_sat<Out>(f[k]));
    t[k] = out;
    t[c + k] = static_cast<float>(cmn::convert_sat<In>(out));
  }
  return table;
}

inline bool is_allowed(at::ScalarType t) {
  return t == at::kByte || t == at::kShort || t == at::kInt || t == at::kHalf || t == at::kFloat;
}

inline bool is_label_type(at::ScalarType t) { return t == at::kShort || t == at::kInt; }

// The conversions DALI's warp operators make for int16 and int32 (label maps, masks): to their
// own type or to float32, and float32 to either; uint8 / float16 / float32 convert freely.
inline bool is_allowed_pair(at::ScalarType in, at::ScalarType out) {
  if (is_label_type(in)) return out == in || out == at::kFloat;
  if (is_label_type(out)) return in == at::kFloat;
  return true;
}

// Everything a kernel needs, validated: contiguous images, one Sample per image (dst set
// once the outputs exist) and the fill as float32 [C] on the CPU (undefined: clamp). `ndim`:
// 2 for images (HWC / CHW), 3 for volumes (DHWC / CDHW), as the matrices say.
struct Args {
  std::vector<at::Tensor> images;
  std::vector<Sample> samples;
  at::Tensor fill;
  int64_t n = 0, channels = 0, ndim = 2;
  bool chw = false;
  at::ScalarType out_dtype = at::kByte;
};

inline const char* layout_name(int64_t ndim, bool chw) {
  if (ndim == 3) return chw ? "CDHW" : "DHWC";
  return chw ? "CHW" : "HWC";
}

inline void check_images(Args& a, const at::TensorList& images, bool chw) {
  const at::Tensor& first = images[0];
  const int64_t dims = a.ndim + 1, cdim = chw ? 0 : a.ndim;
  const char* layout = layout_name(a.ndim, chw);
  TORCH_CHECK_VALUE(first.dim() == dims, "warp_affine: `images` must be ", layout, " (", dims,
                    " dims, as the matrices are ", a.ndim, "D), sample 0 has shape ",
                    first.sizes());
  TORCH_CHECK_TYPE(is_allowed(first.scalar_type()), "warp_affine: `images` must be uint8, "
                   "int16, int32, float16 or float32, got ", first.scalar_type());
  a.channels = first.size(cdim);
  for (int64_t i = 0; i < a.n; ++i) {
    const at::Tensor& im = images[i];
    TORCH_CHECK_VALUE(im.dim() == dims && im.size(cdim) == a.channels, "warp_affine: all "
                      "`images` must be ", layout, " with ", a.channels, " channels; sample ", i,
                      " has shape ", im.sizes());
    TORCH_CHECK_TYPE(im.scalar_type() == first.scalar_type(), "warp_affine: all `images` must "
                     "have one dtype; sample 0 is ", first.scalar_type(), ", sample ", i, " is ",
                     im.scalar_type());
    TORCH_CHECK_VALUE(im.device() == first.device(), "warp_affine: all `images` must be on one "
                      "device; sample 0 is on ", first.device(), ", sample ", i, " on ",
                      im.device());
    TORCH_CHECK_VALUE(im.numel() > 0, "warp_affine: sample ", i, " is empty (", im.sizes(), ")");
    a.images.push_back(im.contiguous());
  }
}

inline Args prepare(const at::TensorList& images, const at::Tensor& matrices,
                    at::IntArrayRef out_sizes, at::IntArrayRef interp,
                    const std::optional<at::Tensor>& fill, at::ScalarType out_dtype, bool chw) {
  Args a;
  a.n = static_cast<int64_t>(images.size());
  a.chw = chw;
  a.out_dtype = out_dtype;
  TORCH_CHECK_VALUE(a.n > 0, "warp_affine: `images` must hold at least one image");
  const bool volumes = matrices.dim() == 3 && matrices.size(1) == 3 && matrices.size(2) == 4;
  a.ndim = volumes ? 3 : 2;
  const int64_t nd = a.ndim;
  TORCH_CHECK_VALUE(matrices.dim() == 3 && matrices.size(0) == a.n &&
                    (volumes || (matrices.size(1) == 2 && matrices.size(2) == 3)),
                    "warp_affine: `matrices` must have shape [", a.n, ", 2, 3] (one 2x3 "
                    "output-to-input matrix per image) or [", a.n, ", 3, 4] (3x4, per volume), "
                    "got ", matrices.sizes());
  check_images(a, images, chw);
  TORCH_CHECK_TYPE(is_allowed(out_dtype), "warp_affine: `out_dtype` must be uint8, int16, "
                   "int32, float16 or float32, got ", out_dtype);
  TORCH_CHECK_TYPE(is_allowed_pair(a.images[0].scalar_type(), out_dtype), "warp_affine: int16 "
                   "and int32 images are warped to their own type or float32, and only float32 "
                   "images to int16 or int32; got ", a.images[0].scalar_type(), " to ", out_dtype);
  TORCH_CHECK_TYPE(at::isFloatingType(matrices.scalar_type()), "warp_affine: `matrices` must "
                   "be floating point, got ", matrices.scalar_type());
  TORCH_CHECK_VALUE(static_cast<int64_t>(out_sizes.size()) == nd * a.n, "warp_affine: "
                    "`out_sizes` must hold ", nd, nd == 3 ? " values (depth, height, width)" :
                    " values (height, width)", " per image: ", nd * a.n, ", got ",
                    out_sizes.size());
  TORCH_CHECK_VALUE(static_cast<int64_t>(interp.size()) == a.n, "warp_affine: `interp` must "
                    "hold one interpolation type per image: ", a.n, ", got ", interp.size());
  if (fill.has_value()) {
    const at::Tensor& f = *fill;
    TORCH_CHECK_VALUE(f.dim() == 1 && (f.size(0) == 1 || f.size(0) == a.channels),
                      "warp_affine: `fill` must have 1 or ", a.channels, " (the number of "
                      "channels) values, got shape ", f.sizes());
    a.fill = f.to(at::kCPU, at::kFloat).expand({a.channels}).contiguous();
  }
  const at::Tensor m = matrices.to(at::kCPU, at::kFloat).contiguous();
  const float* mp = m.const_data_ptr<float>();
  const int64_t mk = nd * (nd + 1);  // matrix values per sample
  for (int64_t i = 0; i < a.n; ++i) {
    const at::Tensor& im = a.images[i];
    const int64_t* os = out_sizes.data() + nd * i;
    const int64_t od = nd == 3 ? os[0] : 1, oh = os[nd - 2], ow = os[nd - 1];
    TORCH_CHECK_VALUE(od > 0 && oh > 0 && ow > 0, "warp_affine: output size of sample ", i,
                      " must be positive, got ", at::IntArrayRef(os, nd));
    TORCH_CHECK_VALUE(interp[i] == kNN || interp[i] == kLinear, "warp_affine: interpolation "
                      "type ", interp[i], " of sample ", i, " is not supported; warp_affine and "
                      "rotate take INTERP_NN (0) or INTERP_LINEAR (1)");
    Sample s{};
    s.src = im.const_data_ptr();
    const int64_t first = chw ? 1 : 0;  // the first spatial dim
    s.in_d = nd == 3 ? im.size(first) : 1;
    s.in_h = im.size(first + nd - 2);
    s.in_w = im.size(first + nd - 1);
    s.out_d = od;
    s.out_h = oh;
    s.out_w = ow;
    s.channels = a.channels;
    s.in_pixel_stride = chw ? 1 : a.channels;
    s.in_channel_stride = chw ? s.in_d * s.in_h * s.in_w : 1;
    s.out_pixel_stride = chw ? 1 : a.channels;
    s.out_channel_stride = chw ? od * oh * ow : 1;
    for (int k = 0; k < mk; ++k) {
      s.m[k] = mp[mk * i + k];
      TORCH_CHECK_VALUE(std::isfinite(s.m[k]), "warp_affine: the matrix of sample ", i,
                        " is not finite: ", at::ArrayRef<float>(mp + mk * i, mk));
    }
    s.interp = static_cast<int32_t>(interp[i]);
    a.samples.push_back(s);
  }
  return a;
}

// Output sample i's shape.
inline std::vector<int64_t> out_shape(const Args& a, int64_t i) {
  const Sample& s = a.samples[i];
  std::vector<int64_t> shape;
  if (a.chw) shape.push_back(a.channels);
  if (a.ndim == 3) shape.push_back(s.out_d);
  shape.push_back(s.out_h);
  shape.push_back(s.out_w);
  if (!a.chw) shape.push_back(a.channels);
  return shape;
}

// The outputs, one per sample or (dense) views of one [N, ...] tensor; sets the samples' dst.
inline std::vector<at::Tensor> allocate(Args& a, bool dense, at::Tensor* batch) {
  const at::TensorOptions opts = a.images[0].options().dtype(a.out_dtype);
  std::vector<at::Tensor> outs;
  if (dense) {
    const std::vector<int64_t> shape = out_shape(a, 0);
    for (int64_t i = 1; i < a.n; ++i)
      TORCH_CHECK_VALUE(out_shape(a, i) == shape, "warp_affine.dense: all output sizes must be "
                        "equal; sample 0 is ", at::IntArrayRef(shape), ", sample ", i, " is ",
                        at::IntArrayRef(out_shape(a, i)));
    std::vector<int64_t> full{a.n};
    full.insert(full.end(), shape.begin(), shape.end());
    *batch = at::empty(full, opts);
    outs = batch->unbind(0);
  } else {
    for (int64_t i = 0; i < a.n; ++i) outs.push_back(at::empty(out_shape(a, i), opts));
  }
  for (int64_t i = 0; i < a.n; ++i) a.samples[i].dst = outs[i].data_ptr();
  return outs;
}

// Calls f(In{}, Out{}) with the C++ types of the input and output dtypes (is_allowed_pair).
template <typename F>
void dispatch(at::ScalarType in, at::ScalarType out, F&& f) {
  if (in == at::kShort && out == at::kShort) return f(int16_t{}, int16_t{});
  if (in == at::kShort && out == at::kFloat) return f(int16_t{}, float{});
  if (in == at::kInt && out == at::kInt) return f(int32_t{}, int32_t{});
  if (in == at::kInt && out == at::kFloat) return f(int32_t{}, float{});
  if (in == at::kFloat && out == at::kShort) return f(float{}, int16_t{});
  if (in == at::kFloat && out == at::kInt) return f(float{}, int32_t{});
  dispatch_types<false>("warp_affine", in, out, f);
}

}  // namespace warp
}  // namespace torchdali
