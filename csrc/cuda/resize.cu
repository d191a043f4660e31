// CUDA kernel of torchdali::resize. Normally one launch per batch: each block resamples a few
// output tiles down a column of one sample entirely in shared memory (the source patch a tile
// reads, the horizontally resampled rows, the filter weights), so the image is read once and
// nothing but the output is written; the next tile's patch and taps are copied while the
// block resamples the current one. Downscales too steep for a tile's patch to fit in shared memory
// take two launches (first pass, second pass) through a float intermediate. Per-sample
// descriptors go up in one asynchronous copy and filter weights are computed on the device
// (for the tiles, once per call by taps_kernel), so a call never waits for the GPU.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "../resize.h"
#include "upload.cuh"

namespace torchdali {
namespace {

using resize::Axis;

// ---- One pass: output tiles resampled in shared memory ----

// A tap: the source element it reads (an index in global memory, an offset in shared memory)
// and its weight (as int bits), so a thread reads both in one 8-byte load.
using Tap = int2;

// One axis of a tile: outputs [out0, out0 + outs) and the source indices [src0, src0 + srcs)
// that they read.
struct alignas(16) Span {
  int out0, src0, outs, srcs;
};

// One unit (an HWC image or a channel plane) of the tiled kernel, and along each axis the span
// of each tile and the taps of each output, as the tile kernel reads them from shared memory
// (taps_kernel): a tile's taps lie together, tile_w x taps_x column taps k-major {byte offset
// in the patch row, weight}, tile_h x taps_y row taps output-major {byte offset in shared
// memory of the resampled row, weight}; the last tile's are as long.
struct TileDesc {
  const void* src;
  void* dst;
  Axis axis[2];    // rows, columns
  Tap* taps[2];    // rows, columns
  Span* spans[2];  // tiles along the axis
};

// The span of tile `index` along `ax` (which has it), tiles being `size` outputs long.
__device__ inline Span locate(const Axis& ax, int64_t index, int size) {
  const int64_t out0 = index * size;
  const int outs = static_cast<int>(ax.out_size - out0 < size ? ax.out_size - out0 : size);
  const resize::Range r = resize::tap_range(ax, out0, out0 + outs - 1);
  return {static_cast<int>(out0), static_cast<int>(r.lo), outs, static_cast<int>(r.hi - r.lo)};
}

// Patch rows hold the aligned 16-byte words that a source row's elements lie in (such a word
// lies inside the row's allocation), so a row is copied without shifting bytes; its data
// starts at the row's misalignment. Bytes per patch row for `seg` elements of `size` bytes:
constexpr int kWord = 16;
C10_HOST_DEVICE inline int patch_pitch_bytes(int seg, int size) {
  return kWord * ((seg * size + kWord - 1) / kWord + 1);
}

// Threads of a tile block. A tile's horizontal pass gives each thread a column and patch rows
// kTileThreads / tile_w apart: a multiple of 8 rows, which horizontal_bytes relies on.
constexpr int kTileThreads = 256;

// The launch-wide tile geometry. Shared memory holds, in this order: column taps for tile_w
// outputs, two buffers of row taps for tile_h outputs, two spans, the horizontally resampled
// rows (float, patch_rows x tile_w x C) and `buffers` source patches (each patch_rows rows of
// `pitch` bytes and `slack` bytes that the byte rows' word reads may pass their end by). A
// block resamples tiles_per_block tiles down a column of the output, copying the next tile's
// row taps and patch (and the span of the tile after it) while it resamples the current one:
// all of it with two patch buffers, its vertical pass with one.
struct TileShape {
  int tile_w = 32, tile_h = 32;  // powers of two, tile_w at most 32 (see kTileThreads)
  int taps_x = 1, taps_y = 1;    // most taps per output coordinate in the batch
  int patch_rows = 0, patch_cols = 0;
  int pitch = 0, slack = 0;
  int buffers = 2, tiles_per_block = 1;
  int64_t bytes = 0;  // of shared memory

