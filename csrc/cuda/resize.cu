// CUDA kernel of torchdali::resize: two launches per batch (first pass, second pass), each
// over every sample; per-sample descriptors go up in one asynchronous copy, and filter
// weights are computed on the fly, so a call never waits for the GPU.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "../resize.h"
#include "upload.cuh"

namespace torchdali {
namespace {

using resize::Axis;

// One 1D pass of one sample: dst (rows x cols x C) from src (src_rows x src_cols x C).
// Horizontal: taps over src columns, dst row r reads src row r + offset; vertical: taps over
// src rows (minus `offset`, the first row the intermediate kept), columns shifted by `col0`.
struct PassDesc {
  const void* src;
  void* dst;
  int64_t src_cols, rows, cols, offset, col0;
  Axis axis;
  bool horizontal;
};

constexpr int kTileW = 32, kTileH = 8;

// The descriptor is read in place (a copy would cost registers); pixel offsets are `Index`
// arithmetic (int32_t where the batch allows it).
template <typename S, typename D, typename Index>
__global__ void pass_kernel(const PassDesc* __restrict__ descs, int64_t n, int C) {
  for (int64_t i = blockIdx.z; i < n; i += gridDim.z) {
    const PassDesc& d = descs[i];
    const S* src = static_cast<const S*>(d.src);
    D* dst = static_cast<D*>(d.dst);
    const Index rows = static_cast<Index>(d.rows), cols = static_cast<Index>(d.cols);
    const Index row_stride = static_cast<Index>(d.src_cols) * C;
    const Index offset = static_cast<Index>(d.offset), col0 = static_cast<Index>(d.col0);
    for (Index y = Index(blockIdx.y) * kTileH + threadIdx.y; y < rows;
         y += Index(gridDim.y) * kTileH) {
      for (Index x = Index(blockIdx.x) * kTileW + threadIdx.x; x < cols;
           x += Index(gridDim.x) * kTileW) {
        // Channels in groups of 4: the filter weights are computed once per group.
        for (int c0 = 0; c0 < C; c0 += 4) {
          const int cn = C - c0 < 4 ? C - c0 : 4;
          float acc[4] = {0.f, 0.f, 0.f, 0.f};
          float sum;
          if (d.horizontal) {
            const S* row = src + (y + offset) * row_stride + c0;
            sum = resize::for_taps(d.axis, x, [&](int64_t s, float w) {
              const S* px = row + static_cast<Index>(s) * C;
              for (int c = 0; c < cn; ++c) acc[c] += w * static_cast<float>(px[c]);
            });
          } else {
            const S* col = src + (x + col0) * C + c0;
            sum = resize::for_taps(d.axis, y, [&](int64_t s, float w) {
              const S* px = col + (static_cast<Index>(s) - offset) * row_stride;
              for (int c = 0; c < cn; ++c) acc[c] += w * static_cast<float>(px[c]);
            });
          }
          D* out = dst + (y * cols + x) * C + c0;
          for (int c = 0; c < cn; ++c)
            out[c] = cmn::convert_sat<D>(sum != 0.f ? acc[c] / sum : acc[c]);
        }
      }
    }
  }
}

template <typename S, typename D>
void launch(const std::vector<PassDesc>& host, const at::Device& device, int64_t C,
            cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(host.size());
  std::vector<const void*> unused;
  at::Tensor dev = upload(host, {}, device, unused);
  int64_t max_r = 1, max_c = 1, max_index = 0;
  for (const PassDesc& d : host) {
    max_r = std::max(max_r, d.rows);
    max_c = std::max(max_c, d.cols);
    // Offsets reach a source of (offset + rows) x src_cols pixels and a rows x cols output.
    max_index = std::max({max_index, (d.offset + d.rows + 1) * std::max(d.src_cols, d.cols) * C,
                          d.axis.in_size * std::max(d.src_cols, d.cols) * C});
  }
  const dim3 block(kTileW, kTileH);
  const dim3 grid(grid_dim(max_c, kTileW), grid_dim(max_r, kTileH), grid_dim(n, 1));
  max_index += (int64_t(grid.x) * kTileW + int64_t(grid.y) * kTileH) * std::max(max_c, int64_t(1));
  dispatch_index(max_index, [&](auto index) {
    pass_kernel<S, D, decltype(index)><<<grid, block, 0, stream>>>(
        reinterpret_cast<const PassDesc*>(dev.const_data_ptr()), n, static_cast<int>(C));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

resize::Args resize_cuda_run(at::TensorList images, at::IntArrayRef out_sizes,
                             const at::Tensor& rois, const at::Tensor& interp, bool antialias,
                             at::ScalarType out_dtype, bool chw, bool dense) {
  TORCH_CHECK_VALUE(!images.empty(), "resize: `images` must hold an image");
  const c10::cuda::CUDAGuard guard(images[0].device());
  resize::Args a =
      resize::prepare(images, out_sizes, rois, interp, antialias, out_dtype, chw, dense);
  const at::Device device = a.images[0].device();
  TORCH_CHECK_VALUE(device.is_cuda(), "resize: CUDA kernel got `images` on ", device);
  const int64_t C = a.channels;
  // The intermediates of all samples in one float buffer (one allocation per batch).
  std::vector<int64_t> tmp_at(a.n + 1, 0);
  for (int64_t i = 0; i < a.n; ++i) {
    const resize::Plan& p = a.plans[i];
    const int64_t cols = p.vert_first ? p.hi - p.lo : p.axis[1].out_size;
    const int64_t rows = p.vert_first ? p.axis[0].out_size : p.hi - p.lo;
    tmp_at[i + 1] = tmp_at[i] + rows * cols * C;
  }
  at::Tensor tmp = at::empty({tmp_at[a.n]}, a.images[0].options().dtype(at::kFloat));
  float* tmp_base = tmp.data_ptr<float>();
  std::vector<PassDesc> first, second;
  for (int64_t i = 0; i < a.n; ++i) {
    const resize::Plan& p = a.plans[i];
    const at::Tensor& im = a.images[i];
    const int64_t ext = p.hi - p.lo, oh = p.axis[0].out_size, ow = p.axis[1].out_size;
    float* t = tmp_base + tmp_at[i];
    if (p.vert_first) {
      first.push_back({im.const_data_ptr(), t, im.size(1), oh, ext, 0, p.lo, p.axis[0], false});
      Axis h = p.axis[1];
      second.push_back({t, a.outs[i].data_ptr(), ext, oh, ow, 0, 0, h, true});
      // Horizontal taps index the kept columns [lo, hi): shift the origin instead.
      second.back().axis.origin -= static_cast<float>(p.lo);
      second.back().axis.in_size = ext;
    } else {
      first.push_back({im.const_data_ptr(), t, im.size(1), ext, ow, p.lo, 0, p.axis[1], true});
      second.push_back({t, a.outs[i].data_ptr(), ow, oh, ow, p.lo, 0, p.axis[0], false});
    }
  }
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  resize::dispatch(a.images[0].scalar_type(), out_dtype, [&](auto in_tag, auto out_tag) {
    launch<decltype(in_tag), float>(first, device, C, stream);
    launch<float, decltype(out_tag)>(second, device, C, stream);
  });
  return a;
}

std::vector<at::Tensor> resize_cuda(at::TensorList images, at::IntArrayRef out_sizes,
                                    const at::Tensor& rois, const at::Tensor& interp,
                                    bool antialias, at::ScalarType out_dtype, bool chw) {
  return resize_cuda_run(images, out_sizes, rois, interp, antialias, out_dtype, chw, false)
      .results;
}

at::Tensor resize_dense_cuda(at::TensorList images, at::IntArrayRef out_sizes,
                             const at::Tensor& rois, const at::Tensor& interp, bool antialias,
                             at::ScalarType out_dtype, bool chw) {
  return resize_cuda_run(images, out_sizes, rois, interp, antialias, out_dtype, chw, true)
      .dense;
}

}  // namespace
}  // namespace torchdali

TORCH_LIBRARY_IMPL(torchdali, CUDA, m) {
  m.impl("resize", &torchdali::resize_cuda);
  m.impl("resize.dense", &torchdali::resize_dense_cuda);
}
