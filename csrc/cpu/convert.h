// Float to an output element type inside the CPU kernels' vectorized loops: the values of
// cmn::convert_sat (round half away from zero, saturate, NaN to 0) without its branches and
// roundf calls, which keep the compiler from vectorizing a loop.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "../crop_mirror_normalize.h"  // cmn::convert_sat

namespace torchdali {

template <typename T>
inline T saturate(float v) {
  if constexpr (std::is_same_v<T, uint8_t> || std::is_same_v<T, int8_t> ||
                std::is_same_v<T, int16_t>) {
    constexpr float lo = static_cast<float>(std::numeric_limits<T>::min());
    constexpr float hi = static_cast<float>(std::numeric_limits<T>::max());
    v = v == v ? v : 0.0f;
    v = v < lo ? lo : v;
    v = v > hi ? hi : v;
    // Truncating v + (0.5 - 2^-25) equals roundf(v) for every float below 2^31 (checked
    // exhaustively): the sum reaches the next integer only from a tie or above it.
    return static_cast<T>(static_cast<int32_t>(v + std::copysign(0.49999997f, v)));
  } else {
    return cmn::convert_sat<T>(v);  // float, float16 (plain conversions) and int32
  }
}

}  // namespace torchdali
