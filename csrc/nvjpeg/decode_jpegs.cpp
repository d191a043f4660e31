// torchdali::decode_jpegs: a batch of JPEGs decoded on the GPU by nvJPEG, each into its
// window of one output buffer, ordered on the caller's current CUDA stream.
//
// Two paths share a batch, as in DALI's 'mixed' decoder:
// - the hardware decoder (the NVJPG engines of A100/H100/H200), one batched call for the
//   first `hw_load` fraction of the images it supports, on a thread of its own;
// - the hybrid path for the rest: Huffman decoding on torchdali's CPU threads (parallel.h; one worker
//   state per chunk), the IDCT and colour conversion on the GPU.
// Only the window is decoded (nvJPEG's ROI decoding). Device memory comes from torch's
// caching allocator. The hardware decoder's call holds its thread until the engines are
// done, so decode_jpegs_start returns once it has handed the share over (its bitstreams
// copied to page-locked memory: a copy from pageable memory would wait for the stream) and
// the hybrid path has run; decode_jpegs_finish waits for the share and orders the caller's
// stream after it. A decode thread can so prepare its next batch while the engines work;
// the next start waits for them. The dispatcher releases the caller's GIL for every call.
#include <ATen/ATen.h>
#include "../parallel.h"
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include "../encoded.h"

#include <nvjpeg.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
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
// nvJPEG's positive status code), and of one it has yet to decode (decode_jpegs_start's).
constexpr int32_t kByHardware = -1;
constexpr int32_t kPending = -2;

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

// One long-lived thread that runs posted tasks in order: the hardware decoder's state is
// made and used there, as nvJPEG's hardware decoder works only on the thread that made it.
class TaskThread {
 public:
  TaskThread() : thread_([this] { loop(); }) {}

  void post(std::function<void()> task) {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push_back(std::move(task));
    changed_.notify_one();
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [this] { return !tasks_.empty(); });
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> tasks_;
  std::thread thread_;  // last: starts once the members above exist
};

// Page-locked host memory from torch's host allocator, grown (rarely) to the largest size
// asked for. The allocator keeps what it hands back (no cudaFreeHost, which would wait for
// the whole GPU), and a job grows only when the GPU is done with its buffer.
class PinnedBuffer {
 public:
  uint8_t* reserve(size_t bytes) {
    if (!buffer_.defined() || static_cast<size_t>(buffer_.numel()) < bytes)
      buffer_ = at::empty({static_cast<int64_t>(bytes + bytes / 4)},
                          at::TensorOptions().dtype(at::kByte).pinned_memory(true));
    return buffer_.data_ptr<uint8_t>();
  }

 private:
  at::Tensor buffer_;
};

// A batch's share for the hardware decoder: each file's parsed header and decode parameters
// (for every image of the batch: which ones the decoder supports decides the share), the
// share's bitstreams in page-locked memory, and where each image goes. Reused by a later
// batch once nothing holds it and the GPU is done with it (Engine::idle_job).
struct HardwareJob {
  HardwareJob() {
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  }

  // Parse state for n images.
  void reserve(nvjpegHandle_t handle, int64_t n) {
    while (static_cast<int64_t>(streams.size()) < n) {
      nvjpegJpegStream_t s;
      nvjpegDecodeParams_t p;
      NVJPEG_CHECK(nvjpegJpegStreamCreate(handle, &s));
      NVJPEG_CHECK(nvjpegDecodeParamsCreate(handle, &p));
      streams.push_back(s);
      params.push_back(p);
    }
  }

  void begin() {
    std::lock_guard<std::mutex> lock(mutex);
    running = true;
  }