  C10_HOST_DEVICE int64_t row_taps_at(int k) const {
    return 8 * (int64_t(tile_w) * taps_x + k * int64_t(tile_h) * taps_y);
  }
  C10_HOST_DEVICE int64_t spans_at() const { return row_taps_at(2); }
  C10_HOST_DEVICE int64_t mid_at() const { return spans_at() + 2 * sizeof(Span); }
  C10_HOST_DEVICE int64_t patch_at(int C, int k) const {
    return mid_at() + 4 * int64_t(patch_rows) * tile_w * C +
           k * (int64_t(patch_rows) * pitch + slack);
  }
};

// Calls emit(k, s, w) for k = 0, ..., n - 1: the n normalized taps of output o of `ax`, tap k
// reading source index s = first + k (`first`: the output's first source index) with weight w.
// Taps clamped to the same edge index add up, and those past the last index weigh 0 (and read
// that index), so an output's taps are one window of n consecutive source elements. The
// filter is evaluated twice (for the sum that normalizes, then for the weights) so that each
// tap is emitted once, in order, and nothing is read back.
template <typename Emit>
__device__ void window_taps(const Axis& ax, int64_t o, int n, Emit&& emit) {
  const float sum = resize::for_taps(ax, o, [](int64_t, float) {});
  const float norm = sum != 0.f ? 1.f / sum : 1.f;
  int k = 0, first = -1, at = -1;  // tap k's source index, once it has a weight
  float w = 0.f;
  resize::for_taps(ax, o, [&](int64_t index, float c) {
    const int s = static_cast<int>(index);  // the planner keeps sizes int
    if (first < 0) first = s;
    if (at >= 0 && s != at) {
      emit(k++, at, w * norm);
      w = 0.f;
    }
    at = s;
    w += c;
  });
  emit(k++, at, w * norm);
  const int last = static_cast<int>(ax.in_size - 1);
  for (; k < n; ++k) emit(k, first + k < last ? first + k : last, 0.f);
}

// Byte rows of 1 or 3 channels are resampled horizontally in fixed point (horizontal_bytes)
// where an output has at most kByteTaps column taps: their weights are 16-bit integers that
// sum to 2^weight_bits, and a resampled row holds the float kMidBias + its sum of taps (the
// bits of kMidBias + i are kMidBiasBits + i for |i| < 2^22, so an integer sum needs no
// conversion). 14 bits keep 255 times the weights under 2^22; filters with negative lobes
// (whose magnitudes sum to under 2) get 13.
constexpr int kByteTaps = 8;
constexpr int kMidBiasBits = 0x4B400000;
constexpr float kMidBias = 12582912.f;  // 1.5 * 2^23

__device__ inline int weight_bits(const Axis& ax) {
  return ax.filter.table == resize::kCubicT || ax.filter.table == resize::kLanczosT ? 13 : 14;
}

// Whether the byte rows of a unit with column axis `ax` take horizontal_bytes (`bytes`: the
// batch is bytes of 1 or 3 channels).
__device__ inline bool fixed_point_rows(bool bytes, const Axis& ax) {
  return bytes && resize::taps_per_output(ax) <= kByteTaps;
}

// Fixed-point rows hold kMidBias + 2^bits times their value: their row weights are scaled by
// 2^-bits, and the vertical pass starts its sums without the bias.
__device__ inline float row_scale(bool fixed, const Axis& columns) {
  return fixed ? ldexpf(1.f, -weight_bits(columns)) : 1.f;
}

// Threads of a taps block, with at most 64 registers each (4 blocks a multiprocessor): the
// kernel is short, and outputs that do not fit in its first wave would nearly double it.
constexpr int kTapsThreads = 256;

// The taps of every output of the batch and the spans of its tiles, in the form and order the
// tile kernel reads them (see TileDesc), a thread per output of one axis (blockIdx.y): computed
// once per call, where every tile would compute and convert its own. Column taps of
// fixed-point rows get integer weights (`bytes`: see fixed_point_rows).
__global__ void __launch_bounds__(kTapsThreads, 4)
    taps_kernel(const TileDesc* __restrict__ descs, int64_t n, TileShape shape, int C, bool bytes) {
  const int a = blockIdx.y;
  const int nt = a == 0 ? shape.taps_y : shape.taps_x;
  const int size = a == 0 ? shape.tile_h : shape.tile_w, size_log2 = __ffs(size) - 1;
  for (int64_t i = blockIdx.z; i < n; i += gridDim.z) {
    const TileDesc& d = descs[i];
    const Axis ax = d.axis[a];  // in registers: the filter reads it for every tap
    const bool fixed = fixed_point_rows(bytes, d.axis[1]);
    const float scale = a == 0 ? row_scale(fixed, d.axis[1]) : 1.f;
    for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < ax.out_size;
         o += int64_t(gridDim.x) * blockDim.x) {
      const int64_t tile = o >> size_log2;
      const int lo = static_cast<int>(o) & (size - 1);
      // Row taps output-major, column taps k-major (a warp's threads read consecutive ones).
      const int stride = a == 0 ? 1 : size;
      Tap* taps = d.taps[a] + tile * size * nt + (a == 0 ? lo * nt : lo);
      // Source indices become offsets from the tile's first: of the element in a patch row, of
      // the resampled row in shared memory.
      const Span span = locate(ax, tile, size);
      const int pitch = a == 0 ? 4 * shape.tile_w * C : C;
      const int base = a == 0 ? static_cast<int>(shape.mid_at()) : 0;
      // Fixed-point column weights become integers that sum to 2^bits: each the difference of
      // the rounded running sums, so the sum is exact and weights that are all positive stay so.
      const bool quantize = a == 1 && fixed;
      const float units = quantize ? ldexpf(1.f, weight_bits(ax)) : 0.f;
      float running = 0.f;
      int prev = 0;
      window_taps(ax, o, nt, [&](int k, int s, float w) {
        int weight = __float_as_int(w * scale);
        if (quantize) {
          running += w;
          const int q = __float2int_rn(running * units);
          weight = q - prev;
          prev = q;
        }
        taps[k * stride] = Tap{(s - span.src0) * pitch + base, weight};
      });
      if (lo == 0) d.spans[a][tile] = span;
    }
  }
}

// A flattened loop over outer x inner iterations, the block's threads blockDim.x apart: a
// thread starts at its own (outer, inner) and steps without dividing. (a + 0.5) / n in float
// floors exactly: it lies at least 0.5 / n from an integer, a relative 1 / (2a + 1) far above
// float's error for a up to the 1024 threads of a block.
struct Walk {
  int outer, inner, n_inner, step_outer, step_inner;
  __device__ explicit Walk(int n) : n_inner(n) {
    const float inv = __frcp_rn(static_cast<float>(n));
    outer = static_cast<int>((threadIdx.x + 0.5f) * inv);
    inner = threadIdx.x - outer * n;
    step_outer = static_cast<int>((blockDim.x + 0.5f) * inv);
    step_inner = blockDim.x - step_outer * n;
  }
  __device__ void next() {
    outer += step_outer;
    inner += step_inner;
    if (inner >= n_inner) {
      inner -= n_inner;
      ++outer;
    }
  }
};

// A source element as float plus kBias<S>: a byte b is read as the float 256 + b (its bits,
// 0x43800000 | b << 15, need no conversion instruction); the bias comes off a sum of taps
// once (the weights sum to 1), and sums below 512 keep 2^-14 of precision.
template <typename S>
constexpr float kBias = sizeof(S) == 1 ? 256.f : 0.f;

template <typename S>
__device__ inline float biased(S v) {
  if constexpr (sizeof(S) == 1)
    return __uint_as_float(0x43800000u | static_cast<uint32_t>(v) << 15);
  else
    return static_cast<float>(v);
}

// acc + the dot product of the 16-bit halves of w (signed) with bytes 0-1 (`high`: 2-3) of x
// (unsigned): two taps of byte rows in one instruction, with no conversion.
__device__ inline int dot2(int w, uint32_t x, int acc, bool high) {
  int d;
  if (high)
    asm("dp2a.hi.s32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(w), "r"(x), "r"(acc));
  else
    asm("dp2a.lo.s32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(w), "r"(x), "r"(acc));
  return d;
}

// The block copies global memory to shared memory asynchronously (cp.async): its threads start
// copies (load_patch, load_words), commit them as a group, go on, and wait for them
// (wait_copies) before the barrier after which the block reads them.

// Starts copying the 16-byte word at global address `from` to shared address `to`.
__device__ inline void copy_word(unsigned to, uintptr_t from) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(to), "l"(from));
}

// Starts copying rows [r0, r0 + rows) x elements [e0, e0 + seg) of `src` (row pitch `pitch`)
// to the patch as the 16-byte words that hold them. A row's words go to consecutive threads,
// as many as the power of two that covers them (up to a warp, which then takes several
// rounds).
template <typename S>
__device__ void load_patch(const S* src, int64_t pitch, int64_t r0, int rows, int64_t e0,
                           int seg, unsigned char* patch, int ppitch) {
  const int bytes = seg * static_cast<int>(sizeof(S));
  const int words = (bytes + 2 * kWord - 1) / kWord;  // most a row's bytes lie in
  const int lanes_log2 = words >= 32 ? 5 : 32 - __clz(words - 1);
  const int row_step = blockDim.x >> lanes_log2, lane = threadIdx.x & ((1 << lanes_log2) - 1);
  const int64_t row_bytes = pitch * static_cast<int64_t>(sizeof(S));
  const int off = kWord * lane;
  const int r = threadIdx.x >> lanes_log2;
  const uintptr_t at = reinterpret_cast<uintptr_t>(src + (r0 + r) * pitch + e0);
  const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(patch)) + r * ppitch;
  const uintptr_t align = ~uintptr_t(kWord - 1);
  if (words <= 32) {
    // A copy per lane and row at most. The thread's rows go in pairs k, k + row_step: rows
    // 2 * row_step apart lie at the same misalignment (row_step, kTileThreads / 32 or more, is
    // a multiple of 8), so each of the pair decides once whether its lane copies, and its
    // words step by 2 * row_step rows.
    const uintptr_t at1 = at + row_step * row_bytes;
    const bool go0 = off < static_cast<int>(at % kWord) + bytes;
    const bool go1 = off < static_cast<int>(at1 % kWord) + bytes;
    const int64_t jump = 2 * row_step * row_bytes;
    const unsigned to_step = row_step * ppitch;
    uintptr_t w0 = (at & align) + off, w1 = (at1 & align) + off;
    unsigned d = to + off;
    for (int k = r; k < rows; k += 2 * row_step, w0 += jump, w1 += jump, d += 2 * to_step) {
      if (go0) copy_word(d, w0);
      if (go1 && k + row_step < rows) copy_word(d + to_step, w1);
    }
    return;
  }
  const int round = kWord << lanes_log2;
  uintptr_t row = at;
  unsigned dst = to;
  for (int k = r; k < rows; k += row_step, row += row_step * row_bytes, dst += row_step * ppitch) {
    const int end = static_cast<int>(row % kWord) + bytes;
    for (int o = off; o < end; o += round) copy_word(dst + o, (row & align) + o);
  }
}

