// Internal to experts/kernels_avx2.cc: the Q4_K and Q3_K kernels over the rows8 layout (rows8.h)
// on AVX2, for CPUs without AVX-512. Each 64-byte vector of the layout is two 32-byte halves of
// four weight rows each, taken as two independent 4-row groups. Without vpdpbusd, a sub-block's
// quants meet their activation qwords in maddubs (u8 × s8 → int16 pairs; a sub-block's sum stays
// exact in int16), and one madd with the rows' scales in all four words of each row's qword gives
// int32 lane 2r + h. Integer sums are exact: results match the other kernels to float rounding.
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

inline __m256i BroadcastQword256(const void* p) {
  int64_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm256_set1_epi64x(v);
}

// vpshufb index for a 32-byte half (Rows8IndexBytes).
inline __m256i Rows8Avx2Index(int entry, int at, int step) {
  alignas(32) int8_t ix[32];
  Rows8IndexBytes(ix, 32, entry, at, step);
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(ix));
}

// Group<N> of F over both 4-row halves of every group of a call (F::Groups).
template <class F, int N>
void Rows8Avx2Groups(const uint8_t* w, int64_t w_stride, int n_groups, int64_t b0, int64_t span,
                     const typename F::Prepared& p, const uint8_t* const* act, float* out,
                     int64_t out_stride) {
  const uint8_t* end = w + n_groups * kRows8 * w_stride;
  for (int g = 0; g < n_groups; ++g) {
    const uint8_t* gw = w + g * kRows8 * w_stride + b0 * F::kGroupBlockBytes;
    for (int half = 0; half < 2; ++half) {
      F::template Group<N>(gw, half, span, end, p, act, b0, out + g * kRows8 + 4 * half, out_stride,
                           b0 == 0);
    }
  }
}

// Lanes 2r, 2r + 1 of acc[a] (r < 4) summed into out[a * out_stride + r] (stored when `first`).
template <int N>
inline void StoreRows4(const __m256* acc, float* out, int64_t out_stride, bool first) {
  for (int a = 0; a < N; ++a) {
    // hadd: per 128-bit lane [r0, r1, r0, r1]; qwords 0 and 2 hold rows 0..3.
    const __m256 pairs = _mm256_hadd_ps(acc[a], acc[a]);
    const __m128 rows = _mm256_castps256_ps128(
        _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(pairs), 0x08)));
    float* o = out + a * out_stride;
    _mm_storeu_ps(o, first ? rows : _mm_add_ps(_mm_loadu_ps(o), rows));
  }
}

// Lanes 2r, 2r + 1 (r < 4) take float f[r] of the first four.
inline __m256 PickRows4(__m128 f) {
  return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(f),
                                  _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
}

struct Rows8Avx2Q4K {
  static constexpr int64_t kGroupBlockBytes = kRows8GroupBlockBytesQ4K;
  using Prepared = Rows8Q4KPrepared;

  // Scale s of row 2l + i in all four words of qword i; min pairs (m_s, m_s+1) of s = 0, 1 | 4, 5
  // and of 2, 3 | 6, 7 in words (0, 1 | 2, 3).
  struct Shuffles {
    __m256i scale[8], min[2];
    Shuffles() {
      for (int s = 0; s < 8; ++s) scale[s] = Rows8Avx2Index(2 * s, 0, 2);
      for (int v = 0; v < 2; ++v) {
        alignas(32) int8_t ix[32];
        Rows8MinPairIndexBytes(ix, 32, v);
        min[v] = _mm256_load_si256(reinterpret_cast<const __m256i*>(ix));
      }
    }
  };

  template <int N>
  static void Groups(const uint8_t* w, int64_t w_stride, int n_groups, int64_t b0, int64_t span,
                     const Prepared& p, const uint8_t* const* act, float* out, int64_t out_stride) {
    Rows8Avx2Groups<Rows8Avx2Q4K, N>(w, w_stride, n_groups, b0, span, p, act, out, out_stride);
  }

