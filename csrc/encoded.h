// A batch of encoded files as the decoding ops take it: one 1-D uint8 CPU buffer and the
// files' spans in it, int64 [N, 2] (offset, size). One tensor for the whole batch instead
// of a tensor per file: a call that drops its references to many Python-visible tensors
// retakes the GIL for each, which stalls a decode thread behind the other Python threads.
#pragma once

#include <ATen/ATen.h>

namespace torchdali {

class Encoded {
 public:
  Encoded(const char* op, const at::Tensor& data, const at::Tensor& spans) {
    TORCH_CHECK_VALUE(data.dim() == 1 && data.scalar_type() == at::kByte && data.device().is_cpu(), op,
                      ": `data` must be a 1-D uint8 CPU tensor (the encoded files back to back), got ",
                      data.sizes(), " ", data.scalar_type(), " on ", data.device());
    TORCH_CHECK_VALUE(spans.dim() == 2 && spans.size(1) == 2 && spans.scalar_type() == at::kLong &&
                          spans.device().is_cpu(),
                      op, ": `spans` must be an int64 CPU tensor [N, 2] (offset, size), got ", spans.sizes(), " ",
                      spans.scalar_type());
    data_ = data.contiguous();
    spans_ = spans.contiguous();
    const int64_t* s = spans_.const_data_ptr<int64_t>();
    for (int64_t i = 0; i < size(); ++i)
      TORCH_CHECK_VALUE(s[2 * i] >= 0 && s[2 * i + 1] >= 0 && s[2 * i] + s[2 * i + 1] <= data_.numel(), op,
                        ": file ", i, "'s span (", s[2 * i], ", ", s[2 * i + 1], ") lies outside `data` (",
                        data_.numel(), " bytes)");
  }

  int64_t size() const { return spans_.size(0); }
  const uint8_t* data(int64_t i) const {
    return data_.const_data_ptr<uint8_t>() + spans_.const_data_ptr<int64_t>()[2 * i];
  }
  int64_t bytes(int64_t i) const { return spans_.const_data_ptr<int64_t>()[2 * i + 1]; }

 private:
  at::Tensor data_, spans_;
};

}  // namespace torchdali
