// Internal to experts/kernels_avx512.cc: the Q4_K kernel over the rows8 layout (rows8.h), for any
// number of activation rows (1..8 in registers; more in chunks of 8, the weights of a call then
// re-read from cache per chunk). Per 64-byte weight run, one AND (low nibbles) and one shift + AND
// (high) feed eight weight rows to one vpdpbusd per activation row, whose operand is a broadcast
// quad-pair of the activation's own Q8_K bytes (no copy); int32 lane 2r + h of a sub-block's
// chain holds half of row r's sum, so one vpdpwssd applies the sub-block's scales to all eight
// rows. The mins take two vpdpwssd per block and activation row against the row's bsums.
// Integer sums are exact, as in the GGUF-layout kernels: results match them to float rounding.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "experts/rows8.h"
#include "runtime/quant/q8_k.h"

namespace tandem::experts {
namespace {

// Blocks of the activation rows prepared at a time (their bsums in lane order and their d): the
// whole row for k up to 16384, so the weights stream through each group in one pass.
inline constexpr int64_t kRows8SpanBlocks = 64;

// Bytes ahead of the block being read that the kernel keeps requested, within the call's own
// rows. Standalone reader on the 16-core H200 host, 16 threads, 1.1 GB of 768 x 2048 matrices at
// 1 row (2026-12-01): none 67-81 GB/s, 2304 80-100, 4608 85-88, 9216 85-112, while the plain
// read measured 88-134 (a noisy host); the GGUF kernel 62-106.
inline constexpr int64_t kRows8PrefetchBytes = 4608;

struct Rows8Prepared {
  // Row a, block j: the bsums of 32-element sub-blocks s = 0, 1, 4, 5 then 2, 3, 6, 7 (int16),
  // so that a broadcast qword pairs them with the mins of lanes 2r (s < 4) and 2r + 1 (s >= 4).
  alignas(64) int16_t bsum_pairs[kRows8][kRows8SpanBlocks][8];
  float d[kRows8][kRows8SpanBlocks];

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

inline __m512i BroadcastQword(const void* p) {
  int64_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm512_set1_epi64(v);
}

// vpshufb indices (the same in each 128-bit lane, which holds rows 2l and 2l + 1): for sub-block
// s, the scale byte of row 2l + i into int16 words 0 and 2 of qword i (the (scale, 0) pairs of
// lanes 2r and 2r + 1); for the mins, pairs (m_s, m_s+1) of s = 0, 1 | 4, 5 (first) and
// 2, 3 | 6, 7 (second).
struct Rows8Shuffles {
  __m512i scale[8], min[2];
  Rows8Shuffles() {
    alignas(64) int8_t ix[64];
    for (int s = 0; s < 8; ++s) {
      for (int p = 0; p < 64; ++p) {
        const int i = (p % 16) / 8, b = p % 8;
        ix[p] = (b == 0 || b == 4) ? static_cast<int8_t>(2 * s + i) : static_cast<int8_t>(0x80);
      }
      scale[s] = _mm512_load_si512(ix);
    }
    static constexpr int kPairs[2][4] = {{0, 1, 4, 5}, {2, 3, 6, 7}};
    for (int v = 0; v < 2; ++v) {
      for (int p = 0; p < 64; ++p) {
        const int i = (p % 16) / 8, b = p % 8;
        ix[p] =
            b % 2 == 0 ? static_cast<int8_t>(2 * kPairs[v][b / 2] + i) : static_cast<int8_t>(0x80);
      }
      min[v] = _mm512_load_si512(ix);
    }
  }
};

// One group of 8 weight rows over blocks [b0, b0 + span) against N activation rows: adds row r's
// dot with activation row a into out[a * out_stride + r] (stores it when `first`).
template <int N>
inline void Rows8Group(const uint8_t* g, int64_t span, const uint8_t* prefetch_end,
                       const Rows8Prepared& p, const uint8_t* const* act, int64_t b0,
                       const Rows8Shuffles& sh, float* out, int64_t out_stride, bool first) {
  const __m512i nib = _mm512_set1_epi8(0x0F), zero = _mm512_setzero_si512();
  // Lanes 2r, 2r + 1 take d (first permutation) or dmin (second) of row r.
  const __m512i pick_d = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  const __m512i pick_dmin = _mm512_add_epi32(pick_d, _mm512_set1_epi32(8));
  __m512 acc[N];
  for (int a = 0; a < N; ++a) acc[a] = _mm512_setzero_ps();
  for (int64_t j = 0; j < span; ++j) {
    const uint8_t* blk = g + j * kRows8GroupBlockBytes;
    const char* ahead = reinterpret_cast<const char*>(blk) + kRows8PrefetchBytes;
    if (ahead < reinterpret_cast<const char*>(prefetch_end)) {
      for (int64_t off = 0; off < kRows8GroupBlockBytes; off += 64) {
        _mm_prefetch(ahead + off, _MM_HINT_T0);
      }
    }
    // Scales and mins of the 8 rows: low nibbles from [32, 96), high bits from [96, 128).
    const __m512i low = _mm512_loadu_si512(blk + 32);
    const __m256i high_packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 96));
    const __m256i nib256 = _mm256_set1_epi8(0x0F);
    const __m512i high =
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(high_packed, nib256)),
                           _mm256_and_si256(_mm256_srli_epi16(high_packed, 4), nib256), 1);
    const __m512i scales =
        _mm512_or_si512(_mm512_and_si512(low, nib),
                        _mm512_slli_epi16(_mm512_and_si512(high, _mm512_set1_epi8(3)), 4));
    const __m512i mins =
        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(low, 4), nib),
                        _mm512_slli_epi16(_mm512_and_si512(high, _mm512_set1_epi8(12)), 2));
    __m512i isum[N];
    for (int a = 0; a < N; ++a) isum[a] = zero;
    const uint8_t* qs = blk + 128;
    for (int s = 0; s < 8; ++s) {
      const __m512i v0 = _mm512_loadu_si512(qs + 128 * s),
                    v1 = _mm512_loadu_si512(qs + 128 * s + 64);
      const __m512i l0 = _mm512_and_si512(v0, nib), l1 = _mm512_and_si512(v1, nib);
      const __m512i h0 = _mm512_and_si512(_mm512_srli_epi16(v0, 4), nib);
      const __m512i h1 = _mm512_and_si512(_mm512_srli_epi16(v1, 4), nib);
      const __m512i scale_pairs = _mm512_shuffle_epi8(scales, sh.scale[s]);
#pragma GCC unroll 8
      for (int a = 0; a < N; ++a) {
        const int8_t* y = reinterpret_cast<const quant::BlockQ8K*>(act[a])[b0 + j].qs + 32 * s;
        // |lane| <= 16 · 15 · 128 = 30720: exact as the int16 that vpdpwssd reads.
        __m512i t = _mm512_dpbusd_epi32(zero, l0, BroadcastQword(y));
        t = _mm512_dpbusd_epi32(t, l1, BroadcastQword(y + 8));
        t = _mm512_dpbusd_epi32(t, h0, BroadcastQword(y + 16));
        t = _mm512_dpbusd_epi32(t, h1, BroadcastQword(y + 24));
        isum[a] = _mm512_dpwssd_epi32(isum[a], t, scale_pairs);
      }
    }
    const __m512i min_pairs0 = _mm512_shuffle_epi8(mins, sh.min[0]);
    const __m512i min_pairs1 = _mm512_shuffle_epi8(mins, sh.min[1]);
    const __m512 factors =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));  // d, dmin