  void end(nvjpegStatus_t s) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      status = s;
      running = false;
    }
    changed.notify_all();
  }

  nvjpegStatus_t wait() {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [this] { return !running; });
    return status;
  }

  std::vector<nvjpegJpegStream_t> streams;  // per image of the batch
  std::vector<nvjpegDecodeParams_t> params;
  PinnedBuffer staging;
  std::vector<int64_t> images;  // the share: indices in the batch
  std::vector<const unsigned char*> ptrs;  // per image of the share
  std::vector<size_t> sizes;
  std::vector<nvjpegImage_t> dests;
  std::vector<nvjpegDecodeParams_t> share_params;
  at::Tensor flat;  // the output, held until the decoder has been called
  cudaEvent_t done{};  // on the batch's stream: the share is decoded
  std::mutex mutex;
  std::condition_variable changed;
  bool running = false;
  nvjpegStatus_t status = NVJPEG_STATUS_SUCCESS;
};

class Engine;

// A batch that decode_jpegs_start has begun: what decode_jpegs_finish needs to complete it.
struct PendingJpegs : torch::CustomClassHolder {
  PendingJpegs(Engine* engine, const torchdali::Encoded& files, std::vector<Window> regions,
               std::vector<int64_t> offsets, at::Tensor flat)
      : engine(engine), files(files), regions(std::move(regions)), offsets(std::move(offsets)), flat(std::move(flat)) {}

  Engine* engine;
  torchdali::Encoded files;
  std::vector<Window> regions;
  std::vector<int64_t> offsets;
  at::Tensor flat;
  at::Tensor status;  // as decode_jpegs_start returned it (kPending for the share), until finished
  std::shared_ptr<HardwareJob> job;  // null once finished, or when the hardware decoder had no share
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

  // (flat, status, pending): see the schemas in csrc/ops.cpp.
  std::tuple<at::Tensor, at::Tensor, c10::intrusive_ptr<PendingJpegs>> start(const torchdali::Encoded& files,
                                                                             const at::Tensor& windows,
                                                                             double hw_load) {
    std::lock_guard<std::mutex> lock(mutex_);
    // No start during the hardware decoder's call: preparing the next batch beside the call
    // gained nothing at batch 64, where the decoder is idle half the time (benchmarks/NOTES.md).
    for (const auto& job : jobs_) job->wait();
    const int64_t n = files.size();
    auto win = windows.accessor<int64_t, 2>();
    std::vector<Window> regions(n);
    std::vector<int64_t> offsets(n + 1, 0);
    for (int64_t i = 0; i < n; ++i) {
      regions[i] = {win[i][0], win[i][1], win[i][2], win[i][3]};
      offsets[i + 1] = offsets[i] + std::max<int64_t>(regions[i].h, 0) * std::max<int64_t>(regions[i].w, 0) * 3;
    }
    cudaStream_t stream = at::cuda::getCurrentCUDAStream(device_).stream();
    at::Tensor flat = output(offsets[n]);
    at::Tensor status = at::zeros({n}, at::kInt);
    int32_t* st = status.data_ptr<int32_t>();
    uint8_t* base = flat.data_ptr<uint8_t>();
    auto pending = c10::make_intrusive<PendingJpegs>(this, files, regions, offsets, flat);

    // The hardware decoder's share runs on its thread; torchdali's CPU threads take the rest
    // through the hybrid path meanwhile.
    std::shared_ptr<HardwareJob> job = hardware_share(files, regions, hw_load);
    std::vector<char> on_hardware(n, 0);
    if (job) {
      stage(*job, files, regions, offsets, base);
      job->flat = flat;
      job->begin();
      hardware_thread_.post([this, job, stream] { run_hardware(*job, stream); });
      for (int64_t i : job->images) {
        on_hardware[i] = 1;
        st[i] = kPending;
      }
      pending->job = job;
    }
    std::vector<int64_t> hybrid;
    for (int64_t i = 0; i < n; ++i)
      if (!on_hardware[i]) hybrid.push_back(i);
    decode_hybrid(files, regions, offsets, hybrid, base, stream, st);
    pending->status = status.clone();
    return {flat, status, pending};
  }