// Starts copying `bytes` (a multiple of 16) from `from` to `to` (both 16-byte aligned), a
// 16-byte word per thread.
__device__ void load_words(const void* from, void* to, int bytes) {
  const uintptr_t src = reinterpret_cast<uintptr_t>(from);
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(to));
  for (int o = kWord * threadIdx.x; o < bytes; o += kWord * blockDim.x)
    copy_word(dst + o, src + o);
}

// Closes the thread's group of copies started since the last.
__device__ inline void commit_copies() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits for all the thread's copies.
__device__ inline void wait_copies() { asm volatile("cp.async.wait_all;\n" ::); }

// What vertical starts each sum at, for the rounding below: 0.5 for bytes.
template <typename D>
constexpr float kRound = std::is_same_v<D, uint8_t> ? 0.5f : 0.f;

// The byte cmn::convert_sat gives for v - 0.5, in the low 8 bits, without branches: clamping
// first takes NaN to 0; adding 2^23 rounded toward zero truncates to an integer in the float's
// low mantissa byte, so half rounds away from zero as roundf does, with no conversion
// instruction (those issue at a fraction of an add's rate).
__device__ inline uint32_t byte_bits(float v) {
  return __float_as_uint(__fadd_rz(fminf(fmaxf(v, 0.f), 255.5f), 8388608.f));
}

// cmn::convert_sat of v - kRound<D> (the sums carry it).
template <typename D>
__device__ inline D saturate(float v) {
  if constexpr (std::is_same_v<D, uint8_t>)
    return static_cast<uint8_t>(byte_bits(v));
  else
    return cmn::convert_sat<D>(v);
}

// The bytes of four outputs, packed into a word.
__device__ inline uint32_t pack4(float4 v) {
  const uint32_t a = byte_bits(v.x), b = byte_bits(v.y), c = byte_bits(v.z), e = byte_bits(v.w);
  return __byte_perm(__byte_perm(a, b, 0x0040), __byte_perm(c, e, 0x0040), 0x5410);
}

// Stores the first `left` (none when it is not positive) of kVec x 4 consecutive outputs;
// vector stores when all go and `out` is aligned for them.
template <int kVec, typename D>
__device__ inline void store_item(D* out, const float4 (&v)[kVec], int left) {
  constexpr int kAlign = sizeof(D) == 1 ? 4 : sizeof(D) == 4 ? 16 : 0;  // bytes, floats
  if (kAlign && left >= 4 * kVec && reinterpret_cast<uintptr_t>(out) % kAlign == 0) {
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      if constexpr (sizeof(D) == 1)
        reinterpret_cast<uint32_t*>(out)[k] = pack4(v[k]);
      else
        reinterpret_cast<float4*>(out)[k] = v[k];
    }
    return;
  }
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const float e[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (4 * k + j < left) out[4 * k + j] = saturate<D>(e[j]);
  }
}

// Where each patch row's data starts: row r of a patch at r * pitch + (mis0 + r * step) % 16
// bytes (the misalignment of its source row).
struct PatchRows {
  int pitch, mis0, step;
  __device__ int at(int r) const { return r * pitch + ((mis0 + r * step) & (kWord - 1)); }
};

constexpr int kRowsPerThread = 2;  // patch rows a thread resamples together (same taps)

