// torchdali::decode_jpegs: a batch of JPEGs decoded on the GPU by nvJPEG, each into its
// window of one output buffer, on the caller's current CUDA stream.
//
// Two paths share a batch, as in DALI's 'mixed' decoder:
// - the hardware decoder (the NVJPG engines of A100/H100/H200), one batched call for the
//   first `hw_load` fraction of the images it supports;
// - the hybrid path for the rest: Huffman decoding on torch's intra-op threads (one worker
//   state per thread), the IDCT and colour conversion on the GPU.
// Only the window is decoded (nvJPEG's ROI decoding). Device memory comes from torch's
// caching allocator, on the decode stream; nothing waits for the GPU except a worker that
// reuses its pinned staging buffer before the previous copy out of it has finished. The
// two paths run at once (the hardware call on its own thread). The dispatcher releases the
// caller's GIL for the whole call.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../encoded.h"

#include <nvjpeg.h>

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <cmath>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

const char* status_name(nvjpegStatus_t s) {
  switch (s) {
    case NVJPEG_STATUS_SUCCESS: return "success";
    case NVJPEG_STATUS_NOT_INITIALIZED: return "not initialized";
    case NVJPEG_STATUS_INVALID_PARAMETER: return "invalid parameter";
    case NVJPEG_STATUS_BAD_JPEG: return "bad JPEG";
    case NVJPEG_STATUS_JPEG_NOT_SUPPORTED: return "JPEG not supported";
    case NVJPEG_STATUS_ALLOCATOR_FAILURE: return "allocator failure";
    case NVJPEG_STATUS_EXECUTION_FAILED: return "execution failed";
    case NVJPEG_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case NVJPEG_STATUS_INTERNAL_ERROR: return "internal error";
    case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED: return "implementation not supported";
    case NVJPEG_STATUS_INCOMPLETE_BITSTREAM: return "incomplete bitstream";
    default: return "unknown status";
  }
}

#define NVJPEG_CHECK(call)                                                                      \
  do {                                                                                          \
    nvjpegStatus_t status_ = (call);                                                            \
    TORCH_CHECK(status_ == NVJPEG_STATUS_SUCCESS, "decode_jpegs: " #call " failed: ",           \
                status_name(status_));                                                          \
  } while (0)

// nvJPEG's device allocations go to torch's caching allocator, ordered on their stream.
int device_malloc(void*, void** ptr, size_t size, cudaStream_t stream) {
  try {
    *ptr = c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(size, stream);
    return 0;
  } catch (...) {
    return 1;
  }
}

int device_free(void*, void* ptr, size_t, cudaStream_t) {
  c10::cuda::CUDACachingAllocator::raw_delete(ptr);
  return 0;
}

nvjpegDevAllocatorV2_t torch_allocator{&device_malloc, &device_free, nullptr};

// Pinned staging buffers (a few per thread, grown rarely): plain page-locked memory.
int pinned_malloc(void*, void** ptr, size_t size, cudaStream_t) {
  return cudaHostAlloc(ptr, size, cudaHostAllocDefault) == cudaSuccess ? 0 : 1;
}

int pinned_free(void*, void* ptr, size_t, cudaStream_t) { return cudaFreeHost(ptr) == cudaSuccess ? 0 : 1; }

nvjpegPinnedAllocatorV2_t pinned_allocator{&pinned_malloc, &pinned_free, nullptr};

// The status of an image the hardware decoder decoded (the hybrid path's is 0, a failure's
// nvJPEG's positive status code).
constexpr int32_t kByHardware = -1;

// One image's region: (y, x, h, w) in pixels.
struct Window {
  int64_t y, x, h, w;
};