  // The final status of a started batch: waits for the hardware decoder's share, whose
  // images the hybrid path decodes if the decoder failed; the caller's stream then waits
  // for them. Once a batch is finished, this returns its status again.
  at::Tensor finish(PendingJpegs& pending) {
    std::shared_ptr<HardwareJob> job = std::move(pending.job);
    if (!job) return pending.status.clone();
    const nvjpegStatus_t hardware_status = job->wait();
    cudaStream_t stream = at::cuda::getCurrentCUDAStream(device_).stream();
    C10_CUDA_CHECK(cudaStreamWaitEvent(stream, job->done, 0));
    int32_t* st = pending.status.data_ptr<int32_t>();
    if (hardware_status == NVJPEG_STATUS_SUCCESS) {
      for (int64_t i : job->images) st[i] = kByHardware;
    } else {
      TORCH_WARN_ONCE("decode_jpegs: the hardware JPEG decoder failed on a batch (", status_name(hardware_status),
                      "); its share goes through the hybrid path");
      std::lock_guard<std::mutex> lock(mutex_);
      decode_hybrid(pending.files, pending.regions, pending.offsets, job->images,
                    pending.flat.data_ptr<uint8_t>(), stream, st);
    }
    return pending.status.clone();
  }

 private:
  // The hybrid path for the images `index`, over torchdali's CPU threads (one worker each).
  void decode_hybrid(const torchdali::Encoded& data, const std::vector<Window>& regions,
                     const std::vector<int64_t>& offsets, const std::vector<int64_t>& index, uint8_t* base,
                     cudaStream_t stream, int32_t* st) {
    if (index.empty()) return;
    const int threads = torchdali::num_threads();
    while (static_cast<int>(workers_.size()) < threads)
      workers_.push_back(std::make_unique<Worker>(handle_, decoder_));
    C10_CUDA_CHECK(cudaEventRecord(ready_, stream));
    torchdali::parallel_chunks(0, static_cast<int64_t>(index.size()), 1, threads,
                               [&](int chunk, int64_t begin, int64_t end) {
      c10::cuda::CUDAGuard guard(device_);
      Worker& worker = *workers_[chunk];
      worker.begin(ready_);
      for (int64_t k = begin; k < end; ++k) {
        const int64_t i = index[k];
        st[i] = worker.decode(data.data(i), data.bytes(i), regions[i], base + offsets[i]);
      }
      worker.end(stream);
    });
  }

  // A job no batch holds and the GPU is done with (its page-locked bitstreams were read),
  // else a new one. Called by start, after every job's call has returned.
  std::shared_ptr<HardwareJob> idle_job() {
    for (const auto& job : jobs_) {
      if (job.use_count() != 1) continue;  // a pending batch (or its finished task, releasing it) holds it
      const cudaError_t e = cudaEventQuery(job->done);
      if (e == cudaSuccess) return job;
      if (e != cudaErrorNotReady) C10_CUDA_CHECK(e);
      (void)cudaGetLastError();  // not ready is no error
    }
    jobs_.push_back(std::make_shared<HardwareJob>());
    return jobs_.back();
  }

