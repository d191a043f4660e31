// CUDA kernel of torchdali::crop_mirror_normalize: one launch for the whole batch.
// Per-sample pointers and sizes, and the small parameters given on the CPU, go to the
// device in one asynchronous copy, so a call never waits for the GPU.

// c10's CUDA headers rather than ATen/cuda/CUDAContext.h, which also wants the cuBLAS and
// cuSPARSE headers that a minimal CUDA toolkit lacks.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "../crop_mirror_normalize.h"

namespace torchdali {
namespace {

struct SampleDesc {
  const void* data;  // HWC or CHW, contiguous
  int64_t h, w;
};

constexpr int kTileW = 32, kTileH = 8;

// blockIdx.z walks samples, each block a 32x8 tile of output pixels; a thread writes all
// channels of one pixel, so in CHW output a warp writes 32 adjacent values per channel.
template <typename In, typename Out>
__global__ void cmn_kernel(const SampleDesc* __restrict__ samples,
                           const int64_t* __restrict__ anchors,
                           const uint8_t* __restrict__ mirror, const float* __restrict__ mean,
                           const float* __restrict__ inv_std, const float* __restrict__ fill,
                           Out* __restrict__ out, int64_t n, int64_t crop_h, int64_t crop_w,
                           int64_t channels, int64_t out_channels, bool out_chw, bool in_chw,
                           float scale, float shift) {
  const int64_t plane = crop_h * crop_w;
  const int64_t px_stride = out_chw ? 1 : out_channels;
  const int64_t c_stride = out_chw ? plane : 1;
  for (int64_t i = blockIdx.z; i < n; i += gridDim.z) {
    const SampleDesc s = samples[i];
    const In* src = static_cast<const In*>(s.data);
    const cmn::InputStrides in = cmn::input_strides(in_chw, s.h, s.w, channels);
    const int64_t ay = anchors[2 * i], ax = anchors[2 * i + 1];
    const bool flip = mirror[i] != 0;
    Out* dst = out + i * plane * out_channels;
    for (int64_t y = int64_t(blockIdx.y) * kTileH + threadIdx.y; y < crop_h;
         y += int64_t(gridDim.y) * kTileH) {
      const int64_t iy = ay + y;
      const bool row_in = iy >= 0 && iy < s.h;
      for (int64_t x = int64_t(blockIdx.x) * kTileW + threadIdx.x; x < crop_w;
           x += int64_t(gridDim.x) * kTileW) {
        const int64_t ix = ax + (flip ? crop_w - 1 - x : x);
        const In* px = (row_in && ix >= 0 && ix < s.w) ? src + (iy * s.w + ix) * in.px
                                                       : nullptr;
        cmn::write_pixel<In, Out>(px, in.ch, dst + (y * crop_w + x) * px_stride, c_stride,
                                  channels, out_channels, mean, inv_std, fill, scale, shift);
      }
    }
  }
}

at::Tensor crop_mirror_normalize_cuda(at::TensorList images, const at::Tensor& anchors,
                                      const at::Tensor& mirror, const at::Tensor& mean,
                                      const at::Tensor& inv_std, int64_t crop_h,
                                      int64_t crop_w, at::ScalarType out_dtype, bool out_chw,
                                      int64_t out_channels, double scale, double shift,
                                      const at::Tensor& fill, bool in_chw) {
  TORCH_CHECK_VALUE(!images.empty(), "crop_mirror_normalize: `images` must hold an image");
  const c10::cuda::CUDAGuard guard(images[0].device());
  cmn::Args a = cmn::prepare(images, anchors, mirror, mean, inv_std, crop_h, crop_w, out_dtype,
                             out_chw, out_channels, fill, in_chw);
  TORCH_CHECK_VALUE(a.out.is_cuda(), "crop_mirror_normalize: CUDA kernel got `images` on ",
                    a.out.device());

  // One pinned table holds the per-sample descriptors and every small parameter that lives
  // on the CPU; it goes up in one asynchronous copy. The caching host allocator keeps the
  // buffer alive until that copy on the current stream has finished.
  std::vector<const at::Tensor*> params = {&a.anchors, &a.mirror, &a.mean, &a.inv_std, &a.fill};
  auto align8 = [](int64_t b) { return (b + 7) / 8 * 8; };
  std::vector<int64_t> offsets;
  int64_t bytes = align8(a.n * int64_t(sizeof(SampleDesc)));
  for (const at::Tensor* t : params) {
    offsets.push_back(bytes);
    if (t->is_cpu()) bytes += align8(t->nbytes());
  }
  at::Tensor table = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  uint8_t* host = table.data_ptr<uint8_t>();
  auto* desc = reinterpret_cast<SampleDesc*>(host);
  for (int64_t i = 0; i < a.n; ++i)
    desc[i] = SampleDesc{a.images[i].const_data_ptr(), cmn::image_h(a.images[i], in_chw),
                         cmn::image_w(a.images[i], in_chw)};
  for (size_t k = 0; k < params.size(); ++k)
    if (params[k]->is_cpu())
      std::memcpy(host + offsets[k], params[k]->const_data_ptr(), params[k]->nbytes());
  at::Tensor table_dev = table.to(a.out.device(), at::kByte, /*non_blocking=*/true);
  const uint8_t* dev = table_dev.const_data_ptr<uint8_t>();
  auto on_device = [&](size_t k) -> const void* {
    return params[k]->is_cpu() ? static_cast<const void*>(dev + offsets[k])
                               : params[k]->const_data_ptr();
  };

  const dim3 block(kTileW, kTileH);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((crop_w + kTileW - 1) / kTileW, 65535)),
                  static_cast<unsigned>(std::min<int64_t>((crop_h + kTileH - 1) / kTileH, 65535)),
                  static_cast<unsigned>(std::min<int64_t>(a.n, 65535)));
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();  // what at::cuda:: returns
  cmn::dispatch(a.images[0].scalar_type(), out_dtype, [&](auto in_tag, auto out_tag) {
    using In = decltype(in_tag);
    using Out = decltype(out_tag);
    cmn_kernel<In, Out><<<grid, block, 0, stream>>>(
        reinterpret_cast<const SampleDesc*>(dev), static_cast<const int64_t*>(on_device(0)),
        static_cast<const uint8_t*>(on_device(1)), static_cast<const float*>(on_device(2)),
        static_cast<const float*>(on_device(3)), static_cast<const float*>(on_device(4)),
        a.out.mutable_data_ptr<Out>(), a.n, crop_h, crop_w,
        a.channels, out_channels, out_chw, in_chw, static_cast<float>(scale),
        static_cast<float>(shift));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return a.out;
}

}  // namespace
}  // namespace torchdali

TORCH_LIBRARY_IMPL(torchdali, CUDA, m) {
  m.impl("crop_mirror_normalize", &torchdali::crop_mirror_normalize_cuda);
}
