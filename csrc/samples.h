// The samples of a batch as kernels read them, from either form an op takes: a list of
// tensors (shapes may differ) or one dense [N, ...] tensor. A dense batch is not split into a
// tensor per sample: sample i is a pointer into it and the batch's sample shape, so a call
// costs the same for 1 and for 1000 samples before the kernel runs.
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

  int64_t size() const {
    return dense_.defined() ? dense_.size(0) : static_cast<int64_t>(list_.size());
  }
  at::IntArrayRef sizes(int64_t i) const {
    return dense_.defined() ? dense_.sizes().slice(1) : list_[i].sizes();
  }
  int64_t dim(int64_t i) const { return static_cast<int64_t>(sizes(i).size()); }
  int64_t size(int64_t i, int64_t d) const { return sizes(i)[d]; }
  at::ScalarType dtype(int64_t i) const { return at_(i).scalar_type(); }
  at::Device device(int64_t i) const { return at_(i).device(); }
  // Options of the batch's first sample (its device and dtype).
  at::TensorOptions options() const { return at_(0).options(); }
  const void* data(int64_t i) const {
    if (dense_.defined())
      return static_cast<const char*>(dense_.const_data_ptr()) + i * sample_bytes_;
    return list_[i].const_data_ptr();
  }

 private:
  const at::Tensor& at_(int64_t i) const { return dense_.defined() ? dense_ : list_[i]; }

  at::Tensor dense_;
  std::vector<at::Tensor> list_;
  int64_t sample_bytes_ = 0;
};

}  // namespace torchdali
