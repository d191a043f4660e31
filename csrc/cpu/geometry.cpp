// CPU kernels of torchdali::flip and torchdali::transpose: one parallel loop over the rows
// of the whole batch (a sample's rows are found from prefix sums).
#include "../parallel.h"
#include <torch/library.h>

#include <algorithm>
#include <cstring>

#include "../geometry.h"
#include "rows.h"
#include "simd.h"

namespace torchdali {
namespace {

// dst[x] = src[n - 1 - x]: a row of pixels that are single elements of T.
template <typename T>
TORCHDALI_SIMD_CLONES void reverse_copy(const T* __restrict src, T* __restrict dst, int64_t n) {
  for (int64_t x = 0; x < n; ++x) dst[x] = src[n - 1 - x];
}

// Swaps elements 0 and 2 of each of n groups of 3: reversed 3-element pixels back in order.
template <typename T>
TORCHDALI_SIMD_CLONES void swap_outer_of_3(T* __restrict d, int64_t n) {
  for (int64_t x = 0; x < n; ++x) {
    const T first = d[3 * x];
    d[3 * x] = d[3 * x + 2];
    d[3 * x + 2] = first;
  }
}

// Mirrors a row of w pixels of 3 bytes, 5 pixels at a time: 16 bytes read from the start of
// their source, reversed pixel-wise with one byte shuffle and stored from the start of their
// destination. The 16th byte read and written lies in the row when 1 <= x < w - 5; the byte
// written is overwritten by the next pixel. Four blocks a step, their loads before their
// stores.
TORCHDALI_SIMD_CLONES void mirror_row3(const uint8_t* __restrict src, uint8_t* __restrict dst,
                                       int64_t w) {
  typedef uint8_t Bytes __attribute__((vector_size(16)));
  constexpr int kBlocks = 4;
  if (w == 0) return;
  std::memcpy(dst, src + (w - 1) * 3, 3);
  int64_t x = 1;
  for (; x + 5 * kBlocks < w; x += 5 * kBlocks) {
    const uint8_t* s = src + (w - x - 5 * kBlocks) * 3;
    Bytes v[kBlocks];
    for (int b = 0; b < kBlocks; ++b) std::memcpy(&v[b], s + 15 * (kBlocks - 1 - b), 16);
    for (int b = 0; b < kBlocks; ++b) {
      v[b] = __builtin_shufflevector(v[b], v[b], 12, 13, 14, 9, 10, 11, 6, 7, 8, 3, 4, 5, 0, 1,
                                     2, 15);
      std::memcpy(dst + (x + 5 * b) * 3, &v[b], 16);
    }
  }
  for (; x < w; ++x) std::memcpy(dst + x * 3, src + (w - 1 - x) * 3, 3);
}

// Mirrors a row of w pixels of W bytes as reversed words W when both rows are aligned to W
// (rows of such pixels are, in tensors torch allocates).
template <typename W>
bool reverse_words(const void* src, void* dst, int64_t w) {
  if (reinterpret_cast<uintptr_t>(src) % sizeof(W) != 0 ||
      reinterpret_cast<uintptr_t>(dst) % sizeof(W) != 0)
    return false;
  reverse_copy(static_cast<const W*>(src), static_cast<W*>(dst), w);
  return true;
}

// dst pixel x = src pixel w - 1 - x, for pixels of `inner` elements of T: reversed words
// where a pixel is 1, 2, 4 or 8 bytes, reversed elements put back in order for 3-element
// pixels, else a copy per pixel.
template <typename T>
void mirror_pixels(const T* __restrict src, T* __restrict dst, int64_t w, int64_t inner) {
  if (inner == 1) return reverse_copy(src, dst, w);
  const int64_t bytes = inner * sizeof(T);
  if ((bytes == 2 && reverse_words<uint16_t>(src, dst, w)) ||
      (bytes == 4 && reverse_words<uint32_t>(src, dst, w)) ||
      (bytes == 8 && reverse_words<uint64_t>(src, dst, w)))
    return;
  if (inner == 3 && sizeof(T) == 1) {
    return mirror_row3(reinterpret_cast<const uint8_t*>(src), reinterpret_cast<uint8_t*>(dst), w);
  } else if (inner == 3) {
    reverse_copy(src, dst, 3 * w);
    swap_outer_of_3(dst, w);
    return;
  }
  for (int64_t x = 0; x < w; ++x)
    std::memcpy(dst + x * inner, src + (w - 1 - x) * inner, inner * sizeof(T));
}

// mirror_pixels over a row, from a copy of the source made in ascending order, a chunk at a
// time, in a buffer that stays in L1: descending reads from memory are several times slower
// (the prefetchers follow ascending streams).
template <typename T>
void mirror_row(const T* src, T* dst, int64_t w, int64_t inner) {
  constexpr int64_t kBytes = 4096;
  alignas(64) unsigned char buffer[kBytes];
  const int64_t pixel = inner * static_cast<int64_t>(sizeof(T));
  if (pixel == 0 || pixel > kBytes) return mirror_pixels(src, dst, w, inner);  // 0: no channels
  const int64_t chunk = kBytes / pixel;
  for (int64_t x0 = 0; x0 < w; x0 += chunk) {
    const int64_t n = std::min(chunk, w - x0);
    std::memcpy(buffer, src + (w - x0 - n) * inner, n * pixel);
    mirror_pixels(reinterpret_cast<const T*>(buffer), dst + x0 * inner, n, inner);
  }
}

// Rows are flipped in groups of about kGroupBytes: a sample without flips is copied a group
// at a time (large copies run faster), and work items cost alike.
constexpr int64_t kGroupBytes = 1 << 16;

template <typename T>
void flip_cpu_impl(const geometry::FlipArgs& a, int64_t height_dim) {
  const uint8_t* hflags = a.horizontal.data_ptr<uint8_t>();
  const uint8_t* vflags = a.vertical.data_ptr<uint8_t>();
  std::vector<geometry::FlipDims> dims;
  std::vector<int64_t> group, items;
  int64_t cost = 1;
  for (const at::Tensor& im : a.images) {
    const geometry::FlipDims d = geometry::flip_dims(im, height_dim);
    const int64_t row_bytes = d.w * d.inner * static_cast<int64_t>(sizeof(T));
    dims.push_back(d);
    group.push_back(std::max<int64_t>(1, kGroupBytes / std::max<int64_t>(row_bytes, 1)));
    items.push_back((d.outer * d.h + group.back() - 1) / group.back());
    cost = std::max(cost, group.back() * d.w * d.inner);
  }
  for_each_row(items, cost, [&](int64_t i, int64_t item) {
    const geometry::FlipDims& d = dims[i];
    const int64_t row_len = d.w * d.inner;
    const int64_t r0 = item * group[i], r1 = std::min(r0 + group[i], d.outer * d.h);
    const T* in = static_cast<const T*>(a.images[i].const_data_ptr());
    T* out = static_cast<T*>(a.outs[i].data_ptr());
    if (!hflags[i] && !vflags[i]) {
      std::memcpy(out + r0 * row_len, in + r0 * row_len, (r1 - r0) * row_len * sizeof(T));
      return;
    }
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t o = r / d.h, y = r % d.h;
      const int64_t sy = geometry::flip_index(y, d.h, vflags[i] != 0);
      const T* src = in + (o * d.h + sy) * row_len;
      T* dst = out + r * row_len;
      if (hflags[i]) {
        mirror_row(src, dst, d.w, d.inner);
      } else {
        std::memcpy(dst, src, row_len * sizeof(T));
      }
    }
  });
}

geometry::FlipArgs flip_cpu_run(at::TensorList images, const at::Tensor& horizontal,
                                const at::Tensor& vertical, int64_t height_dim,
                                const at::Tensor& dense_out) {
  geometry::FlipArgs a =
      geometry::flip_prepare(images, horizontal, vertical, height_dim, dense_out);
  TORCH_CHECK_VALUE(a.images[0].is_cpu(), "flip: CPU kernel got `images` on ",
                    a.images[0].device());
  geometry::dispatch_elem("flip", a.images[0], [&](auto tag) {
    flip_cpu_impl<decltype(tag)>(a, height_dim);
  });
  return a;
}

std::vector<at::Tensor> flip_cpu(at::TensorList images, const at::Tensor& horizontal,
                                 const at::Tensor& vertical, int64_t height_dim) {
  return flip_cpu_run(images, horizontal, vertical, height_dim, at::Tensor()).outs;
}

at::Tensor flip_dense_cpu(const at::Tensor& images, const at::Tensor& horizontal,
                          const at::Tensor& vertical, int64_t height_dim) {
  at::Tensor out = dense_output(images, images.scalar_type());
  flip_cpu_run(samples_of("flip", images), horizontal, vertical, height_dim, out);
  return out;
}

// Planar rows from n interleaved pixels: dst[c * plane + x] = src[x * K + c].
template <typename T, int K>
TORCHDALI_SIMD_CLONES void deinterleave(const T* __restrict src, T* __restrict dst, int64_t n,
                                        int64_t plane) {
  for (int64_t x = 0; x < n; ++x)
    for (int c = 0; c < K; ++c) dst[c * plane + x] = src[x * K + c];
}

// n interleaved pixels from planar rows: dst[x * K + c] = src[c * plane + x].
template <typename T, int K>
TORCHDALI_SIMD_CLONES void interleave(const T* __restrict src, T* __restrict dst, int64_t n,
                                      int64_t plane) {
  for (int64_t x = 0; x < n; ++x)
    for (int c = 0; c < K; ++c) dst[x * K + c] = src[c * plane + x];
}

// How transpose copies a sample whose plan ends in [.., A, B]: by rows of B, or, between
// pixels of K = 2..4 interleaved channels and K planes of `pixels` (HWC <-> CHW), in blocks
// of pixels (`blocks` per plane).
struct TransposeWork {
  enum Kind { kRows, kDeinterleave, kInterleave } kind = kRows;
  int k = 0;
  int64_t pixels = 0, blocks = 0, items = 0;
};

constexpr int64_t kPixelBlock = 4096;

inline TransposeWork transpose_work(const geometry::TransposePlan& p) {
  TransposeWork w;
  const int64_t b = p.shape[p.ndim - 1];
  w.items = b == 0 ? 0 : p.numel / b;
  if (p.ndim < 2 || p.numel == 0) return w;
  const int64_t a = p.shape[p.ndim - 2];
  if (p.src_stride[p.ndim - 2] != 1 || p.src_stride[p.ndim - 1] != a) return w;
  if (a >= 2 && a <= 4) {
    w.kind = TransposeWork::kDeinterleave;
    w.k = static_cast<int>(a);
    w.pixels = b;
  } else if (b >= 2 && b <= 4) {
    w.kind = TransposeWork::kInterleave;
    w.k = static_cast<int>(b);
    w.pixels = a;
  } else {
    return w;
  }
  w.blocks = (w.pixels + kPixelBlock - 1) / kPixelBlock;
  w.items = p.numel / (a * b) * w.blocks;
  return w;
}

// Copies block `item` of a sample between interleaved pixels and planes (see TransposeWork).
template <typename T>
void transpose_block(const geometry::TransposePlan& p, const TransposeWork& w, int64_t item,
                     const T* in, T* out) {
  const int64_t x0 = item % w.blocks * kPixelBlock, n = std::min(kPixelBlock, w.pixels - x0);
  const int64_t plane_start = item / w.blocks * w.k * w.pixels;
  const bool de = w.kind == TransposeWork::kDeinterleave;
  const int64_t first = plane_start + (de ? x0 : x0 * w.k);  // output index of the block
  const T* src = in + geometry::transpose_src(p, first);
  T* dst = out + first;
  switch (w.k * (de ? 1 : -1)) {
    case 2: return deinterleave<T, 2>(src, dst, n, w.pixels);
    case 3: return deinterleave<T, 3>(src, dst, n, w.pixels);
    case 4: return deinterleave<T, 4>(src, dst, n, w.pixels);
    case -2: return interleave<T, 2>(src, dst, n, w.pixels);
    case -3: return interleave<T, 3>(src, dst, n, w.pixels);
    default: return interleave<T, 4>(src, dst, n, w.pixels);
  }
}

template <typename T>
void transpose_cpu_impl(const std::vector<at::Tensor>& ins, std::vector<at::Tensor>& outs,
                        const std::vector<geometry::TransposePlan>& plans) {
  // An item is a row (the plan's innermost output dimension) or a block of pixels.
  std::vector<TransposeWork> work;
  std::vector<int64_t> items;
  int64_t cost = 1;
  for (const auto& p : plans) {
    work.push_back(transpose_work(p));
    items.push_back(work.back().items);
    cost = std::max(cost, work.back().kind == TransposeWork::kRows
                              ? p.shape[p.ndim - 1]
                              : std::min(kPixelBlock, work.back().pixels) * work.back().k);
  }
  for_each_row(items, cost, [&](int64_t i, int64_t r) {
    const geometry::TransposePlan& p = plans[i];
    const T* in = static_cast<const T*>(ins[i].const_data_ptr());
    T* out = static_cast<T*>(outs[i].data_ptr());
    if (work[i].kind != TransposeWork::kRows) return transpose_block(p, work[i], r, in, out);
    const int64_t len = p.shape[p.ndim - 1], stride = p.src_stride[p.ndim - 1];
    const T* src = in + geometry::transpose_src(p, r * len);
    T* dst = out + r * len;
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

at::Tensor gather_windows_cpu(at::TensorList images, const at::Tensor& windows) {
  std::vector<at::Tensor> ins = geometry::check_images("gather_windows", images, 2);
  TORCH_CHECK_VALUE(ins[0].is_cpu(), "gather_windows: CPU kernel got `images` on ",
                    ins[0].device());
  int64_t total = 0;
  const std::vector<geometry::WindowCopy> copies = geometry::window_copies(ins, windows, total);
  at::Tensor out = at::empty({total}, ins[0].options());
  const int64_t elem = ins[0].element_size();
  char* dst = static_cast<char*>(out.data_ptr());
  torchdali::parallel_for(0, static_cast<int64_t>(ins.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const geometry::WindowCopy& c = copies[i];
      const char* src = static_cast<const char*>(ins[i].const_data_ptr()) + c.start * elem;
      for (int64_t r = 0; r < c.rows; ++r)
        std::memcpy(dst + (c.dst + r * c.row_len) * elem, src + r * c.pitch * elem,
                    c.row_len * elem);
    }
  });
  return out;
}

}  // namespace
}  // namespace torchdali

TORCH_LIBRARY_IMPL(torchdali, CPU, m) {
  m.impl("gather_windows", &torchdali::gather_windows_cpu);
  m.impl("flip", &torchdali::flip_cpu);
  m.impl("flip.dense", &torchdali::flip_dense_cpu);
  m.impl("transpose", &torchdali::transpose_cpu);
}