// Sets `params` to decode `window` (the whole image: no ROI) of an image of width x height
// into interleaved RGB; INVALID_PARAMETER for a window outside the image.
nvjpegStatus_t set_window(nvjpegDecodeParams_t params, const Window& win, unsigned width, unsigned height) {
  if (win.y < 0 || win.x < 0 || win.h <= 0 || win.w <= 0 || win.y + win.h > height || win.x + win.w > width)
    return NVJPEG_STATUS_INVALID_PARAMETER;
  nvjpegStatus_t s = nvjpegDecodeParamsSetOutputFormat(params, NVJPEG_OUTPUT_RGBI);
  if (s != NVJPEG_STATUS_SUCCESS) return s;
  if (win.y == 0 && win.x == 0 && win.h == height && win.w == width)
    return nvjpegDecodeParamsSetROI(params, 0, 0, -1, -1);
  return nvjpegDecodeParamsSetROI(params, int(win.x), int(win.y), int(win.w), int(win.h));
}

// One CPU thread's share of the hybrid path, on its own CUDA stream (so that waiting for
// its copies never waits for the other threads' work). Two decoder states, each with its
// pinned staging buffer, alternate, so the host decode of an image overlaps the copy of the
// previous one; both use one device buffer, in the stream's order.
class Worker {
 public:
  Worker(nvjpegHandle_t handle, nvjpegJpegDecoder_t decoder) : handle_(handle), decoder_(decoder) {
    NVJPEG_CHECK(nvjpegBufferDeviceCreateV2(handle, &torch_allocator, &device_buffer_));
    NVJPEG_CHECK(nvjpegJpegStreamCreate(handle, &jpeg_));
    NVJPEG_CHECK(nvjpegDecodeParamsCreate(handle, &params_));
    for (int k = 0; k < 2; ++k) {
      NVJPEG_CHECK(nvjpegDecoderStateCreate(handle, decoder, &state_[k]));
      NVJPEG_CHECK(nvjpegBufferPinnedCreateV2(handle, &pinned_allocator, &pinned_[k]));
      NVJPEG_CHECK(nvjpegStateAttachPinnedBuffer(state_[k], pinned_[k]));
      NVJPEG_CHECK(nvjpegStateAttachDeviceBuffer(state_[k], device_buffer_));
      C10_CUDA_CHECK(cudaEventCreateWithFlags(&copied_[k], cudaEventDisableTiming));
    }
    C10_CUDA_CHECK(cudaStreamCreateWithFlags(&cuda_, cudaStreamNonBlocking));
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  }

  // Starts after `ready` (recorded on the caller's stream: the output buffer is free).
  void begin(cudaEvent_t ready) { C10_CUDA_CHECK(cudaStreamWaitEvent(cuda_, ready, 0)); }

  // The caller's `stream` waits for everything decoded since begin().
  void end(cudaStream_t stream) {
    C10_CUDA_CHECK(cudaEventRecord(done_, cuda_));
    C10_CUDA_CHECK(cudaStreamWaitEvent(stream, done_, 0));
  }

  // Decodes `window` of one JPEG into `out` (window.h x window.w x 3).
  nvjpegStatus_t decode(const uint8_t* data, size_t size, const Window& window, uint8_t* out) {
    nvjpegStatus_t s = nvjpegJpegStreamParse(handle_, data, size, 0, 0, jpeg_);
    unsigned width = 0, height = 0;
    if (s == NVJPEG_STATUS_SUCCESS) s = nvjpegJpegStreamGetFrameDimensions(jpeg_, &width, &height);
    if (s == NVJPEG_STATUS_SUCCESS) s = set_window(params_, window, width, height);
    if (s != NVJPEG_STATUS_SUCCESS) return s;
    const int k = next_;
    next_ ^= 1;
    C10_CUDA_CHECK(cudaEventSynchronize(copied_[k]));  // pinned_[k]'s last copy is done
    s = nvjpegDecodeJpegHost(handle_, decoder_, state_[k], params_, jpeg_);
    if (s != NVJPEG_STATUS_SUCCESS) return s;
    s = nvjpegDecodeJpegTransferToDevice(handle_, decoder_, state_[k], jpeg_, cuda_);
    C10_CUDA_CHECK(cudaEventRecord(copied_[k], cuda_));
    if (s != NVJPEG_STATUS_SUCCESS) return s;
    nvjpegImage_t dest{};
    dest.channel[0] = out;
    dest.pitch[0] = size_t(window.w) * 3;
    return nvjpegDecodeJpegDevice(handle_, decoder_, state_[k], &dest, cuda_);
  }

