// CUDA kernels of torchdali::flip and torchdali::transpose: one launch per batch. The
// per-sample descriptors (and flags given on the CPU) go to the device in one asynchronous
// copy of a pinned table, so a call never waits for the GPU.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "../geometry.h"
#include "upload.cuh"

namespace torchdali {
namespace {

constexpr int kThreads = 256;

// --- flip ---

struct FlipDesc {
  const void* src;
  void* dst;
  geometry::FlipDims d;
};

// blockIdx.z walks samples, blockIdx.y rows ([outer, H] flattened), x the W pixels of a row:
// each thread copies one pixel's `inner` elements (no division per element), so consecutive
// threads read and write consecutive pixels.
template <typename T, typename Index>
__global__ void flip_kernel(const FlipDesc* __restrict__ descs,
                            const uint8_t* __restrict__ hflags,
                            const uint8_t* __restrict__ vflags, int64_t n) {
  for (int64_t i = blockIdx.z; i < n; i += gridDim.z) {
    const FlipDesc& s = descs[i];
    const bool hf = hflags[i] != 0, vf = vflags[i] != 0;
    const Index h = static_cast<Index>(s.d.h), w = static_cast<Index>(s.d.w);
    const Index inner = static_cast<Index>(s.d.inner);
    const Index rows = static_cast<Index>(s.d.outer) * h, row_len = w * inner;
    for (Index r = blockIdx.y; r < rows; r += gridDim.y) {
      const Index o = r / h, y = r - o * h;
      const T* src = static_cast<const T*>(s.src) +
                     int64_t(o * h + geometry::flip_index(y, h, vf)) * row_len;
      T* dst = static_cast<T*>(s.dst) + int64_t(r) * row_len;
      for (Index x = Index(blockIdx.x) * blockDim.x + threadIdx.x; x < w;
           x += Index(gridDim.x) * blockDim.x) {
        const T* from = src + geometry::flip_index(x, w, hf) * inner;
        T* to = dst + x * inner;
        for (Index c = 0; c < inner; ++c) to[c] = from[c];
      }
    }
  }
}

void flip_cuda_run(at::TensorList images, const at::Tensor& horizontal,
                   const at::Tensor& vertical, int64_t height_dim, const at::Tensor& dense_out,
                   std::vector<at::Tensor>& outs) {
  TORCH_CHECK_VALUE(!images.empty(), "flip: `images` must hold at least one sample");
  const c10::cuda::CUDAGuard guard(images[0].device());
  geometry::FlipArgs a =
      geometry::flip_prepare(images, horizontal, vertical, height_dim, dense_out);
  TORCH_CHECK_VALUE(a.images[0].is_cuda(), "flip: CUDA kernel got `images` on ",
                    a.images[0].device());
  outs = a.outs;
  const int64_t n = static_cast<int64_t>(a.images.size());
  std::vector<FlipDesc> descs;
  int64_t max_rows = 0, max_row_len = 0, max_w = 0;
  for (int64_t i = 0; i < n; ++i) {
    descs.push_back(FlipDesc{a.images[i].const_data_ptr(), a.outs[i].data_ptr(),
                             geometry::flip_dims(a.images[i], height_dim)});
    const geometry::FlipDims& d = descs.back().d;
    max_rows = std::max(max_rows, d.outer * d.h);
    max_row_len = std::max(max_row_len, d.w * d.inner);
    max_w = std::max(max_w, d.w);
  }
  if (max_rows == 0 || max_row_len == 0) return;
  std::vector<const void*> flags;
  at::Tensor table = upload(descs, {&a.horizontal, &a.vertical}, a.images[0].device(), flags);
  const dim3 grid(grid_dim(max_w, kThreads), grid_dim(max_rows, 1), grid_dim(n, 1));
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  // Indices within a sample: rows, and positions within a row (plus a grid's stride).
  const int64_t max_index = std::max(max_rows + grid.y, max_row_len + int64_t(grid.x) * kThreads);
  geometry::dispatch_elem("flip", a.images[0], [&](auto tag) {
    dispatch_index(max_index, [&](auto index) {
      flip_kernel<decltype(tag), decltype(index)><<<grid, kThreads, 0, stream>>>(
          reinterpret_cast<const FlipDesc*>(table.const_data_ptr()),
          static_cast<const uint8_t*>(flags[0]), static_cast<const uint8_t*>(flags[1]), n);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
}

std::vector<at::Tensor> flip_cuda(at::TensorList images, const at::Tensor& horizontal,
                                  const at::Tensor& vertical, int64_t height_dim) {
  std::vector<at::Tensor> outs;
  flip_cuda_run(images, horizontal, vertical, height_dim, at::Tensor(), outs);
  return outs;
}

at::Tensor flip_dense_cuda(const at::Tensor& images, const at::Tensor& horizontal,
                           const at::Tensor& vertical, int64_t height_dim) {
  at::Tensor out = dense_output(images, images.scalar_type());
  std::vector<at::Tensor> outs;
  flip_cuda_run(samples_of("flip", images), horizontal, vertical, height_dim, out, outs);
  return out;
}

// --- transpose ---

struct TransposeDesc {
  const void* src;
  void* dst;
  geometry::TransposePlan plan;
};

// blockIdx.y walks samples; threads stride over the output elements, written in order. The
// descriptor is read in place (a copy of its plan would live in local memory).
template <typename T, typename Index>
__global__ void transpose_kernel(const TransposeDesc* __restrict__ descs, int64_t n) {
  for (int64_t i = blockIdx.y; i < n; i += gridDim.y) {
    const TransposeDesc& s = descs[i];
    const T* src = static_cast<const T*>(s.src);
    T* dst = static_cast<T*>(s.dst);
    const Index numel = static_cast<Index>(s.plan.numel);
    for (Index e = Index(blockIdx.x) * blockDim.x + threadIdx.x; e < numel;
         e += Index(gridDim.x) * blockDim.x)
      dst[e] = src[geometry::transpose_src<Index>(s.plan, e)];
  }
}

// Transposes whose plan is two dims, one of them short (HWC <-> CHW: the channels): each
// thread takes one index of the long dim and loops over the short one, so neither side needs
// a division per element. Output [a, b] reads the input at a * stride[0] + b * stride[1].
template <typename T, typename Index>
__global__ void transpose_short_kernel(const TransposeDesc* __restrict__ descs, int64_t n) {
  for (int64_t i = blockIdx.y; i < n; i += gridDim.y) {
    const TransposeDesc& s = descs[i];
    const T* src = static_cast<const T*>(s.src);
    T* dst = static_cast<T*>(s.dst);
    const Index rows = static_cast<Index>(s.plan.shape[0]);
    const Index cols = static_cast<Index>(s.plan.shape[1]);
    const Index row_stride = static_cast<Index>(s.plan.src_stride[0]);
    const Index col_stride = static_cast<Index>(s.plan.src_stride[1]);
    const bool short_rows = rows <= cols;
    const Index along = short_rows ? cols : rows, across = short_rows ? rows : cols;
    for (Index t = Index(blockIdx.x) * blockDim.x + threadIdx.x; t < along;
         t += Index(gridDim.x) * blockDim.x) {
      for (Index k = 0; k < across; ++k) {
        const Index a = short_rows ? k : t, b = short_rows ? t : k;
        dst[a * cols + b] = src[a * row_stride + b * col_stride];
      }
    }
  }
}

// The longest dim below which transpose_short_kernel's loop is cheap.
constexpr int64_t kShortDim = 16;

inline bool short_plan(const geometry::TransposePlan& p) {
  return p.ndim == 2 && std::min(p.shape[0], p.shape[1]) <= kShortDim;
}

std::vector<at::Tensor> transpose_cuda(at::TensorList images, at::IntArrayRef perm) {
  TORCH_CHECK_VALUE(!images.empty(), "transpose: `images` must hold at least one sample");
  const c10::cuda::CUDAGuard guard(images[0].device());
  std::vector<at::Tensor> ins = geometry::check_images("transpose", images, 1);
  TORCH_CHECK_VALUE(ins[0].is_cuda(), "transpose: CUDA kernel got `images` on ",
                    ins[0].device());
  const std::vector<int64_t> p(perm.begin(), perm.end());
  geometry::check_perm(p, ins[0].dim());
  const int64_t n = static_cast<int64_t>(ins.size());
  std::vector<at::Tensor> outs;
  std::vector<TransposeDesc> descs;
  int64_t max_numel = 0, max_long = 0;  // the longest sample; its longest plan dim
  bool all_short = true;
  for (const at::Tensor& im : ins) {
    outs.push_back(at::empty(geometry::transpose_shape(im, p), im.options()));
    descs.push_back(TransposeDesc{im.const_data_ptr(), outs.back().data_ptr(),
                                  geometry::transpose_plan(im, p)});
    const geometry::TransposePlan& plan = descs.back().plan;
    max_numel = std::max(max_numel, im.numel());
    max_long = std::max(max_long, std::max(plan.shape[0], plan.ndim > 1 ? plan.shape[1] : 1));
    all_short = all_short && short_plan(plan);
  }
  if (max_numel == 0) return outs;
  std::vector<const void*> unused;
  at::Tensor table = upload(descs, {}, ins[0].device(), unused);
  const dim3 grid(grid_dim(all_short ? max_long : max_numel, kThreads), grid_dim(n, 1));
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  // Index math stays below numel + a thread grid's stride.
  const int64_t max_index = max_numel + int64_t(grid.x) * kThreads;
  geometry::dispatch_elem("transpose", ins[0], [&](auto tag) {
    dispatch_index(max_index, [&](auto index) {
      const auto* table_dev =
          reinterpret_cast<const TransposeDesc*>(table.const_data_ptr());
      if (all_short) {
        transpose_short_kernel<decltype(tag), decltype(index)>
            <<<grid, kThreads, 0, stream>>>(table_dev, n);
      } else {
        transpose_kernel<decltype(tag), decltype(index)>
            <<<grid, kThreads, 0, stream>>>(table_dev, n);
      }
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  return outs;
}

// --- gather_windows ---

struct WindowDesc {
  const void* src;
  geometry::WindowCopy c;
};

// blockIdx.z walks samples, blockIdx.y a window's rows, x the elements of a row.
template <typename T, typename Index>
__global__ void gather_windows_kernel(const WindowDesc* __restrict__ descs, int64_t n,
                                      T* __restrict__ out) {
  for (int64_t i = blockIdx.z; i < n; i += gridDim.z) {
    const geometry::WindowCopy c = descs[i].c;
    const T* src = static_cast<const T*>(descs[i].src) + c.start;
    T* dst = out + c.dst;
    const Index row_len = static_cast<Index>(c.row_len);
    for (Index r = blockIdx.y; r < c.rows; r += gridDim.y)
      for (Index e = Index(blockIdx.x) * blockDim.x + threadIdx.x; e < row_len;
           e += Index(gridDim.x) * blockDim.x)
        dst[int64_t(r) * row_len + e] = src[int64_t(r) * c.pitch + e];
  }
}

at::Tensor gather_windows_cuda(at::TensorList images, const at::Tensor& windows) {
  std::vector<at::Tensor> ins = geometry::check_images("gather_windows", images, 2);
  const c10::cuda::CUDAGuard guard(ins[0].device());
  TORCH_CHECK_VALUE(ins[0].is_cuda(), "gather_windows: CUDA kernel got `images` on ",
                    ins[0].device());
  int64_t total = 0;
  const std::vector<geometry::WindowCopy> copies = geometry::window_copies(ins, windows, total);
  at::Tensor out = at::empty({total}, ins[0].options());
  std::vector<WindowDesc> descs;
  int64_t max_rows = 0, max_row_len = 0;
  for (size_t i = 0; i < ins.size(); ++i) {
    descs.push_back(WindowDesc{ins[i].const_data_ptr(), copies[i]});
    max_rows = std::max(max_rows, copies[i].rows);
    max_row_len = std::max(max_row_len, copies[i].row_len);
  }
  if (total == 0) return out;
  std::vector<const void*> unused;
  at::Tensor table = upload(descs, {}, out.device(), unused);
  const int64_t n = static_cast<int64_t>(ins.size());
  const dim3 grid(grid_dim(max_row_len, kThreads), grid_dim(max_rows, 1), grid_dim(n, 1));
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int64_t max_index = std::max(max_rows + grid.y, max_row_len + int64_t(grid.x) * kThreads);
  geometry::dispatch_elem("gather_windows", ins[0], [&](auto tag) {
    using T = decltype(tag);
    dispatch_index(max_index, [&](auto index) {
      gather_windows_kernel<T, decltype(index)><<<grid, kThreads, 0, stream>>>(
          reinterpret_cast<const WindowDesc*>(table.const_data_ptr()), n,
          static_cast<T*>(out.data_ptr()));
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  return out;
}

}  // namespace
}  // namespace torchdali

TORCH_LIBRARY_IMPL(torchdali, CUDA, m) {
  m.impl("gather_windows", &torchdali::gather_windows_cuda);
  m.impl("flip", &torchdali::flip_cuda);
  m.impl("flip.dense", &torchdali::flip_dense_cuda);
  m.impl("transpose", &torchdali::transpose_cuda);
}