// The horizontal pass of patch rows ly, ly + step, ... (< rows) for output column lx: the
// general form, any element type and number of taps (read from shared memory, tap k of the
// column at taps[k * tap_stride]).
template <typename S, int kC>
__device__ void horizontal(const Tap* taps, int tap_stride, int kx, const unsigned char* patch,
                           PatchRows pr, int ly, int step, int rows, float* mid, int mid_step,
                           int C) {
  constexpr int R = kRowsPerThread;
  for (int r = ly; r < rows; r += R * step) {
    const S* row[R];
#pragma unroll
    for (int j = 0; j < R; ++j) {
      const int rj = r + j * step < rows ? r + j * step : rows - 1;
      row[j] = reinterpret_cast<const S*>(patch + pr.at(rj));
    }
    if constexpr (kC > 0) {
      float acc[R][kC] = {};
      for (int k = 0; k < kx; ++k) {
        const Tap t = taps[k * tap_stride];
        const float w = __int_as_float(t.y);
#pragma unroll
        for (int j = 0; j < R; ++j)
#pragma unroll
          for (int c = 0; c < kC; ++c) acc[j][c] += w * biased(row[j][t.x + c]);
      }
#pragma unroll
      for (int j = 0; j < R; ++j) {
        if (r + j * step >= rows) break;
        float* out = mid + (r + j * step) * mid_step;
#pragma unroll
        for (int c = 0; c < kC; ++c) out[c] = acc[j][c] - kBias<S>;
      }
    } else {
      for (int c = 0; c < C; ++c) {
        float acc[R] = {};
        for (int k = 0; k < kx; ++k) {
          const Tap t = taps[k * tap_stride];
          const float w = __int_as_float(t.y);
#pragma unroll
          for (int j = 0; j < R; ++j) acc[j] += w * biased(row[j][t.x + c]);
        }
#pragma unroll
        for (int j = 0; j < R; ++j) {
          const int rj = r + j * step;
          if (rj < rows) mid[rj * mid_step + c] = acc[j] - kBias<S>;
        }
      }
    }
  }
}

// The same in fixed point for bytes of kC (1, 3) channels and K taps, whose integer weights
// (taps_kernel) are read once: the column's taps are one window of K pixels (window_taps),
// so a row's K * kC bytes are read as whole 4-byte words and lined up with funnel shifts, and
// dot2 takes two taps of a channel at a time (for 3 channels, after a byte permute gathers
// them). A resampled row holds kMidBias + the integer sum.
template <int K, int kC>
__device__ void horizontal_bytes(const Tap* taps, int tap_stride, const unsigned char* patch,
                                 PatchRows pr, int ly, int step, int rows, float* mid,
                                 int mid_step) {
  constexpr int kWords = (K * kC + 3) / 4, kPairs = K / 2;
  int pair[kPairs + 1];  // taps 2p and 2p + 1 as the low and high halves
#pragma unroll
  for (int p = 0; p < kPairs; ++p)
    pair[p] = __byte_perm(taps[2 * p * tap_stride].y, taps[(2 * p + 1) * tap_stride].y, 0x5410);
  // An odd last tap pairs with a weight of 0, on either side.
  const int last = K % 2 ? taps[(K - 1) * tap_stride].y : 0;
  const int last_half[2] = {last & 0xffff, last << 16};
  // One row: its window's first word p, the window's offset in it (its bytes from 8 * at % 32),
  // and where the sums go.
  auto resample = [&](const uint32_t* p, int at, float* out) {
    uint32_t word[kWords + 1], u[kWords];
#pragma unroll
    for (int j = 0; j <= kWords; ++j) word[j] = p[j];
#pragma unroll
    for (int j = 0; j < kWords; ++j) u[j] = __funnelshift_r(word[j], word[j + 1], 8 * at);
    int acc[kC];
#pragma unroll
    for (int c = 0; c < kC; ++c) acc[c] = kMidBiasBits;
#pragma unroll
    for (int q = 0; q < kPairs; ++q) {
      if constexpr (kC == 1) {
        acc[0] = dot2(pair[q], u[q / 2], acc[0], q % 2);
      } else {
        // Taps 2q, 2q + 1: bytes 6q + c and 6q + 3 + c, inside words a and a + 1 from o.
        const int a = 6 * q / 4, o = 6 * q % 4;
        const uint32_t x01 = __byte_perm(u[a], u[a + 1],
                                         o | (o + 3) << 4 | (o + 1) << 8 | (o + 4) << 12);
        const uint32_t x2 = __byte_perm(u[a], u[a + 1], (o + 2) | (o + 5) << 4);
        acc[0] = dot2(pair[q], x01, acc[0], false);
        acc[1] = dot2(pair[q], x01, acc[1], true);
        acc[2] = dot2(pair[q], x2, acc[2], false);
      }
    }
    if constexpr (K % 2) {
#pragma unroll
      for (int c = 0; c < kC; ++c) {
        const int e = kC * (K - 1) + c;  // the byte of channel c of the last tap
        acc[c] = dot2(last_half[e % 2], u[e / 4], acc[c], e % 4 >= 2);
      }
    }
#pragma unroll
    for (int c = 0; c < kC; ++c) out[c] = __int_as_float(acc[c]);
  };
  // The thread's rows in pairs r, r + step: rows 2 * step apart lie at the same misalignment
  // (2 * step * pr.step is a multiple of 16, step being a multiple of 8: see kTileThreads), so
  // each of the pair's window offsets is found once and its words step by 2 * step rows; the
  // two rows' independent chains of reads and dot products are in flight together.
  const int at0 = pr.at(ly) + taps[0].x, at1 = pr.at(ly + step) + taps[0].x;
  const uint32_t* p0 = reinterpret_cast<const uint32_t*>(patch + (at0 & ~3));
  const uint32_t* p1 = reinterpret_cast<const uint32_t*>(patch + (at1 & ~3));
  const int words = 2 * step * pr.pitch / 4;
  float* out = mid + ly * mid_step;
  for (int r = ly; r < rows; r += 2 * step, p0 += words, p1 += words, out += 2 * step * mid_step) {
    resample(p0, at0, out);
    if (r + step < rows) resample(p1, at1, out + step * mid_step);
  }
}

// The vertical pass: `rows` output rows of `row_elems` elements from the resampled rows, an item
// of kVec x 4 consecutive elements per step of `walk` (over rows x items a row; one 16-byte
// read of the resampled rows per 4 elements and tap, rows of tile_w x C floats keep them
// aligned; wider items share each tap's read and the walk's steps over more elements), K taps
// (0: `ky`, known at run time only) of output row r at taps[r * tap_stride]: {byte offset in
// smem of the resampled row, weight}. Each sum starts at `init`.
template <int K, int kVec, typename D>
__device__ void vertical(const Tap* taps, int tap_stride, int ky, const unsigned char* smem,
                         Walk w, int row_elems, int rows, float init, D* dst, int out_pitch) {
  const int n = K ? K : ky;
  for (; w.outer < rows; w.next()) {
    const Tap* t = taps + w.outer * tap_stride;
    const unsigned char* column = smem + kVec * sizeof(float4) * w.inner;  // + a row's offset
    float4 acc[kVec];
#pragma unroll
    for (int v = 0; v < kVec; ++v) acc[v] = make_float4(init, init, init, init);
#pragma unroll
    for (int j = 0; j < n; ++j) {
      const Tap tap = t[j];
      const float wt = __int_as_float(tap.y);
#pragma unroll
      for (int v = 0; v < kVec; ++v) {
        const float4 x = *reinterpret_cast<const float4*>(column + tap.x + sizeof(float4) * v);
        acc[v] = make_float4(fmaf(wt, x.x, acc[v].x), fmaf(wt, x.y, acc[v].y),
                             fmaf(wt, x.z, acc[v].z), fmaf(wt, x.w, acc[v].w));
      }
    }
    const int e = 4 * kVec * w.inner;
    store_item(dst + (w.outer * out_pitch + e), acc, row_elems - e);
  }
}

