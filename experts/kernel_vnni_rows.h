// Internal to experts/kernels_avx512.cc: the 1..kMaxKernelRows-row (decode and speculative verify)
// kernels for Q4_K, Q5_K and Q3_K on AVX-512 VNNI. The generic loop (kernel_simd.h) pays maddubs +
// vpdpwssd per 64 weight bytes per activation row, because each chunk mixes sub-blocks with
// different scales. Here each weight block is decoded once into a lane order in which every int32
// lane belongs to one sub-block in every chunk, so each row pays one vpdpbusd per chunk and one
// vpdpwssd (Q3_K) or two (Q4_K, Q5_K) per block to apply the scales. What depends only on the
// activations is prepared once per call (a stack buffer of kRowsSpanBlocks blocks per row): the
// rows' qs in that element order, Q3_K's offset correction as the lanes' starting value,
// Q4_K/Q5_K's bsums as floats scaled by the row's d (two rows per register, so one FMA applies a
// block's mins to two rows) and the rows' d. Integer sums are exact, so results equal the generic
// path's up to float rounding. At one row the copy is paid once per call and the shuffles once per
// block, and this still runs Q4_K and Q3_K faster than the generic loop (kernels_avx512.cc says
// where and by how much).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

#include "experts/kernel_decode_avx2.h"
#include "experts/kernel_rows_span.h"
#include "experts/kernels.h"

namespace tandem::experts {
namespace {

// Q4_K. Raw qs qword q (bytes 8q..8q+7) holds elements 8·(q%4)+0..7 of sub-blocks 2·(q/4) (low
// nibbles) and 2·(q/4)+1 (high nibbles). T0 = qwords {0,1,8,9,4,5,12,13}, T1 = {2,3,10,11,6,7,
// 14,15}: low(T0), low(T1) have qword lane i in even sub-block kQ4Sub[i] and high(T0), high(T1)
// in kQ4Sub[i] + 1, so one "even" and one "odd" accumulator per row each see a fixed sub-block
// per lane. Chunk c of the copied activation block is the elements chunk c of the weights holds:
// chunks 0..3 = low(T0), high(T0), low(T1), high(T1).
inline constexpr std::array<int, 8> kQ4T0 = {0, 1, 8, 9, 4, 5, 12, 13};
inline constexpr std::array<int, 8> kQ4T1 = {2, 3, 10, 11, 6, 7, 14, 15};
inline constexpr std::array<int, 8> kQ4Sub = {0, 0, 4, 4, 2, 2, 6, 6};

// Source qword (8 elements) of activation qword 8c + i, for the Q4_K order above.
constexpr std::array<uint8_t, 32> Q4ActivationOrder() {
  std::array<uint8_t, 32> order{};
  for (int c = 0; c < 4; ++c) {
    for (int i = 0; i < 8; ++i) {
      const int q = (c & 2) ? kQ4T1[i] : kQ4T0[i];
      order[8 * c + i] = static_cast<uint8_t>(8 * (q / 4) + q % 4 + 4 * (c & 1));
    }
  }
  return order;
}

// Q3_K: chunk X (0..3), int32 lane L holds elements 16L + 4X .. +3 (sub-block L). Activation
// dword 16X + L = source dword 4L + X.
constexpr std::array<uint8_t, 64> Q3ActivationOrder() {
  std::array<uint8_t, 64> order{};
  for (int x = 0; x < 4; ++x) {
    for (int l = 0; l < 16; ++l) order[16 * x + l] = static_cast<uint8_t>(4 * l + x);
  }
  return order;
}

// Q5_K: qs as Q4_K; the high bit of element 32s + i is bit s of qh byte i, so chunk qword lane i
// (qs qword q) takes qh qword q % 4 at bit 2·(q / 4) + (1 for the high-nibble chunks).
inline constexpr std::array<int, 8> kQ5HighT0 = {0, 1, 0, 1, 0, 1, 0, 1};  // kQ4T0[i] % 4
inline constexpr std::array<int, 8> kQ5HighT1 = {2, 3, 2, 3, 2, 3, 2, 3};  // kQ4T1[i] % 4

template <quant::GgmlType T>
static inline void CopyActivationBlock(const int8_t* src, int8_t* dst) {
  if constexpr (T == quant::GgmlType::kQ4_K || T == quant::GgmlType::kQ5_K) {
    static constexpr auto kOrder = Q4ActivationOrder();
    for (int i = 0; i < 32; ++i) std::memcpy(dst + 8 * i, src + 8 * kOrder[i], 8);
  } else {
    static constexpr auto kOrder = Q3ActivationOrder();
    for (int i = 0; i < 64; ++i) std::memcpy(dst + 4 * i, src + 4 * kOrder[i], 4);
  }
}

// What a call prepares once per span from the N activation rows, so that per weight block each
// row pays only its vpdpbusd chain, its scale vpdpwssd and one FMA.
template <quant::GgmlType T, int N>
struct PreparedSpan {
  static constexpr bool kMins = T == quant::GgmlType::kQ4_K || T == quant::GgmlType::kQ5_K;
  static constexpr int kPairs = (N + 1) / 2;
  alignas(64) int8_t qs[N][kRowsSpanBlocks][quant::kQK_K];  // in the weights' lane order
  // Q3_K: -4·bsums of sub-block L in lane L, the start of the row's dpbusd chain (it removes the
  // q + 4 offset there: Σ q·y of a lane is at most 16·4·128 = 8192, still exact as int16).
  alignas(64) int32_t q3_start[kMins ? 1 : N][kRowsSpanBlocks][16];
  // Q4_K, Q5_K: y.d · Σ of the two bsums of sub-block s, row 2p in lanes 0..7 and 2p+1 in 8..15.
  alignas(64) float q4_bsums[kMins ? kPairs : 1][kRowsSpanBlocks][16];
  alignas(32) float d[kRowsSpanBlocks][8];  // y.d of rows 0..N-1, zero past N