  // Half `half` (rows 4·half .. +3) of one group over blocks [b0, b0 + span), N activation rows.
  template <int N>
  static void Group(const uint8_t* g, int half, int64_t span, const uint8_t* end, const Prepared& p,
                    const uint8_t* const* act, int64_t b0, float* out, int64_t out_stride,
                    bool first) {
    static const Shuffles sh;
    const __m256i nib = _mm256_set1_epi8(0x0F);
    __m256 acc[N];
    for (int a = 0; a < N; ++a) acc[a] = _mm256_setzero_ps();
    for (int64_t j = 0; j < span; ++j) {
      const uint8_t* blk = g + j * kGroupBlockBytes;
      if (half == 0) Rows8Prefetch(blk, kGroupBlockBytes, end);
      // This half's 32 scale/min entries: low nibbles, and the top bits from the low (half 0)
      // or high (half 1) nibbles of the 32 packed bytes.
      const __m256i low =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32 + 32 * half));
      const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 96));
      const __m256i high = _mm256_and_si256(_mm256_srli_epi16(packed, 4 * half), nib);
      const __m256i scales =
          _mm256_or_si256(_mm256_and_si256(low, nib),
                          _mm256_slli_epi16(_mm256_and_si256(high, _mm256_set1_epi8(3)), 4));
      const __m256i mins =
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(low, 4), nib),
                          _mm256_slli_epi16(_mm256_and_si256(high, _mm256_set1_epi8(12)), 2));
      __m256i isum[N];
      for (int a = 0; a < N; ++a) isum[a] = _mm256_setzero_si256();
      const uint8_t* qs = blk + 128 + 32 * half;
      for (int s = 0; s < 8; ++s) {
        const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 128 * s));
        const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 128 * s + 64));
        const __m256i l0 = _mm256_and_si256(v0, nib), l1 = _mm256_and_si256(v1, nib);
        const __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), nib);
        const __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), nib);
        const __m256i scale_words = _mm256_shuffle_epi8(scales, sh.scale[s]);
#pragma GCC unroll 8
        for (int a = 0; a < N; ++a) {
          const int8_t* y = reinterpret_cast<const quant::BlockQ8K*>(act[a])[b0 + j].qs + 32 * s;
          // Each maddubs word |.| <= 2 · 15 · 128 = 3840; four of them: 15360, exact as int16.
          const __m256i sum16 = _mm256_add_epi16(
              _mm256_add_epi16(_mm256_maddubs_epi16(l0, BroadcastQword256(y)),
                               _mm256_maddubs_epi16(l1, BroadcastQword256(y + 8))),
              _mm256_add_epi16(_mm256_maddubs_epi16(h0, BroadcastQword256(y + 16)),
                               _mm256_maddubs_epi16(h1, BroadcastQword256(y + 24))));
          isum[a] = _mm256_add_epi32(isum[a], _mm256_madd_epi16(sum16, scale_words));
        }
      }
      const __m256i min_pairs0 = _mm256_shuffle_epi8(mins, sh.min[0]);
      const __m256i min_pairs1 = _mm256_shuffle_epi8(mins, sh.min[1]);
      // d and dmin of this half's four rows.
      const __m128 d =
          _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 8 * half)));
      const __m128 dmin =
          _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 16 + 8 * half)));
      const __m256 d_lanes = PickRows4(d), dmin_lanes = PickRows4(dmin);
#pragma GCC unroll 8
      for (int a = 0; a < N; ++a) {
        const __m256i msum = _mm256_add_epi32(
            _mm256_madd_epi16(min_pairs0, BroadcastQword256(p.bsum_pairs[a][j])),
            _mm256_madd_epi16(min_pairs1, BroadcastQword256(p.bsum_pairs[a][j] + 4)));
        const __m256 dy = _mm256_set1_ps(p.d[a][j]);
        acc[a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[a]), _mm256_mul_ps(d_lanes, dy), acc[a]);
        acc[a] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(dmin_lanes, dy), acc[a]);
      }
    }
    StoreRows4<N>(acc, out, out_stride, first);
  }
};

struct Rows8Avx2Q3K {
  static constexpr int64_t kGroupBlockBytes = kRows8GroupBlockBytesQ3K;
  // Words (-4 · bsum_s, 0, 0, 0), added to row r's first word so that lane 2r's sum loses the
  // q + 4 offset of all 16 elements.
  using Prepared = Rows8Q3KPrepared<int16_t>;

  // Signed scale s of row 2l + i in the high byte of all four words of qword i (256 · scale).
  struct Shuffles {
    __m256i scale[8];
    Shuffles() {
      for (int s = 0; s < 8; ++s) scale[s] = Rows8Avx2Index(2 * s, 1, 2);
    }
  };

