// CPU kernel of torchdali::normalize: one parallel loop over runs of the whole batch. A run
// is a row of the plan (its innermost dim) or, where rows are short and share their
// parameters (HWC per channel: rows of C), a group of rows whose parameters are tiled
// into a pattern as long as the run, so the inner loop is long and contiguous.
#include "../parallel.h"
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "../normalize.h"
#include "convert.h"
#include "simd.h"

namespace torchdali {
namespace {

constexpr int64_t kRunLength = 1024;  // elements of a run of grouped rows, at the least

// dst[x] = (src[x] - mean[x * ms]) * inv_std[x * is] + shift for x < n.
template <typename In, typename Out>
TORCHDALI_SIMD_CLONES void normalize_run(const In* __restrict src, Out* __restrict dst,
                                         int64_t n, const float* __restrict mean, int64_t ms,
                                         const float* __restrict inv_std, int64_t is,
                                         float shift) {
  if (ms == 0 && is == 0) {
    const float m = mean[0], s = inv_std[0];
    for (int64_t x = 0; x < n; ++x)
      dst[x] = saturate<Out>(normalize::value(static_cast<float>(src[x]), m, s, shift));
  } else if (ms == 1 && is == 1) {
    for (int64_t x = 0; x < n; ++x)
      dst[x] =
          saturate<Out>(normalize::value(static_cast<float>(src[x]), mean[x], inv_std[x], shift));
  } else {
    for (int64_t x = 0; x < n; ++x)
      dst[x] = saturate<Out>(
          normalize::value(static_cast<float>(src[x]), mean[x * ms], inv_std[x * is], shift));
  }
}

// How a sample's rows (of `len` elements) are cut into runs: blocks of `block` rows
// sharing their parameters, each cut into runs of up to `group` rows.
struct Runs {
  int64_t len, block, group, count;
};

inline Runs runs_of(const normalize::Plan& p) {
  const int64_t len = p.shape[p.ndim - 1];
  const int64_t rows = len == 0 ? 0 : p.numel / len;
  const int k = p.ndim - 2;
  if (rows == 0 || k < 0 || len >= kRunLength || p.mean_stride[k] != 0 ||
      p.inv_stride[k] != 0)
    return {len, 1, 1, rows};
  const int64_t block = p.shape[k], group = std::min(block, (kRunLength + len - 1) / len);
  return {len, block, group, rows / block * ((block + group - 1) / group)};
}

// The parameters of a group of rows of sample i tiled into a pattern as long as the group,
// rebuilt only when the sample or the group's parameter offsets change.
struct Pattern {
  std::vector<float> mean, inv_std;
  int64_t i = -1, m0 = -1, s0 = -1;

  void build(int64_t sample, const float* mean_src, const float* inv_src, int64_t m, int64_t s,
             const normalize::Plan& p, int64_t len, int64_t length) {
    if (sample == i && m == m0 && s == s0) return;
    i = sample;
    m0 = m;
    s0 = s;
    mean.resize(length);
    inv_std.resize(length);
    const int64_t ms = p.mean_stride[p.ndim - 1], is = p.inv_stride[p.ndim - 1];
    for (int64_t x = 0; x < length; ++x) {
      mean[x] = mean_src[m + x % len * ms];
      inv_std[x] = inv_src[s + x % len * is];
    }
  }
};

template <typename In, typename Out>
void normalize_cpu_impl(const normalize::Args& a, float shift) {
  std::vector<Runs> runs;
  std::vector<int64_t> start(a.n + 1, 0);
  int64_t cost = 1;
  for (int64_t i = 0; i < a.n; ++i) {
    runs.push_back(runs_of(a.plans[i]));
    start[i + 1] = start[i] + runs.back().count;
    cost = std::max(cost, runs.back().len * runs.back().group);
  }
  const int64_t grain = std::max<int64_t>(1, at::internal::GRAIN_SIZE / cost);
  torchdali::parallel_for(0, start[a.n], grain, [&](int64_t begin, int64_t end) {
    Pattern pattern;
    int64_t i = std::upper_bound(start.begin(), start.end(), begin) - start.begin() - 1;
    for (int64_t item = begin; item < end; ++item) {
      while (item >= start[i + 1]) ++i;
      const normalize::Plan& p = a.plans[i];
      const Runs& r = runs[i];
      const int64_t per_block = (r.block + r.group - 1) / r.group, k = (item - start[i]) % per_block;
      const int64_t row = (item - start[i]) / per_block * r.block + k * r.group;
      const int64_t n = std::min(r.group, r.block - k * r.group) * r.len;
      int64_t m0, s0;
      normalize::param_offsets(p, row * r.len, m0, s0);
      const In* src = a.images[i].const_data_ptr<In>() + row * r.len;
      Out* dst = a.out[i].mutable_data_ptr<Out>() + row * r.len;
      const float* mean = a.mean[i].const_data_ptr<float>();
      const float* inv = a.inv_std[i].const_data_ptr<float>();
      if (r.group == 1) {
        normalize_run(src, dst, n, mean + m0, p.mean_stride[p.ndim - 1], inv + s0,
                      p.inv_stride[p.ndim - 1], shift);
      } else {
        pattern.build(i, mean, inv, m0, s0, p, r.len, r.group * r.len);
        normalize_run(src, dst, n, pattern.mean.data(), 1, pattern.inv_std.data(), 1, shift);
      }
    }
  });
}

std::vector<at::Tensor> normalize_cpu(at::TensorList images, at::TensorList mean,
                                      at::TensorList inv_std, double shift,
                                      at::ScalarType out_dtype) {
  normalize::Args a = normalize::prepare(images, mean, inv_std, out_dtype);
  TORCH_CHECK_VALUE(a.images[0].is_cpu(), "normalize: CPU kernel got `images` on ",
                    a.images[0].device());
  for (int64_t i = 0; i < a.n; ++i)
    TORCH_CHECK_VALUE(a.mean[i].is_cpu() && a.inv_std[i].is_cpu(), "normalize: CPU kernel "
                      "needs `mean` and `inv_std` on the CPU");
  normalize::dispatch(a.images[0].scalar_type(), out_dtype, [&](auto in_tag, auto out_tag) {
    normalize_cpu_impl<decltype(in_tag), decltype(out_tag)>(a, static_cast<float>(shift));
  });
  return a.out;
}

}  // namespace
}  // namespace torchdali

TORCH_LIBRARY_IMPL(torchdali, CPU, m) {
  m.impl("normalize", &torchdali::normalize_cpu);
}
