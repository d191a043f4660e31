// torchdali::flip and torchdali::transpose — argument checks and per-sample geometry shared
// by the CPU (csrc/cpu) and CUDA (csrc/cuda) kernels. Schemas and semantics: csrc/ops.cpp.
// Both ops only move elements, so the kernels copy elements of 1, 2, 4 or 8 bytes and work
// for any dtype of those sizes.
#pragma once

#include <ATen/ATen.h>
#include <c10/macros/Macros.h>

#include <cstdint>
#include <vector>

#include "dense.h"

namespace torchdali {
namespace geometry {

constexpr int kMaxDims = 8;

// Calls f(T{}) with an unsigned integer type as wide as one element of `t`.
template <typename F>
void dispatch_elem(const char* op, const at::Tensor& t, F&& f) {
  switch (t.element_size()) {
    case 1: f(uint8_t{}); break;
    case 2: f(uint16_t{}); break;
    case 4: f(uint32_t{}); break;
    case 8: f(uint64_t{}); break;
    default:
      TORCH_CHECK_TYPE(false, op, ": elements of ", t.element_size(), " bytes (",
                       t.scalar_type(), ") are not supported");
  }
}

// Checks that `images` is a non-empty list of tensors of one dtype, device and rank, and
// returns them contiguous.
inline std::vector<at::Tensor> check_images(const char* op, const at::TensorList& images,
                                            int64_t min_dims) {
  TORCH_CHECK_VALUE(!images.empty(), op, ": `images` must hold at least one sample");
  const at::Tensor& first = images[0];
  std::vector<at::Tensor> out;
  out.reserve(images.size());
  for (size_t i = 0; i < images.size(); ++i) {
    const at::Tensor& im = images[i];
    TORCH_CHECK_VALUE(im.dim() == first.dim() && im.dim() >= min_dims && im.dim() <= kMaxDims,
                      op, ": all samples must have one number of dimensions, from ", min_dims,
                      " to ", kMaxDims, "; sample 0 has shape ", first.sizes(), ", sample ", i,
                      " has shape ", im.sizes());
    TORCH_CHECK_TYPE(im.scalar_type() == first.scalar_type(), op, ": all samples must have "
                     "one dtype; sample 0 is ", first.scalar_type(), ", sample ", i, " is ",
                     im.scalar_type());
    TORCH_CHECK_VALUE(im.device() == first.device(), op, ": all samples must be on one "
                      "device; sample 0 is on ", first.device(), ", sample ", i, " on ",
                      im.device());
    out.push_back(im.contiguous());
  }
  return out;
}

// --- flip ---

// Sample i viewed as [outer, H, W, inner] (H = dim height_dim, W = the next dim).
struct FlipDims {
  int64_t outer, h, w, inner;
};

inline FlipDims flip_dims(const at::Tensor& im, int64_t height_dim) {
  FlipDims d{1, im.size(height_dim), im.size(height_dim + 1), 1};
  for (int64_t k = 0; k < height_dim; ++k) d.outer *= im.size(k);
  for (int64_t k = height_dim + 2; k < im.dim(); ++k) d.inner *= im.size(k);
  return d;
}

struct FlipArgs {
  std::vector<at::Tensor> images, outs;
  at::Tensor horizontal, vertical;  // uint8 [N], contiguous, on the CPU or the images' device
};

inline at::Tensor flag_tensor(const char* name, const at::Tensor& t, int64_t n,
                              const at::Device& device) {
  TORCH_CHECK_VALUE(t.dim() == 1 && t.size(0) == n, "flip: `", name, "` must have shape [", n,
                    "] (one flag per sample), got ", t.sizes());
  return t.ne(0).to(t.is_cpu() ? t.device() : device, at::kByte).contiguous();
}

// Checks the arguments; the outputs are views of `dense_out` when it is defined (flip.dense).
inline FlipArgs flip_prepare(const at::TensorList& images, const at::Tensor& horizontal,
                             const at::Tensor& vertical, int64_t height_dim,
                             const at::Tensor& dense_out = at::Tensor()) {
  FlipArgs a;
  TORCH_CHECK_VALUE(height_dim >= 0 && height_dim <= kMaxDims - 2, "flip: `height_dim` must be 0 to ",
                    kMaxDims - 2, ", got ", height_dim);
  a.images = check_images("flip", images, height_dim + 2);
  const int64_t n = static_cast<int64_t>(a.images.size());
  const at::Device device = a.images[0].device();
  a.horizontal = flag_tensor("horizontal", horizontal, n, device);
  a.vertical = flag_tensor("vertical", vertical, n, device);
  for (int64_t i = 0; i < n; ++i)
    a.outs.push_back(sample_output(dense_out, i, a.images[i], a.images[i].scalar_type()));
  return a;
}

// The source index of output index `v` along an axis of `extent`, flipped or not.
template <typename Index>
C10_HOST_DEVICE inline Index flip_index(Index v, Index extent, bool flip) {
  return flip ? extent - 1 - v : v;
}

// --- transpose ---

inline void check_perm(const std::vector<int64_t>& perm, int64_t ndim) {
  TORCH_CHECK_VALUE(static_cast<int64_t>(perm.size()) == ndim, "transpose: `perm` must have ",
                    ndim, " entries (the samples' number of dimensions), got ", perm.size());
  std::vector<bool> seen(ndim, false);
  for (int64_t p : perm) {
    TORCH_CHECK_VALUE(p >= 0 && p < ndim && !seen[p], "transpose: `perm` must be a "
                      "permutation of 0..", ndim - 1, ", got ", at::IntArrayRef(perm));
    seen[p] = true;
  }
}

// Output sample i of transpose: out_shape[k] = in.size(perm[k]); src_stride[k] is the input's
// stride (in elements) of dimension perm[k]. Dimensions of extent 1 drop out and adjacent
// output dimensions that stay adjacent in the input merge, so most copies have few dims.
struct TransposePlan {
  int ndim;
  int64_t shape[kMaxDims];
  int64_t src_stride[kMaxDims];
  int64_t numel;
};

inline TransposePlan transpose_plan(const at::Tensor& im, const std::vector<int64_t>& perm) {
  TransposePlan p{};
  p.numel = im.numel();
  const auto strides = im.strides();
  for (size_t k = 0; k < perm.size(); ++k) {
    const int64_t ext = im.size(perm[k]), st = strides[perm[k]];
    if (ext == 1) continue;
    if (p.ndim > 0 && p.src_stride[p.ndim - 1] == st * ext) {  // contiguous with the last one
      p.shape[p.ndim - 1] *= ext;
      p.src_stride[p.ndim - 1] = st;
      continue;
    }
    p.shape[p.ndim] = ext;
    p.src_stride[p.ndim] = st;
    ++p.ndim;
  }
  if (p.ndim == 0) {  // a single element (or an empty tensor's unit dims)
    p.ndim = 1;
    p.shape[0] = 1;
    p.src_stride[0] = 1;
  }
  return p;
}

inline std::vector<int64_t> transpose_shape(const at::Tensor& im,
                                            const std::vector<int64_t>& perm) {
  std::vector<int64_t> shape;
  for (int64_t p : perm) shape.push_back(im.size(p));
  return shape;
}

// The input offset of output element `idx` (row-major in the plan's shape), computed in
// `Index` arithmetic (the CUDA kernel uses 32 bits where the sample allows).
template <typename Index>
C10_HOST_DEVICE inline Index transpose_src(const TransposePlan& p, Index idx) {
  Index off = 0;
  for (int k = p.ndim - 1; k >= 0; --k) {
    const Index ext = static_cast<Index>(p.shape[k]);
    off += (idx % ext) * static_cast<Index>(p.src_stride[k]);
    idx /= ext;
  }
  return off;
}

// --- gather_windows ---

// Window i of sample i, in elements: `rows` rows of `row_len` elements, read from `src` at
// element offset `start` and then every `pitch` elements, written to `dst` back to back.
struct WindowCopy {
  int64_t start, pitch, rows, row_len, dst;  // dst: offset in the output buffer
};

// The checked windows of `images` (dims 0 and 1 are rows and columns; any dims after them
// are copied whole) and the total number of output elements.
inline std::vector<WindowCopy> window_copies(const std::vector<at::Tensor>& images,
                                             const at::Tensor& windows, int64_t& total) {
  const int64_t n = static_cast<int64_t>(images.size());
  TORCH_CHECK_VALUE(windows.dim() == 2 && windows.size(0) == n && windows.size(1) == 4,
                    "gather_windows: `windows` must have shape [", n, ", 4], got ",
                    windows.sizes());
  const at::Tensor w = windows.to(at::kCPU, at::kLong).contiguous();
  const int64_t* p = w.data_ptr<int64_t>();
  std::vector<WindowCopy> copies;
  copies.reserve(n);
  total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const at::Tensor& im = images[i];
    const int64_t y = p[4 * i], x = p[4 * i + 1], h = p[4 * i + 2], wd = p[4 * i + 3];
    TORCH_CHECK_VALUE(y >= 0 && x >= 0 && h >= 0 && wd >= 0 && h <= im.size(0) - y &&
                          wd <= im.size(1) - x,
                      "gather_windows: window ", i, " (y=", y, ", x=", x, ", h=", h, ", w=", wd,
                      ") is not inside sample ", i, " of shape ", im.sizes());
    int64_t inner = 1;
    for (int64_t d = 2; d < im.dim(); ++d) inner *= im.size(d);
    copies.push_back(WindowCopy{(y * im.size(1) + x) * inner, im.size(1) * inner, h, wd * inner,
                                total});
    total += h * wd * inner;
  }
  return copies;
}

}  // namespace geometry
}  // namespace torchdali
