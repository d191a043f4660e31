// CPU kernel of torchdali::warp_affine (list and dense outputs): one parallel loop over the
// output rows of the whole batch (a volume's rows: depth x height).
#include <torch/library.h>

#include <algorithm>

#include "../warp.h"
#include "convert.h"
#include "rows.h"
#include "simd.h"

namespace torchdali {
namespace {

// The source point of output pixel x of a row minus half a pixel, as warp_pixel computes it
// for INTERP_LINEAR (px_y, py_y: see warp::source_point).
inline void linear_point(const warp::Sample& s, int64_t x, float px_y, float py_y, float& sx,
                         float& sy) {
  float px, py;
  warp::source_point(s, x, px_y, py_y, px, py);
  sx = warp::limit(px - 0.5f);
  sy = warp::limit(py - 0.5f);
}

// Whether all four taps of output pixel x lie inside the image.
inline bool taps_inside(const warp::Sample& s, int64_t x, float px_y, float py_y) {
  float sx, sy;
  linear_point(s, x, px_y, py_y, sx, sy);
  const int64_t c0 = static_cast<int64_t>(std::floor(sx));
  const int64_t r0 = static_cast<int64_t>(std::floor(sy));
  return c0 >= 0 && c0 + 1 < s.in_w && r0 >= 0 && r0 + 1 < s.in_h;
}

// Pixels [x0, x1) of output row y, sampled with INTERP_LINEAR, all four taps inside the image
// (K > 0: K channels): warp_pixel's arithmetic without its border cases.
template <typename In, typename Out, int K>
TORCHDALI_SIMD_CLONES void linear_inside(const warp::Sample& s, int64_t y, int64_t x0,
                                         int64_t x1, float px_y, float py_y) {
  const In* src = static_cast<const In*>(s.src);
  Out* dst = static_cast<Out*>(s.dst) + y * s.out_w * s.out_pixel_stride;
  const int64_t channels = K > 0 ? K : s.channels;
  const int64_t ps = s.in_pixel_stride, cs = s.in_channel_stride, row = s.in_w * ps;
  const int64_t ops = s.out_pixel_stride, ocs = s.out_channel_stride;
  for (int64_t x = x0; x < x1; ++x) {
    float sx, sy;
    linear_point(s, x, px_y, py_y, sx, sy);
    const float fx0 = std::floor(sx), fy0 = std::floor(sy);
    const float qx = sx - fx0, wx = 1.f - qx, qy = sy - fy0;
    const In* p = src + static_cast<int64_t>(fy0) * row + static_cast<int64_t>(fx0) * ps;
    for (int64_t ch = 0; ch < channels; ++ch) {
      const In* t = p + ch * cs;
      const float top = warp::add(warp::mul(static_cast<float>(t[0]), wx),
                                  warp::mul(static_cast<float>(t[ps]), qx));
      const float bottom = warp::add(warp::mul(static_cast<float>(t[row]), wx),
                                     warp::mul(static_cast<float>(t[row + ps]), qx));
      dst[x * ops + ch * ocs] = saturate<Out>(warp::add(top, warp::mul(bottom - top, qy)));
    }
  }
}

// Output row y with INTERP_LINEAR. The source point moves along a line as x grows, so the
// pixels whose taps all lie inside the image form one run [x0, x1); the others go through
// warp_pixel.
template <typename In, typename Out>
void warp_row_linear(const warp::Sample& s, int64_t y, const float* border) {
  const float fy = static_cast<float>(y) + 0.5f;
  const float px_y = warp::mul(s.m[1], fy), py_y = warp::mul(s.m[4], fy);
  int64_t x0 = 0, x1 = s.out_w;
  while (x0 < x1 && !taps_inside(s, x0, px_y, py_y)) warp::warp_pixel<In, Out>(s, x0++, y, border);
  while (x1 > x0 && !taps_inside(s, x1 - 1, px_y, py_y)) warp::warp_pixel<In, Out>(s, --x1, y, border);
  if (s.channels == 3) {
    linear_inside<In, Out, 3>(s, y, x0, x1, px_y, py_y);
  } else {
    linear_inside<In, Out, 0>(s, y, x0, x1, px_y, py_y);
  }
}

template <typename In, typename Out>
void warp_cpu_impl(const warp::Args& a) {
  at::Tensor border;
  if (a.fill.defined()) border = warp::border_table<In, Out>(a.fill);
  const float* b = border.defined() ? border.const_data_ptr<float>() : nullptr;
  std::vector<int64_t> rows;
  int64_t row_cost = 1;
  const int64_t taps = a.ndim == 3 ? 8 : 4;
  for (const warp::Sample& s : a.samples) {
    rows.push_back(s.out_d * s.out_h);
    row_cost = std::max(row_cost, s.out_w * s.channels * (s.interp == warp::kLinear ? taps : 1));
  }
  for_each_row(rows, row_cost, [&](int64_t i, int64_t row) {
    const warp::Sample& s = a.samples[i];
    if (a.ndim == 3) {
      const int64_t z = row / s.out_h, y = row % s.out_h;
      for (int64_t x = 0; x < s.out_w; ++x) warp::warp_voxel<In, Out>(s, x, y, z, b);
      return;
    }
    if (s.interp == warp::kLinear) return warp_row_linear<In, Out>(s, row, b);
    for (int64_t x = 0; x < s.out_w; ++x) warp::warp_pixel<In, Out>(s, x, row, b);
  });
}

std::vector<at::Tensor> run(const at::TensorList& images, const at::Tensor& matrices,
                            at::IntArrayRef out_sizes, at::IntArrayRef interp,
                            const std::optional<at::Tensor>& fill, at::ScalarType out_dtype,
                            bool chw, bool dense, at::Tensor* batch) {
  warp::Args a = warp::prepare(images, matrices, out_sizes, interp, fill, out_dtype, chw);
  TORCH_CHECK_VALUE(a.images[0].is_cpu(), "warp_affine: CPU kernel got `images` on ",
                    a.images[0].device());
  std::vector<at::Tensor> outs = warp::allocate(a, dense, batch);
  warp::dispatch(a.images[0].scalar_type(), out_dtype, [&](auto in, auto out) {
    warp_cpu_impl<decltype(in), decltype(out)>(a);
  });
  return outs;
}

std::vector<at::Tensor> warp_affine_cpu(at::TensorList images, const at::Tensor& matrices,
                                        at::IntArrayRef out_sizes, at::IntArrayRef interp,
                                        const std::optional<at::Tensor>& fill,
                                        at::ScalarType out_dtype, bool chw) {
  return run(images, matrices, out_sizes, interp, fill, out_dtype, chw, false, nullptr);
}

at::Tensor warp_affine_dense_cpu(at::TensorList images, const at::Tensor& matrices,
                                 at::IntArrayRef out_sizes, at::IntArrayRef interp,
                                 const std::optional<at::Tensor>& fill,
                                 at::ScalarType out_dtype, bool chw) {
  at::Tensor batch;
  run(images, matrices, out_sizes, interp, fill, out_dtype, chw, true, &batch);
  return batch;
}

}  // namespace
}  // namespace torchdali

TORCH_LIBRARY_IMPL(torchdali, CPU, m) {
  m.impl("warp_affine", &torchdali::warp_affine_cpu);
  m.impl("warp_affine.dense", &torchdali::warp_affine_dense_cpu);
}