// kC: the channels when known at compile time (1, 3), else 0 and `channels` at run time.
template <typename S, typename D, int kC>
__global__ void __launch_bounds__(kTileThreads, 4)
    tile_kernel(const TileDesc* __restrict__ descs, int64_t n, TileShape shape, int channels) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int C = kC ? kC : channels;
  const int TW = shape.tile_w, TH = shape.tile_h;
  const Tap* tx = reinterpret_cast<const Tap*>(smem);
  Span* spans = reinterpret_cast<Span*>(smem + shape.spans_at());
  float* mid = reinterpret_cast<float*>(smem + shape.mid_at());
  const int lx = threadIdx.x & (TW - 1), ly = threadIdx.x / TW, ly_step = blockDim.x / TW;
  for (int64_t i = blockIdx.z; i < n; i += gridDim.z) {
    const TileDesc& d = descs[i];
    const Axis &ay = d.axis[0], &ax = d.axis[1];
    const int64_t k0 = int64_t(blockIdx.y) * shape.tiles_per_block;
    if (int64_t(blockIdx.x) * TW >= ax.out_size || k0 * TH >= ay.out_size) continue;
    // The block's tiles: k0, ..., k_end - 1 down column blockIdx.x.
    const int64_t tiles = (ay.out_size + TH - 1) / TH;
    const int64_t k_end = k0 + shape.tiles_per_block < tiles ? k0 + shape.tiles_per_block : tiles;
    const Span x = d.spans[1][blockIdx.x];
    const int64_t e0 = int64_t(x.src0) * C;
    const int seg = x.srcs * C;
    const S* src = static_cast<const S*>(d.src);
    const int64_t src_pitch = ax.in_size * C;
    const int64_t row_bytes = src_pitch * int64_t(sizeof(S));
    // Starts copying what tile k (span y) reads: its row taps (to buffer k % 2), its patch (to
    // patch buffer `buffer`), and the span of the tile after it, which the block reads when it
    // starts those copies.
    auto load_tile = [&](int64_t k, const Span& y, int buffer) {
      load_words(d.taps[0] + k * TH * shape.taps_y, smem + shape.row_taps_at(k & 1),
                 8 * TH * shape.taps_y);
      load_patch(src, src_pitch, y.src0, y.srcs, e0, seg, smem + shape.patch_at(C, buffer),
                 shape.pitch);
      if (k + 1 < k_end) load_words(d.spans[0] + k + 1, spans + ((k + 1) & 1), sizeof(Span));
      commit_copies();
    };
    Span y = d.spans[0][k0];
    int buffer = 0;  // the current tile's patch
    load_words(d.taps[1] + int64_t(blockIdx.x) * TW * shape.taps_x, smem,
               8 * TW * shape.taps_x);
    load_tile(k0, y, buffer);
    const int kx = resize::taps_per_output(ax), ky = resize::taps_per_output(ay);
    const bool fixed = fixed_point_rows(sizeof(S) == 1 && kC > 0, ax);
    const float init = kRound<D> - (fixed ? kMidBias * row_scale(fixed, ax) : 0.f);
    const int row_elems = x.outs * C;
    // Vertical items of 4 pixels for 3 channels (the 32 x 8 items of a 32 x 32 tile take one
    // of the kTileThreads threads each), else of 4 elements; the walk is the same for each tile.
    constexpr int kVec = kC == 3 ? 3 : 1;
    const Walk walk((row_elems + 4 * kVec - 1) / (4 * kVec));
    const int out_pitch = static_cast<int>(ax.out_size * C);  // a tile's offsets are int
    D* const column_out = static_cast<D*>(d.dst) + int64_t(x.out0) * C;  // the first output
    for (int64_t k = k0; k < k_end; ++k) {
      // The tile's copies are done, and the last tile's vertical pass (the last reader of the
      // resampled rows, of the other row taps buffer and span) is.
      wait_copies();
      __syncthreads();
      const bool more = k + 1 < k_end;
      const Span next = more ? spans[(k + 1) & 1] : y;
      const unsigned char* patch = smem + shape.patch_at(C, buffer);
      const int next_buffer = shape.buffers == 2 ? buffer ^ 1 : buffer;
      // With two patch buffers, the next tile's copies start now: the other buffer's last
      // reader (the last tile's horizontal pass) is done.
      if (more && shape.buffers == 2) load_tile(k + 1, next, next_buffer);
      // Horizontal: patch rows to x.outs output columns, a column per thread.
      if (lx < x.outs) {
        const uintptr_t at = reinterpret_cast<uintptr_t>(src + y.src0 * src_pitch + e0);
        const PatchRows pr{shape.pitch, static_cast<int>(at % kWord),
                           static_cast<int>(row_bytes % kWord)};
        float* out = mid + lx * C;
        const Tap* taps = tx + lx;
        if constexpr (sizeof(S) == 1 && kC > 0) {
          if (fixed) switch (kx) {
#define TORCHDALI_HORIZONTAL_BYTES(K)                                                       \
  case K:                                                                                   \
    horizontal_bytes<K, kC>(taps, TW, patch, pr, ly, ly_step, y.srcs, out, TW * kC); \
    break;
            TORCHDALI_HORIZONTAL_BYTES(1)
            TORCHDALI_HORIZONTAL_BYTES(2)
            TORCHDALI_HORIZONTAL_BYTES(3)
            TORCHDALI_HORIZONTAL_BYTES(4)
            TORCHDALI_HORIZONTAL_BYTES(5)
            TORCHDALI_HORIZONTAL_BYTES(6)
            TORCHDALI_HORIZONTAL_BYTES(7)
            TORCHDALI_HORIZONTAL_BYTES(8)
#undef TORCHDALI_HORIZONTAL_BYTES
          }
        }
        if (!fixed)
          horizontal<S, kC>(taps, TW, kx, patch, pr, ly, ly_step, y.srcs, out, TW * C, C);
      }
      __syncthreads();
      // With one, they start now: the horizontal pass is done with the patch.
      if (more && shape.buffers == 1) load_tile(k + 1, next, next_buffer);
      // Vertical: y.outs rows of x.outs x C outputs.
      D* dst = column_out + int64_t(y.out0) * out_pitch;
      const Tap* ty = reinterpret_cast<const Tap*>(smem + shape.row_taps_at(k & 1));
      switch (ky) {
#define TORCHDALI_VERTICAL(K)                                                         \
  case K:                                                                             \
    vertical<K, kVec>(ty, shape.taps_y, ky, smem, walk, row_elems, y.outs, init, dst, \
                      out_pitch);                                                     \
    break;
        TORCHDALI_VERTICAL(1)
        TORCHDALI_VERTICAL(2)
        TORCHDALI_VERTICAL(3)
        TORCHDALI_VERTICAL(4)
        TORCHDALI_VERTICAL(5)
        TORCHDALI_VERTICAL(6)
#undef TORCHDALI_VERTICAL
        default:
          vertical<0, kVec>(ty, shape.taps_y, ky, smem, walk, row_elems, y.outs, init, dst,
                            out_pitch);
      }
      y = next;
      buffer = next_buffer;
    }
    // The next unit's copies overwrite what this one's last vertical pass reads.
    if (i + gridDim.z < n) __syncthreads();
  }
}

