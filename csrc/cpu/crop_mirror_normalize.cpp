// CPU kernel of torchdali::crop_mirror_normalize: one parallel loop over (sample, row).
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "../crop_mirror_normalize.h"

namespace torchdali {
namespace {

template <typename In, typename Out>
void cmn_cpu(const cmn::Args& a, int64_t crop_h, int64_t crop_w, bool out_chw,
             int64_t out_channels, float scale, float shift) {
  const int64_t* anchors = a.anchors.data_ptr<int64_t>();
  const uint8_t* mirror = a.mirror.data_ptr<uint8_t>();
  const float* mean = a.mean.data_ptr<float>();
  const float* inv_std = a.inv_std.data_ptr<float>();
  const float* fill = a.fill.data_ptr<float>();
  Out* out = a.out.data_ptr<Out>();
  const int64_t plane = crop_h * crop_w;
  const int64_t sample_size = plane * out_channels;
  // HWC: pixels are out_channels apart, channels adjacent; CHW: the other way round.
  const int64_t px_stride = out_chw ? 1 : out_channels;
  const int64_t c_stride = out_chw ? plane : 1;
  const int64_t C = a.channels;
  const int64_t grain = std::max<int64_t>(1, at::internal::GRAIN_SIZE / (crop_w * out_channels));

  at::parallel_for(0, a.n * crop_h, grain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t i = row / crop_h, y = row % crop_h;
      const at::Tensor& im = a.images[i];
      const int64_t H = cmn::image_h(im, a.in_chw), W = cmn::image_w(im, a.in_chw);
      const cmn::InputStrides in = cmn::input_strides(a.in_chw, H, W, C);
      const In* src = im.const_data_ptr<In>();
      const int64_t iy = anchors[2 * i] + y, ax = anchors[2 * i + 1];
      const bool flip = mirror[i] != 0;
      const bool row_in = iy >= 0 && iy < H;
      Out* dst = out + i * sample_size + y * crop_w * px_stride;
      for (int64_t x = 0; x < crop_w; ++x) {
        const int64_t ix = ax + (flip ? crop_w - 1 - x : x);
        const In* px = (row_in && ix >= 0 && ix < W) ? src + (iy * W + ix) * in.px : nullptr;
        cmn::write_pixel<In, Out>(px, in.ch, dst + x * px_stride, c_stride, C, out_channels,
                                  mean, inv_std, fill, scale, shift);
      }
    }
  });
}

at::Tensor crop_mirror_normalize_cpu(at::TensorList images, const at::Tensor& anchors,
                                     const at::Tensor& mirror, const at::Tensor& mean,
                                     const at::Tensor& inv_std, int64_t crop_h, int64_t crop_w,
                                     at::ScalarType out_dtype, bool out_chw,
                                     int64_t out_channels, double scale, double shift,
                                     const at::Tensor& fill, bool in_chw) {
  cmn::Args a = cmn::prepare(images, anchors, mirror, mean, inv_std, crop_h, crop_w, out_dtype,
                             out_chw, out_channels, fill, in_chw);
  TORCH_CHECK_VALUE(a.out.device().is_cpu(), "crop_mirror_normalize: CPU kernel got `images` "
                    "on ", a.out.device());
  cmn::dispatch(a.images[0].scalar_type(), out_dtype, [&](auto in_tag, auto out_tag) {
    cmn_cpu<decltype(in_tag), decltype(out_tag)>(a, crop_h, crop_w, out_chw, out_channels,
                                                  static_cast<float>(scale),
                                                  static_cast<float>(shift));
  });
  return a.out;
}

}  // namespace
}  // namespace torchdali

TORCH_LIBRARY_IMPL(torchdali, CPU, m) {
  m.impl("crop_mirror_normalize", &torchdali::crop_mirror_normalize_cpu);
}
