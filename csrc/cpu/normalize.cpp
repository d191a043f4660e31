// CPU kernel of torchdali::normalize: one parallel loop over the rows (the plans' innermost
// dims) of the whole batch.
#include <torch/library.h>

#include <algorithm>

#include "../normalize.h"
#include "rows.h"

namespace torchdali {
namespace {

template <typename In, typename Out>
void normalize_cpu_impl(const normalize::Args& a, float shift) {
  std::vector<int64_t> rows;
  int64_t row_cost = 1;
  for (const normalize::Plan& p : a.plans) {
    const int64_t len = p.shape[p.ndim - 1];
    rows.push_back(len == 0 ? 0 : p.numel / len);
    row_cost = std::max(row_cost, len);
  }
  for_each_row(rows, row_cost, [&](int64_t i, int64_t r) {
    const normalize::Plan& p = a.plans[i];
    const int64_t len = p.shape[p.ndim - 1];
    const int64_t ms = p.mean_stride[p.ndim - 1], is = p.inv_stride[p.ndim - 1];
    int64_t m0, s0;
    normalize::param_offsets(p, r * len, m0, s0);
    const In* src = a.images[i].const_data_ptr<In>() + r * len;
    Out* dst = a.out[i].mutable_data_ptr<Out>() + r * len;
    const float* mean = a.mean[i].const_data_ptr<float>() + m0;
    const float* inv = a.inv_std[i].const_data_ptr<float>() + s0;
    for (int64_t x = 0; x < len; ++x)
      dst[x] = normalize::apply<In, Out>(src[x], mean[x * ms], inv[x * is], shift);
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
