// torchdali::unpack: the samples laid back to back in one 1-D buffer (pack's output, a
// batch decoded or gathered into one buffer) as views of it, one per sample: made in one
// C++ loop instead of a split and a view per sample in Python.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <vector>

namespace {

std::vector<at::Tensor> unpack(const at::Tensor& flat, at::IntArrayRef shapes, int64_t ndim) {
  TORCH_CHECK_VALUE(flat.dim() == 1, "unpack: `flat` must be a contiguous 1-D tensor, got sizes ", flat.sym_sizes());
  TORCH_CHECK_VALUE(ndim >= 1 && static_cast<int64_t>(shapes.size()) % ndim == 0,
                    "unpack: `shapes` must hold ndim (", ndim, " >= 1) values per sample, got ", shapes.size());
  const int64_t n = static_cast<int64_t>(shapes.size()) / ndim;
  const c10::SymInt total = flat.sym_size(0);  // symbolic while torch.compile traces
  std::vector<at::Tensor> out;
  out.reserve(n);
  int64_t offset = 0;
  for (int64_t i = 0; i < n; ++i) {
    at::IntArrayRef shape = shapes.slice(i * ndim, ndim);
    int64_t numel = 1;
    for (int64_t d : shape) {
      TORCH_CHECK_VALUE(d >= 0, "unpack: sample ", i, " has a negative extent in its shape ", shape);
      numel *= d;
    }
    TORCH_CHECK_VALUE(total.sym_ge(offset + numel).expect_true(__FILE__, __LINE__),
                      "unpack: the shapes need more than the ", total, " elements of `flat` (sample ", i, ")");
    out.push_back(flat.narrow(0, offset, numel).view(shape));
    offset += numel;
  }
  TORCH_CHECK_VALUE(total.sym_eq(offset).expect_true(__FILE__, __LINE__), "unpack: the shapes cover ", offset,
                    " elements but `flat` has ", total);
  return out;
}

}  // namespace

// Views only: torch.compile traces through it to aten's narrow and view (a custom op may not
// return views of its inputs there).
TORCH_LIBRARY_IMPL(torchdali, CompositeImplicitAutograd, m) {
  m.impl("unpack", &unpack);
}
