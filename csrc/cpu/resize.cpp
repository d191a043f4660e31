// CPU kernel of torchdali::resize: per sample, two separable 1D passes (the order DALI's cost
// model picks) through a float intermediate; each pass is one parallel loop over
// (sample, row) of the whole batch.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "../resize.h"

namespace torchdali {
namespace {

using resize::Axis;
using resize::Plan;

// Normalized taps of one axis: `support` source indices and weights per output coordinate.
struct Taps {
  int support = 1;
  std::vector<int64_t> idx;
  std::vector<float> w;
};

Taps make_taps(const Axis& a, int64_t offset, bool rows) {
  Taps t;
  if (rows && a.filter.table == resize::kNearest) {
    // DALI's CPU ResampleNN steps the row coordinate by adding `scale` (float), so rows
    // whose exact coordinate is an integer may land one lower; kept on purpose.
    t.idx.resize(a.out_size);
    t.w.assign(a.out_size, 1.f);
    float sy = a.origin + 0.5f * a.scale;
    for (int64_t y = 0; y < a.out_size; ++y, sy += a.scale) {
      int64_t s = static_cast<int64_t>(std::floor(sy));
      t.idx[y] = std::min(std::max<int64_t>(s, 0), a.in_size - 1) - offset;
    }
    return t;
  }
  t.support = a.filter.table == resize::kNearest ? 1 : a.filter.support;
  t.idx.resize(a.out_size * t.support);
  t.w.resize(a.out_size * t.support);
  for (int64_t x = 0; x < a.out_size; ++x) {
    int k = 0;
    const float sum = resize::for_taps(a, x, [&](int64_t s, float c) {
      t.idx[x * t.support + k] = s - offset;
      t.w[x * t.support + k] = c;
      ++k;
    });
    if (sum != 0)
      for (int j = 0; j < t.support; ++j) t.w[x * t.support + j] /= sum;
  }
  return t;
}

// A 1D pass over an HWC image `src` (rows x cols x C), writing `dst` (its row `r` is source
// row r + row0 for a horizontal pass). Horizontal: taps index columns; vertical: rows.
template <typename S, typename D>
void pass_row(const S* src, int64_t cols, int64_t C, D* dst, int64_t dst_cols, const Taps& t,
              bool horizontal, int64_t r, int64_t row0, float* acc) {
  if (horizontal) {
    const S* row = src + (r + row0) * cols * C;
    for (int64_t x = 0; x < dst_cols; ++x) {
      for (int64_t c = 0; c < C; ++c) acc[c] = 0.f;
      for (int k = 0; k < t.support; ++k) {
        const float w = t.w[x * t.support + k];
        const S* px = row + t.idx[x * t.support + k] * C;
        for (int64_t c = 0; c < C; ++c) acc[c] += w * static_cast<float>(px[c]);
      }
      for (int64_t c = 0; c < C; ++c) dst[(r * dst_cols + x) * C + c] = cmn::convert_sat<D>(acc[c]);
    }
  } else {
    const int64_t flat = dst_cols * C;
    for (int64_t j = 0; j < flat; ++j) acc[j] = 0.f;
    for (int k = 0; k < t.support; ++k) {
      const float w = t.w[r * t.support + k];
      const S* row = src + t.idx[r * t.support + k] * cols * C + row0 * C;
      for (int64_t j = 0; j < flat; ++j) acc[j] += w * static_cast<float>(row[j]);
    }
    D* out = dst + r * flat;
    for (int64_t j = 0; j < flat; ++j) out[j] = cmn::convert_sat<D>(acc[j]);
  }
}

// A sample's taps and float intermediate.
struct Work {
  Taps first, second;
  at::Tensor tmp;  // float, rows x cols x C
  int64_t rows1 = 0;  // rows of the first pass's output
};

template <typename In, typename Out>
void resize_cpu_impl(resize::Args& a) {
  const int64_t C = a.channels;
  std::vector<Work> work(a.n);
  std::vector<int64_t> row_start(a.n + 1, 0), row_start2(a.n + 1, 0);
  for (int64_t i = 0; i < a.n; ++i) {
    const Plan& p = a.plans[i];
    Work& w = work[i];
    const Axis& ax1 = p.axis[p.vert_first ? 0 : 1];
    const Axis& ax2 = p.axis[p.vert_first ? 1 : 0];
    w.first = make_taps(ax1, 0, p.vert_first);
    w.second = make_taps(ax2, p.lo, !p.vert_first);
    const int64_t extent = p.hi - p.lo;
    w.tmp = p.vert_first ? at::empty({p.axis[0].out_size, extent, C}, at::kFloat)
                         : at::empty({extent, p.axis[1].out_size, C}, at::kFloat);
    w.rows1 = w.tmp.size(0);
    row_start[i + 1] = row_start[i] + w.rows1;
    row_start2[i + 1] = row_start2[i] + p.axis[0].out_size;
  }
  auto locate = [&](const std::vector<int64_t>& starts, int64_t row) {
    return std::upper_bound(starts.begin(), starts.end(), row) - starts.begin() - 1;
  };
  int64_t max_w = 1;
  for (int64_t i = 0; i < a.n; ++i)
    max_w = std::max({max_w, work[i].tmp.size(1), a.plans[i].axis[1].out_size, int64_t(1)});
  const int64_t acc_size = max_w * C;

  at::parallel_for(0, row_start[a.n], 1, [&](int64_t begin, int64_t end) {
    std::vector<float> acc(acc_size);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t i = locate(row_start, row), r = row - row_start[i];
      const Plan& p = a.plans[i];
      const at::Tensor& im = a.images[i];
      Work& w = work[i];
      // Vertical first: columns [lo, hi) of every output row; horizontal first: rows [lo, hi).
      if (p.vert_first)
        pass_row<In, float>(im.const_data_ptr<In>(), im.size(1), C, w.tmp.data_ptr<float>(),
                            w.tmp.size(1), w.first, false, r, p.lo, acc.data());
      else
        pass_row<In, float>(im.const_data_ptr<In>(), im.size(1), C, w.tmp.data_ptr<float>(),
                            w.tmp.size(1), w.first, true, r, p.lo, acc.data());
    }
  });
  at::parallel_for(0, row_start2[a.n], 1, [&](int64_t begin, int64_t end) {
    std::vector<float> acc(acc_size);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t i = locate(row_start2, row), r = row - row_start2[i];
      const Plan& p = a.plans[i];
      Work& w = work[i];
      pass_row<float, Out>(w.tmp.const_data_ptr<float>(), w.tmp.size(1), C,
                           a.outs[i].data_ptr<Out>(), p.axis[1].out_size, w.second,
                           p.vert_first, r, 0, acc.data());
    }
  });
}

