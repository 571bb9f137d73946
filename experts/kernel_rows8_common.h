// Internal to the rows8 kernels (kernel_rows8_avx512.h, kernel_rows8_avx2.h): what they share that
// does not depend on the vector width: the activation data a call prepares, the pshufb index
// patterns, the prefetch, and the driver over spans of blocks and chunks of 8 activation rows. No
// vector intrinsics, so each kernel file compiles it with its own -m flags.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "experts/kernels.h"
#include "experts/rows8.h"
#include "runtime/quant/q8_k.h"

namespace tandem::experts {
namespace {

// Bytes ahead of the block being read that the kernels keep requested, within the call's own
// rows. Standalone reader on the 16-core H200 host, 16 threads, 1.1 GB of 768 x 2048 Q4_K matrices
// at 1 row (2026-12-01): none 67-81 GB/s, 2304 80-100, 4608 85-88, 9216 85-112, while the plain
// read measured 88-134 (a noisy host); the GGUF kernel 62-106.
inline constexpr int64_t kRows8PrefetchBytes = 4608;

// Requests the group block kRows8PrefetchBytes past blk (`bytes` long) unless that is past end.
inline void Rows8Prefetch(const uint8_t* blk, int64_t bytes, const uint8_t* end) {
  const char* ahead = reinterpret_cast<const char*>(blk) + kRows8PrefetchBytes;
  if (ahead >= reinterpret_cast<const char*>(end)) return;
  for (int64_t off = 0; off < bytes; off += 64) _mm_prefetch(ahead + off, _MM_HINT_T0);
}

// pshufb index bytes ix[0..n) (each 16-byte lane holds rows 2l, 2l + 1 of a vector): byte
// `entry` + i of the lane into every `step`-th byte from `at` of qword i, 0x80 (zero) elsewhere.
inline void Rows8IndexBytes(int8_t* ix, int n, int entry, int at, int step) {
  for (int p = 0; p < n; ++p) {
    const int i = (p % 16) / 8, b = p % 8;
    ix[p] = (b >= at && (b - at) % step == 0) ? static_cast<int8_t>(entry + i)
                                              : static_cast<int8_t>(0x80);
  }
}

// Q4_K's min pairs: int16 words (m_s, m_s+1) of s = 0, 1 | 4, 5 (v = 0) or 2, 3 | 6, 7 (v = 1)
// in words (0, 1 | 2, 3) of qword i, from the unpacked min bytes (entry 2s + i of a lane).
inline void Rows8MinPairIndexBytes(int8_t* ix, int n, int v) {
  static constexpr int kPairs[2][4] = {{0, 1, 4, 5}, {2, 3, 6, 7}};
  for (int p = 0; p < n; ++p) {
    const int i = (p % 16) / 8, b = p % 8;
    ix[p] = b % 2 == 0 ? static_cast<int8_t>(2 * kPairs[v][b / 2] + i) : static_cast<int8_t>(0x80);
  }
}

// Q4_K: per activation row a and block j, the bsums of 32-element sub-blocks s = 0, 1, 4, 5 then
// 2, 3, 6, 7 (int16), so that a broadcast qword pairs them with the mins of lanes 2r (s < 4) and
// 2r + 1 (s >= 4), and the row's d. The whole row for k up to 16384.
struct Rows8Q4KPrepared {
  static constexpr int64_t kSpanBlocks = 64;
  alignas(64) int16_t bsum_pairs[kRows8][kSpanBlocks][8];
  float d[kRows8][kSpanBlocks];

  void Prepare(const uint8_t* const* act, int n, int64_t b0, int64_t span) {
    static constexpr int kOrder[8] = {0, 1, 4, 5, 2, 3, 6, 7};
    for (int a = 0; a < n; ++a) {
      const auto* y = reinterpret_cast<const quant::BlockQ8K*>(act[a]) + b0;
      for (int64_t j = 0; j < span; ++j) {
        for (int i = 0; i < 8; ++i) {
          const int s = kOrder[i];
          bsum_pairs[a][j][i] = static_cast<int16_t>(y[j].bsums[2 * s] + y[j].bsums[2 * s + 1]);
        }
        d[a][j] = y[j].d;
      }
    }
  }
};

// Q3_K: per activation row a, block j and sub-block s, a qword that starts the sub-block's sum of
// lane 2r: -4 · bsum_s in its first Word, zero in the rest (int32 pairs for vpdpbusd chains,
// int16 quads for maddubs sums), and the row's d. k up to 8192 (32 KiB of starts for 8 rows).
template <class Word>
struct Rows8Q3KPrepared {
  static constexpr int64_t kSpanBlocks = 32;
  static constexpr int kWords = 8 / sizeof(Word);
  alignas(64) Word start[kRows8][kSpanBlocks][16][kWords];
  float d[kRows8][kSpanBlocks];

  void Prepare(const uint8_t* const* act, int n, int64_t b0, int64_t span) {
    for (int a = 0; a < n; ++a) {
      const auto* y = reinterpret_cast<const quant::BlockQ8K*>(act[a]) + b0;
      for (int64_t j = 0; j < span; ++j) {
        for (int s = 0; s < 16; ++s) {
          start[a][j][s][0] = static_cast<Word>(-4 * y[j].bsums[s]);
          for (int w = 1; w < kWords; ++w) start[a][j][s][w] = 0;
        }
        d[a][j] = y[j].d;
      }
    }
  }
};

// DotFn over the rows8 layout with F's kernels: w at the first row of a group, n_wrows a multiple
// of 8, w_stride the GGUF row bytes (a group is 8 · w_stride bytes). F gives its Prepared and
// Groups<N>(w, w_stride, n_groups, b0, span, prepared, act, out, out_stride) for N = 1..8 rows.
template <class F>
void DotRows8(const uint8_t* w, int64_t w_stride, int n_wrows, int64_t k, const uint8_t* const* act,
              int n_act, float* out, int64_t out_stride) {
  static constexpr decltype(&F::template Groups<1>) kGroupsFor[kRows8] = {
      &F::template Groups<1>, &F::template Groups<2>, &F::template Groups<3>,
      &F::template Groups<4>, &F::template Groups<5>, &F::template Groups<6>,
      &F::template Groups<7>, &F::template Groups<8>};
  using Prepared = typename F::Prepared;
  Prepared prepared;
  const int64_t nb = k / quant::kQK_K;
  const int n_groups = n_wrows / kRows8;
  for (int64_t b0 = 0; b0 < nb; b0 += Prepared::kSpanBlocks) {
    const int64_t span = std::min(Prepared::kSpanBlocks, nb - b0);
    for (int c = 0; c < n_act; c += kRows8) {
      const int n = std::min(kRows8, n_act - c);
      prepared.Prepare(act + c, n, b0, span);
      kGroupsFor[n - 1](w, w_stride, n_groups, b0, span, prepared, act + c, out + c * out_stride,
                        out_stride);
    }
  }
}

}  // namespace
}  // namespace tandem::experts
