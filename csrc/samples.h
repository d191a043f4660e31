// The samples of a batch as kernels read them, from any form an op takes: a list of tensors
// (shapes may differ), one dense [N, ...] tensor, or one flat 1-D buffer holding samples of
// different shapes back to back with their shapes [N, ndim] (a ragged batch in one
// allocation, as the decoders output it). Neither of the last two is split into a tensor per
// sample: sample i is a pointer into the buffer and its shape, so a call costs the same for 1
// and for 1000 samples before the kernel runs, and the caller makes no Python tensor per
// sample.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace torchdali {

class Samples {
 public:
  Samples() = default;  // no samples

  // A list of samples, each made contiguous.
  Samples(const char* op, at::TensorList list) {
    TORCH_CHECK_VALUE(!list.empty(), op, ": `images` must hold at least one image");
    list_.reserve(list.size());
    for (const at::Tensor& t : list) list_.push_back(t.contiguous());
  }

  // A dense batch [N, ...] (N > 0), made contiguous.
  Samples(const char* op, const at::Tensor& dense) {
    TORCH_CHECK_VALUE(dense.dim() >= 1 && dense.size(0) > 0, op, ": a dense batch of `images` "
                      "needs a leading batch dimension and at least one image, got shape ",
                      dense.sizes());
    dense_ = dense.contiguous();
    sample_bytes_ = dense_.numel() / dense_.size(0) * dense_.element_size();
  }

  // Samples back to back in the 1-D buffer `flat`: sample i has shape shapes[i] (int64
  // [N, ndim] on the CPU, N > 0) and starts where sample i - 1 ends.
  Samples(const char* op, const at::Tensor& flat, const at::Tensor& shapes) {
    TORCH_CHECK_VALUE(flat.dim() == 1, op, ": a flat batch of `images` must be 1-D, got shape ",
                      flat.sizes());
    TORCH_CHECK_VALUE(shapes.dim() == 2 && shapes.size(0) > 0, op, ": `shapes` must be [N, ndim] "
                      "with at least one image, got shape ", shapes.sizes());
    TORCH_CHECK_TYPE(shapes.scalar_type() == at::kLong && shapes.is_cpu(), op,
                     ": `shapes` must be an int64 CPU tensor, got ", shapes.scalar_type(), " on ",
                     shapes.device());
    flat_ = flat.contiguous();
    shapes_ = shapes.contiguous();
    const int64_t n = shapes_.size(0), ndim = shapes_.size(1), limit = flat_.numel();
    const int64_t* s = shapes_.const_data_ptr<int64_t>();
    offsets_.resize(n);
    int64_t end = 0;
    for (int64_t i = 0; i < n; ++i) {
      int64_t numel = 1;
      for (int64_t d = 0; d < ndim; ++d) {
        const int64_t extent = s[i * ndim + d];
        TORCH_CHECK_VALUE(extent >= 0 && (extent == 0 || numel <= limit / extent), op,
                          ": sample ", i, " of shape ", at::IntArrayRef(s + i * ndim, ndim), " does not fit the flat "
                          "batch of ", limit, " elements");
        numel *= extent;
      }
      offsets_[i] = end;
      end += numel;
      TORCH_CHECK_VALUE(end <= limit, op, ": `shapes` describe more elements than the flat batch "
                        "holds (", limit, ") by sample ", i);
    }
    sample_bytes_ = flat_.element_size();  // per element, for the flat form
  }

  int64_t size() const {
    if (flat_.defined()) return shapes_.size(0);
    return dense_.defined() ? dense_.size(0) : static_cast<int64_t>(list_.size());
  }
  at::IntArrayRef sizes(int64_t i) const {
    if (flat_.defined()) {
      const int64_t ndim = shapes_.size(1);
      return at::IntArrayRef(shapes_.const_data_ptr<int64_t>() + i * ndim, ndim);
    }
    return dense_.defined() ? dense_.sizes().slice(1) : list_[i].sizes();
  }
  int64_t dim(int64_t i) const { return static_cast<int64_t>(sizes(i).size()); }
  int64_t size(int64_t i, int64_t d) const { return sizes(i)[d]; }
  at::ScalarType dtype(int64_t i) const { return at_(i).scalar_type(); }
  at::Device device(int64_t i) const { return at_(i).device(); }
  // Options of the batch's first sample (its device and dtype).
  at::TensorOptions options() const { return at_(0).options(); }
  const void* data(int64_t i) const {
    if (flat_.defined())
      return static_cast<const char*>(flat_.const_data_ptr()) + offsets_[i] * sample_bytes_;
    if (dense_.defined())
      return static_cast<const char*>(dense_.const_data_ptr()) + i * sample_bytes_;
    return list_[i].const_data_ptr();
  }

 private:
  const at::Tensor& at_(int64_t i) const {
    return flat_.defined() ? flat_ : dense_.defined() ? dense_ : list_[i];
  }

  at::Tensor dense_;
  std::vector<at::Tensor> list_;
  at::Tensor flat_, shapes_;       // the flat form
  std::vector<int64_t> offsets_;  // the flat form's sample starts, in elements
  int64_t sample_bytes_ = 0;      // dense: bytes a sample; flat: bytes an element
};

}  // namespace torchdali
