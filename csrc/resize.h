// torchdali::resize — DALI's separable resampling, shared by the CPU (csrc/cpu) and CUDA
// (csrc/cuda) kernels. Schema and semantics: csrc/ops.cpp.
//
// Each axis is resampled with a filter read from a small table by linear interpolation, the
// way DALI's ResamplingFilter does (kernels/imgproc/resample): the triangle [0, 1, 0], 129
// Keys-cubic nodes over [-2, 2], 193 Lanczos-3 nodes over [-3, 3] and 65 Gaussian nodes. Output
// coordinate x samples the input around origin + (x + 0.5) * scale - 0.5; source indices are
// clamped to the image (edge replication); weights are normalized to sum 1.
#pragma once

#include <ATen/ATen.h>
#include <c10/macros/Macros.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "crop_mirror_normalize.h"

#include "dispatch.h"
#include "samples.h"

namespace torchdali {
namespace resize {

// DALI's DALIInterpType values.
enum Interp : int64_t { kNN = 0, kLinear = 1, kCubic = 2, kLanczos3 = 3, kTriangular = 4,
                        kGaussian = 5 };

enum Table : int { kNearest = 0, kTri = 1, kCubicT = 2, kLanczosT = 3, kGaussT = 4 };

struct Filter {
  int table = kNearest;
  int num_coeffs = 0;
  float anchor = 0, scale = 1;  // DALI's ResamplingFilter fields after rescale()
  int support = 1;
};

// One resampled axis: output coordinate x reads the input around origin + (x + 0.5) * scale.
struct Axis {
  float origin = 0, scale = 1;
  int64_t in_size = 0, out_size = 0;
  Filter filter;
};

constexpr float kPi = 3.14159265358979323846f;

C10_HOST_DEVICE inline float sinc(float x) {
  return x != 0.f ? ::sinf(x * kPi) / (x * kPi) : 1.f;
}

// The table's node i, computed rather than stored so the CUDA kernel needs no table upload.
C10_HOST_DEVICE inline float node(int table, int i, int num) {
  const float half = (num - 1) * 0.5f;
  switch (table) {
    case kTri: return i == 1 ? 1.f : 0.f;
    case kCubicT: {
      float x = ::fabsf(4 * (i - half) / (num - 1));
      if (x >= 2) return 0.f;
      float x2 = x * x, x3 = x2 * x;
      return x > 1 ? -0.5f * x3 + 2.5f * x2 - 4.0f * x + 2.0f : 1.5f * x3 - 2.5f * x2 + 1.0f;
    }
    case kLanczosT: {
      float x = 2 * 3 * (i - half) / (num - 1);
      return ::fabsf(x) >= 3 ? 0.f : sinc(x) * sinc(x / 3);
    }
    case kGaussT: {
      float x = 4 * (i - half) / (num - 1);
      return ::expf(-x * x);
    }
    default: return 0.f;
  }
}

// ResamplingFilter::operator(): the table linearly interpolated at x (in table units).
C10_HOST_DEVICE inline float filter_at(const Filter& f, float x) {
  if (!(x > -1)) return 0.f;
  if (x >= f.num_coeffs) return 0.f;
  int x0 = static_cast<int>(::floorf(x));
  int x1 = x0 + 1;
  float d = x - x0;
  float f0 = x0 < 0 ? 0.f : node(f.table, x0, f.num_coeffs);
  float f1 = x1 >= f.num_coeffs ? 0.f : node(f.table, x1, f.num_coeffs);
  return f0 + d * (f1 - f0);
}

// First source index of output coordinate x and the offset that the filter taps start from.
C10_HOST_DEVICE inline int first_tap(const Axis& a, int64_t x, float* f0) {
  const float start = a.origin + 0.5f * a.scale - 0.5f - a.filter.anchor;
  const float sx0f = x * a.scale + start;
  const int sx0 = static_cast<int>(::ceilf(sx0f));
  *f0 = sx0 - sx0f;
  return sx0;
}

// Nearest neighbour: floor(origin + (x + 0.5) * scale), clamped.
C10_HOST_DEVICE inline int64_t nearest(const Axis& a, int64_t x) {
  int64_t s = static_cast<int64_t>(::floorf(a.origin + (x + 0.5f) * a.scale));
  return s < 0 ? 0 : (s >= a.in_size ? a.in_size - 1 : s);
}

inline Filter make_filter(int table, int num_coeffs, float support_span) {
  // ResamplingFilter initialized with scale 1 and anchor (n-1)/2, then rescale(span).
  Filter f;
  f.table = table;
  f.num_coeffs = num_coeffs;
  f.scale = (num_coeffs - 1) / support_span;
  f.anchor = (num_coeffs - 1) * 0.5f / f.scale;
  f.support = static_cast<int>(std::ceil((num_coeffs - 1) / f.scale));
  return f;
}

// DALI's choice of filter for one axis: min_filter when the output is smaller than the ROI,
// else mag_filter; LINEAR becomes TRIANGULAR (widened by in/out) when downscaling with
// antialias, TRIANGULAR becomes LINEAR without it; the others widen by in/out with antialias.
inline Filter choose_filter(int64_t min_interp, int64_t mag_interp, bool antialias,
                            float in_size, float out_size) {
  const bool down = out_size < in_size;
  int64_t t = down ? min_interp : mag_interp;
  const bool aa = down && antialias;
  if (aa && t == kLinear) t = kTriangular;
  if (!aa && t == kTriangular) t = kLinear;
  const float ratio = in_size > out_size ? in_size / out_size : 1.f;
  switch (t) {
    case kNN: return Filter{};
    case kLinear: return make_filter(kTri, 3, 2.f);
    case kTriangular: return make_filter(kTri, 3, std::max(1.f, 2 * ratio));
    case kCubic: return make_filter(kCubicT, 129, 4.f * (aa ? ratio : 1.f));
    case kLanczos3: return make_filter(kLanczosT, 193, std::max(1.f, 2 * 3 * (aa ? ratio : 1.f)));
    case kGaussian: {
      float radius = aa ? ratio : 1.f;
      float sigma = radius * 0.5f / static_cast<float>(M_SQRT2);
      return make_filter(kGaussT, 65, std::max(1.0f, static_cast<float>(4 * M_SQRT2) * sigma));
    }
    default: TORCH_CHECK_VALUE(false, "resize: unknown interpolation type ", t);
  }
}

// One output coordinate x of a 1D pass over `a`: calls tap(src_index, weight) for each tap
// (indices clamped to the input) and returns the sum of the weights (to normalize by).
template <typename Tap>
C10_HOST_DEVICE inline float for_taps(const Axis& a, int64_t x, Tap&& tap) {
  if (a.filter.table == kNearest) {
    tap(nearest(a, x), 1.f);
    return 1.f;
  }
  float f0;
  const int sx0 = first_tap(a, x, &f0);
  float sum = 0;
  for (int k = 0; k < a.filter.support; ++k) {
    const float c = filter_at(a.filter, (f0 + k) * a.filter.scale);
    int64_t s = sx0 + k;
    s = s < 0 ? 0 : (s >= a.in_size ? a.in_size - 1 : s);
    tap(s, c);
    sum += c;
  }
  return sum;
}

// The taps an output of `ax` reads: 1 for nearest neighbour, else the filter's support.
C10_HOST_DEVICE inline int taps_per_output(const Axis& ax) {
  return ax.filter.table == kNearest ? 1 : ax.filter.support;
}

// A range [lo, hi) of source indices.
struct Range {
  int64_t lo, hi;
};

// The source indices that outputs a..b of axis `ax` read (taps move monotonically with the
// output coordinate, up or, for a flipped ROI, down, so the ends bound the range).
C10_HOST_DEVICE inline Range tap_range(const Axis& ax, int64_t a, int64_t b) {
  int64_t first, last, span = 1;
  if (ax.filter.table == kNearest) {
    first = nearest(ax, a);
    last = nearest(ax, b);
  } else {
    float f0;
    first = first_tap(ax, a, &f0);
    last = first_tap(ax, b, &f0);
    span = ax.filter.support;
  }
  if (first > last) {
    const int64_t t = first;
    first = last;
    last = t;
  }
  const int64_t end = last + span;
  return {first < 0 ? 0 : (first >= ax.in_size ? ax.in_size - 1 : first),
          end > ax.in_size ? ax.in_size : (end < 1 ? 1 : end)};
}

inline bool is_allowed(at::ScalarType t) {
  return t == at::kByte || t == at::kHalf || t == at::kFloat;
}

// A sample's plan: both axes (0 = rows, 1 = columns) and the pass order.
struct Plan {
  Axis axis[2];
  bool vert_first = false;
  int64_t lo = 0, hi = 0;  // the second pass's source range: the first pass computes only it
};

// The kernels resample HWC units: a whole HWC image, or one channel plane (viewed as
// [H, W, 1]) of a CHW image. `units` and `plans` are per unit; `results` are the op's
// outputs, per sample, or `dense` their [N, ...] storage when one was asked for.
struct Unit {
  const void* src;  // rows of `width` pixels of `channels` values
  int64_t width;
  void* dst;        // rows of the plan's output width
};

// How the outputs come: a tensor per image, one [N, ...] tensor (one output size), or one
// 1-D buffer with the outputs back to back (sizes may differ; the caller knows the shapes).
enum class Output { kList, kDense, kFlat };

struct Args {
  std::vector<Unit> units;
  std::vector<Plan> plans;
  int64_t n = 0, channels = 0;  // units, and the channels of a unit
  at::ScalarType in_dtype = at::kByte;
  at::Device device = at::kCPU;
  std::vector<at::Tensor> results;  // Output::kList
  at::Tensor dense;                 // Output::kDense, or kFlat's buffer
  Samples input;  // keeps the units' sources alive
};

inline Args prepare(Samples images, at::IntArrayRef out_sizes, const at::Tensor& rois,
                    const at::Tensor& interp, bool antialias, at::ScalarType out_dtype, bool chw,
                    Output output) {
  Args a;
  const int64_t n = images.size();
  const char* layout = chw ? "CHW" : "HWC";
  const int cdim = chw ? 0 : 2, hdim = chw ? 1 : 0;
  TORCH_CHECK_VALUE(images.dim(0) == 3, "resize: `images` must be ", layout, " (3 dims), "
                    "sample 0 has shape ", images.sizes(0));
  a.in_dtype = images.dtype(0);
  a.device = images.device(0);
  TORCH_CHECK_TYPE(is_allowed(a.in_dtype), "resize: `images` must be uint8, float16 or float32, "
                   "got ", a.in_dtype);
  TORCH_CHECK_TYPE(is_allowed(out_dtype), "resize: `out_dtype` must be uint8, float16 or "
                   "float32, got ", out_dtype);
  TORCH_CHECK_VALUE(static_cast<int64_t>(out_sizes.size()) == 2 * n, "resize: `out_sizes` "
                    "must hold 2 values (height, width) per image: ", 2 * n, ", got ",
                    out_sizes.size());
  TORCH_CHECK_VALUE(rois.dim() == 2 && rois.size(0) == n && rois.size(1) == 4,
                    "resize: `rois` must have shape [", n, ", 4], got ", rois.sizes());
  TORCH_CHECK_VALUE(interp.dim() == 2 && interp.size(0) == n && interp.size(1) == 2,
                    "resize: `interp` must have shape [", n, ", 2], got ", interp.sizes());
  const int64_t channels = images.size(0, cdim);
  a.channels = chw ? 1 : channels;
  for (int64_t i = 0; i < n; ++i)
    TORCH_CHECK_VALUE(out_sizes[2 * i] > 0 && out_sizes[2 * i + 1] > 0, "resize: output size of "
                      "sample ", i, " must be positive, got ", out_sizes[2 * i], "x",
                      out_sizes[2 * i + 1]);
  const bool dense = output == Output::kDense;
  for (int64_t i = 1; dense && i < n; ++i)
    TORCH_CHECK_VALUE(out_sizes[2 * i] == out_sizes[0] && out_sizes[2 * i + 1] == out_sizes[1],
                      "resize: a dense output needs one output size for all images; sample 0 "
                      "is ", out_sizes[0], "x", out_sizes[1], ", sample ", i, " is ",
                      out_sizes[2 * i], "x", out_sizes[2 * i + 1]);
  const at::TensorOptions out_options = images.options().dtype(out_dtype);
  if (dense) {
    const int64_t oh = out_sizes[0], ow = out_sizes[1];
    a.dense = at::empty(chw ? std::vector<int64_t>{n, channels, oh, ow}
                            : std::vector<int64_t>{n, oh, ow, channels},
                        out_options);
  } else if (output == Output::kFlat) {
    int64_t total = 0;
    for (int64_t i = 0; i < n; ++i) total += channels * out_sizes[2 * i] * out_sizes[2 * i + 1];
    a.dense = at::empty({total}, out_options);
  }
  const at::Tensor r = rois.to(at::kCPU, at::kFloat).contiguous();
  const at::Tensor it = interp.to(at::kCPU, at::kLong).contiguous();
  const float* rp = r.data_ptr<float>();
  const int64_t* ip = it.data_ptr<int64_t>();
  const int64_t in_elem = at::elementSize(a.in_dtype), out_elem = at::elementSize(out_dtype);
  char* next_out = output == Output::kList ? nullptr : static_cast<char*>(a.dense.data_ptr());
  for (int64_t i = 0; i < n; ++i) {
    const at::IntArrayRef shape = images.sizes(i);
    TORCH_CHECK_VALUE(shape.size() == 3 && shape[cdim] == channels, "resize: all `images` must "
                      "be ", layout, " with ", channels, " channels; sample ", i, " has shape ",
                      shape);
    TORCH_CHECK_TYPE(images.dtype(i) == a.in_dtype, "resize: all `images` must have the same "
                     "dtype; sample 0 is ", a.in_dtype, ", sample ", i, " is ", images.dtype(i));
    TORCH_CHECK_VALUE(images.device(i) == a.device, "resize: all `images` must be on one "
                      "device; sample 0 is on ", a.device, ", sample ", i, " on ",
                      images.device(i));
    TORCH_CHECK_VALUE(shape[hdim] > 0 && shape[hdim + 1] > 0, "resize: sample ", i,
                      " is empty (", shape, ")");
    const int64_t oh = out_sizes[2 * i], ow = out_sizes[2 * i + 1];
    for (int k = 0; k < 2; ++k)
      TORCH_CHECK_VALUE(ip[2 * i + k] >= kNN && ip[2 * i + k] <= kGaussian, "resize: unknown "
                        "interpolation type ", ip[2 * i + k], " for sample ", i);
    Plan p;
    const int64_t in_sz[2] = {shape[hdim], shape[hdim + 1]}, out_sz[2] = {oh, ow};
    for (int d = 0; d < 2; ++d) {
      float lo = rp[4 * i + d], hi = rp[4 * i + 2 + d];
      TORCH_CHECK_VALUE(std::isfinite(lo) && std::isfinite(hi), "resize: ROI of sample ", i,
                        " is not finite");
      if (lo == hi) { lo = 0; hi = static_cast<float>(in_sz[d]); }  // DALI: no ROI
      Axis& ax = p.axis[d];
      ax.in_size = in_sz[d];
      ax.out_size = out_sz[d];
      ax.origin = lo;
      ax.scale = (hi - lo) / static_cast<float>(out_sz[d]);
      ax.filter = choose_filter(ip[2 * i], ip[2 * i + 1], antialias, std::fabs(hi - lo),
                                static_cast<float>(out_sz[d]));
    }
    // DALI's cost model: the pass that shrinks the image more goes first.
    const int64_t sv = std::max(1, p.axis[0].filter.support), sh = std::max(1, p.axis[1].filter.support);
    const double cost_v = 3.0 * oh * in_sz[1] + double(oh) * in_sz[1] * sv + double(oh) * ow * sh;
    const double cost_h = 3.0 * in_sz[0] * ow + double(in_sz[0]) * ow * sh + double(oh) * ow * sv;
    p.vert_first = cost_v < cost_h;
    const Axis& second = p.axis[p.vert_first ? 1 : 0];
    const Range range = tap_range(second, 0, second.out_size - 1);
    p.lo = range.lo;
    p.hi = range.hi;
    if (second.filter.table == kNearest) {  // the CPU steps NN rows by accumulation: +-1
      p.lo = std::max<int64_t>(0, p.lo - 1);
      p.hi = std::min(second.in_size, p.hi + 1);
    }
    const int64_t out_bytes = channels * oh * ow * out_elem;
    char* out;
    if (output != Output::kList) {
      out = next_out;
      next_out += out_bytes;
    } else {
      a.results.push_back(at::empty(chw ? std::vector<int64_t>{channels, oh, ow}
                                        : std::vector<int64_t>{oh, ow, channels},
                                    out_options));
      out = static_cast<char*>(a.results.back().data_ptr());
    }
    const char* src = static_cast<const char*>(images.data(i));
    const int64_t plane_in = in_sz[0] * in_sz[1] * in_elem, plane_out = oh * ow * out_elem;
    for (int64_t c = 0; c < (chw ? channels : 1); ++c) {
      a.plans.push_back(p);
      a.units.push_back(Unit{src + c * plane_in, in_sz[1], out + c * plane_out});
    }
  }
  a.n = static_cast<int64_t>(a.units.size());
  a.input = std::move(images);
  return a;
}

// Calls f(In{}, Out{}) with the C++ types of the input and output dtypes.
template <typename F>
void dispatch(at::ScalarType in, at::ScalarType out, F&& f) {
  dispatch_types<false>("resize", in, out, f);
}

}  // namespace resize
}  // namespace torchdali
