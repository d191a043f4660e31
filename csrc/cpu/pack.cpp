// torchdali::pack: a batch's samples copied back to back into one buffer, the staging step
// of a host-to-GPU copy (or of stacking a list into a dense batch). One call does the
// bookkeeping in C++ (no tensor op per sample) and the copies on torchdali's CPU threads,
// without the GIL.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <tuple>
#include <vector>

#include "copy.h"

namespace {

std::tuple<at::Tensor, at::Tensor> pack(at::TensorList samples, bool pin_memory) {
  const int64_t n = static_cast<int64_t>(samples.size());
  TORCH_CHECK_VALUE(n > 0, "pack: `samples` must hold at least one tensor");
  const at::Tensor& first = samples[0];
  const int64_t ndim = first.dim();
  at::Tensor shapes = at::empty({n, ndim}, at::kLong);
  int64_t* shape = shapes.data_ptr<int64_t>();
  const int64_t elem = first.element_size();
  std::vector<at::Tensor> contiguous(n);
  std::vector<const void*> src(n);
  std::vector<int64_t> offset(n + 1, 0);  // in bytes
  for (int64_t i = 0; i < n; ++i) {
    const at::Tensor& s = samples[i];
    TORCH_CHECK_VALUE(s.dim() == ndim, "pack: all `samples` must have the same number of dims; "
                      "sample 0 has ", ndim, ", sample ", i, " has ", s.dim());
    TORCH_CHECK_TYPE(s.scalar_type() == first.scalar_type(), "pack: all `samples` must have the "
                     "same dtype; sample 0 is ", first.scalar_type(), ", sample ", i, " is ",
                     s.scalar_type());
    TORCH_CHECK_VALUE(s.is_cpu(), "pack: `samples` must be CPU tensors; sample ", i, " is on ",
                      s.device());
    for (int64_t d = 0; d < ndim; ++d) shape[i * ndim + d] = s.size(d);
    contiguous[i] = s.contiguous();
    src[i] = contiguous[i].const_data_ptr();
    offset[i + 1] = offset[i] + s.numel() * elem;
  }
  at::Tensor out = at::empty({offset[n] / elem}, first.options().pinned_memory(pin_memory));
  torchdali::copy_back_to_back(static_cast<char*>(out.data_ptr()), src, offset);
  return {out, shapes};
}

}  // namespace

TORCH_LIBRARY_IMPL(torchdali, CPU, m) {
  m.impl("pack", &pack);
}
