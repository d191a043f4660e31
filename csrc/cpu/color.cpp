// CPU kernel of torchdali::color_transform: one parallel loop over (sample, chunk of pixels).
#include "../parallel.h"
#include <torch/library.h>

#include <algorithm>

#include "../color.h"
#include "convert.h"
#include "simd.h"

namespace torchdali {
namespace {

// Transforms n pixels of `channels` interleaved channels (K > 0: of K channels, with the
// matrix held in registers); the same arithmetic as color::transform_pixel.
template <typename In, typename Out, int K>
TORCHDALI_SIMD_CLONES void transform_run(const In* __restrict src, Out* __restrict dst,
                                         int64_t n, int64_t channels,
                                         const float* __restrict m,
                                         const float* __restrict offset) {
  if constexpr (K > 0) {
    float mk[K * K], ok[K];
    for (int c = 0; c < K * K; ++c) mk[c] = m[c];
    for (int c = 0; c < K; ++c) ok[c] = offset[c];
    for (int64_t p = 0; p < n; ++p) {
      float in[K];
      for (int k = 0; k < K; ++k) in[k] = static_cast<float>(src[p * K + k]);
      for (int c = 0; c < K; ++c) {
        float v = ok[c];
        for (int k = 0; k < K; ++k) v += mk[c * K + k] * in[k];
        dst[p * K + c] = saturate<Out>(v);
      }
    }
  } else {
    for (int64_t p = 0; p < n; ++p)
      color::transform_pixel<In, Out>(src + p * channels, dst + p * channels, channels, m,
                                      offset);
  }
}

template <typename In, typename Out>
void color_cpu(const color::Args& a) {
  const int64_t C = a.channels;
  const float* matrices = a.matrices.data_ptr<float>();
  const float* offsets = a.offsets.data_ptr<float>();
  // Work items are chunks of `chunk` pixels of one sample, so small and large images mix.
  const int64_t chunk = std::max<int64_t>(1, at::internal::GRAIN_SIZE / C);
  std::vector<int64_t> first_item(a.n + 1, 0);
  for (int64_t i = 0; i < a.n; ++i) {
    const int64_t pixels = a.images[i].numel() / C;
    first_item[i + 1] = first_item[i] + (pixels + chunk - 1) / chunk;
  }
  torchdali::parallel_for(0, first_item[a.n], 1, [&](int64_t begin, int64_t end) {
    int64_t i = std::upper_bound(first_item.begin(), first_item.end(), begin) -
                first_item.begin() - 1;
    for (int64_t item = begin; item < end; ++item) {
      while (item >= first_item[i + 1]) ++i;
      const int64_t pixels = a.images[i].numel() / C;
      const int64_t p0 = (item - first_item[i]) * chunk, p1 = std::min(pixels, p0 + chunk);
      const In* src = a.images[i].const_data_ptr<In>();
      Out* dst = a.out[i].mutable_data_ptr<Out>();
      const float* m = matrices + i * C * C;
      const float* off = offsets + i * C;
      if (C == 3) {
        transform_run<In, Out, 3>(src + p0 * 3, dst + p0 * 3, p1 - p0, 3, m, off);
      } else {
        transform_run<In, Out, 0>(src + p0 * C, dst + p0 * C, p1 - p0, C, m, off);
      }
    }
  });
}

color::Args color_transform_cpu_run(at::TensorList images, const at::Tensor& matrices,
                                    const at::Tensor& offsets, at::ScalarType out_dtype,
                                    const at::Tensor& dense_out) {
  color::Args a = color::prepare(images, matrices, offsets, out_dtype, dense_out);
  TORCH_CHECK_VALUE(a.images[0].device().is_cpu(), "color_transform: CPU kernel got `images` "
                    "on ", a.images[0].device());
  TORCH_CHECK_VALUE(a.matrices.is_cpu() && a.offsets.is_cpu(), "color_transform: CPU kernel "
                    "needs `matrices` and `offsets` on the CPU");
  color::dispatch(a.images[0].scalar_type(), out_dtype, [&](auto in_tag, auto out_tag) {
    color_cpu<decltype(in_tag), decltype(out_tag)>(a);
  });
  return a;
}

std::vector<at::Tensor> color_transform_cpu(at::TensorList images, const at::Tensor& matrices,
                                            const at::Tensor& offsets,
                                            at::ScalarType out_dtype) {
  return color_transform_cpu_run(images, matrices, offsets, out_dtype, at::Tensor()).out;
}

at::Tensor color_transform_dense_cpu(const at::Tensor& images, const at::Tensor& matrices,
                                     const at::Tensor& offsets, at::ScalarType out_dtype) {
  at::Tensor out = dense_output(images, out_dtype);
  color_transform_cpu_run(samples_of("color_transform", images), matrices, offsets, out_dtype,
                          out);
  return out;
}

}  // namespace
}  // namespace torchdali

TORCH_LIBRARY_IMPL(torchdali, CPU, m) {
  m.impl("color_transform", &torchdali::color_transform_cpu);
  m.impl("color_transform.dense", &torchdali::color_transform_dense_cpu);
}
