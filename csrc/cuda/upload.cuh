// Helpers shared by the CUDA kernels: the one pinned upload of a batch's per-sample
// descriptors, and grid sizes.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace torchdali {

// Copies `descs` and the bytes of the CPU tensors among `extra` into one pinned buffer and
// uploads it on the current stream; returns the device copy and, per extra tensor, its
// pointer on the device (tensors already on the device are used in place). The caching
// host allocator keeps the pinned buffer alive until the copy has finished, so a call
// never waits for the GPU.
template <typename Desc>
at::Tensor upload(const std::vector<Desc>& descs, const std::vector<const at::Tensor*>& extra,
                  const at::Device& device, std::vector<const void*>& extra_dev) {
  auto align8 = [](int64_t b) { return (b + 7) / 8 * 8; };
  std::vector<int64_t> offsets;
  int64_t bytes = align8(int64_t(descs.size() * sizeof(Desc)));
  for (const at::Tensor* t : extra) {
    offsets.push_back(bytes);
    if (t->is_cpu()) bytes += align8(t->nbytes());
  }
  at::Tensor table =
      at::empty({bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  uint8_t* host = table.data_ptr<uint8_t>();
  std::memcpy(host, descs.data(), descs.size() * sizeof(Desc));
  for (size_t k = 0; k < extra.size(); ++k)
    if (extra[k]->is_cpu())
      std::memcpy(host + offsets[k], extra[k]->const_data_ptr(), extra[k]->nbytes());
  at::Tensor dev = table.to(device, at::kByte, /*non_blocking=*/true);
  const uint8_t* base = dev.const_data_ptr<uint8_t>();
  extra_dev.clear();
  for (size_t k = 0; k < extra.size(); ++k)
    extra_dev.push_back(extra[k]->is_cpu() ? static_cast<const void*>(base + offsets[k])
                                           : extra[k]->const_data_ptr());
  return dev;
}

// Calls f(Index{}) with int32_t when every index a kernel forms stays below `max_index`
// < 2^31, else int64_t: 32-bit division is several times cheaper on the GPU.
template <typename F>
void dispatch_index(int64_t max_index, F&& f) {
  if (max_index < (int64_t(1) << 31))
    f(int32_t{});
  else
    f(int64_t{});
}

// Blocks of `per_block` covering n, within 1..65535 (kernels stride over the rest).
inline unsigned grid_dim(int64_t n, int64_t per_block) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + per_block - 1) / per_block, 65535)));
}

}  // namespace torchdali
