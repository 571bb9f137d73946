// AVX-512 VNNI kernels (compiled with -mavx512f/bw/vl/vnni; called only after
// CpuSupports(kAvx512)). K family: 64 bytes of the decoded block per vpdpbusd (u8 × s8 → s32,
// four products per lane, so lanes 4j..4j+3 hold run j of 16), then the per-run scale by vpmulld.
// 32 family: the 256-bit vpdpbusd (AVX512VL) on the sign-trick operands of one block.
#include <immintrin.h>

#include "experts/kernel_decode_avx2.h"
#include "experts/kernels_internal.h"

namespace tandem::experts {
namespace {

template <quant::GgmlType T, int N>
struct KRowsAvx512 {
  static void Run(const uint8_t* w, int64_t w_stride, int n_wrows, int64_t k,
                  const uint8_t* const* act, float* out, int64_t out_stride) {
    using F = Format<T>;
    using B = typename F::Block;
    const int64_t nb = k / B::kElems;
    // Lane i of chunk c (64 elements) belongs to run 4c + i/4.
    __m512i lane_run[4];
    for (int c = 0; c < 4; ++c) {
      lane_run[c] = _mm512_setr_epi32(4 * c, 4 * c, 4 * c, 4 * c, 4 * c + 1, 4 * c + 1, 4 * c + 1,
                                      4 * c + 1, 4 * c + 2, 4 * c + 2, 4 * c + 2, 4 * c + 2,
                                      4 * c + 3, 4 * c + 3, 4 * c + 3, 4 * c + 3);
    }
    for (int r = 0; r < n_wrows; ++r) {
      const B* wb = reinterpret_cast<const B*>(w + r * w_stride);
      __m512 acc[N];
      for (int a = 0; a < N; ++a) acc[a] = _mm512_setzero_ps();
      for (int64_t ib = 0; ib < nb; ++ib) {
        KBlock kb;
        DecodeK(wb[ib], &kb);
        const __m512i sc32 =
            _mm512_cvtepi16_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(kb.sc)));
        __m512i scale[4], wq[4], aw[4];
        __mmask64 neg[4];
        for (int c = 0; c < 4; ++c) {
          scale[c] = _mm512_permutexvar_epi32(lane_run[c], sc32);
          wq[c] = _mm512_load_si512(kb.q + 64 * c);
          if constexpr (F::kSigned) {
            neg[c] = _mm512_movepi8_mask(wq[c]);
            aw[c] = _mm512_abs_epi8(wq[c]);
          }
        }
        const __m512 corr = _mm512_load_ps(kb.corr);
        const __m512 d = _mm512_set1_ps(kb.d);
        for (int a = 0; a < N; ++a) {
          const quant::BlockQ8K& y = reinterpret_cast<const quant::BlockQ8K*>(act[a])[ib];
          __m512i isum = _mm512_setzero_si512();
          for (int c = 0; c < 4; ++c) {
            __m512i qy = _mm512_loadu_si512(y.qs + 64 * c);
            __m512i dot;
            if constexpr (F::kSigned) {
              qy = _mm512_mask_sub_epi8(qy, neg[c], _mm512_setzero_si512(), qy);
              dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), aw[c], qy);
            } else {
              dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wq[c], qy);
            }
            isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(dot, scale[c]));
          }
          __m512 part = _mm512_mul_ps(_mm512_cvtepi32_ps(isum), d);
          if constexpr (!F::kSigned) {
            const __m512 bs = _mm512_cvtepi32_ps(
                _mm512_cvtepi16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums))));
            part = _mm512_fnmadd_ps(bs, corr, part);
          }
          acc[a] = _mm512_fmadd_ps(part, _mm512_set1_ps(y.d), acc[a]);
        }
      }
      for (int a = 0; a < N; ++a) out[a * out_stride + r] = _mm512_reduce_add_ps(acc[a]);
    }
  }
};

template <quant::GgmlType T, int N>
struct Rows32Avx512 {
  static void Run(const uint8_t* w, int64_t w_stride, int n_wrows, int64_t k,
                  const uint8_t* const* act, float* out, int64_t out_stride) {
    using B = typename Format<T>::Block;
    const int64_t nb = k / B::kElems;
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
          const __m256i dot =
              _mm256_dpbusd_epi32(_mm256_setzero_si256(), aw, _mm256_sign_epi8(LoadU(y.qs), wq));
          acc[a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(dw * F16(y.d)), acc[a]);
        }
      }
      for (int a = 0; a < N; ++a) out[a * out_stride + r] = HorizontalSum(acc[a]);
    }
  }
};

template <quant::GgmlType T>
void DotAvx512(const uint8_t* w, int64_t w_stride, int n_wrows, int64_t k,
               const uint8_t* const* act, int n_act, float* out, int64_t out_stride) {
  if constexpr (Format<T>::kK) {
    DispatchRows<KRowsAvx512, T>(w, w_stride, n_wrows, k, act, n_act, out, out_stride);
  } else {
    DispatchRows<Rows32Avx512, T>(w, w_stride, n_wrows, k, act, n_act, out, out_stride);
  }
}

struct Avx512Maker {
  template <quant::GgmlType T>
  static DotFn Make() { return &DotAvx512<T>; }
};

}  // namespace

DotFn GetAvx512Kernel(quant::GgmlType type) { return DispatchFormat<Avx512Maker>(type); }

}  // namespace tandem::experts
