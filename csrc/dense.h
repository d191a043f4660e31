// Dense batches for the `.dense` overloads of per-sample ops (flip, color_transform): one
// [N, ...] tensor in and one out, so a batch that is already dense stays one tensor.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace torchdali {

// The samples of a dense batch [N, ...] as views.
inline std::vector<at::Tensor> samples_of(const char* op, const at::Tensor& batch) {
  TORCH_CHECK_VALUE(batch.dim() >= 1, op, ": a dense batch needs a leading batch dimension, "
                    "got shape ", batch.sizes());
  return batch.unbind(0);
}

// Sample i's output: a view of `dense` when it is defined, else a new tensor like `sample`.
inline at::Tensor sample_output(const at::Tensor& dense, int64_t i, const at::Tensor& sample,
                                at::ScalarType dtype) {
  return dense.defined() ? dense[i] : at::empty(sample.sizes(), sample.options().dtype(dtype));
}

// The output of a dense batch: contiguous, of `batch`'s shape and `dtype`.
inline at::Tensor dense_output(const at::Tensor& batch, at::ScalarType dtype) {
  return at::empty(batch.sizes(), batch.options().dtype(dtype));
}

}  // namespace torchdali