// Most source elements a tile of `tile` outputs reads along `ax` (see resize::tap_range).
int64_t patch_extent(const Axis& ax, int tile) {
  const int64_t span = resize::taps_per_output(ax);
  const int64_t reach = static_cast<int64_t>(std::floor((tile - 1) * std::fabs(ax.scale)));
  return std::min<int64_t>(ax.in_size, reach + span + 2);
}

// The largest tile whose shared memory fits `limit` bytes (with two patch buffers if they fit,
// else one), or tile_w = 0 when none does. A block takes as many tiles of a column as leave
// about kWaves waves of blocks, `slots` blocks running at a time.
TileShape plan_tiles(const resize::Args& a, int64_t in_size, int64_t limit, int64_t slots) {
  static constexpr int kTiles[][2] = {{32, 32}, {32, 16}, {32, 8}, {16, 8}, {8, 8}};
  constexpr int64_t kWaves = 3;
  const int C = static_cast<int>(a.channels);
  for (const auto& t : kTiles) {
    TileShape s;
    s.tile_w = t[0];
    s.tile_h = t[1];
    int64_t max_r = 1, max_c = 1, max_in = 1;
    for (const resize::Plan& p : a.plans) {
      s.taps_y = std::max(s.taps_y, p.axis[0].filter.support);
      s.taps_x = std::max(s.taps_x, p.axis[1].filter.support);
      s.patch_rows = static_cast<int>(std::max<int64_t>(s.patch_rows, patch_extent(p.axis[0], s.tile_h)));
      s.patch_cols = static_cast<int>(std::max<int64_t>(s.patch_cols, patch_extent(p.axis[1], s.tile_w)));
      max_r = std::max(max_r, p.axis[0].out_size);
      max_c = std::max(max_c, p.axis[1].out_size);
      max_in = std::max({max_in, p.axis[0].in_size, p.axis[1].in_size});
    }
    // Spans and a tile's output offsets are int.
    const bool fits_int =
        std::max({max_in, max_r, max_c * C * s.tile_h}) <= std::numeric_limits<int>::max();
    s.pitch = patch_pitch_bytes(s.patch_cols * C, static_cast<int>(in_size));
    // horizontal_bytes reads a window of taps_x pixels and a word past it from its first tap.
    s.slack = in_size == 1 ? (s.taps_x * C + 2 * 4 + kWord - 1) / kWord * kWord : 0;
    s.buffers = 2;
    s.bytes = s.patch_at(C, 2);
    if (s.bytes > limit) {
      s.buffers = 1;
      s.bytes = s.patch_at(C, 1);
    }
    if (s.bytes > limit || !fits_int) continue;
    const int64_t rows = (max_r + s.tile_h - 1) / s.tile_h;
    const int64_t columns = a.n * ((max_c + s.tile_w - 1) / s.tile_w);
    const int64_t groups = std::min(rows, (kWaves * slots + columns - 1) / columns);
    s.tiles_per_block = static_cast<int>((rows + groups - 1) / groups);
    return s;
  }
  return TileShape{0};
}

// The batch's tile descriptors and the buffer they point into (tile spans, then taps).
struct TileBatch {
  std::vector<TileDesc> descs;
  at::Tensor taps;
  int64_t max_r = 1, max_c = 1;  // output rows and columns
};

TileBatch tile_batch(const resize::Args& a, const TileShape& shape) {
  TileBatch b;
  const int64_t size[2] = {shape.tile_h, shape.tile_w}, per_tile[2] = {
      int64_t(shape.tile_h) * shape.taps_y, int64_t(shape.tile_w) * shape.taps_x};
  auto tiles = [&](const resize::Plan& p, int k) {
    return (p.axis[k].out_size + size[k] - 1) / size[k];
  };
  int64_t spans = 0, taps = 0;
  for (const resize::Plan& p : a.plans)
    for (int k = 0; k < 2; ++k) {
      spans += tiles(p, k);
      taps += tiles(p, k) * per_tile[k];
    }
  // The spans, then the taps, all 16-byte aligned (a tile's taps are a multiple of 16 bytes:
  // sizes are at least 8).
  b.taps = at::empty({4 * spans + 2 * taps}, at::TensorOptions(a.device).dtype(at::kInt));
  Span* next_span = reinterpret_cast<Span*>(b.taps.data_ptr<int>());
  Tap* next_tap = reinterpret_cast<Tap*>(next_span + spans);
  for (int64_t i = 0; i < a.n; ++i) {
    const resize::Plan& p = a.plans[i];
    TileDesc d{a.units[i].src, a.units[i].dst, {p.axis[0], p.axis[1]}};
    for (int k = 0; k < 2; ++k) {
      d.taps[k] = next_tap;
      next_tap += tiles(p, k) * per_tile[k];
      d.spans[k] = next_span;
      next_span += tiles(p, k);
    }
    b.descs.push_back(d);
    b.max_r = std::max(b.max_r, p.axis[0].out_size);
    b.max_c = std::max(b.max_c, p.axis[1].out_size);
  }
  return b;
}

