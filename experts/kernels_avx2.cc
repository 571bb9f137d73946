// AVX2 kernels (compiled with -mavx2 -mfma -mf16c; called only after CpuSupports(kAvx2)).
// K family: each 256-element weight block is decoded once into L1 (kernel_decode_avx2.h), then
// every activation row takes maddubs (u8 × s8 → s16 pairs) and madd with the per-16 scales
// (→ s32), one float FMA per block and row. 32 family: the decoded block stays in a register and
// every row applies the sign trick (|w| × sign(w)·y) before maddubs.
#include <immintrin.h>

#include "experts/kernel_decode_avx2.h"
#include "experts/kernels_internal.h"

namespace tandem::experts {
namespace {

template <quant::GgmlType T, int N>
struct KRowsAvx2 {
  static void Run(const uint8_t* w, int64_t w_stride, int n_wrows, int64_t k,
                  const uint8_t* const* act, float* out, int64_t out_stride) {
    using F = Format<T>;
    using B = typename F::Block;
    const int64_t nb = k / B::kElems;
    for (int r = 0; r < n_wrows; ++r) {
      const B* wb = reinterpret_cast<const B*>(w + r * w_stride);
      __m256 acc[N];
      for (int a = 0; a < N; ++a) acc[a] = _mm256_setzero_ps();
      for (int64_t ib = 0; ib < nb; ++ib) {
        KBlock kb;
        DecodeK(wb[ib], &kb);
        __m256i scale[8];
        for (int c = 0; c < 8; ++c) {
          scale[c] = _mm256_set_m128i(_mm_set1_epi16(kb.sc[2 * c + 1]), _mm_set1_epi16(kb.sc[2 * c]));
        }
        const __m256 corr_lo = _mm256_load_ps(kb.corr), corr_hi = _mm256_load_ps(kb.corr + 8);
        const __m256 d = _mm256_set1_ps(kb.d);
        for (int a = 0; a < N; ++a) {
          const quant::BlockQ8K& y = reinterpret_cast<const quant::BlockQ8K*>(act[a])[ib];
          __m256i isum = _mm256_setzero_si256();
          for (int c = 0; c < 8; ++c) {
            const __m256i wq = _mm256_load_si256(reinterpret_cast<const __m256i*>(kb.q + 32 * c));
            const __m256i qy = LoadU(y.qs + 32 * c);
            const __m256i pairs =
                F::kSigned ? _mm256_maddubs_epi16(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(qy, wq))
                           : _mm256_maddubs_epi16(wq, qy);
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(pairs, scale[c]));
          }
          __m256 part = _mm256_mul_ps(_mm256_cvtepi32_ps(isum), d);
          if constexpr (!F::kSigned) {
            const __m256i bs = LoadU(y.bsums);
            const __m256 bs_lo = _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(bs)));
            const __m256 bs_hi = _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_extracti128_si256(bs, 1)));
            part = _mm256_sub_ps(part, _mm256_fmadd_ps(bs_lo, corr_lo, _mm256_mul_ps(bs_hi, corr_hi)));
          }
          acc[a] = _mm256_fmadd_ps(part, _mm256_set1_ps(y.d), acc[a]);
        }
      }
      for (int a = 0; a < N; ++a) out[a * out_stride + r] = HorizontalSum(acc[a]);
    }
  }
};

template <quant::GgmlType T, int N>
struct Rows32Avx2 {
  static void Run(const uint8_t* w, int64_t w_stride, int n_wrows, int64_t k,
                  const uint8_t* const* act, float* out, int64_t out_stride) {
    using B = typename Format<T>::Block;
    const int64_t nb = k / B::kElems;
    const __m256i ones = _mm256_set1_epi16(1);
    for (int r = 0; r < n_wrows; ++r) {
      const B* wb = reinterpret_cast<const B*>(w + r * w_stride);
      __m256 acc[N];
      for (int a = 0; a < N; ++a) acc[a] = _mm256_setzero_ps();
      for (int64_t ib = 0; ib < nb; ++ib) {
        float dw;
        const __m256i wq = Decode32(wb[ib], &dw);
        const __m256i aw = _mm256_sign_epi8(wq, wq);
        for (int a = 0; a < N; ++a) {
          const quant::BlockQ8_0& y = reinterpret_cast<const quant::BlockQ8_0*>(act[a])[ib];
          const __m256i pairs = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(LoadU(y.qs), wq));
          const __m256 s = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
          acc[a] = _mm256_fmadd_ps(s, _mm256_set1_ps(dw * F16(y.d)), acc[a]);
        }
      }
      for (int a = 0; a < N; ++a) out[a * out_stride + r] = HorizontalSum(acc[a]);
    }
  }
};

template <quant::GgmlType T>
void DotAvx2(const uint8_t* w, int64_t w_stride, int n_wrows, int64_t k,
             const uint8_t* const* act, int n_act, float* out, int64_t out_stride) {
  if constexpr (Format<T>::kK) {
    DispatchRows<KRowsAvx2, T>(w, w_stride, n_wrows, k, act, n_act, out, out_stride);
  } else {
    DispatchRows<Rows32Avx2, T>(w, w_stride, n_wrows, k, act, n_act, out, out_stride);
  }
}

struct Avx2Maker {
  template <quant::GgmlType T>
  static DotFn Make() { return &DotAvx2<T>; }
};

}  // namespace

DotFn GetAvx2Kernel(quant::GgmlType type) { return DispatchFormat<Avx2Maker>(type); }

}  // namespace tandem::experts
