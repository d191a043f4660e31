// CPU kernel of torchdali::crop_mirror_normalize: one parallel loop over (sample, row). A row
// is the run of window pixels inside the image, normalized into a planar scratch row and
// stored in the output's order (reversed when mirrored), plus the fill around it.
#include "../parallel.h"
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "../crop_mirror_normalize.h"
#include "convert.h"
#include "simd.h"

namespace torchdali {
namespace {

// Normalizes n input pixels (channel c of pixel x at src[x * px + c * ch]) into the planar
// scratch row tmp[c * n + x]. K > 0: pixels of K interleaved channels (px = K, ch = 1).
template <typename In, int K>
TORCHDALI_SIMD_CLONES void normalize_pixels(const In* __restrict src, int64_t px, int64_t ch,
                                            int64_t n, int64_t channels,
                                            const float* __restrict mean,
                                            const float* __restrict inv_std, float scale,
                                            float shift, float* __restrict tmp) {
  if constexpr (K > 0) {
    for (int64_t x = 0; x < n; ++x)
      for (int c = 0; c < K; ++c)
        tmp[c * n + x] =
            (static_cast<float>(src[x * K + c]) - mean[c]) * inv_std[c] * scale + shift;
    return;
  }
  for (int64_t c = 0; c < channels; ++c) {
    const In* s = src + c * ch;
    float* t = tmp + c * n;
    const float m = mean[c], is = inv_std[c];
    if (px == 1) {
      for (int64_t x = 0; x < n; ++x) t[x] = (static_cast<float>(s[x]) - m) * is * scale + shift;
    } else {
      for (int64_t x = 0; x < n; ++x)
        t[x] = (static_cast<float>(s[x * px]) - m) * is * scale + shift;
    }
  }
}

// Stores the scratch row converted: its pixel x (n - 1 - x when `reverse`) goes to
// out[x * opx + c * ocs]. K > 0: output pixels of K interleaved channels (opx = K, ocs = 1).
template <typename Out, int K>
TORCHDALI_SIMD_CLONES void store_pixels(const float* __restrict tmp, int64_t n,
                                        int64_t channels, bool reverse, Out* __restrict out,
                                        int64_t opx, int64_t ocs) {
  if constexpr (K > 0) {
    if (reverse) {
      for (int64_t x = 0; x < n; ++x)
        for (int c = 0; c < K; ++c) out[x * K + c] = saturate<Out>(tmp[c * n + n - 1 - x]);
    } else {
      for (int64_t x = 0; x < n; ++x)
        for (int c = 0; c < K; ++c) out[x * K + c] = saturate<Out>(tmp[c * n + x]);
    }
    return;
  }
  for (int64_t c = 0; c < channels; ++c) {
    const float* t = tmp + c * n;
    Out* o = out + c * ocs;
    if (opx == 1 && reverse) {
      for (int64_t x = 0; x < n; ++x) o[x] = saturate<Out>(t[n - 1 - x]);
    } else if (opx == 1) {
      for (int64_t x = 0; x < n; ++x) o[x] = saturate<Out>(t[x]);
    } else {
      for (int64_t x = 0; x < n; ++x) o[x * opx] = saturate<Out>(t[reverse ? n - 1 - x : x]);
    }
  }
}

// Writes fill[c] to channels [c0, c1) of the output pixels [x0, x1) of a row.
template <typename Out>
void fill_pixels(Out* out, int64_t x0, int64_t x1, int64_t c0, int64_t c1, const Out* fill,
                 int64_t opx, int64_t ocs) {
  for (int64_t c = c0; c < c1; ++c)
    for (int64_t x = x0; x < x1; ++x) out[x * opx + c * ocs] = fill[c];
}

template <typename In, typename Out>
void cmn_cpu(const cmn::Args& a, int64_t crop_h, int64_t crop_w, bool out_chw,
             int64_t out_channels, float scale, float shift) {
  const int64_t* anchors = a.anchors.data_ptr<int64_t>();
  const uint8_t* mirror = a.mirror.data_ptr<uint8_t>();
  const float* mean = a.mean.data_ptr<float>();
  const float* inv_std = a.inv_std.data_ptr<float>();
  Out* out = a.out.data_ptr<Out>();
  std::vector<Out> fill(out_channels);
  for (int64_t c = 0; c < out_channels; ++c)
    fill[c] = cmn::convert_sat<Out>(a.fill.data_ptr<float>()[c]);
  const int64_t plane = crop_h * crop_w;
  const int64_t C = a.channels;
  // HWC: pixels are out_channels apart, channels adjacent; CHW: the other way round.
  const int64_t opx = out_chw ? 1 : out_channels, ocs = out_chw ? plane : 1;
  const bool in3 = !a.in_chw && C == 3, out3 = !out_chw && C == 3 && out_channels == 3;
  const int64_t grain = std::max<int64_t>(1, at::internal::GRAIN_SIZE / (crop_w * out_channels));

  torchdali::parallel_for(0, a.n * crop_h, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> tmp(C * crop_w);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t i = row / crop_h, y = row % crop_h;
      const int64_t H = cmn::image_h(a, i), W = cmn::image_w(a, i);
      const cmn::InputStrides in = cmn::input_strides(a.in_chw, H, W, C);
      const int64_t iy = anchors[2 * i] + y, ax = anchors[2 * i + 1];
      const bool flip = mirror[i] != 0;
      // The window's columns inside the image, [s0, s1), land on output columns from x0.
      const int64_t s0 = std::clamp<int64_t>(ax, 0, W), s1 = std::clamp<int64_t>(ax + crop_w, 0, W);
      const int64_t n = iy >= 0 && iy < H ? s1 - s0 : 0;
      const int64_t x0 = n == 0 ? 0 : flip ? ax + crop_w - s1 : s0 - ax;
      Out* dst = out + i * plane * out_channels + y * crop_w * opx;
      if (n > 0) {
        const In* src = static_cast<const In*>(a.images.data(i)) + (iy * W + s0) * in.px;
        if (in3) {
          normalize_pixels<In, 3>(src, 3, 1, n, 3, mean, inv_std, scale, shift, tmp.data());
        } else {
          normalize_pixels<In, 0>(src, in.px, in.ch, n, C, mean, inv_std, scale, shift,
                                  tmp.data());
        }
        Out* run = dst + x0 * opx;
        if (out3) {
          store_pixels<Out, 3>(tmp.data(), n, 3, flip, run, 3, 1);
        } else {
          store_pixels<Out, 0>(tmp.data(), n, C, flip, run, opx, ocs);
        }
      }
      fill_pixels(dst, 0, x0, 0, C, fill.data(), opx, ocs);
      fill_pixels(dst, x0 + n, crop_w, 0, C, fill.data(), opx, ocs);
      fill_pixels(dst, 0, crop_w, C, out_channels, fill.data(), opx, ocs);
    }
  });
}