  // The hardware decoder's share of the batch: the first hw_load of it among the images it
  // supports with their window (the rest, and files it cannot parse, go the hybrid path);
  // null when that is none.
  std::shared_ptr<HardwareJob> hardware_share(const torchdali::Encoded& data, const std::vector<Window>& regions,
                                              double hw_load) {
    const int64_t n = data.size();
    if (!hw_handle_ || hw_load <= 0 || n == 0) return nullptr;
    std::shared_ptr<HardwareJob> job = idle_job();
    job->reserve(hw_handle_, n);
    std::vector<char> supported(n, 0);
    torchdali::parallel_for(0, n, 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        nvjpegStatus_t s = nvjpegJpegStreamParseHeader(hw_handle_, data.data(i), data.bytes(i), job->streams[i]);
        unsigned width = 0, height = 0;
        if (s == NVJPEG_STATUS_SUCCESS) s = nvjpegJpegStreamGetFrameDimensions(job->streams[i], &width, &height);
        if (s == NVJPEG_STATUS_SUCCESS) s = set_window(job->params[i], regions[i], width, height);
        int is_supported = 1;
        if (s == NVJPEG_STATUS_SUCCESS)
          s = nvjpegDecodeBatchedSupportedEx(hw_handle_, job->streams[i], job->params[i], &is_supported);
        supported[i] = s == NVJPEG_STATUS_SUCCESS && is_supported == 0;
      }
    });
    const int64_t quota = static_cast<int64_t>(std::llround(std::min(hw_load, 1.0) * n));
    job->images.clear();
    for (int64_t i = 0; i < n && static_cast<int64_t>(job->images.size()) < quota; ++i)
      if (supported[i]) job->images.push_back(i);
    if (job->images.empty()) return nullptr;
    return job;
  }

  // The share's bitstreams copied to the job's page-locked buffer (over torchdali's CPU
  // threads), and the decoder's arguments for each image.
  void stage(HardwareJob& job, const torchdali::Encoded& data, const std::vector<Window>& regions,
             const std::vector<int64_t>& offsets, uint8_t* base) {
    const int64_t m = static_cast<int64_t>(job.images.size());
    std::vector<size_t> at(m + 1, 0);
    for (int64_t k = 0; k < m; ++k) at[k + 1] = at[k] + data.bytes(job.images[k]);
    uint8_t* staging = job.staging.reserve(std::max<size_t>(at[m], 1));
    job.ptrs.resize(m);
    job.sizes.resize(m);
    job.dests.assign(m, nvjpegImage_t{});
    job.share_params.resize(m);
    torchdali::parallel_for(0, m, 8, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) {
        const int64_t i = job.images[k];
        std::memcpy(staging + at[k], data.data(i), data.bytes(i));
        job.ptrs[k] = staging + at[k];
        job.sizes[k] = data.bytes(i);
        job.dests[k].channel[0] = base + offsets[i];
        job.dests[k].pitch[0] = size_t(regions[i].w) * 3;
        job.share_params[k] = job.params[i];
      }
    });
  }

  // One batched call of the hardware decoder, on its thread (which also owns its state), on
  // the stream of the batch's start (where its output was allocated).
  void run_hardware(HardwareJob& job, cudaStream_t stream) {
    nvjpegStatus_t s = NVJPEG_STATUS_EXECUTION_FAILED;
    try {
      c10::cuda::CUDAGuard guard(device_);
      const int m = static_cast<int>(job.images.size());
      // A call begun while the previous one's GPU work was still queued made no progress,
      // ever (benchmarks/NOTES.md): the previous call's work finishes first (a few us).
      if (last_call_) C10_CUDA_CHECK(cudaEventSynchronize(last_call_));
      s = hw_state_ ? NVJPEG_STATUS_SUCCESS : nvjpegJpegStateCreate(hw_handle_, &hw_state_);
      if (s == NVJPEG_STATUS_SUCCESS) s = nvjpegDecodeBatchedInitialize(hw_handle_, hw_state_, m, 1, NVJPEG_OUTPUT_RGBI);
      if (s == NVJPEG_STATUS_SUCCESS)
        s = nvjpegDecodeBatchedEx(hw_handle_, hw_state_, job.ptrs.data(), job.sizes.data(), job.dests.data(),
                                  job.share_params.data(), stream);
      C10_CUDA_CHECK(cudaEventRecord(job.done, stream));
      last_call_ = job.done;
    } catch (...) {  // e.g. a CUDA error: the hybrid path decodes the share
      s = NVJPEG_STATUS_EXECUTION_FAILED;
    }
    job.flat = at::Tensor();  // if the caller has dropped it, freed in the stream's order after the decoder's work
    job.end(s);
  }

  // A batch's output: the first `bytes` of an allocation of output_capacity_ bytes, the most
  // a batch has needed plus 1/4, grown only. With one size for every batch, torch's caching
  // allocator hands each batch the blocks earlier ones freed; with each batch's own size it
  // had reserved 792 MiB for the val stage's 328 MiB live (whole images, 148-166 MiB batches).
  at::Tensor output(int64_t bytes) {
    constexpr int64_t kRound = int64_t(2) << 20;  // the allocator's granule for large blocks
    if (bytes > output_capacity_) output_capacity_ = (bytes + bytes / 4 + kRound - 1) / kRound * kRound;
    return at::empty({output_capacity_}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA, device_))
        .narrow(0, 0, bytes);
  }

  int device_;
  std::mutex mutex_;  // one start (or hybrid fallback) at a time: they share the workers
  int64_t output_capacity_ = 0;
  nvjpegHandle_t handle_{};
  nvjpegJpegDecoder_t decoder_{};
  cudaEvent_t ready_{};  // the output buffer is free for the workers' streams
  std::vector<std::unique_ptr<Worker>> workers_;  // one per chunk of the hybrid path
  nvjpegHandle_t hw_handle_{};
  nvjpegJpegState_t hw_state_{};  // used on hardware_thread_ only
  cudaEvent_t last_call_{};  // the previous call's job's `done` (hardware_thread_ only)
  std::vector<std::shared_ptr<HardwareJob>> jobs_;
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

