// Copies of a batch's buffers back to back into one buffer, shared by torchdali::pack and
// _C.gather_arrays: spread over torchdali's CPU threads when the batch is large enough.
#pragma once

#include "../parallel.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace torchdali {

// Copies src[i] (offsets[i + 1] - offsets[i] bytes) to dst + offsets[i], for every i.
inline void copy_back_to_back(char* dst, const std::vector<const void*>& src,
                              const std::vector<int64_t>& offsets) {
  constexpr int64_t kGrainBytes = int64_t(1) << 20;  // a smaller copy does not pay for a thread
  const int64_t n = static_cast<int64_t>(src.size());
  const int64_t grain = std::max<int64_t>(1, n * kGrainBytes / std::max<int64_t>(1, offsets[n]));
  torchdali::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      std::memcpy(dst + offsets[i], src[i], offsets[i + 1] - offsets[i]);
  });
}

}  // namespace torchdali