 private:
  nvjpegHandle_t handle_;
  nvjpegJpegDecoder_t decoder_;
  nvjpegJpegState_t state_[2]{};
  nvjpegBufferPinned_t pinned_[2]{};
  cudaEvent_t copied_[2]{};
  int next_ = 0;
  nvjpegBufferDevice_t device_buffer_{};
  nvjpegJpegStream_t jpeg_{};
  nvjpegDecodeParams_t params_{};
  cudaStream_t cuda_{};
  cudaEvent_t done_{};
};

// One long-lived thread that runs a task at a time: the hardware decoder's state is made
// and used there, as nvJPEG's hardware decoder works only on the thread that made its state.
class TaskThread {
 public:
  TaskThread() : thread_([this] { loop(); }) {}

  // Runs `task` on the thread; wait() returns when it has finished.
  void start(std::function<void()> task) {
    std::lock_guard<std::mutex> lock(mutex_);
    task_ = std::move(task);
    busy_ = true;
    changed_.notify_all();
  }

  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return !busy_; });
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [this] { return busy_ && task_; });
        task = std::move(task_);
        task_ = nullptr;
      }
      task();
      std::lock_guard<std::mutex> lock(mutex_);
      busy_ = false;
      changed_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::function<void()> task_;
  bool busy_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

// The decoders of one GPU. Made on first use and kept for the process (never destroyed:
// at exit the CUDA context may already be gone).
class Engine {
 public:
  explicit Engine(int device) : device_(device) {
    NVJPEG_CHECK(nvjpegCreateExV2(NVJPEG_BACKEND_DEFAULT, &torch_allocator, &pinned_allocator, 0, &handle_));
    NVJPEG_CHECK(nvjpegDecoderCreate(handle_, NVJPEG_BACKEND_HYBRID, &decoder_));
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    // GPUs without the hardware decoder refuse this backend: the hybrid path does all.
    if (nvjpegCreateExV2(NVJPEG_BACKEND_HARDWARE, &torch_allocator, &pinned_allocator, 0, &hw_handle_) !=
        NVJPEG_STATUS_SUCCESS)
      hw_handle_ = nullptr;
  }

  bool has_hardware() const { return hw_handle_ != nullptr; }

  // (flat, status): see the schema in csrc/ops.cpp.
  std::tuple<at::Tensor, at::Tensor> decode(const torchdali::Encoded& data, const at::Tensor& windows,
                                            double hw_load) {
    std::lock_guard<std::mutex> lock(mutex_);
    const int64_t n = data.size();
    auto win = windows.accessor<int64_t, 2>();
    std::vector<Window> regions(n);
    std::vector<int64_t> offsets(n + 1, 0);
    for (int64_t i = 0; i < n; ++i) {
      regions[i] = {win[i][0], win[i][1], win[i][2], win[i][3]};
      offsets[i + 1] = offsets[i] + std::max<int64_t>(regions[i].h, 0) * std::max<int64_t>(regions[i].w, 0) * 3;
    }
    cudaStream_t stream = at::cuda::getCurrentCUDAStream(device_).stream();
    at::Tensor flat = at::empty({offsets[n]}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA, device_));
    at::Tensor status = at::zeros({n}, at::kInt);
    int32_t* st = status.data_ptr<int32_t>();
    uint8_t* base = flat.data_ptr<uint8_t>();