template <typename S, typename D, int kC>
void launch_tiles(const resize::Args& a, const TileShape& shape, cudaStream_t stream) {
  const TileBatch b = tile_batch(a, shape);
  std::vector<const void*> unused;
  at::Tensor dev = upload(b.descs, {}, a.device, unused);
  const TileDesc* descs = reinterpret_cast<const TileDesc*>(dev.const_data_ptr());
  taps_kernel<<<dim3(grid_dim(std::max(b.max_r, b.max_c), kTapsThreads), 2, grid_dim(a.n, 1)),
                kTapsThreads, 0,
                stream>>>(descs, a.n, shape, static_cast<int>(a.channels),
                          sizeof(S) == 1 && kC > 0);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  auto kernel = tile_kernel<S, D, kC>;
  if (shape.bytes > 48 * 1024)
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(shape.bytes)));
  const dim3 grid(static_cast<unsigned>((b.max_c + shape.tile_w - 1) / shape.tile_w),
                  grid_dim(b.max_r, int64_t(shape.tile_h) * shape.tiles_per_block),
                  grid_dim(a.n, 1));
  kernel<<<grid, kTileThreads, shape.bytes, stream>>>(descs, a.n, shape,
                                                      static_cast<int>(a.channels));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// What the planner needs of a device, asked once per device: shared memory per
// multiprocessor, the most a block may have, and the multiprocessors.
struct DeviceFacts {
  int smem_per_sm, smem_optin, sms;
  // Shared memory per block that lets `blocks` blocks share a multiprocessor.
  int64_t smem_for(int blocks) const {
    return std::min<int64_t>(smem_optin, smem_per_sm / blocks - 1024);  // the driver's 1 KiB
  }
};

DeviceFacts device_facts(int device) {
  static std::atomic<int> cache[64][3] = {};
  auto& c = cache[device & 63];
  if (c[2].load() == 0) {
    const cudaDeviceAttr attrs[3] = {cudaDevAttrMaxSharedMemoryPerMultiprocessor,
                                     cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                     cudaDevAttrMultiProcessorCount};
    for (int k = 0; k < 3; ++k) {
      int v = 0;
      C10_CUDA_CHECK(cudaDeviceGetAttribute(&v, attrs[k], device));
      c[k] = v;
    }
  }
  return {c[0].load(), c[1].load(), c[2].load()};
}

// Whole-batch launch of the tiled kernel, or false when no tile fits in shared memory. Tiles
// are sized so that three blocks share a multiprocessor with two patch buffers each, else four
// (as many as the registers allow) with one: the next tile's copies then overlap the whole
// tile, not just its vertical pass (measured faster on an H100).
bool resize_tiles(const resize::Args& a, at::ScalarType out_dtype, cudaStream_t stream) {
  const int64_t in_size = at::elementSize(a.in_dtype);
  const DeviceFacts dev = device_facts(a.device.index());
  TileShape shape = plan_tiles(a, in_size, dev.smem_for(3), 3 * int64_t(dev.sms));
  if (shape.buffers != 2) shape = plan_tiles(a, in_size, dev.smem_for(4), 4 * int64_t(dev.sms));
  if (shape.tile_w == 0) shape = plan_tiles(a, in_size, dev.smem_optin, dev.sms);
  if (shape.tile_w == 0) return false;
  resize::dispatch(a.in_dtype, out_dtype, [&](auto in_tag, auto out_tag) {
    using S = decltype(in_tag);
    using D = decltype(out_tag);
    if (a.channels == 3)
      launch_tiles<S, D, 3>(a, shape, stream);
    else if (a.channels == 1)
      launch_tiles<S, D, 1>(a, shape, stream);
    else
      launch_tiles<S, D, 0>(a, shape, stream);
  });
  return true;
}

// ---- Two passes through a float intermediate (steep downscales) ----

// One 1D pass of one sample: dst (rows x cols x C) from src (src_rows x src_cols x C).
// Horizontal: taps over src columns, dst row r reads src row r + offset; vertical: taps over
// src rows (minus `offset`, the first row the intermediate kept), columns shifted by `col0`.
struct PassDesc {
  const void* src;
  void* dst;
  int64_t src_cols, rows, cols, offset, col0;
  Axis axis;
  bool horizontal;
};

constexpr int kTileW = 32, kTileH = 8;

// The descriptor is read in place (a copy would cost registers); pixel offsets are `Index`
// arithmetic (int32_t where the batch allows it).
template <typename S, typename D, typename Index>
__global__ void pass_kernel(const PassDesc* __restrict__ descs, int64_t n, int C) {
  for (int64_t i = blockIdx.z; i < n; i += gridDim.z) {
    const PassDesc& d = descs[i];
    const S* src = static_cast<const S*>(d.src);
    D* dst = static_cast<D*>(d.dst);
    const Index rows = static_cast<Index>(d.rows), cols = static_cast<Index>(d.cols);
    const Index row_stride = static_cast<Index>(d.src_cols) * C;
    const Index offset = static_cast<Index>(d.offset), col0 = static_cast<Index>(d.col0);
    for (Index y = Index(blockIdx.y) * kTileH + threadIdx.y; y < rows;
         y += Index(gridDim.y) * kTileH) {
      for (Index x = Index(blockIdx.x) * kTileW + threadIdx.x; x < cols;
           x += Index(gridDim.x) * kTileW) {
        // Channels in groups of 4: the filter weights are computed once per group.
        for (int c0 = 0; c0 < C; c0 += 4) {
          const int cn = C - c0 < 4 ? C - c0 : 4;
          float acc[4] = {0.f, 0.f, 0.f, 0.f};
          float sum;
          if (d.horizontal) {
            const S* row = src + (y + offset) * row_stride + c0;
            sum = resize::for_taps(d.axis, x, [&](int64_t s, float w) {
              const S* px = row + static_cast<Index>(s) * C;
              for (int c = 0; c < cn; ++c) acc[c] += w * static_cast<float>(px[c]);
            });
          } else {
            const S* col = src + (x + col0) * C + c0;
            sum = resize::for_taps(d.axis, y, [&](int64_t s, float w) {
              const S* px = col + (static_cast<Index>(s) - offset) * row_stride;
              for (int c = 0; c < cn; ++c) acc[c] += w * static_cast<float>(px[c]);
            });
          }
          D* out = dst + (y * cols + x) * C + c0;
          for (int c = 0; c < cn; ++c)
            out[c] = cmn::convert_sat<D>(sum != 0.f ? acc[c] / sum : acc[c]);
        }
      }
    }
  }
}

