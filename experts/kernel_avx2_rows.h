// Internal to experts/kernels_avx2.cc: the 1..kMaxKernelRows-row (decode and speculative verify)
// kernel for Q4_K on AVX2 without VNNI. The generic loop (kernel_simd.h) pays maddubs + madd + add
// per 32 weight bytes per activation row, because each 32-byte run is one sub-block and the next
// run has another scale. Here each weight block is decoded once, with a 4×4 dword transpose of its
// four 32-byte qs groups, into chunks in which every 16-bit lane belongs to the same sub-block in
// every chunk; a row then adds its maddubs results as int16 across four chunks and pays one madd
// per four chunks to apply the scales. What depends only on the activations (their qs in the same
// element order, bsums·d as floats, d) is prepared once per call in a stack buffer of
// kRowsSpanBlocks blocks per row. Integer sums are exact, so results equal the generic path's up
// to float rounding. At one row it too beats the generic loop: experts_bench on the 2-core Zen 4
// VM, three alternating passes (2026-11-30), hot 18.6-18.7 -> 20.7-21.2 GB/s, cold 13.0-15.2 ->
// 15.0-16.1, down shape cold 15.0-15.1 -> 17.9-18.2.
// Q5_K the same way measured no gain at 2 and 4 rows (2026-11-29, experts_bench hot: 12.8 / 8.1 ->
// 12.2 / 8.1 GB/s; its qh bits cost four ops per chunk on top of the transpose), so it is not here.
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

// Chunk c = 2k + h (k = 0..3: transposed register, h = 0 low nibbles, 1 high). Its dword d (128-bit
// lane d / 4, qs group g = d % 4) holds qs dword k + 4·(d / 4) of group g, i.e. elements
// 64g + 32h + 4k + 16·(d / 4) + 0..3 of sub-block 2g + h. So int16 lanes 2d, 2d+1 stay in sub-block
// 2·(d % 4) (low chunks) or 2·(d % 4) + 1 (high chunks) in every chunk of the block.
// Source dword of activation dword 8c + d:
constexpr std::array<uint8_t, 64> Q4Avx2ActivationOrder() {
  std::array<uint8_t, 64> order{};
  for (int c = 0; c < 8; ++c) {
    const int k = c / 2, h = c % 2;
    for (int d = 0; d < 8; ++d) {
      order[8 * c + d] = static_cast<uint8_t>(16 * (d % 4) + 8 * h + k + 4 * (d / 4));
    }
  }
  return order;
}

template <int N>
struct Avx2PreparedSpan {
  alignas(32) int8_t qs[N][kRowsSpanBlocks][quant::kQK_K];  // in the weights' chunk order
  alignas(32) float bsums[N][kRowsSpanBlocks][8];  // y.d · Σ of the two bsums of sub-block s
  alignas(32) float d[kRowsSpanBlocks][8];         // y.d of rows 0..N-1, zero past N

  void Prepare(const uint8_t* const* act, int64_t b0, int64_t span) {
    static constexpr auto kOrder = Q4Avx2ActivationOrder();
    for (int64_t j = 0; j < span; ++j) {
      for (int a = 0; a < 8; ++a) d[j][a] = 0.0f;
    }
    for (int a = 0; a < N; ++a) {
      const auto* y = reinterpret_cast<const quant::BlockQ8K*>(act[a]) + b0;
      for (int64_t j = 0; j < span; ++j) {
        for (int i = 0; i < 64; ++i) std::memcpy(qs[a][j] + 4 * i, y[j].qs + 4 * kOrder[i], 4);
        d[j][a] = y[j].d;
        const __m256i pair_sums = _mm256_madd_epi16(LoadU(y[j].bsums), _mm256_set1_epi16(1));
        _mm256_store_ps(bsums[a][j],
                        _mm256_mul_ps(_mm256_cvtepi32_ps(pair_sums), _mm256_set1_ps(y[j].d)));
      }
    }
  }
};

