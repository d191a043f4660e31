// CPU kernels of torchdali::flip and torchdali::transpose: one parallel loop over the rows
// of the whole batch (a sample's rows are found from prefix sums).
#include <torch/library.h>

#include <algorithm>
#include <cstring>

#include "../geometry.h"
#include "rows.h"

namespace torchdali {
namespace {

// dst[x] = src[w - 1 - x] for pixels of `inner` elements (K = inner, or 0: any).
template <typename T, int K>
void mirror_row(const T* __restrict src, T* __restrict dst, int64_t w, int64_t inner) {
  if constexpr (K > 0) {
    for (int64_t x = 0; x < w; ++x)
      for (int c = 0; c < K; ++c) dst[x * K + c] = src[(w - 1 - x) * K + c];
  } else {
    for (int64_t x = 0; x < w; ++x)
      for (int64_t c = 0; c < inner; ++c) dst[x * inner + c] = src[(w - 1 - x) * inner + c];
  }
}

template <typename T>
void flip_cpu_impl(const geometry::FlipArgs& a, std::vector<at::Tensor>& outs,
                   int64_t height_dim) {
  const uint8_t* hflags = a.horizontal.data_ptr<uint8_t>();
  const uint8_t* vflags = a.vertical.data_ptr<uint8_t>();
  std::vector<geometry::FlipDims> dims;
  std::vector<int64_t> rows;
  int64_t row_cost = 1;
  for (const at::Tensor& im : a.images) {
    dims.push_back(geometry::flip_dims(im, height_dim));
    rows.push_back(dims.back().outer * dims.back().h);
    row_cost = std::max(row_cost, dims.back().w * dims.back().inner);
  }
  for_each_row(rows, row_cost, [&](int64_t i, int64_t r) {
    const geometry::FlipDims& d = dims[i];
    const int64_t o = r / d.h, y = r % d.h;
    const int64_t sy = geometry::flip_index(y, d.h, vflags[i] != 0);
    const int64_t row_len = d.w * d.inner;
    const T* src = static_cast<const T*>(a.images[i].const_data_ptr()) + (o * d.h + sy) * row_len;
    T* dst = static_cast<T*>(outs[i].data_ptr()) + (o * d.h + y) * row_len;
    if (!hflags[i]) {
      std::memcpy(dst, src, row_len * sizeof(T));
      return;
    }
    switch (d.inner) {  // fixed-size pixels for the common channel counts
      case 1: mirror_row<T, 1>(src, dst, d.w, 1); break;
      case 3: mirror_row<T, 3>(src, dst, d.w, 3); break;
      case 4: mirror_row<T, 4>(src, dst, d.w, 4); break;
      default: mirror_row<T, 0>(src, dst, d.w, d.inner);
    }
  });
}

std::vector<at::Tensor> flip_cpu(at::TensorList images, const at::Tensor& horizontal,
                                 const at::Tensor& vertical, int64_t height_dim) {
  geometry::FlipArgs a = geometry::flip_prepare(images, horizontal, vertical, height_dim);
  TORCH_CHECK_VALUE(a.images[0].is_cpu(), "flip: CPU kernel got `images` on ",
                    a.images[0].device());
  std::vector<at::Tensor> outs;
  for (const at::Tensor& im : a.images) outs.push_back(at::empty_like(im));
  geometry::dispatch_elem("flip", a.images[0], [&](auto tag) {
    flip_cpu_impl<decltype(tag)>(a, outs, height_dim);
  });
  return outs;
}

template <typename T>
void transpose_cpu_impl(const std::vector<at::Tensor>& ins, std::vector<at::Tensor>& outs,
                        const std::vector<geometry::TransposePlan>& plans) {
  // A row is the plan's innermost output dimension.
  std::vector<int64_t> rows;
  int64_t row_cost = 1;
  for (const auto& p : plans) {
    const int64_t len = p.shape[p.ndim - 1];
    rows.push_back(len == 0 ? 0 : p.numel / len);
    row_cost = std::max(row_cost, len);
  }
  for_each_row(rows, row_cost, [&](int64_t i, int64_t r) {
    const geometry::TransposePlan& p = plans[i];
    const int64_t len = p.shape[p.ndim - 1], stride = p.src_stride[p.ndim - 1];
    const T* src = static_cast<const T*>(ins[i].const_data_ptr()) + geometry::transpose_src(p, r * len);
    T* dst = static_cast<T*>(outs[i].data_ptr()) + r * len;
    if (stride == 1) {
      std::memcpy(dst, src, len * sizeof(T));
      return;
    }
    for (int64_t x = 0; x < len; ++x) dst[x] = src[x * stride];
  });
}

std::vector<at::Tensor> transpose_cpu(at::TensorList images, at::IntArrayRef perm) {
  std::vector<at::Tensor> ins = geometry::check_images("transpose", images, 1);
  TORCH_CHECK_VALUE(ins[0].is_cpu(), "transpose: CPU kernel got `images` on ", ins[0].device());
  const std::vector<int64_t> p(perm.begin(), perm.end());
  geometry::check_perm(p, ins[0].dim());
  std::vector<at::Tensor> outs;
  std::vector<geometry::TransposePlan> plans;
  for (const at::Tensor& im : ins) {
    outs.push_back(at::empty(geometry::transpose_shape(im, p), im.options()));
    plans.push_back(geometry::transpose_plan(im, p));
  }
  geometry::dispatch_elem("transpose", ins[0], [&](auto tag) {
    transpose_cpu_impl<decltype(tag)>(ins, outs, plans);
  });
  return outs;
}

}  // namespace
}  // namespace torchdali

TORCH_LIBRARY_IMPL(torchdali, CPU, m) {
  m.impl("flip", &torchdali::flip_cpu);
  m.impl("transpose", &torchdali::transpose_cpu);
}