  void Prepare(const uint8_t* const* act, int64_t b0, int64_t span) {
    for (int64_t j = 0; j < span; ++j) {
      for (int a = 0; a < 8; ++a) d[j][a] = 0.0f;
      if constexpr (kMins) {
        for (int p = 0; p < kPairs; ++p) _mm512_store_ps(q4_bsums[p][j], _mm512_setzero_ps());
      }
    }
    for (int a = 0; a < N; ++a) {
      const auto* y = reinterpret_cast<const quant::BlockQ8K*>(act[a]) + b0;
      for (int64_t j = 0; j < span; ++j) {
        CopyActivationBlock<T>(y[j].qs, qs[a][j]);
        d[j][a] = y[j].d;
        if constexpr (kMins) {
          const __m256i pair_sums = _mm256_madd_epi16(LoadU(y[j].bsums), _mm256_set1_epi16(1));
          _mm256_storeu_ps(q4_bsums[a / 2][j] + 8 * (a % 2),
                           _mm256_mul_ps(_mm256_cvtepi32_ps(pair_sums), _mm256_set1_ps(y[j].d)));
        } else {
          const __m512i b = _mm512_cvtepi16_epi32(LoadU(y[j].bsums));
          _mm512_store_si512(q3_start[a][j],
                             _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(b, 2)));
        }
      }
    }
  }
};

// Weight block j of the span against N rows: adds d·dy·(scaled integer sum) into acc[a] and, for
// Q4_K and Q5_K, dmin·m_s·dy·bsums_s into acc_min[a / 2] (row a in lanes 8·(a % 2)..+7).
template <quant::GgmlType T, int N>
static inline void VnniBlockRows(const typename Format<T>::Block& b, const PreparedSpan<T, N>& p,
                                 int64_t j, __m512* acc, __m512* acc_min) {
  __m512i total[N];
  if constexpr (PreparedSpan<T, N>::kMins) {
    const __m512i r0 = _mm512_loadu_si512(b.qs), r1 = _mm512_loadu_si512(b.qs + 64);
    const __m512i t0 =
        _mm512_permutex2var_epi64(r0,
                                  _mm512_setr_epi64(kQ4T0[0], kQ4T0[1], kQ4T0[2], kQ4T0[3],
                                                    kQ4T0[4], kQ4T0[5], kQ4T0[6], kQ4T0[7]),
                                  r1);
    const __m512i t1 =
        _mm512_permutex2var_epi64(r0,
                                  _mm512_setr_epi64(kQ4T1[0], kQ4T1[1], kQ4T1[2], kQ4T1[3],
                                                    kQ4T1[4], kQ4T1[5], kQ4T1[6], kQ4T1[7]),
                                  r1);
    const __m512i nib = _mm512_set1_epi8(0x0F);
    __m512i w[4] = {_mm512_and_si512(t0, nib), _mm512_and_si512(_mm512_srli_epi16(t0, 4), nib),
                    _mm512_and_si512(t1, nib), _mm512_and_si512(_mm512_srli_epi16(t1, 4), nib)};
    if constexpr (T == quant::GgmlType::kQ5_K) {
      const __m512i qh = _mm512_broadcast_i64x4(LoadU(b.qh));
      const __m512i h[2] = {
          _mm512_permutexvar_epi64(
              _mm512_setr_epi64(kQ5HighT0[0], kQ5HighT0[1], kQ5HighT0[2], kQ5HighT0[3],
                                kQ5HighT0[4], kQ5HighT0[5], kQ5HighT0[6], kQ5HighT0[7]),
              qh),
          _mm512_permutexvar_epi64(
              _mm512_setr_epi64(kQ5HighT1[0], kQ5HighT1[1], kQ5HighT1[2], kQ5HighT1[3],
                                kQ5HighT1[4], kQ5HighT1[5], kQ5HighT1[6], kQ5HighT1[7]),
              qh)};
      for (int c = 0; c < 4; ++c) {
        int64_t bits[8];  // bit 2·(q / 4) + (c & 1) of every byte of lane i (q / 4: same in T1)
        for (int i = 0; i < 8; ++i) {
          bits[i] = static_cast<int64_t>(0x0101010101010101ull << (2 * (kQ4T0[i] / 4) + (c & 1)));
        }
        const __mmask64 high =
            _mm512_test_epi8_mask(h[c >> 1], _mm512_setr_epi64(bits[0], bits[1], bits[2], bits[3],
                                                               bits[4], bits[5], bits[6], bits[7]));
        w[c] = _mm512_mask_add_epi8(w[c], high, w[c], _mm512_set1_epi8(16));
      }
    }
    // (sc, 0) int16 pairs: vpdpwssd multiplies the low half (the lane's sum, |sum| ≤ 2·4·15·128 =
    // 15360 for Q4_K, 2·4·31·128 = 31744 for Q5_K, so it is exact as int16) by sc and the high
    // half (its sign) by 0.
    const __m128i scmin = ScaleMinBytesK4(b.scales);
    const __m512i sc32 = _mm512_cvtepu8_epi32(scmin);  // lanes 0..7: sc, 8..15: m
    const __m512i sc_even = _mm512_permutexvar_epi32(
        _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 2, 2, 2, 2, 6, 6, 6, 6), sc32);
    const __m512i sc_odd = _mm512_permutexvar_epi32(
        _mm512_setr_epi32(1, 1, 1, 1, 5, 5, 5, 5, 3, 3, 3, 3, 7, 7, 7, 7), sc32);
    for (int a = 0; a < N; ++a) {
      const int8_t* yq = p.qs[a][j];
      const __m512i zero = _mm512_setzero_si512();
      __m512i even = _mm512_dpbusd_epi32(zero, w[0], _mm512_load_si512(yq));
      __m512i odd = _mm512_dpbusd_epi32(zero, w[1], _mm512_load_si512(yq + 64));
      even = _mm512_dpbusd_epi32(even, w[2], _mm512_load_si512(yq + 128));
      odd = _mm512_dpbusd_epi32(odd, w[3], _mm512_load_si512(yq + 192));
      total[a] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(zero, even, sc_even), odd, sc_odd);
    }
    // dmin·m as floats, [m0..m7, m0..m7]: one FMA per pair of rows against the prepared bsums.
    const __m512 m =
        _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpackhi_epi64(scmin, scmin))),
                      _mm512_set1_ps(F16(b.dmin)));
    for (int q = 0; q < PreparedSpan<T, N>::kPairs; ++q) {
      acc_min[q] = _mm512_fmadd_ps(m, _mm512_load_ps(p.q4_bsums[q][j]), acc_min[q]);
    }
  } else {
    const __m512i q = _mm512_loadu_si512(b.qs);
    const __m512i h = _mm512_castsi256_si512(LoadU(b.hmask));
    // Lane L: qs dword 8(L>>3) + 4(L&1) + X at bit pair (L>>1)&3; hmask dword 4(L&1) + X, bit L>>1.
    const __m512i q_idx = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 8, 12, 8, 12, 8, 12, 8, 12);
    const __m512i h_idx = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
    const __m512i shift = _mm512_setr_epi32(0, 0, 2, 2, 4, 4, 6, 6, 0, 0, 2, 2, 4, 4, 6, 6);
    const __m512i bit = _mm512_setr_epi32(
        0x01010101, 0x01010101, 0x02020202, 0x02020202, 0x04040404, 0x04040404, 0x08080808,
        0x08080808, 0x10101010, 0x10101010, 0x20202020, 0x20202020, 0x40404040, 0x40404040,
        static_cast<int>(0x80808080), static_cast<int>(0x80808080));
    const __m512i three = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4);
    __m512i w[4];
    for (int x = 0; x < 4; ++x) {
      const __m512i dx = _mm512_set1_epi32(x);
      const __m512i low2 = _mm512_and_si512(
          _mm512_srlv_epi32(_mm512_permutexvar_epi32(_mm512_add_epi32(q_idx, dx), q), shift),
          three);
      const __mmask64 high =
          _mm512_test_epi8_mask(_mm512_permutexvar_epi32(_mm512_add_epi32(h_idx, dx), h), bit);
      w[x] = _mm512_mask_add_epi8(low2, high, low2, four);  // q + 4
    }
    // (sc, 0) int16 pairs, as for Q4_K; the chain starts at -4·bsums, so the lane holds Σ q·y.
    const __m512i sc = _mm512_cvtepu16_epi32(KSource<quant::GgmlType::kQ3_K>{b}.Scales().sc16);
    for (int a = 0; a < N; ++a) {
      const int8_t* yq = p.qs[a][j];
      __m512i sum = _mm512_load_si512(p.q3_start[a][j]);
      for (int x = 0; x < 4; ++x)
        sum = _mm512_dpbusd_epi32(sum, w[x], _mm512_load_si512(yq + 64 * x));
      total[a] = _mm512_dpwssd_epi32(_mm512_setzero_si512(), sum, sc);
    }
  }
  // d·dy of every row in one multiply; each row's FMA then broadcasts its factor from memory
  // instead of a scalar multiply and a register broadcast of its own.
  alignas(32) float ddy[8];
  _mm256_store_ps(ddy, _mm256_mul_ps(_mm256_set1_ps(F16(b.d)), _mm256_load_ps(p.d[j])));
  // Keep the per-row loads below: GCC would otherwise shuffle each factor out of a register.
  asm volatile("" ::: "memory");
  for (int a = 0; a < N; ++a) {
    acc[a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total[a]), _mm512_set1_ps(ddy[a]), acc[a]);
  }
}

