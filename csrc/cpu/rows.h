// A parallel loop over the rows of a whole batch, shared by the CPU kernels: one
// torchdali::parallel_for whose chunks may span samples (a sample's rows are found from prefix sums).
#pragma once

#include "../parallel.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace torchdali {

// Runs f(i, r) for every row r < rows[i] of every sample i, in parallel over the batch;
// `row_cost` (elements per row) sets the grain.
template <typename F>
void for_each_row(const std::vector<int64_t>& rows, int64_t row_cost, F&& f) {
  std::vector<int64_t> start(rows.size() + 1, 0);
  for (size_t i = 0; i < rows.size(); ++i) start[i + 1] = start[i] + rows[i];
  const int64_t grain = std::max<int64_t>(1, at::internal::GRAIN_SIZE / std::max<int64_t>(row_cost, 1));
  torchdali::parallel_for(0, start.back(), grain, [&](int64_t begin, int64_t end) {
    int64_t i = std::upper_bound(start.begin(), start.end(), begin) - start.begin() - 1;
    for (int64_t g = begin; g < end; ++g) {
      while (g >= start[i + 1]) ++i;
      f(i, g - start[i]);
    }
  });
}

}  // namespace torchdali
