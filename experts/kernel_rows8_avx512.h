// Internal to experts/kernels_avx512.cc: the Q4_K and Q3_K kernels over the rows8 layout
// (rows8.h), for any number of activation rows (1..8 in registers; more in chunks of 8, the
// weights of a call then re-read from cache per chunk). Each 64-byte weight vector holds 8 bytes
// (elements) of each of eight weight rows and meets one vpdpbusd per activation row, whose operand
// is a broadcast qword of the activation's own Q8_K bytes (no copy): int32 lane 2r + h of a
// sub-block's chain holds half of row r's sum, so one vpdpwssd applies the sub-block's scales to
// all eight rows. Q4_K's mins take two vpdpwssd per block and activation row against its bsums;
// Q3_K's offset (q + 4) is taken out by starting lane 2r's chain at -4 · the sub-block's bsum.
// Integer sums are exact, as in the GGUF-layout kernels: results match them to float rounding.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "experts/kernel_rows8_common.h"
#include "experts/rows8.h"
#include "runtime/quant/q8_k.h"

namespace tandem::experts {
namespace {

inline __m512i BroadcastQword(const void* p) {
  int64_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm512_set1_epi64(v);
}

// Lanes 2r, 2r + 1 of acc[a] summed into out[a * out_stride + r] for r < 8 (stored when `first`).
template <int N>
inline void StoreRows8(const __m512* acc, float* out, int64_t out_stride, bool first) {
  for (int a = 0; a < N; ++a) {
    const __m512 pair_sums = _mm512_add_ps(acc[a], _mm512_permute_ps(acc[a], 0xB1));
    const __m256 rows = _mm512_castps512_ps256(_mm512_maskz_compress_ps(0x5555, pair_sums));
    float* o = out + a * out_stride;
    _mm256_storeu_ps(o, first ? rows : _mm256_add_ps(_mm256_loadu_ps(o), rows));
  }
}

// vpshufb index (the same in each 128-bit lane, which holds rows 2l and 2l + 1) that puts byte
// `entry` + i of the lane into bytes `at` and `at` + 4 of qword i, zeroing every other byte.
inline __m512i Rows8PairIndex(int entry, int at) {
  alignas(64) int8_t ix[64];
  Rows8IndexBytes(ix, 64, entry, at, 4);
  return _mm512_load_si512(ix);
}

// Group<N> of F over every group of a call (F::Groups).
template <class F, int N>
void Rows8Groups(const uint8_t* w, int64_t w_stride, int n_groups, int64_t b0, int64_t span,
                 const typename F::Prepared& p, const uint8_t* const* act, float* out,
                 int64_t out_stride) {
  const uint8_t* end = w + n_groups * kRows8 * w_stride;
  for (int g = 0; g < n_groups; ++g) {
    const uint8_t* gw = w + g * kRows8 * w_stride + b0 * F::kGroupBlockBytes;
    F::template Group<N>(gw, span, end, p, act, b0, out + g * kRows8, out_stride, b0 == 0);
  }
}

struct Rows8Q4K {
  static constexpr int64_t kGroupBlockBytes = kRows8GroupBlockBytesQ4K;
  using Prepared = Rows8Q4KPrepared;

  // vpshufb indices: sub-block s's scale of row 2l + i into int16 words 0 and 2 of qword i (the
  // (scale, 0) pairs of lanes 2r and 2r + 1); min pairs (m_s, m_s+1) of s = 0, 1 | 4, 5 and of
  // s = 2, 3 | 6, 7.
  struct Shuffles {
    __m512i scale[8], min[2];
    Shuffles() {
      for (int s = 0; s < 8; ++s) scale[s] = Rows8PairIndex(2 * s, 0);
      for (int v = 0; v < 2; ++v) {
        alignas(64) int8_t ix[64];
        Rows8MinPairIndexBytes(ix, 64, v);
        min[v] = _mm512_load_si512(ix);
      }
    }
  };

  template <int N>
  static void Groups(const uint8_t* w, int64_t w_stride, int n_groups, int64_t b0, int64_t span,
                     const Prepared& p, const uint8_t* const* act, float* out, int64_t out_stride) {
    Rows8Groups<Rows8Q4K, N>(w, w_stride, n_groups, b0, span, p, act, out, out_stride);
  }

  // One group of 8 weight rows over blocks [b0, b0 + span) against N activation rows.
  template <int N>
  static void Group(const uint8_t* g, int64_t span, const uint8_t* end, const Prepared& p,
                    const uint8_t* const* act, int64_t b0, float* out, int64_t out_stride,
                    bool first) {
    static const Shuffles sh;
    const __m512i nib = _mm512_set1_epi8(0x0F), zero = _mm512_setzero_si512();
    // Lanes 2r, 2r + 1 take d (first permutation) or dmin (second) of row r.
    const __m512i pick_d = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512i pick_dmin = _mm512_add_epi32(pick_d, _mm512_set1_epi32(8));
    __m512 acc[N];
    for (int a = 0; a < N; ++a) acc[a] = _mm512_setzero_ps();
    for (int64_t j = 0; j < span; ++j) {
      const uint8_t* blk = g + j * kGroupBlockBytes;
      Rows8Prefetch(blk, kGroupBlockBytes, end);
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
        const __m512i v0 = _mm512_loadu_si512(qs + 128 * s);
        const __m512i v1 = _mm512_loadu_si512(qs + 128 * s + 64);
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
    StoreRows8<N>(acc, out, out_stride, first);
  }
};

struct Rows8Q3K {
  static constexpr int64_t kGroupBlockBytes = kRows8GroupBlockBytesQ3K;
  using Prepared = Rows8Q3KPrepared<int32_t>;  // (-4 · bsum_s, 0): the starts of lanes 2r, 2r + 1