    // The hardware decoder's share runs on its own thread while the intra-op threads take
    // the rest through the hybrid path; a failed batched call leaves its share to the hybrid path.
    const std::vector<int64_t> hardware = hardware_share(data, regions, hw_load);
    std::vector<char> on_hardware(n, 0);
    for (int64_t i : hardware) on_hardware[i] = 1;
    std::vector<int64_t> hybrid;
    for (int64_t i = 0; i < n; ++i)
      if (!on_hardware[i]) hybrid.push_back(i);
    nvjpegStatus_t hardware_status = NVJPEG_STATUS_SUCCESS;
    if (!hardware.empty()) {
      hardware_thread_.start([&] {
        try {
          c10::cuda::CUDAGuard guard(device_);
          hardware_status = decode_hardware(data, regions, offsets, hardware, base, stream);
        } catch (...) {  // e.g. out of memory: the hybrid path decodes the share
          hardware_status = NVJPEG_STATUS_EXECUTION_FAILED;
        }
      });
    }
    try {
      decode_hybrid(data, regions, offsets, hybrid, base, stream, st);
    } catch (...) {
      hardware_thread_.wait();  // the task uses this call's locals
      throw;
    }
    hardware_thread_.wait();
    if (hardware_status != NVJPEG_STATUS_SUCCESS) {
      TORCH_WARN_ONCE("decode_jpegs: the hardware JPEG decoder failed on a batch (", status_name(hardware_status),
                      "); its share goes through the hybrid path");
      decode_hybrid(data, regions, offsets, hardware, base, stream, st);
    } else {
      for (int64_t i : hardware) st[i] = kByHardware;
    }
    return {flat, status};
  }

 private:
  // The hybrid path for the images `index`, over the intra-op threads (one worker each).
  void decode_hybrid(const torchdali::Encoded& data, const std::vector<Window>& regions,
                     const std::vector<int64_t>& offsets, const std::vector<int64_t>& index, uint8_t* base,
                     cudaStream_t stream, int32_t* st) {
    const int threads = at::get_num_threads();
    while (static_cast<int>(workers_.size()) < threads)
      workers_.push_back(std::make_unique<Worker>(handle_, decoder_));
    C10_CUDA_CHECK(cudaEventRecord(ready_, stream));
    at::parallel_for(0, static_cast<int64_t>(index.size()), 1, [&](int64_t begin, int64_t end) {
      c10::cuda::CUDAGuard guard(device_);
      Worker& worker = *workers_[at::get_thread_num()];
      worker.begin(ready_);
      for (int64_t k = begin; k < end; ++k) {
        const int64_t i = index[k];
        st[i] = worker.decode(data.data(i), data.bytes(i), regions[i], base + offsets[i]);
      }
      worker.end(stream);
    });
  }

  // The images for the hardware decoder: the first hw_load of the batch among those it
  // supports with their window (the rest, and files it cannot parse, go the hybrid path).
  std::vector<int64_t> hardware_share(const torchdali::Encoded& data, const std::vector<Window>& regions,
                                      double hw_load) {
    if (!hw_handle_ || hw_load <= 0) return {};
    const int64_t n = data.size();
    while (static_cast<int64_t>(hw_streams_.size()) < n) {
      nvjpegJpegStream_t s;
      nvjpegDecodeParams_t p;
      NVJPEG_CHECK(nvjpegJpegStreamCreate(hw_handle_, &s));
      NVJPEG_CHECK(nvjpegDecodeParamsCreate(hw_handle_, &p));
      hw_streams_.push_back(s);
      hw_params_.push_back(p);
    }
    std::vector<char> supported(n, 0);
    at::parallel_for(0, n, 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        nvjpegStatus_t s = nvjpegJpegStreamParseHeader(hw_handle_, data.data(i), data.bytes(i), hw_streams_[i]);
        unsigned width = 0, height = 0;
        if (s == NVJPEG_STATUS_SUCCESS) s = nvjpegJpegStreamGetFrameDimensions(hw_streams_[i], &width, &height);
        if (s == NVJPEG_STATUS_SUCCESS) s = set_window(hw_params_[i], regions[i], width, height);
        int is_supported = 1;
        if (s == NVJPEG_STATUS_SUCCESS)
          s = nvjpegDecodeBatchedSupportedEx(hw_handle_, hw_streams_[i], hw_params_[i], &is_supported);
        supported[i] = s == NVJPEG_STATUS_SUCCESS && is_supported == 0;
      }
    });
    const int64_t quota = static_cast<int64_t>(std::llround(std::min(hw_load, 1.0) * n));
    std::vector<int64_t> chosen;
    for (int64_t i = 0; i < n && static_cast<int64_t>(chosen.size()) < quota; ++i)
      if (supported[i]) chosen.push_back(i);
    return chosen;
  }

  // One batched call of the hardware decoder (on its thread, which also owns its state).
  nvjpegStatus_t decode_hardware(const torchdali::Encoded& data, const std::vector<Window>& regions,
                       const std::vector<int64_t>& offsets, const std::vector<int64_t>& chosen, uint8_t* base,
                       cudaStream_t stream) {
    const int m = static_cast<int>(chosen.size());
    std::vector<const unsigned char*> ptrs(m);
    std::vector<size_t> sizes(m);
    std::vector<nvjpegImage_t> dests(m);
    std::vector<nvjpegDecodeParams_t> params(m);
    for (int k = 0; k < m; ++k) {
      const int64_t i = chosen[k];
      ptrs[k] = data.data(i);
      sizes[k] = data.bytes(i);
      dests[k] = nvjpegImage_t{};
      dests[k].channel[0] = base + offsets[i];
      dests[k].pitch[0] = size_t(regions[i].w) * 3;
      params[k] = hw_params_[i];
    }
    nvjpegStatus_t s = hw_state_ ? NVJPEG_STATUS_SUCCESS : nvjpegJpegStateCreate(hw_handle_, &hw_state_);
    if (s == NVJPEG_STATUS_SUCCESS) s = nvjpegDecodeBatchedInitialize(hw_handle_, hw_state_, m, 1, NVJPEG_OUTPUT_RGBI);
    if (s != NVJPEG_STATUS_SUCCESS) return s;
    return nvjpegDecodeBatchedEx(hw_handle_, hw_state_, ptrs.data(), sizes.data(), dests.data(), params.data(), stream);
  }

  int device_;
  std::mutex mutex_;
  nvjpegHandle_t handle_{};
  nvjpegJpegDecoder_t decoder_{};
  cudaEvent_t ready_{};  // the output buffer is free for the workers' streams
  nvjpegHandle_t hw_handle_{};
  nvjpegJpegState_t hw_state_{};
  std::vector<nvjpegJpegStream_t> hw_streams_;  // one per image of the largest batch so far
  std::vector<nvjpegDecodeParams_t> hw_params_;
  std::vector<std::unique_ptr<Worker>> workers_;  // one per intra-op thread
  TaskThread hardware_thread_;
};

