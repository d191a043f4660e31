// CPU kernel of torchdali::warp_affine (list and dense outputs): one parallel loop over the
// output rows of the whole batch.
#include <torch/library.h>

#include <algorithm>

#include "../warp.h"
#include "rows.h"

namespace torchdali {
namespace {

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