template <typename S, typename D>
void launch(const std::vector<PassDesc>& host, const at::Device& device, int64_t C,
            cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(host.size());
  std::vector<const void*> unused;
  at::Tensor dev = upload(host, {}, device, unused);
  int64_t max_r = 1, max_c = 1, max_index = 0;
  for (const PassDesc& d : host) {
    max_r = std::max(max_r, d.rows);
    max_c = std::max(max_c, d.cols);
    // Offsets reach a source of (offset + rows) x src_cols pixels and a rows x cols output.
    max_index = std::max({max_index, (d.offset + d.rows + 1) * std::max(d.src_cols, d.cols) * C,
                          d.axis.in_size * std::max(d.src_cols, d.cols) * C});
  }
  const dim3 block(kTileW, kTileH);
  const dim3 grid(grid_dim(max_c, kTileW), grid_dim(max_r, kTileH), grid_dim(n, 1));
  max_index += (int64_t(grid.x) * kTileW + int64_t(grid.y) * kTileH) * std::max(max_c, int64_t(1));
  dispatch_index(max_index, [&](auto index) {
    pass_kernel<S, D, decltype(index)><<<grid, block, 0, stream>>>(
        reinterpret_cast<const PassDesc*>(dev.const_data_ptr()), n, static_cast<int>(C));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

void resize_two_pass(const resize::Args& a, at::ScalarType out_dtype, cudaStream_t stream) {
  const at::Device device = a.device;
  const int64_t C = a.channels;
  // The intermediates of all samples in one float buffer (one allocation per batch).
  std::vector<int64_t> tmp_at(a.n + 1, 0);
  for (int64_t i = 0; i < a.n; ++i) {
    const resize::Plan& p = a.plans[i];
    const int64_t cols = p.vert_first ? p.hi - p.lo : p.axis[1].out_size;
    const int64_t rows = p.vert_first ? p.axis[0].out_size : p.hi - p.lo;
    tmp_at[i + 1] = tmp_at[i] + rows * cols * C;
  }
  at::Tensor tmp = at::empty({tmp_at[a.n]}, at::TensorOptions(device).dtype(at::kFloat));
  float* tmp_base = tmp.data_ptr<float>();
  std::vector<PassDesc> first, second;
  for (int64_t i = 0; i < a.n; ++i) {
    const resize::Plan& p = a.plans[i];
    const resize::Unit& u = a.units[i];
    const int64_t ext = p.hi - p.lo, oh = p.axis[0].out_size, ow = p.axis[1].out_size;
    float* t = tmp_base + tmp_at[i];
    if (p.vert_first) {
      first.push_back({u.src, t, u.width, oh, ext, 0, p.lo, p.axis[0], false});
      Axis h = p.axis[1];
      second.push_back({t, u.dst, ext, oh, ow, 0, 0, h, true});
      // Horizontal taps index the kept columns [lo, hi): shift the origin instead.
      second.back().axis.origin -= static_cast<float>(p.lo);
      second.back().axis.in_size = ext;
    } else {
      first.push_back({u.src, t, u.width, ext, ow, p.lo, 0, p.axis[1], true});
      second.push_back({t, u.dst, ow, oh, ow, p.lo, 0, p.axis[0], false});
    }
  }
  resize::dispatch(a.in_dtype, out_dtype, [&](auto in_tag, auto out_tag) {
    launch<decltype(in_tag), float>(first, device, C, stream);
    launch<float, decltype(out_tag)>(second, device, C, stream);
  });
}

resize::Args resize_cuda_run(Samples images, at::IntArrayRef out_sizes, const at::Tensor& rois,
                             const at::Tensor& interp, bool antialias, at::ScalarType out_dtype,
                             bool chw, resize::Output output) {
  const c10::cuda::CUDAGuard guard(images.device(0));
  resize::Args a = resize::prepare(std::move(images), out_sizes, rois, interp, antialias,
                                   out_dtype, chw, output);
  TORCH_CHECK_VALUE(a.device.is_cuda(), "resize: CUDA kernel got `images` on ", a.device);
  if (a.n == 0 || a.channels == 0) return a;  // images without channels: empty outputs, no work
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  if (!resize_tiles(a, out_dtype, stream)) resize_two_pass(a, out_dtype, stream);
  return a;
}

std::vector<at::Tensor> resize_cuda(at::TensorList images, at::IntArrayRef out_sizes,
                                    const at::Tensor& rois, const at::Tensor& interp,
                                    bool antialias, at::ScalarType out_dtype, bool chw) {
  return resize_cuda_run(Samples("resize", images), out_sizes, rois, interp, antialias,
                         out_dtype, chw, resize::Output::kList)
      .results;
}

// resize.dense (`images` a list) and resize.dense_in (a dense batch): one [N, ...] output.
template <typename Images>
at::Tensor resize_dense_cuda(Images images, at::IntArrayRef out_sizes, const at::Tensor& rois,
                             const at::Tensor& interp, bool antialias, at::ScalarType out_dtype,
                             bool chw) {
  return resize_cuda_run(Samples("resize", images), out_sizes, rois, interp, antialias,
                         out_dtype, chw, resize::Output::kDense)
      .dense;
}


// resize.flat: the samples back to back in one buffer with their shapes, the outputs too.
at::Tensor resize_flat_cuda(const at::Tensor& images, const at::Tensor& shapes, at::IntArrayRef out_sizes,
                        const at::Tensor& rois, const at::Tensor& interp, bool antialias,
                        at::ScalarType out_dtype, bool chw) {
  return resize_cuda_run(Samples("resize", images, shapes), out_sizes, rois, interp, antialias,
                        out_dtype, chw, resize::Output::kFlat)
      .dense;
}

}  // namespace
}  // namespace torchdali

TORCH_LIBRARY_IMPL(torchdali, CUDA, m) {
  m.impl("resize", &torchdali::resize_cuda);
  m.impl("resize.dense", &torchdali::resize_dense_cuda<at::TensorList>);
  m.impl("resize.dense_in", &torchdali::resize_dense_cuda<const at::Tensor&>);
  m.impl("resize.flat", &torchdali::resize_flat_cuda);
}
