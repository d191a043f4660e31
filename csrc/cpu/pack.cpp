// torchdali::pack: a batch's samples copied back to back into one buffer, the staging step
// of a host-to-GPU copy (or of stacking a list into a dense batch). One call does the
// bookkeeping in C++ (no tensor op per sample) and the copies on the intra-op threads,
// without the GIL.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <tuple>
#include <vector>

namespace {

std::tuple<at::Tensor, at::Tensor> pack(at::TensorList samples, bool pin_memory) {
  const int64_t n = static_cast<int64_t>(samples.size());
  TORCH_CHECK_VALUE(n > 0, "pack: `samples` must hold at least one tensor");
  const at::Tensor& first = samples[0];
  const int64_t ndim = first.dim();
  at::Tensor shapes = at::empty({n, ndim}, at::kLong);
  int64_t* shape = shapes.data_ptr<int64_t>();
  std::vector<at::Tensor> src(n);
  std::vector<int64_t> offset(n + 1, 0);
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
    src[i] = s.contiguous();
    offset[i + 1] = offset[i] + s.numel();
  }
  at::Tensor out = at::empty({offset[n]}, first.options().pinned_memory(pin_memory));
  const int64_t elem = first.element_size();
  auto* dst = static_cast<char*>(out.data_ptr());
  constexpr int64_t kGrainBytes = int64_t(1) << 20;  // a smaller copy does not pay for a thread
  const int64_t grain = std::max<int64_t>(1, n * kGrainBytes / std::max<int64_t>(1, offset[n] * elem));
  at::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      std::memcpy(dst + offset[i] * elem, src[i].const_data_ptr(), src[i].numel() * elem);
  });
  return {out, shapes};
}

}  // namespace

TORCH_LIBRARY_IMPL(torchdali, CPU, m) {
  m.impl("pack", &pack);
}