  // vpshufb indices: sub-block s's signed scale of row 2l + i into the high byte of int16 words 0
  // and 2 of qword i (256 · scale: exact, and the sign lands where vpdpwssd reads it; the 1/256 is
  // folded into d). Scales 0..7 come from the first 64 entries, 8..15 from the second.
  struct Shuffles {
    __m512i scale[8];
    Shuffles() {
      for (int s = 0; s < 8; ++s) scale[s] = Rows8PairIndex(2 * s, 1);
    }
  };

  template <int N>
  static void Groups(const uint8_t* w, int64_t w_stride, int n_groups, int64_t b0, int64_t span,
                     const Prepared& p, const uint8_t* const* act, float* out, int64_t out_stride) {
    Rows8Groups<Rows8Q3K, N>(w, w_stride, n_groups, b0, span, p, act, out, out_stride);
  }

  // One group of 8 weight rows over blocks [b0, b0 + span) against N activation rows.
  template <int N>
  static void Group(const uint8_t* g, int64_t span, const uint8_t* end, const Prepared& p,
                    const uint8_t* const* act, int64_t b0, float* out, int64_t out_stride,
                    bool first) {
    static const Shuffles sh;
    const __m512i three = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4);
    const __m512i nib = _mm512_set1_epi8(0x0F);
    const __m512i pick_d = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    __m512 acc[N];
    for (int a = 0; a < N; ++a) acc[a] = _mm512_setzero_ps();
    for (int64_t j = 0; j < span; ++j) {
      const uint8_t* blk = g + j * kGroupBlockBytes;
      Rows8Prefetch(blk, kGroupBlockBytes, end);
      // Biased scales of entries 0..63 and 64..127, then signed (-32..31).
      const __m512i low = _mm512_loadu_si512(blk + 16);
      const __m512i high =
          _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 80)));
      // Entries 32m..32m + 31 take bits 2m, 2m + 1 of the high bytes: per 256-bit half shifts.
      const __m512i shift01 = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
      const __m512i shift23 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
      const __m512i bias = _mm512_set1_epi8(32);
      const __m512i scales[2] = {
          _mm512_sub_epi8(
              _mm512_or_si512(
                  _mm512_and_si512(low, nib),
                  _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(high, shift01), three), 4)),
              bias),
          _mm512_sub_epi8(
              _mm512_or_si512(
                  _mm512_and_si512(_mm512_srli_epi16(low, 4), nib),
                  _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(high, shift23), three), 4)),
              bias)};
      const uint8_t* low2 = blk + 112;
      const uint8_t* high1 = blk + 624;
      __m512i isum[N];
      for (int a = 0; a < N; ++a) isum[a] = _mm512_setzero_si512();
#pragma GCC unroll 16
      for (int s = 0; s < 16; ++s) {
        __m512i u[2];
        for (int t = 0; t < 2; ++t) {
          const int v = 2 * s + t;
          const __m512i l = _mm512_loadu_si512(low2 + 64 * (v / 4));
          const __m512i q2 =
              _mm512_and_si512(v % 4 == 0 ? l : _mm512_srli_epi16(l, 2 * (v % 4)), three);
          const __mmask64 hb =
              _mm512_test_epi8_mask(_mm512_loadu_si512(high1 + 64 * (v / 8)),
                                    _mm512_set1_epi8(static_cast<char>(1 << (v % 8))));
          u[t] = _mm512_mask_add_epi8(q2, hb, q2, four);  // q + 4
        }
        const __m512i scale_pairs = _mm512_shuffle_epi8(scales[s / 8], sh.scale[s % 8]);
#pragma GCC unroll 8
        for (int a = 0; a < N; ++a) {
          const int8_t* y = reinterpret_cast<const quant::BlockQ8K*>(act[a])[b0 + j].qs + 16 * s;
          // Lane 2r: Σ q·y of its 8 elements - 4 · Σ y of the other 8, |.| <= 8192; lane 2r + 1:
          // Σ (q + 4)·y, |.| <= 7168. Exact as int16.
          __m512i t =
              _mm512_dpbusd_epi32(BroadcastQword(p.start[a][j][s]), u[0], BroadcastQword(y));
          t = _mm512_dpbusd_epi32(t, u[1], BroadcastQword(y + 8));
          // |isum| <= 16 · 8192 · 32 · 256 < 2^30.
          isum[a] = _mm512_dpwssd_epi32(isum[a], t, scale_pairs);
        }
      }
      const __m512 d = _mm512_permutexvar_ps(
          pick_d, _mm512_castps256_ps512(_mm256_mul_ps(
                      _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk))),
                      _mm256_set1_ps(1.0f / 256))));
#pragma GCC unroll 8
      for (int a = 0; a < N; ++a) {
        acc[a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[a]),
                                 _mm512_mul_ps(d, _mm512_set1_ps(p.d[a][j])), acc[a]);
      }
    }
    StoreRows8<N>(acc, out, out_stride, first);
  }
};

}  // namespace
}  // namespace tandem::experts
