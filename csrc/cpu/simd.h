// Vector instruction sets for the CPU kernels' hot loops. The extension is built for the
// baseline of its architecture (x86-64: SSE2), so that one build runs on any CPU; a function
// marked TORCHDALI_SIMD_CLONES is compiled once more for AVX2 (x86-64-v3) and for AVX-512
// (x86-64-v4), and the loader picks the best version the CPU has (GCC's target_clones).
// Mark the function holding the loop, not its caller: clones do not reach callees that are
// not inlined into it. The versions do not fuse multiplies and adds (the baseline has no FMA),
// so they all give the same results.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#define TORCHDALI_SIMD_CLONES \
  __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4"), \
                 optimize("fp-contract=off")))
#else
#define TORCHDALI_SIMD_CLONES
#endif
