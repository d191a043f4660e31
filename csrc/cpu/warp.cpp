// CPU kernel of torchdali::warp_affine (list and dense outputs): one parallel loop over the
// output rows of the whole batch.
#include <torch/library.h>

#include <algorithm>

#include "../warp.h"
#include "convert.h"
#include "rows.h"
#include "simd.h"

namespace torchdali {
namespace {

// Output row y of a sample sampled with INTERP_LINEAR: pixels whose four taps lie inside the
// image are blended here (K > 0: K channels), with warp_pixel's arithmetic; the others, near
// the image's edges, go through warp_pixel.
template <typename In, typename Out, int K>
TORCHDALI_SIMD_CLONES void warp_row_linear(const warp::Sample& s, int64_t y, const float* border) {
  const In* src = static_cast<const In*>(s.src);
  Out* dst = static_cast<Out*>(s.dst) + y * s.out_w * s.out_pixel_stride;
  const int64_t channels = K > 0 ? K : s.channels;
  const int64_t ps = s.in_pixel_stride, cs = s.in_channel_stride, row = s.in_w * ps;
  const float fy = static_cast<float>(y) + 0.5f;
  const float py_y = warp::mul(s.m[4], fy), px_y = warp::mul(s.m[1], fy);
  for (int64_t x = 0; x < s.out_w; ++x) {
    const float fx = static_cast<float>(x) + 0.5f;
    const float px = warp::add(warp::add(warp::mul(s.m[0], fx), px_y), s.m[2]);
    const float py = warp::add(warp::add(warp::mul(s.m[3], fx), py_y), s.m[5]);
    const float sx = warp::limit(px - 0.5f), sy = warp::limit(py - 0.5f);
    const float fx0 = std::floor(sx), fy0 = std::floor(sy);
    const int64_t c0 = static_cast<int64_t>(fx0), r0 = static_cast<int64_t>(fy0);
    if (c0 < 0 || c0 + 1 >= s.in_w || r0 < 0 || r0 + 1 >= s.in_h) {
      warp::warp_pixel<In, Out>(s, x, y, border);
      continue;
    }
    const float qx = sx - fx0, wx = 1.f - qx, qy = sy - fy0;
    const In* p = src + r0 * row + c0 * ps;
    Out* o = dst + x * s.out_pixel_stride;
    for (int64_t ch = 0; ch < channels; ++ch) {
      const In* t = p + ch * cs;
      const float top = warp::add(warp::mul(static_cast<float>(t[0]), wx),
                                  warp::mul(static_cast<float>(t[ps]), qx));
      const float bottom = warp::add(warp::mul(static_cast<float>(t[row]), wx),
                                     warp::mul(static_cast<float>(t[row + ps]), qx));
      o[ch * s.out_channel_stride] = saturate<Out>(warp::add(top, warp::mul(bottom - top, qy)));
    }
  }
}

template <typename In, typename Out>
void warp_cpu_impl(const warp::Args& a) {
  at::Tensor border;
  if (a.fill.defined()) border = warp::border_table<In, Out>(a.fill);
  const float* b = border.defined() ? border.const_data_ptr<float>() : nullptr;
  std::vector<int64_t> rows;
  int64_t row_cost = 1;
  for (const warp::Sample& s : a.samples) {
    rows.push_back(s.out_h);
    row_cost = std::max(row_cost, s.out_w * s.channels * (s.interp == warp::kLinear ? 4 : 1));
  }
  for_each_row(rows, row_cost, [&](int64_t i, int64_t y) {
    const warp::Sample& s = a.samples[i];
    if (s.interp == warp::kLinear && s.channels == 3) return warp_row_linear<In, Out, 3>(s, y, b);
    if (s.interp == warp::kLinear) return warp_row_linear<In, Out, 0>(s, y, b);
    for (int64_t x = 0; x < s.out_w; ++x) warp::warp_pixel<In, Out>(s, x, y, b);
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