Engine& engine(int device) {
  static std::mutex mutex;
  static std::unordered_map<int, Engine*> engines;
  std::lock_guard<std::mutex> lock(mutex);
  Engine*& e = engines[device];
  if (!e) e = new Engine(device);  // kept for the process (see Engine)
  return *e;
}

std::tuple<at::Tensor, at::Tensor> decode_jpegs(const at::Tensor& data, const at::Tensor& spans,
                                                const at::Tensor& windows, double hw_load, at::Device device) {
  TORCH_CHECK(device.is_cuda(), "decode_jpegs: `device` must be a CUDA device, got ", device);
  const torchdali::Encoded files("decode_jpegs", data, spans);
  TORCH_CHECK(windows.dim() == 2 && windows.size(1) == 4 && windows.size(0) == files.size() &&
                  windows.scalar_type() == at::kLong && windows.device().is_cpu(),
              "decode_jpegs: `windows` must be an int64 CPU tensor [N, 4] (y, x, h, w), one row per image");
  const int index = device.has_index() ? device.index() : c10::cuda::current_device();
  c10::cuda::CUDAGuard guard(index);
  return engine(index).decode(files, windows.contiguous(), hw_load);
}

bool has_hardware_decoder(at::Device device) {
  const int index = device.has_index() ? device.index() : c10::cuda::current_device();
  c10::cuda::CUDAGuard guard(index);
  return engine(index).has_hardware();
}

}  // namespace

// The data are CPU tensors, so the dispatcher finds the kernel under CPU; it writes CUDA memory.
TORCH_LIBRARY_IMPL(torchdali, CPU, m) {
  m.impl("decode_jpegs", &decode_jpegs);
}

TORCH_LIBRARY_IMPL(torchdali, CompositeExplicitAutograd, m) {
  m.impl("jpeg_hardware_decoder", &has_hardware_decoder);
}