resize::Args resize_cpu_run(at::TensorList images, at::IntArrayRef out_sizes,
                            const at::Tensor& rois, const at::Tensor& interp, bool antialias,
                            at::ScalarType out_dtype, bool chw, bool dense) {
  resize::Args a =
      resize::prepare(images, out_sizes, rois, interp, antialias, out_dtype, chw, dense);
  TORCH_CHECK_VALUE(a.images[0].device().is_cpu(), "resize: CPU kernel got `images` on ",
                    a.images[0].device());
  resize::dispatch(a.images[0].scalar_type(), out_dtype, [&](auto in_tag, auto out_tag) {
    resize_cpu_impl<decltype(in_tag), decltype(out_tag)>(a);
  });
  return a;
}

std::vector<at::Tensor> resize_cpu(at::TensorList images, at::IntArrayRef out_sizes,
                                   const at::Tensor& rois, const at::Tensor& interp,
                                   bool antialias, at::ScalarType out_dtype, bool chw) {
  return resize_cpu_run(images, out_sizes, rois, interp, antialias, out_dtype, chw, false)
      .results;
}

at::Tensor resize_dense_cpu(at::TensorList images, at::IntArrayRef out_sizes,
                            const at::Tensor& rois, const at::Tensor& interp, bool antialias,
                            at::ScalarType out_dtype, bool chw) {
  return resize_cpu_run(images, out_sizes, rois, interp, antialias, out_dtype, chw, true).dense;
}

}  // namespace
}  // namespace torchdali

TORCH_LIBRARY_IMPL(torchdali, CPU, m) {
  m.impl("resize", &torchdali::resize_cpu);
  m.impl("resize.dense", &torchdali::resize_dense_cpu);
}
