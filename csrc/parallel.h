// torchdali's CPU threads: the pool the C++ kernels share a batch out over, in place of
// torch's intra-op threads. Those are OpenMP's, whose idle threads spin: with several
// pipelines' threads (or several ranks of a torchrun job) calling at once, the spinning
// took the CPUs the work needed (two ranks on a 64-core host: 5,252 images/s a rank where
// one rank alone made 22,997). These threads sleep when idle, and there are as many as the
// pipelines' num_threads asks for, whatever OMP_NUM_THREADS says.
#pragma once

#include <cstdint>
#include <functional>

namespace torchdali {

// Threads that may run chunks of one parallel_for at once, its caller included: the largest
// request_threads() so far, else (no pipeline built yet) torch's intra-op thread count.
int num_threads();

// At least `n` threads from now on (a pipeline asks for its num_threads when it is built).
void request_threads(int n);

// f(begin, end) over [begin, end) cut into at most num_threads() contiguous chunks of at
// least `grain` each; the caller runs chunks too and returns when all are done, rethrowing
// the first exception. Called from inside a chunk it runs f over the whole range itself.
void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& f);

// parallel_for that also passes each chunk's number, below `max_chunks` (per-chunk state,
// such as a decoder each).
void parallel_chunks(int64_t begin, int64_t end, int64_t grain, int max_chunks,
                     const std::function<void(int, int64_t, int64_t)>& f);

}  // namespace torchdali