at::Tensor crop_mirror_normalize_cpu_run(Samples samples, const at::Tensor& anchors,
                                     const at::Tensor& mirror, const at::Tensor& mean,
                                     const at::Tensor& inv_std, int64_t crop_h, int64_t crop_w,
                                     at::ScalarType out_dtype, bool out_chw, int64_t out_channels,
                                     double scale, double shift, const at::Tensor& fill,
                                     bool in_chw) {
  cmn::Args a = cmn::prepare(std::move(samples), anchors, mirror, mean, inv_std, crop_h, crop_w,
                             out_dtype, out_chw, out_channels, fill, in_chw);
  TORCH_CHECK_VALUE(a.out.device().is_cpu(), "crop_mirror_normalize: CPU kernel got `images` "
                    "on ", a.out.device());
  cmn::dispatch(a.images.dtype(0), out_dtype, [&](auto in_tag, auto out_tag) {
    cmn_cpu<decltype(in_tag), decltype(out_tag)>(a, crop_h, crop_w, out_chw, out_channels,
                                                  static_cast<float>(scale),
                                                  static_cast<float>(shift));
  });
  return a.out;
}

// crop_mirror_normalize (`images` a list) and crop_mirror_normalize.dense_in (a dense batch).
template <typename Images>
at::Tensor crop_mirror_normalize_cpu(Images images, const at::Tensor& anchors,
                                      const at::Tensor& mirror, const at::Tensor& mean,
                                      const at::Tensor& inv_std, int64_t crop_h, int64_t crop_w,
                                      at::ScalarType out_dtype, bool out_chw, int64_t out_channels,
                                      double scale, double shift, const at::Tensor& fill,
                                      bool in_chw) {
  return crop_mirror_normalize_cpu_run(Samples("crop_mirror_normalize", images), anchors, mirror, mean,
                                        inv_std, crop_h, crop_w, out_dtype, out_chw, out_channels,
                                        scale, shift, fill, in_chw);
}

// crop_mirror_normalize.flat_in: the samples back to back in one buffer, with their shapes.
at::Tensor crop_mirror_normalize_flat_cpu(const at::Tensor& images, const at::Tensor& shapes,
                                           const at::Tensor& anchors, const at::Tensor& mirror,
                                           const at::Tensor& mean, const at::Tensor& inv_std,
                                           int64_t crop_h, int64_t crop_w, at::ScalarType out_dtype,
                                           bool out_chw, int64_t out_channels, double scale,
                                           double shift, const at::Tensor& fill, bool in_chw) {
  return crop_mirror_normalize_cpu_run(Samples("crop_mirror_normalize", images, shapes), anchors, mirror,
                                        mean, inv_std, crop_h, crop_w, out_dtype, out_chw,
                                        out_channels, scale, shift, fill, in_chw);
}

}  // namespace
}  // namespace torchdali

TORCH_LIBRARY_IMPL(torchdali, CPU, m) {
  m.impl("crop_mirror_normalize", &torchdali::crop_mirror_normalize_cpu<at::TensorList>);
  m.impl("crop_mirror_normalize.dense_in",
         &torchdali::crop_mirror_normalize_cpu<const at::Tensor&>);
  m.impl("crop_mirror_normalize.flat_in", &torchdali::crop_mirror_normalize_flat_cpu);
}