std::tuple<at::Tensor, at::Tensor, c10::intrusive_ptr<PendingJpegs>> decode_jpegs_start(
    const at::Tensor& data, const at::Tensor& spans, const at::Tensor& windows, double hw_load, at::Device device) {
  TORCH_CHECK(device.is_cuda(), "decode_jpegs: `device` must be a CUDA device, got ", device);
  const torchdali::Encoded files("decode_jpegs", data, spans);
  TORCH_CHECK(windows.dim() == 2 && windows.size(1) == 4 && windows.size(0) == files.size() &&
                  windows.scalar_type() == at::kLong && windows.device().is_cpu(),
              "decode_jpegs: `windows` must be an int64 CPU tensor [N, 4] (y, x, h, w), one row per image");
  const int index = device.has_index() ? device.index() : c10::cuda::current_device();
  c10::cuda::CUDAGuard guard(index);
  return engine(index).start(files, windows.contiguous(), hw_load);
}

at::Tensor decode_jpegs_finish(const c10::intrusive_ptr<PendingJpegs>& pending) {
  return pending->engine->finish(*pending);
}

std::tuple<at::Tensor, at::Tensor> decode_jpegs(const at::Tensor& data, const at::Tensor& spans,
                                                const at::Tensor& windows, double hw_load, at::Device device) {
  auto [flat, status, pending] = decode_jpegs_start(data, spans, windows, hw_load, device);
  return {flat, decode_jpegs_finish(pending)};
}

bool has_hardware_decoder(at::Device device) {
  const int index = device.has_index() ? device.index() : c10::cuda::current_device();
  c10::cuda::CUDAGuard guard(index);
  return engine(index).has_hardware();
}

}  // namespace

// The two halves of decode_jpegs, declared where nvJPEG is built (their handle's class is here).
TORCH_LIBRARY_FRAGMENT(torchdali, m) {
  m.class_<PendingJpegs>("PendingJpegs");
  m.def("decode_jpegs_start(Tensor data, Tensor spans, Tensor windows, float hw_load, Device device) -> "
        "(Tensor, Tensor, __torch__.torch.classes.torchdali.PendingJpegs)");
  m.def("decode_jpegs_finish(__torch__.torch.classes.torchdali.PendingJpegs pending) -> Tensor");
}

// The data are CPU tensors, so the dispatcher finds the kernel under CPU; it writes CUDA memory.
TORCH_LIBRARY_IMPL(torchdali, CPU, m) {
  m.impl("decode_jpegs", &decode_jpegs);
  m.impl("decode_jpegs_start", &decode_jpegs_start);
}

TORCH_LIBRARY_IMPL(torchdali, CompositeExplicitAutograd, m) {
  m.impl("jpeg_hardware_decoder", &has_hardware_decoder);
  m.impl("decode_jpegs_finish", &decode_jpegs_finish);
}
