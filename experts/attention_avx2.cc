// Attend's work item with AVX2 and FMA (compiled with -mavx2 -mfma; called only on a CPU with
// AVX2, for head_dim a multiple of 8). Scores four query heads at a time, so each 8-float slice of
// a key is loaded once for four heads; the chunk's weights through the polynomial exp; the
// weighted values summed in registers, 64 dimensions of one head at a time.
#include <immintrin.h>

#include <algorithm>
#include <limits>

#include "experts/attention_internal.h"
#include "experts/exp_avx2.h"
#include "experts/kernel_decode_avx2.h"

namespace tandem::experts {
namespace {

// o[0 .. 8·kVecs) = Σ_j w[j] · v[j · stride + 0 .. 8·kVecs) over j < n.
template <int kVecs>
void AccumulateValues(const float* w, const float* v, int64_t stride, int64_t n, float* o) {
  __m256 acc[kVecs];
  for (int r = 0; r < kVecs; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t j = 0; j < n; ++j, v += stride) {
    const __m256 wj = _mm256_broadcast_ss(w + j);
    for (int r = 0; r < kVecs; ++r)
      acc[r] = _mm256_fmadd_ps(wj, _mm256_loadu_ps(v + 8 * r), acc[r]);
  }
  for (int r = 0; r < kVecs; ++r) _mm256_storeu_ps(o + 8 * r, acc[r]);
}

}  // namespace

void AttendChunkAvx2(const AttendChunkArgs& a) {
  const int64_t n = a.j1 - a.j0;
  const int hd = a.head_dim;
  // Scores, four heads (or the remaining ones) per pass over the chunk's keys.
  for (int i0 = 0; i0 < a.n_heads; i0 += 4) {
    const int heads = std::min(4, a.n_heads - i0);
    const float* q[4];
    // (Past the group's last head the spare lanes repeat it; their sums are dropped.)
    for (int h = 0; h < 4; ++h) q[h] = a.q + (i0 + std::min(h, heads - 1)) * a.q_head_stride;
    for (int64_t j = 0; j < n; ++j) {
      const float* k = a.k + (a.j0 + j) * a.kv_stride;
      __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                       _mm256_setzero_ps()};
      for (int d = 0; d < hd; d += 8) {
        const __m256 kd = _mm256_loadu_ps(k + d);
        for (int h = 0; h < 4; ++h) acc[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q[h] + d), kd, acc[h]);
      }
      for (int h = 0; h < heads; ++h) a.scores[(i0 + h) * n + j] = HorizontalSum(acc[h]) * a.scale;
    }
  }
  for (int i = 0; i < a.n_heads; ++i) {
    float* s = a.scores + i * n;
    float max_s = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) max_s = std::max(max_s, s[j]);
    // e^(s − max): s − max ≤ 0, clamped at −87 where e^x leaves the normal floats (a weight below
    // 1.7e-38 beside the max's 1).
    const __m256 m = _mm256_set1_ps(max_s), floor = _mm256_set1_ps(-87.0f);
    __m256 sum8 = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
      const __m256 e = ExpAvx2(_mm256_max_ps(_mm256_sub_ps(_mm256_loadu_ps(s + j), m), floor));
      _mm256_storeu_ps(s + j, e);
      sum8 = _mm256_add_ps(sum8, e);
    }
    float sum = HorizontalSum(sum8);
    if (j < n) {
      alignas(32) float tail[8];
      for (int t = 0; t < 8; ++t) tail[t] = j + t < n ? s[j + t] - max_s : -87.0f;
      _mm256_store_ps(tail, ExpAvx2(_mm256_max_ps(_mm256_load_ps(tail), floor)));
      for (int t = 0; j + t < n; ++t) {
        s[j + t] = tail[t];
        sum += tail[t];
      }
    }
    float* out = a.partial + i * a.partial_stride;
    out[0] = max_s;
    out[1] = sum;
  }
  // Weighted values: per head, 64 dimensions (eight registers) at a time over the chunk's
  // positions, so the sums stay in registers; the chunk's values are read again from L2 for the
  // group's other heads.
  for (int i = 0; i < a.n_heads; ++i) {
    const float* w = a.scores + i * n;
    float* o = a.partial + i * a.partial_stride + 2;
    int d0 = 0;
    for (; d0 + 64 <= hd; d0 += 64)
      AccumulateValues<8>(w, a.v + a.j0 * a.kv_stride + d0, a.kv_stride, n, o + d0);
    for (; d0 < hd; d0 += 8)
      AccumulateValues<1>(w, a.v + a.j0 * a.kv_stride + d0, a.kv_stride, n, o + d0);
  }
}

}  // namespace tandem::experts
