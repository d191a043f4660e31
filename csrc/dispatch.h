// Dispatch of the image kernels over their element types, shared by every kernel family.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace torchdali {

// Calls f(In{}, Out{}) for the output dtype: float32, float16, uint8 and, when
// IntOutputs, int8/int16/int32 too.
template <bool IntOutputs, typename In, typename F>
void dispatch_out(const char* op, at::ScalarType out, F&& f) {
  switch (out) {
    case at::kFloat: f(In{}, float{}); return;
    case at::kHalf: f(In{}, at::Half{}); return;
    case at::kByte: f(In{}, uint8_t{}); return;
    default: break;
  }
  if constexpr (IntOutputs) {
    switch (out) {
      case at::kChar: f(In{}, int8_t{}); return;
      case at::kShort: f(In{}, int16_t{}); return;
      case at::kInt: f(In{}, int32_t{}); return;
      default: break;
    }
  }
  TORCH_CHECK_TYPE(false, op, ": unsupported `out_dtype` ", out);
}

// Calls f(In{}, Out{}) with the C++ types of a uint8/float16/float32 input and the output.
template <bool IntOutputs, typename F>
void dispatch_types(const char* op, at::ScalarType in, at::ScalarType out, F&& f) {
  switch (in) {
    case at::kByte: dispatch_out<IntOutputs, uint8_t>(op, out, f); return;
    case at::kHalf: dispatch_out<IntOutputs, at::Half>(op, out, f); return;
    case at::kFloat: dispatch_out<IntOutputs, float>(op, out, f); return;
    default: TORCH_CHECK_TYPE(false, op, ": unsupported `images` dtype ", in);
  }
}

}  // namespace torchdali