// Lane j of the result is the sum of v[j]'s 16 lanes: 16 horizontal sums in 45 shuffles and adds
// (one _mm512_reduce_add_ps is 8).
static inline __m512 SumEachOf16(const float (*v)[16]) {
  __m512 pairs[8];  // per 128-bit lane q, rows 2i, 2i + 1: halves of their 4-lane sums
  for (int i = 0; i < 8; ++i) {
    const __m512 a = _mm512_load_ps(v[2 * i]), b = _mm512_load_ps(v[2 * i + 1]);
    pairs[i] = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  }
  __m512 quads[4];  // per 128-bit lane q, rows 4i..4i + 3: their sums over elements 4q..4q + 3
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(pairs[2 * i]), b = _mm512_castps_pd(pairs[2 * i + 1]);
    quads[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  // 128-bit lanes: halves, then whole sums; lane group g of the result holds rows 4g..4g + 3.
  const __m512 h01 = _mm512_add_ps(_mm512_shuffle_f32x4(quads[0], quads[1], 0x88),
                                   _mm512_shuffle_f32x4(quads[0], quads[1], 0xDD));
  const __m512 h23 = _mm512_add_ps(_mm512_shuffle_f32x4(quads[2], quads[3], 0x88),
                                   _mm512_shuffle_f32x4(quads[2], quads[3], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(h01, h23, 0x88), _mm512_shuffle_f32x4(h01, h23, 0xDD));
}

template <quant::GgmlType T, int N>
struct VnniKRows {
  // Weight rows whose per-row sums are reduced together (SumEachOf16).
  static constexpr int kRowGroup = 16;

  static void Run(const uint8_t* w, int64_t w_stride, int n_wrows, int64_t k,
                  const uint8_t* const* act, float* out, int64_t out_stride) {
    using B = typename Format<T>::Block;
    using Span = PreparedSpan<T, N>;
    Span prepared;
    // Each weight row's N accumulators, mins folded in, until its group of rows is reduced. On
    // the down shape (three blocks a row) one reduction per row and activation row cost as much
    // as a block's dot products (docs/perf/experts.md, session 14).
    alignas(64) float lanes[N][kRowGroup][16];
    const int64_t nb = k / quant::kQK_K;
    for (int64_t b0 = 0; b0 < nb; b0 += kRowsSpanBlocks) {
      const int64_t span = std::min(kRowsSpanBlocks, nb - b0);
      prepared.Prepare(act, b0, span);
      const int ahead = RowsPrefetchAhead<N>(span * static_cast<int64_t>(sizeof(B)));
      for (int r0 = 0; r0 < n_wrows; r0 += kRowGroup) {
        const int rows = std::min(kRowGroup, n_wrows - r0);
        for (int i = 0; i < rows; ++i) {
          const int r = r0 + i;
          const B* wb = reinterpret_cast<const B*>(w + r * w_stride) + b0;
          PrefetchRowAhead<B>(w, w_stride, r, ahead, n_wrows, b0, span);
          __m512 acc[N], acc_min[Span::kPairs];
          for (int a = 0; a < N; ++a) acc[a] = _mm512_setzero_ps();
          for (int q = 0; q < Span::kPairs; ++q) acc_min[q] = _mm512_setzero_ps();
          for (int64_t j = 0; j < span; ++j) VnniBlockRows<T, N>(wb[j], prepared, j, acc, acc_min);
          for (int a = 0; a < N; ++a) {
            if constexpr (Span::kMins) {  // row a's min terms are lanes 8·(a % 2)..+7 of its pair
              acc[a] = _mm512_mask_sub_ps(acc[a], a % 2 ? 0xFF00 : 0x00FF, acc[a], acc_min[a / 2]);
            }
            _mm512_store_ps(lanes[a][i], acc[a]);
          }
        }
        for (int i = rows; i < kRowGroup; ++i) {
          for (int a = 0; a < N; ++a) _mm512_store_ps(lanes[a][i], _mm512_setzero_ps());
        }
        const __mmask16 mask = static_cast<__mmask16>((1u << rows) - 1);
        for (int a = 0; a < N; ++a) {
          float* o = out + a * out_stride + r0;
          const __m512 sum = SumEachOf16(lanes[a]);
          _mm512_mask_storeu_ps(o, mask,
                                b0 > 0 ? _mm512_add_ps(_mm512_maskz_loadu_ps(mask, o), sum) : sum);
        }
      }
    }
  }
};

}  // namespace
}  // namespace tandem::experts