  template <int N>
  static void Groups(const uint8_t* w, int64_t w_stride, int n_groups, int64_t b0, int64_t span,
                     const Prepared& p, const uint8_t* const* act, float* out, int64_t out_stride) {
    Rows8Avx2Groups<Rows8Avx2Q3K, N>(w, w_stride, n_groups, b0, span, p, act, out, out_stride);
  }

  template <int N>
  static void Group(const uint8_t* g, int half, int64_t span, const uint8_t* end, const Prepared& p,
                    const uint8_t* const* act, int64_t b0, float* out, int64_t out_stride,
                    bool first) {
    static const Shuffles sh;
    const __m256i three = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
    const __m256i nib = _mm256_set1_epi8(0x0F);
    __m256 acc[N];
    for (int a = 0; a < N; ++a) acc[a] = _mm256_setzero_ps();
    for (int64_t j = 0; j < span; ++j) {
      const uint8_t* blk = g + j * kGroupBlockBytes;
      if (half == 0) Rows8Prefetch(blk, kGroupBlockBytes, end);
      // Entries 32·half .. +31 of each 64-entry set (scales 0..7, then 8..15) of this half's rows:
      // low nibbles, and top bits m = half (first set) or 2 + half (second) of the packed bytes.
      const __m256i low =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * half));
      const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 80));
      const __m256i bias = _mm256_set1_epi8(32);
      const __m256i scales[2] = {
          _mm256_sub_epi8(
              _mm256_or_si256(_mm256_and_si256(low, nib),
                              _mm256_slli_epi16(
                                  _mm256_and_si256(_mm256_srli_epi16(packed, 2 * half), three), 4)),
              bias),
          _mm256_sub_epi8(
              _mm256_or_si256(
                  _mm256_and_si256(_mm256_srli_epi16(low, 4), nib),
                  _mm256_slli_epi16(
                      _mm256_and_si256(_mm256_srli_epi16(packed, 4 + 2 * half), three), 4)),
              bias)};
      const uint8_t* low2 = blk + 112 + 32 * half;
      const uint8_t* high1 = blk + 624 + 32 * half;
      __m256i isum[N];
      for (int a = 0; a < N; ++a) isum[a] = _mm256_setzero_si256();
#pragma GCC unroll 16
      for (int s = 0; s < 16; ++s) {
        __m256i u[2];
        for (int t = 0; t < 2; ++t) {
          const int v = 2 * s + t;
          const __m256i l =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(low2 + 64 * (v / 4)));
          const __m256i h =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(high1 + 64 * (v / 8)));
          const int hs = v % 8;  // bit hs of h to bit 2
          const __m256i hbit = _mm256_and_si256(
              hs >= 2 ? _mm256_srli_epi16(h, hs - 2) : _mm256_slli_epi16(h, 2 - hs), four);
          u[t] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l, 2 * (v % 4)), three), hbit);
        }
        const __m256i scale_words = _mm256_shuffle_epi8(scales[s / 8], sh.scale[s % 8]);
#pragma GCC unroll 8
        for (int a = 0; a < N; ++a) {
          const int8_t* y = reinterpret_cast<const quant::BlockQ8K*>(act[a])[b0 + j].qs + 16 * s;
          // Words: |maddubs| <= 2 · 7 · 128 = 1792, two of them plus the start (<= 8192 on row r's
          // first word): exact as int16. × 256 · scale, 16 sub-blocks: |isum| < 2^31.
          const __m256i sum16 = _mm256_add_epi16(
              _mm256_add_epi16(_mm256_maddubs_epi16(u[0], BroadcastQword256(y)),
                               _mm256_maddubs_epi16(u[1], BroadcastQword256(y + 8))),
              BroadcastQword256(p.start[a][j][s]));
          isum[a] = _mm256_add_epi32(isum[a], _mm256_madd_epi16(sum16, scale_words));
        }
      }
      const __m256 d_lanes = _mm256_mul_ps(PickRows4(_mm_cvtph_ps(_mm_loadl_epi64(
                                               reinterpret_cast<const __m128i*>(blk + 8 * half)))),
                                           _mm256_set1_ps(1.0f / 256));
#pragma GCC unroll 8
      for (int a = 0; a < N; ++a) {
        acc[a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[a]),
                                 _mm256_mul_ps(d_lanes, _mm256_set1_ps(p.d[a][j])), acc[a]);
      }
    }
    StoreRows4<N>(acc, out, out_stride, first);
  }
};

}  // namespace
}  // namespace tandem::experts
