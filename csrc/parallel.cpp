// The pool behind parallel.h: worker threads that wait on a condition variable for chunks.
// A parallel_for is a job of numbered chunks; the caller and up to (chunks - 1) workers take
// the next chunk from an atomic counter until none is left, so a job completes even when no
// worker comes (all busy, or none in a process forked from one that had them).
#include "parallel.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <c10/util/ParallelGuard.h>
#include <pthread.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace torchdali {
namespace {

thread_local bool in_chunk = false;  // nested calls run inline

struct Job {
  const std::function<void(int, int64_t, int64_t)>* f;
  int64_t begin, end, chunk;
  int chunks;
  std::atomic<int> next{0}, done{0};
  std::mutex mutex;
  std::condition_variable finished;
  std::exception_ptr error;

  // Runs chunks until none is left to take.
  void work() {
    for (int k; (k = next++) < chunks;) {
      try {
        in_chunk = true;
        c10::ParallelGuard guard(true);  // torch ops inside run serially, as in at::parallel_for
        (*f)(k, begin + k * chunk, std::min(end, begin + (k + 1) * chunk));
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!error) error = std::current_exception();
      }
      in_chunk = false;
      if (++done == chunks) {
        std::lock_guard<std::mutex> lock(mutex);
        finished.notify_all();
      }
    }
  }
};

class Pool {
 public:
  int size() {
    int n = size_.load();
    return n > 0 ? n : std::max(1, at::get_num_threads());
  }

  void request(int n) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (n > size_.load()) size_ = n;
  }

  // Hands `job` to up to `helpers` idle workers, starting workers up to size() - 1.
  void help(const std::shared_ptr<Job>& job, int helpers) {
    std::lock_guard<std::mutex> lock(mutex_);
    while (static_cast<int>(threads_) < size() - 1) {
      std::thread(&Pool::serve, this).detach();  // the pool lives as long as the process
      ++threads_;
    }
    for (int i = 0; i < helpers; ++i) jobs_.push_back(job);
    wake_.notify_all();
  }

 private:
  void serve() {
    pthread_setname_np(pthread_self(), "torchdali-cpu");
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return !jobs_.empty(); });
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job->work();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> jobs_;
  std::atomic<int> size_{0};  // 0: no request yet
  size_t threads_ = 0;
};

Pool* make_pool();

Pool* pool_ptr = make_pool();

// A forked child has none of the parent's threads, and the pool's lock may be held: it
// starts over with a new pool of the same size (the old one is left, never destroyed).
Pool* make_pool() {
  static std::once_flag registered;
  std::call_once(registered, [] {
    pthread_atfork(nullptr, nullptr, [] {
      const int n = pool_ptr->size();
      pool_ptr = new Pool();
      pool_ptr->request(n);
    });
  });
  return new Pool();
}

}  // namespace

int num_threads() { return pool_ptr->size(); }

void request_threads(int n) {
  TORCH_CHECK(n >= 1, "request_threads: the thread count must be at least 1, got ", n);
  pool_ptr->request(n);
}

void parallel_chunks(int64_t begin, int64_t end, int64_t grain, int max_chunks,
                     const std::function<void(int, int64_t, int64_t)>& f) {
  if (end <= begin) return;
  const int64_t n = end - begin;
  const int64_t most = std::min<int64_t>({num_threads(), max_chunks, (n + std::max<int64_t>(grain, 1) - 1) /
                                                                          std::max<int64_t>(grain, 1)});
  if (most <= 1 || in_chunk) {
    f(0, begin, end);
    return;
  }
  auto job = std::make_shared<Job>();
  job->f = &f;
  job->begin = begin;
  job->end = end;
  job->chunk = (n + most - 1) / most;
  job->chunks = static_cast<int>((n + job->chunk - 1) / job->chunk);
  pool_ptr->help(job, job->chunks - 1);
  job->work();
  std::unique_lock<std::mutex> lock(job->mutex);
  job->finished.wait(lock, [&] { return job->done.load() == job->chunks; });
  if (job->error) std::rethrow_exception(job->error);
}

void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& f) {
  parallel_chunks(begin, end, grain, INT32_MAX, [&](int, int64_t b, int64_t e) { f(b, e); });
}

}  // namespace torchdali

TORCH_LIBRARY_FRAGMENT(torchdali, m) {
  m.def("cpu_threads() -> int", [] { return static_cast<int64_t>(torchdali::num_threads()); });
  m.def("request_cpu_threads(int n) -> ()", [](int64_t n) {
    TORCH_CHECK(n >= 1 && n <= 4096, "request_cpu_threads: n must be in [1, 4096], got ", n);
    torchdali::request_threads(static_cast<int>(n));
  });
}