// Weight block j of the span against N rows: adds d·dy·(scaled integer sum) into acc[a] and
// dmin·dy·m_s·bsums_s into acc_min[a].
template <quant::GgmlType T, int N>
static inline void Avx2KBlockRows(const typename Format<T>::Block& b, const Avx2PreparedSpan<N>& p,
                                  int64_t j, __m256* acc, __m256* acc_min) {
  // 4×4 dword transpose within each 128-bit lane: v[k] = qs dword k (low lane) and k + 4 (high
  // lane) of groups 0..3.
  const __m256i g0 = LoadU(b.qs), g1 = LoadU(b.qs + 32), g2 = LoadU(b.qs + 64),
                g3 = LoadU(b.qs + 96);
  const __m256i t0 = _mm256_unpacklo_epi32(g0, g1), t1 = _mm256_unpackhi_epi32(g0, g1);
  const __m256i t2 = _mm256_unpacklo_epi32(g2, g3), t3 = _mm256_unpackhi_epi32(g2, g3);
  const __m256i v[4] = {_mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2),
                        _mm256_unpacklo_epi64(t1, t3), _mm256_unpackhi_epi64(t1, t3)};
  __m256i w[8];
  for (int k = 0; k < 4; ++k) {
    w[2 * k] = Low4(v[k]);
    w[2 * k + 1] = High4(v[k]);
  }
  // Scales per int16 lane: low chunks [s0 s0 s2 s2 s4 s4 s6 s6] per 128-bit lane, high [s1 s1 ...].
  const __m128i scmin = ScaleMinBytesK4(b.scales);  // bytes 0..7: sc, 8..15: m
  const __m256i sc16 = _mm256_cvtepu8_epi16(
      _mm_shuffle_epi8(scmin, _mm_setr_epi8(0, 0, 2, 2, 4, 4, 6, 6, 1, 1, 3, 3, 5, 5, 7, 7)));
  const __m256i sc_low = _mm256_permute2x128_si256(sc16, sc16, 0x00);
  const __m256i sc_high = _mm256_permute2x128_si256(sc16, sc16, 0x11);
  __m256i total[N];
  for (int a = 0; a < N; ++a) {
    // int16 lane sums: 4 chunks × 2 elements × 15 × 128 = 15360 at most, exact.
    const int8_t* yq = p.qs[a][j];
    __m256i low =
        _mm256_maddubs_epi16(w[0], _mm256_load_si256(reinterpret_cast<const __m256i*>(yq)));
    __m256i high =
        _mm256_maddubs_epi16(w[1], _mm256_load_si256(reinterpret_cast<const __m256i*>(yq + 32)));
    for (int k = 1; k < 4; ++k) {
      low = _mm256_add_epi16(
          low, _mm256_maddubs_epi16(
                   w[2 * k], _mm256_load_si256(reinterpret_cast<const __m256i*>(yq + 64 * k))));
      high = _mm256_add_epi16(
          high,
          _mm256_maddubs_epi16(
              w[2 * k + 1], _mm256_load_si256(reinterpret_cast<const __m256i*>(yq + 64 * k + 32))));
    }
    total[a] = _mm256_add_epi32(_mm256_madd_epi16(low, sc_low), _mm256_madd_epi16(high, sc_high));
  }
  const __m256 m = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(scmin, 8))),
                                 _mm256_set1_ps(F16(b.dmin)));
  alignas(32) float ddy[8];
  _mm256_store_ps(ddy, _mm256_mul_ps(_mm256_set1_ps(F16(b.d)), _mm256_load_ps(p.d[j])));
  // Keep the per-row loads below: GCC would otherwise shuffle each factor out of a register.
  asm volatile("" ::: "memory");
  for (int a = 0; a < N; ++a) {
    acc_min[a] = _mm256_fmadd_ps(m, _mm256_load_ps(p.bsums[a][j]), acc_min[a]);
    acc[a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total[a]), _mm256_set1_ps(ddy[a]), acc[a]);
  }
}

template <quant::GgmlType T, int N>
struct Avx2KRows {
  static_assert(T == quant::GgmlType::kQ4_K);
  static void Run(const uint8_t* w, int64_t w_stride, int n_wrows, int64_t k,
                  const uint8_t* const* act, float* out, int64_t out_stride) {
    Avx2PreparedSpan<N> prepared;
    const int64_t nb = k / quant::kQK_K;
    for (int64_t b0 = 0; b0 < nb; b0 += kRowsSpanBlocks) {
      const int64_t span = std::min(kRowsSpanBlocks, nb - b0);
      prepared.Prepare(act, b0, span);
      const int ahead =
          RowsPrefetchAhead<N>(span * static_cast<int64_t>(sizeof(typename Format<T>::Block)));
      for (int r = 0; r < n_wrows; ++r) {
        using B = typename Format<T>::Block;
        const auto* wb = reinterpret_cast<const B*>(w + r * w_stride) + b0;
        PrefetchRowAhead<B>(w, w_stride, r, ahead, n_wrows, b0, span);
        __m256 acc[N], acc_min[N];
        for (int a = 0; a < N; ++a) acc[a] = acc_min[a] = _mm256_setzero_ps();
        for (int64_t j = 0; j < span; ++j) Avx2KBlockRows<T, N>(wb[j], prepared, j, acc, acc_min);
        for (int a = 0; a < N; ++a) {
          const float sum = HorizontalSum(_mm256_sub_ps(acc[a], acc_min[a]));
          float& o = out[a * out_stride + r];
          o = b0 > 0 ? o + sum : sum;
        }
      }
    }
  }
};

}  // namespace
}  // namespace tandem::experts
