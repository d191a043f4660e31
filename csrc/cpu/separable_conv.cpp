// CPU kernel of torchdali::separable_conv: per pass (one spatial axis, innermost first), one
// parallel loop over the lines of the whole batch. Where a line's elements are far apart
// (inner >= kWide), a task is one output row of `inner` elements accumulated tap by tap, so
// the inner loop is contiguous; otherwise a task is a whole line.
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "../separable_conv.h"
#include "convert.h"
#include "rows.h"
#include "simd.h"

namespace torchdali {
namespace {

constexpr int64_t kWide = 16;

// out[e] = sum_k w[k] * in[e + k * step] for k = 0..taps-1, in order, for e < m: a run of
// outputs whose taps are `step` elements apart, as one contiguous loop per tap.
template <typename Src, typename Dst>
TORCHDALI_SIMD_CLONES void convolve_run(const Src* __restrict in, Dst* __restrict out,
                                        float* __restrict acc, int64_t m, int64_t step,
                                        const float* __restrict w, int64_t taps) {
  for (int64_t e = 0; e < m; ++e) acc[e] = 0.f;
  for (int64_t k = 0; k < taps; ++k) {
    const Src* s = in + k * step;
    const float wk = w[k];
    for (int64_t e = 0; e < m; ++e) acc[e] = conv::mul_add(acc[e], wk, static_cast<float>(s[e]));
  }
  for (int64_t e = 0; e < m; ++e) out[e] = saturate<Dst>(acc[e]);
}

// Output row x of a line of n rows of `inner` elements: its taps are rows, reflected at the
// line's ends.
template <typename Src, typename Dst>
TORCHDALI_SIMD_CLONES void convolve_rows(const Src* __restrict line, Dst* __restrict out,
                                         float* __restrict acc, int64_t n, int64_t inner,
                                         int64_t x, const float* __restrict w, int64_t r) {
  for (int64_t j = 0; j < inner; ++j) acc[j] = 0.f;
  for (int64_t k = 0; k <= 2 * r; ++k) {
    const Src* in = line + conv::reflect101(x + k - r, n) * inner;
    const float wk = w[k];
    for (int64_t j = 0; j < inner; ++j) acc[j] = conv::mul_add(acc[j], wk, static_cast<float>(in[j]));
  }
  for (int64_t j = 0; j < inner; ++j) out[j] = saturate<Dst>(acc[j]);
}

template <typename Src, typename Dst>
void pass_cpu(const conv::Args& a, int64_t p, const std::vector<const Src*>& src,
              const std::vector<Dst*>& dst) {
  const conv::Pass* passes = a.passes.data() + p * a.n;
  const float* windows = a.windows.const_data_ptr<float>();
  std::vector<int64_t> rows;
  int64_t row_cost = 1;
  for (int64_t i = 0; i < a.n; ++i) {
    const conv::Pass& s = passes[i];
    const bool wide = s.inner >= kWide;
    rows.push_back(wide ? s.outer * s.n : s.outer);
    row_cost = std::max(row_cost, (wide ? s.inner : s.n * s.inner) * (2 * s.radius + 1));
  }
  for_each_row(rows, row_cost, [&](int64_t i, int64_t row) {
    const conv::Pass& s = passes[i];
    const float* w = windows + s.window_at;
    const int64_t r = s.radius;
    thread_local std::vector<float> acc;
    if (s.inner >= kWide) {
      const int64_t o = row / s.n, x = row % s.n;
      acc.resize(s.inner);
      convolve_rows(src[i] + o * s.n * s.inner, dst[i] + row * s.inner, acc.data(), s.n,
                    s.inner, x, w, r);
      return;
    }
    // A whole line: its interior [r, n - r) as one run, its ends element by element.
    const Src* line = src[i] + row * s.n * s.inner;
    Dst* out = dst[i] + row * s.n * s.inner;
    const int64_t lo = std::min(r, s.n), hi = std::max(lo, s.n - r);
    if (hi > lo) {
      acc.resize((hi - lo) * s.inner);
      convolve_run(line + (lo - r) * s.inner, out + lo * s.inner, acc.data(),
                   (hi - lo) * s.inner, s.inner, w, 2 * r + 1);
    }
    auto ends = [&](int64_t x0, int64_t x1) {
      for (int64_t x = x0; x < x1; ++x)
        for (int64_t j = 0; j < s.inner; ++j)
          out[x * s.inner + j] =
              cmn::convert_sat<Dst>(conv::convolve_at(line + j, s.n, s.inner, x, w, r));
    };
    ends(0, lo);
    ends(hi, s.n);
  });
}

template <typename In, typename Out>
void separable_conv_cpu_impl(const conv::Args& a, const at::Tensor& scratch) {
  std::vector<const In*> in;
  std::vector<Out*> out;
  std::vector<float*> tmp[2];
  float* base = a.num_axes > 1 ? scratch.mutable_data_ptr<float>() : nullptr;
  for (int64_t i = 0; i < a.n; ++i) {
    in.push_back(a.images[i].const_data_ptr<In>());
    out.push_back(a.out[i].mutable_data_ptr<Out>());
    tmp[0].push_back(base ? base + a.tmp_at[i] : nullptr);
    tmp[1].push_back(base && a.num_axes > 2 ? base + a.tmp_size + a.tmp_at[i] : nullptr);
  }
  auto as_const = [](const std::vector<float*>& v) {
    return std::vector<const float*>(v.begin(), v.end());
  };
  for (int64_t p = 0; p < a.num_axes; ++p) {
    const bool first = p == 0, last = p == a.num_axes - 1;
    if (first && last) pass_cpu<In, Out>(a, p, in, out);
    else if (first) pass_cpu<In, float>(a, p, in, tmp[0]);
    else if (last) pass_cpu<float, Out>(a, p, as_const(tmp[(p - 1) % 2]), out);
    else pass_cpu<float, float>(a, p, as_const(tmp[(p - 1) % 2]), tmp[p % 2]);
  }
}

std::vector<at::Tensor> separable_conv_cpu(at::TensorList images, const at::Tensor& windows,
                                           at::IntArrayRef window_sizes, int64_t first_axis,
                                           int64_t num_axes, at::ScalarType out_dtype) {
  conv::Args a = conv::prepare(images, windows, window_sizes, first_axis, num_axes, out_dtype);
  TORCH_CHECK_VALUE(a.images[0].is_cpu(), "separable_conv: CPU kernel got `images` on ",
                    a.images[0].device());
  TORCH_CHECK_VALUE(a.windows.is_cpu(), "separable_conv: CPU kernel needs `windows` on the CPU");
  const int64_t halves = std::min<int64_t>(a.num_axes - 1, 2);
  const at::Tensor scratch = at::empty({halves * a.tmp_size}, a.windows.options());
  dispatch_types<false>("separable_conv", a.images[0].scalar_type(), out_dtype,
                        [&](auto in_tag, auto out_tag) {
    separable_conv_cpu_impl<decltype(in_tag), decltype(out_tag)>(a, scratch);
  });
  return a.out;
}

}  // namespace
}  // namespace torchdali

TORCH_LIBRARY_IMPL(torchdali, CPU, m) {
  m.impl("separable_conv", &torchdali::separable_conv_cpu);
}