#pragma GCC unroll 8
    for (int a = 0; a < N; ++a) {
      const __m512i msum = _mm512_dpwssd_epi32(
          _mm512_dpwssd_epi32(zero, min_pairs0, BroadcastQword(p.bsum_pairs[a][j])), min_pairs1,
          BroadcastQword(p.bsum_pairs[a][j] + 4));
      const __m512 f = _mm512_mul_ps(factors, _mm512_set1_ps(p.d[a][j]));
      acc[a] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[a]), _mm512_permutexvar_ps(pick_d, f), acc[a]);
      acc[a] =
          _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_permutexvar_ps(pick_dmin, f), acc[a]);
    }
  }
  for (int a = 0; a < N; ++a) {
    // Row r is lanes 2r and 2r + 1 summed, packed into the low 8 lanes.
    const __m512 pair_sums = _mm512_add_ps(acc[a], _mm512_permute_ps(acc[a], 0xB1));
    const __m256 rows = _mm512_castps512_ps256(_mm512_maskz_compress_ps(0x5555, pair_sums));
    float* o = out + a * out_stride;
    _mm256_storeu_ps(o, first ? rows : _mm256_add_ps(_mm256_loadu_ps(o), rows));
  }
}

template <int N>
void Rows8Groups(const uint8_t* w, int64_t w_stride, int n_groups, int64_t b0, int64_t span,
                 const Rows8Prepared& p, const uint8_t* const* act, const Rows8Shuffles& sh,
                 float* out, int64_t out_stride) {
  const uint8_t* end = w + n_groups * kRows8 * w_stride;
  for (int g = 0; g < n_groups; ++g) {
    const uint8_t* gw = w + g * kRows8 * w_stride + b0 * kRows8GroupBlockBytes;
    Rows8Group<N>(gw, span, end, p, act, b0, sh, out + g * kRows8, out_stride, b0 == 0);
  }
}

// Rows8Groups<N> for N = 1..8 activation rows at index N - 1.
inline constexpr decltype(&Rows8Groups<1>) kRows8GroupsFor[kRows8] = {
    &Rows8Groups<1>, &Rows8Groups<2>, &Rows8Groups<3>, &Rows8Groups<4>,
    &Rows8Groups<5>, &Rows8Groups<6>, &Rows8Groups<7>, &Rows8Groups<8>};

// DotFn over the rows8 layout: w at the first row of a group, n_wrows a multiple of 8, w_stride
// the GGUF row bytes (a group is 8 · w_stride bytes).
void DotRows8Q4K(const uint8_t* w, int64_t w_stride, int n_wrows, int64_t k,
                 const uint8_t* const* act, int n_act, float* out, int64_t out_stride) {
  static const Rows8Shuffles shuffles;
  Rows8Prepared prepared;
  const int64_t nb = k / quant::kQK_K;
  const int n_groups = n_wrows / kRows8;
  for (int64_t b0 = 0; b0 < nb; b0 += kRows8SpanBlocks) {
    const int64_t span = std::min(kRows8SpanBlocks, nb - b0);
    for (int c = 0; c < n_act; c += kRows8) {
      const int n = std::min(kRows8, n_act - c);
      prepared.Prepare(act + c, n, b0, span);
      float* o = out + c * out_stride;
      kRows8GroupsFor[n - 1](w, w_stride, n_groups, b0, span, prepared, act + c, shuffles, o,
                             out_stride);
    }
  }
}

}  // namespace
}  // namespace tandem::experts
