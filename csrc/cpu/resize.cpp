// CPU kernel of torchdali::resize: per sample, two separable 1D passes (the order DALI's cost
// model picks) through a float intermediate. The batch is cut into bands of output rows, one
// parallel loop over all of them, so that a band's intermediate stays in the cache: vertical
// first, one row at a time; horizontal first, the source rows the band reads.
#include "../parallel.h"
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <type_traits>
#include <utility>

#include "../resize.h"
#include "simd.h"

namespace torchdali {
namespace {

using resize::Axis;
using resize::Plan;

// Float buffers end with kPad spare floats: the horizontal pass reads and writes whole
// groups of 4 channels, up to 3 floats past a pixel.
constexpr int64_t kPad = 4;
// A band's intermediate aims at about this many bytes (what an L2 cache holds).
constexpr int64_t kBandBytes = 256 << 10;

// Normalized taps of one axis: per output coordinate, `support` source offsets and weights.
struct Taps {
  int support = 1;
  std::vector<int32_t> idx;
  std::vector<float> w;
};

Taps make_taps(const Axis& a, bool rows) {
  Taps t;
  if (rows && a.filter.table == resize::kNearest) {
    // DALI's CPU ResampleNN steps the row coordinate by adding `scale` (float), so rows
    // whose exact coordinate is an integer may land one lower; kept on purpose.
    t.idx.resize(a.out_size);
    t.w.assign(a.out_size, 1.f);
    float sy = a.origin + 0.5f * a.scale;
    for (int64_t y = 0; y < a.out_size; ++y, sy += a.scale) {
      const int64_t s = static_cast<int64_t>(std::floor(sy));
      t.idx[y] = static_cast<int32_t>(std::min(std::max<int64_t>(s, 0), a.in_size - 1));
    }
    return t;
  }
  t.support = resize::taps_per_output(a);
  t.idx.resize(a.out_size * t.support);
  t.w.resize(a.out_size * t.support);
  for (int64_t x = 0; x < a.out_size; ++x) {
    int32_t* idx = &t.idx[x * t.support];
    float* w = &t.w[x * t.support];
    int k = 0;
    const float sum = resize::for_taps(a, x, [&](int64_t s, float c) {
      idx[k] = static_cast<int32_t>(s);
      w[k++] = c;
    });
    if (sum != 0)
      for (int j = 0; j < t.support; ++j) w[j] /= sum;
  }
  return t;
}

// The lowest and highest source offsets that outputs [y0, y1) read.
std::pair<int32_t, int32_t> span(const Taps& t, int64_t y0, int64_t y1) {
  const auto [lo, hi] = std::minmax_element(t.idx.begin() + y0 * t.support,
                                            t.idx.begin() + y1 * t.support);
  return {*lo, *hi};
}

// dst[j] = cmn::convert_sat<D>(v[j]), in two loops that vectorize (clamped in place first).
template <typename D>
[[gnu::always_inline]] inline void store(float* __restrict v, int64_t n, D* __restrict dst) {
  if constexpr (std::is_same_v<D, uint8_t>) {
    for (int64_t j = 0; j < n; ++j) {
      const float x = v[j] > 0.f ? v[j] : 0.f;  // NaN -> 0
      v[j] = x < 255.f ? x : 255.f;
    }
    for (int64_t j = 0; j < n; ++j) {  // rounds half away from zero, as roundf
      const int32_t i = static_cast<int32_t>(v[j]);
      dst[j] = static_cast<uint8_t>(i + (v[j] - static_cast<float>(i) >= 0.5f));
    }
  } else {
    for (int64_t j = 0; j < n; ++j) dst[j] = static_cast<D>(v[j]);
  }
}

template <typename S>
TORCHDALI_SIMD_CLONES void widen_row(const S* __restrict src, int64_t n, float* __restrict dst) {
  for (int64_t j = 0; j < n; ++j) dst[j] = static_cast<float>(src[j]);
}

template <typename D>
TORCHDALI_SIMD_CLONES void narrow_row(float* __restrict src, int64_t n, D* __restrict dst) {
  store<D>(src, n, dst);
}

// dst[j] = sum_k w[k] * src[(idx[k] - first) * stride + j] for j < n, summed in tap order.
template <typename S, typename D>
TORCHDALI_SIMD_CLONES void vertical(const S* src, int64_t stride, int64_t first,
                                    const int32_t* idx, const float* w, int support, int64_t n,
                                    D* __restrict dst) {
  constexpr int64_t kChunk = 512;
  float acc[kChunk];
  for (int64_t j0 = 0; j0 < n; j0 += kChunk) {
    const int64_t len = std::min(kChunk, n - j0);
    const S* s0 = src + (idx[0] - first) * stride + j0;
    for (int64_t j = 0; j < len; ++j) acc[j] = w[0] * static_cast<float>(s0[j]);
    int k = 1;
    for (; k + 1 < support; k += 2) {  // two taps per sweep: half the accumulator traffic
      const S* a = src + (idx[k] - first) * stride + j0;
      const S* b = src + (idx[k + 1] - first) * stride + j0;
      const float wa = w[k], wb = w[k + 1];
      for (int64_t j = 0; j < len; ++j) {
        float v = acc[j];
        v += wa * static_cast<float>(a[j]);
        v += wb * static_cast<float>(b[j]);
        acc[j] = v;
      }
    }
    if (k < support) {
      const S* a = src + (idx[k] - first) * stride + j0;
      for (int64_t j = 0; j < len; ++j) acc[j] += w[k] * static_cast<float>(a[j]);
    }
    store<D>(acc, len, dst + j0);
  }
}

using float4 = float __attribute__((vector_size(16)));

inline float4 load4(const float* p) {
  float4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Up to 4 rows at once (they share the taps): dst pixel x = sum_k w[k] * src pixel idx[k]
// (idx in floats), for pixels of C channels (C = 0: `channels`). The sums are 4-lane vector
// operations, over 4 channels (C > 1: reading and writing up to 3 floats past a pixel, the next
// pixel's, rewritten when it comes, or kPad) or over the 4 rows (C = 1), so that a channel of
// an HWC image and the same plane of a CHW image see the same arithmetic.
template <int C>
TORCHDALI_SIMD_CLONES void horizontal(const float* src, int64_t src_stride, int rows,
                                      const Taps& t, int64_t n, int64_t channels,
                                      float* __restrict dst, int64_t dst_stride) {
  const int support = t.support;
  const int64_t nc = C ? C : channels;
  const float* s[4];
  for (int r = 0; r < 4; ++r) s[r] = src + std::min(r, rows - 1) * src_stride;
  int64_t x = 0;
  if constexpr (C > 1) {
    for (; x + 1 < n; x += 2) {  // two pixels: 8 independent sums
      const int32_t* idx = t.idx.data() + x * support;
      const float* w = t.w.data() + x * support;
      float4 a0[4] = {}, a1[4] = {};
      for (int k = 0; k < support; ++k) {
        const float w0 = w[k], w1 = w[support + k];
        const int32_t i0 = idx[k], i1 = idx[support + k];
        for (int r = 0; r < 4; ++r) {
          a0[r] += w0 * load4(s[r] + i0);
          a1[r] += w1 * load4(s[r] + i1);
        }
      }
      for (int r = 0; r < rows; ++r) {
        std::memcpy(dst + r * dst_stride + x * C, &a0[r], sizeof(float4));
        std::memcpy(dst + r * dst_stride + (x + 1) * C, &a1[r], sizeof(float4));
      }
    }
  }
  for (; x < n; ++x) {
    const int32_t* idx = t.idx.data() + x * support;
    const float* w = t.w.data() + x * support;
    if constexpr (C == 1) {
      float4 acc = {0.f, 0.f, 0.f, 0.f};
      for (int k = 0; k < support; ++k) {
        const int32_t i = idx[k];
        acc += w[k] * float4{s[0][i], s[1][i], s[2][i], s[3][i]};
      }
      for (int r = 0; r < rows; ++r) dst[r * dst_stride + x] = acc[r];
    } else {
      for (int64_t c = 0; c < nc; c += 4) {
        float4 acc[4] = {};
        for (int k = 0; k < support; ++k)
          for (int r = 0; r < 4; ++r) acc[r] += w[k] * load4(s[r] + idx[k] + c);
        for (int r = 0; r < rows; ++r)
          std::memcpy(dst + r * dst_stride + x * nc + c, &acc[r], sizeof(float4));
      }
    }
  }
}

// A unit's taps: rows (source rows) and columns (float offsets from column `col0`).
struct UnitTaps {
  Taps rows, cols;
  int64_t col0 = 0, ncols = 0;  // the source columns the horizontal taps read
};

// Output rows [y0, y1) of unit `unit`, and the source rows [r0, r1] they read.
struct Band {
  int64_t unit, y0, y1, r0, r1;
};

UnitTaps unit_taps(const Plan& p, int64_t channels) {
  UnitTaps u;
  u.rows = make_taps(p.axis[0], true);
  u.cols = make_taps(p.axis[1], false);
  const auto [lo, hi] = span(u.cols, 0, p.axis[1].out_size);
  u.col0 = lo;
  u.ncols = hi - lo + 1;
  for (int32_t& i : u.cols.idx) i = static_cast<int32_t>((i - lo) * channels);
  return u;
}

// Floats of scratch that band `b` needs: 4 widened source (or vertically resampled) rows and
// 4 output rows, or, horizontal first, the band's intermediate rows.
int64_t scratch_size(const Plan& p, const UnitTaps& u, const Band& b, int64_t C) {
  const int64_t row = p.axis[1].out_size * C + kPad;
  return 4 * (u.ncols * C + kPad) + (p.vert_first ? 4 : b.r1 - b.r0 + 1) * row;
}

template <int C, typename In, typename Out>
void run_band(const resize::Args& a, const UnitTaps& u, const Band& b, float* scratch) {
  const Plan& p = a.plans[b.unit];
  const resize::Unit& unit = a.units[b.unit];
  const int64_t ch = a.channels, in_row = unit.width * ch, ow = p.axis[1].out_size;
  const In* src = static_cast<const In*>(unit.src) + u.col0 * ch;
  Out* out = static_cast<Out*>(unit.dst);
  const int sv = u.rows.support;
  const int64_t seg_stride = u.ncols * ch + kPad, mid_stride = ow * ch + kPad;
  float* seg = scratch;
  float* mid = scratch + 4 * seg_stride;
  if (p.vert_first) {
    for (int64_t y0 = b.y0; y0 < b.y1; y0 += 4) {
      const int rows = static_cast<int>(std::min<int64_t>(4, b.y1 - y0));
      for (int r = 0; r < rows; ++r) {
        const int64_t y = y0 + r;
        vertical<In, float>(src, in_row, 0, &u.rows.idx[y * sv], &u.rows.w[y * sv], sv,
                            u.ncols * ch, seg + r * seg_stride);
      }
      horizontal<C>(seg, seg_stride, rows, u.cols, ow, ch, mid, mid_stride);
      for (int r = 0; r < rows; ++r)
        narrow_row<Out>(mid + r * mid_stride, ow * ch, out + (y0 + r) * ow * ch);
    }
    return;
  }
  for (int64_t r0 = b.r0; r0 <= b.r1; r0 += 4) {
    const int rows = static_cast<int>(std::min<int64_t>(4, b.r1 + 1 - r0));
    for (int r = 0; r < rows; ++r)
      widen_row<In>(src + (r0 + r) * in_row, u.ncols * ch, seg + r * seg_stride);
    horizontal<C>(seg, seg_stride, rows, u.cols, ow, ch, mid + (r0 - b.r0) * mid_stride,
                  mid_stride);
  }
  for (int64_t y = b.y0; y < b.y1; ++y)
    vertical<float, Out>(mid, mid_stride, b.r0, &u.rows.idx[y * sv], &u.rows.w[y * sv], sv,
                         ow * ch, out + y * ow * ch);
}

template <typename In, typename Out>
void resize_cpu_impl(const resize::Args& a) {
  const int64_t C = a.channels;
  std::vector<UnitTaps> taps;
  std::vector<Band> bands;
  int64_t scratch = 0;
  for (int64_t i = 0; i < a.n; ++i) {
    const Plan& p = a.plans[i];
    taps.push_back(unit_taps(p, C));
    const int64_t oh = p.axis[0].out_size, row_bytes = (p.axis[1].out_size * C + kPad) * 4;
    const float rows_per_out = std::max(1.f, std::fabs(p.axis[0].scale));
    const int64_t band = std::max<int64_t>(4, kBandBytes / row_bytes / rows_per_out);
    for (int64_t y0 = 0; y0 < oh; y0 += band) {
      const int64_t y1 = std::min(oh, y0 + band);
      const auto [r0, r1] = span(taps[i].rows, y0, y1);
      bands.push_back({i, y0, y1, r0, r1});
      scratch = std::max(scratch, scratch_size(p, taps[i], bands.back(), C));
    }
  }
  // Bands differ in cost (samples differ in size): each thread takes the next band left.
  std::atomic<int64_t> next{0};
  const int64_t nb = static_cast<int64_t>(bands.size());
  torchdali::parallel_for(0, std::min<int64_t>(nb, torchdali::num_threads()), 1, [&](int64_t, int64_t) {
    std::vector<float> buf(scratch);
    for (int64_t b; (b = next++) < nb;) {
      const UnitTaps& u = taps[bands[b].unit];
      switch (C) {
        case 1: run_band<1, In, Out>(a, u, bands[b], buf.data()); break;
        case 3: run_band<3, In, Out>(a, u, bands[b], buf.data()); break;
        case 4: run_band<4, In, Out>(a, u, bands[b], buf.data()); break;
        default: run_band<0, In, Out>(a, u, bands[b], buf.data());
      }
    }
  });
}

resize::Args resize_cpu_run(Samples images, at::IntArrayRef out_sizes, const at::Tensor& rois,
                            const at::Tensor& interp, bool antialias, at::ScalarType out_dtype,
                            bool chw, resize::Output output) {
  resize::Args a = resize::prepare(std::move(images), out_sizes, rois, interp, antialias,
                                   out_dtype, chw, output);
  TORCH_CHECK_VALUE(a.device.is_cpu(), "resize: CPU kernel got `images` on ", a.device);
  resize::dispatch(a.in_dtype, out_dtype, [&](auto in_tag, auto out_tag) {
    resize_cpu_impl<decltype(in_tag), decltype(out_tag)>(a);
  });
  return a;
}

std::vector<at::Tensor> resize_cpu(at::TensorList images, at::IntArrayRef out_sizes,
                                   const at::Tensor& rois, const at::Tensor& interp,
                                   bool antialias, at::ScalarType out_dtype, bool chw) {
  return resize_cpu_run(Samples("resize", images), out_sizes, rois, interp, antialias,
                        out_dtype, chw, resize::Output::kList)
      .results;
}

// resize.dense (`images` a list) and resize.dense_in (a dense batch): one [N, ...] output.
template <typename Images>
at::Tensor resize_dense_cpu(Images images, at::IntArrayRef out_sizes, const at::Tensor& rois,
                            const at::Tensor& interp, bool antialias, at::ScalarType out_dtype,
                            bool chw) {
  return resize_cpu_run(Samples("resize", images), out_sizes, rois, interp, antialias,
                         out_dtype, chw, resize::Output::kDense)
      .dense;
}


// resize.flat: the samples back to back in one buffer with their shapes, the outputs too.
at::Tensor resize_flat_cpu(const at::Tensor& images, const at::Tensor& shapes, at::IntArrayRef out_sizes,
                        const at::Tensor& rois, const at::Tensor& interp, bool antialias,
                        at::ScalarType out_dtype, bool chw) {
  return resize_cpu_run(Samples("resize", images, shapes), out_sizes, rois, interp, antialias,
                        out_dtype, chw, resize::Output::kFlat)
      .dense;
}

}  // namespace
}  // namespace torchdali

TORCH_LIBRARY_IMPL(torchdali, CPU, m) {
  m.impl("resize", &torchdali::resize_cpu);
  m.impl("resize.dense", &torchdali::resize_dense_cpu<at::TensorList>);
  m.impl("resize.dense_in", &torchdali::resize_dense_cpu<const at::Tensor&>);
  m.impl("resize.flat", &torchdali::resize_flat_cpu);
}
