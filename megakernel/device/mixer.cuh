// The mixer half of one layer as phases of a persistent kernel: gated attention (projections,
// q/k norm + partial NeoX RoPE + KV append, split-key attention, combine + sigmoid gate, output
// projection) or Gated DeltaNet (projections, causal conv + L2 norms, delta rule, gated RMSNorm +
// output projection), each ending in the residual add. Phase p only reads what phases < p wrote;
// the caller puts a grid barrier (megakernel) or a kernel boundary (per-op mode) between phases.
// C++17, device only.
#pragma once

#include "megakernel/device/matvec.cuh"

namespace tandem::megakernel {

inline constexpr int kAttentionPhases = 5;
inline constexpr int kDeltaNetPhases = 4;
inline constexpr int kMaxHeadDim = 256;       // attention head_dim (checked on the host)
inline constexpr int kMaxConvKernel = 8;      // DeltaNet conv taps (checked on the host)

// Key-chunk length of the attention phases: enough chunks that every warp of the grid has work,
// at least 32 keys each. Both attention phases and the host's scratch sizing agree on it.
__device__ __forceinline__ int AttentionChunk(int n_keys, int n_rows, int n_head) {
  const int wanted = max(1, GridWarps() / (n_rows * n_head));
  const int len = (n_keys + wanted - 1) / wanted;
  return max(32, (len + 31) / 32 * 32);
}

// Phase 0 of both kinds: RMSNorm(x) into shared memory, quantised, then the input projections.
template <int R>
__device__ void MixerProjections(const MixerArgs& A, uint8_t* smem) {
  const ModelDims& D = A.dims;
  const int B = A.in->n_rows;
  uint8_t* cursor = smem;
  const ActSet* act = PublishActs(0, NormedActs(cursor, A.s.x, B, D.n_embd, A.norm, D.rms_eps));
  const unsigned mask = RowMask(B);
  float* proj = A.s.proj;
  const int ps = A.s.proj_stride;
  int n = 0;
  auto add = [&](const Matrix& m, int offset) { SetJob(n++, m, act, mask, proj + offset, ps); };
  if (A.recurrent) {
    const int conv_dim = D.ssm_conv_dim(), d_inner = D.ssm_d_inner();
    add(A.dn.qkv, 0);
    add(A.dn.z, conv_dim);
    if (D.ssm_grouped_ba) {
      add(A.dn.ba, conv_dim + d_inner);
    } else {
      add(A.dn.beta, conv_dim + d_inner);
      add(A.dn.alpha, conv_dim + d_inner + D.ssm_n_v);
    }
  } else {
    add(A.att.wq, 0);
    add(A.att.wk, D.q_rows());
    add(A.att.wv, D.q_rows() + D.kv_dim());
  }
  __syncthreads();
  RunJobs<R>(Plan().job, n);
}

// Attention phase 1: q/k RMSNorm and RoPE in place, k and v appended to the caches.
__device__ void AttentionNormRope(const MixerArgs& A) {
  const ModelDims& D = A.dims;
  const int B = A.in->n_rows, hd = D.head_dim, half = D.n_rot / 2;
  const int q_stride = D.gated_attention ? 2 * hd : hd;
  const int per_row = D.n_head + D.n_head_kv;
  for (int it = GlobalWarp(); it < B * per_row; it += GridWarps()) {
    const int r = it / per_row, h = it % per_row;
    const int pos = A.in->first_pos + r;
    float* row = A.s.proj + static_cast<int64_t>(r) * A.s.proj_stride;
    const bool is_q = h < D.n_head;
    float* v = is_q ? row + h * q_stride : row + D.q_rows() + (h - D.n_head) * hd;
    const float* w = is_q ? A.att.q_norm : A.att.k_norm;
    float ss = 0;
    for (int i = Lane(); i < hd; i += 32) ss += v[i] * v[i];
    ss = WarpSum(ss);
    const float scale = 1.0f / sqrtf(ss / static_cast<float>(hd) + D.rms_eps);
    for (int i = Lane(); i < hd; i += 32) v[i] = v[i] * scale * w[i];
    __syncwarp();
    for (int i = Lane(); i < half; i += 32) {
      float s, c;
      sincosf(static_cast<float>(pos) * D.rope_inv_freq[i], &s, &c);
      const float x0 = v[i], x1 = v[i + half];
      v[i] = x0 * c - x1 * s;
      v[i + half] = x1 * c + x0 * s;
    }
    __syncwarp();
    if (!is_q) {
      const int g = h - D.n_head;
      const int64_t at = static_cast<int64_t>(pos) * D.kv_dim() + g * hd;
      const float* vsrc = row + D.q_rows() + D.kv_dim() + g * hd;
      for (int i = Lane(); i < hd; i += 32) {
        A.att.k_cache[at + i] = v[i];
        A.att.v_cache[at + i] = vsrc[i];
      }
    }
  }
}

// Attention phase 2: one warp per (row, head, key chunk): online softmax over the chunk's keys,
// writing (max, sum, unnormalised output) to the partials. Keys go 32 at a time: each lane scores
// one key with independent 16-byte loads (no dependent round trip per key), then the warp
// accumulates the 32 weighted value rows, lanes over head dimensions.
__device__ void AttentionPartials(const MixerArgs& A) {
  const ModelDims& D = A.dims;
  const int B = A.in->n_rows, hd = D.head_dim, nh = D.n_head;
  const int q_stride = D.gated_attention ? 2 * hd : hd;
  const int group = nh / D.n_head_kv;
  const int n_keys_max = A.in->first_pos + B;
  const int chunk = AttentionChunk(n_keys_max, B, nh);
  const int n_chunks = (n_keys_max + chunk - 1) / chunk;
  const float scale = 1.0f / sqrtf(static_cast<float>(hd));
  const int per_lane = hd / 32;
  const int kv_dim = D.kv_dim();
  for (int it = GlobalWarp(); it < B * nh * n_chunks; it += GridWarps()) {
    const int c = it % n_chunks, h = (it / n_chunks) % nh, r = it / (n_chunks * nh);
    const int n_keys = A.in->first_pos + r + 1;
    const int k0 = c * chunk, k1 = min(n_keys, k0 + chunk);
    const float4* q4 = reinterpret_cast<const float4*>(
        A.s.proj + static_cast<int64_t>(r) * A.s.proj_stride + h * q_stride);
    const int g = h / group;
    const float* k_base = A.att.k_cache + g * hd;
    const float* v_base = A.att.v_cache + g * hd;
    float o[kMaxHeadDim / 32];
#pragma unroll
    for (int t = 0; t < kMaxHeadDim / 32; ++t) o[t] = 0;
    float m = -INFINITY, l = 0;
    for (int j0 = k0; j0 < k1; j0 += 32) {
      const int j = j0 + Lane();
      float s = -INFINITY;
      if (j < k1) {
        const float4* k4 = reinterpret_cast<const float4*>(k_base + static_cast<int64_t>(j) * kv_dim);
        float acc0 = 0, acc1 = 0;
#pragma unroll 8
        for (int d = 0; d < hd / 4; d += 2) {
          const float4 a = k4[d], b = q4[d], a2 = k4[d + 1], b2 = q4[d + 1];
          acc0 += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
          acc1 += a2.x * b2.x + a2.y * b2.y + a2.z * b2.z + a2.w * b2.w;
        }
        s = (acc0 + acc1) * scale;
      }
      const float m_new = fmaxf(m, WarpMax(s));
      const float p = j < k1 ? expf(s - m_new) : 0.0f;
      const float corr = expf(m - m_new);
      l = l * corr + WarpSum(p);
#pragma unroll
      for (int t = 0; t < kMaxHeadDim / 32; ++t) o[t] *= corr;
      // The value rows go kValueBatch at a time, all loads before any use: one round trip per
      // batch instead of one per key (a loop of dependent round trips cost 33 us per layer at
      // 512 keys, phase timeline 2026-11-29). Keys past the chunk load the last key again
      // (a valid row) with p = 0; the sum runs in key order as before.
      const int n = min(32, k1 - j0);
      constexpr int kValueBatch = 4;
      for (int jj0 = 0; jj0 < n; jj0 += kValueBatch) {
        float vb[kValueBatch][kMaxHeadDim / 32];
#pragma unroll
        for (int b = 0; b < kValueBatch; ++b) {
          const float* vj = v_base + static_cast<int64_t>(j0 + min(jj0 + b, n - 1)) * kv_dim;
#pragma unroll
          for (int t = 0; t < kMaxHeadDim / 32; ++t) vb[b][t] = t < per_lane ? vj[Lane() + 32 * t] : 0.0f;
        }
#pragma unroll
        for (int b = 0; b < kValueBatch; ++b) {
          const float pj = __shfl_sync(kFullMask, p, jj0 + b);  // 0 past the chunk's keys
#pragma unroll
          for (int t = 0; t < kMaxHeadDim / 32; ++t) {
            if (t < per_lane && jj0 + b < n) o[t] += pj * vb[b][t];
          }
        }
      }
      m = m_new;
    }
    float* part = A.s.attn_part + ((static_cast<int64_t>(r) * nh + h) * A.s.n_chunks_max + c) * (hd + 2);
    if (Lane() == 0) {
      part[0] = m;
      part[1] = l;
    }
#pragma unroll
    for (int t = 0; t < kMaxHeadDim / 32; ++t) {
      if (t < per_lane) part[2 + Lane() + 32 * t] = o[t];
    }
  }
}

// Attention phase 3: merge the chunks of each (row, head), apply the sigmoid output gate. A warp
// per (row, head, 32 head dimensions), so that B · n_head · head_dim / 32 warps share the merge
// (a warp per (row, head) left 32 warps busy for 11 us per layer at 512 keys: phase timeline,
// 2026-11-29); each lane's dimension sums its chunks in order, as before.
__device__ void AttentionCombine(const MixerArgs& A) {
  const ModelDims& D = A.dims;
  const int B = A.in->n_rows, hd = D.head_dim, nh = D.n_head;
  const int q_stride = D.gated_attention ? 2 * hd : hd;
  const int n_keys_max = A.in->first_pos + B;
  const int chunk = AttentionChunk(n_keys_max, B, nh);
  const int n_chunks = (n_keys_max + chunk - 1) / chunk;
  const int parts = (hd + 31) / 32;
  for (int it = GlobalWarp(); it < B * nh * parts; it += GridWarps()) {
    const int part = it % parts, h = (it / parts) % nh, r = it / (parts * nh);
    const float* chunks =
        A.s.attn_part + (static_cast<int64_t>(r) * nh + h) * A.s.n_chunks_max * (hd + 2);
    float m = -INFINITY;
    for (int c = Lane(); c < n_chunks; c += 32) m = fmaxf(m, chunks[c * (hd + 2)]);
    m = WarpMax(m);
    float l = 0;
    for (int c = Lane(); c < n_chunks; c += 32) {
      const float* p = chunks + c * (hd + 2);
      if (p[1] > 0) l += p[1] * expf(p[0] - m);
    }
    l = WarpSum(l);
    const int d = 32 * part + Lane();
    if (d >= hd) continue;
    float acc = 0;
#pragma unroll 8
    for (int c = 0; c < n_chunks; ++c) {
      const float* p = chunks + c * (hd + 2);
      if (p[1] > 0) acc += p[2 + d] * expf(p[0] - m);
    }
    float y = acc / l;
    if (D.gated_attention) {
      y *= Sigmoid(A.s.proj[static_cast<int64_t>(r) * A.s.proj_stride + h * q_stride + hd + d]);
    }
    A.s.mix[static_cast<int64_t>(r) * nh * hd + h * hd + d] = y;
  }
}

// Attention phase 4: output projection added to the residual.
template <int R>
__device__ void AttentionOutput(const MixerArgs& A, uint8_t* smem) {
  const ModelDims& D = A.dims;
  const int B = A.in->n_rows, cols = D.n_head * D.head_dim;
  uint8_t* cursor = smem;
  float* unused;
  ActSet a = CarveActs(cursor, B, cols, false, &unused);
  a.x = A.s.mix;
  QuantizeRows(A.s.mix, cols, B, a);
  SetJob(0, A.att.wo, PublishActs(0, a), RowMask(B), A.s.x, D.n_embd, OutMode::kAdd);
  __syncthreads();
  RunJobs<R>(Plan().job, 1);
}

__device__ __forceinline__ float Softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// DeltaNet phase 1: causal conv (state update) + SiLU per channel, rows in order; L2 norm of each
// query/key head (queries also scaled by 1/sqrt(dk)). Warp per head of channels.
__device__ void DeltaNetConv(const MixerArgs& A) {
  const ModelDims& D = A.dims;
  const int B = A.in->n_rows, K = D.ssm_conv_kernel;
  const int n_k = D.ssm_n_k, dk = D.ssm_dk, dv = D.ssm_dv;
  const int key_dim = n_k * dk, conv_dim = D.ssm_conv_dim();
  const int n_items = 2 * n_k + D.ssm_n_v;
  const float q_scale = 1.0f / sqrtf(static_cast<float>(dk));
  for (int it = GlobalWarp(); it < n_items; it += GridWarps()) {
    const bool is_v = it >= 2 * n_k;
    const int c0 = is_v ? 2 * key_dim + (it - 2 * n_k) * dv : it * dk;
    const int width = is_v ? dv : dk;
    for (int r = 0; r < B; ++r) {
      const float* xin = A.s.proj + static_cast<int64_t>(r) * A.s.proj_stride;
      float ss = 0;
      for (int c = c0 + Lane(); c < c0 + width; c += 32) {
        float* st = A.dn.conv_state + static_cast<int64_t>(c) * (K - 1);
        const float* w = A.dn.conv + static_cast<int64_t>(c) * K;
        float acc = w[K - 1] * xin[c];
        for (int j = 0; j < K - 1; ++j) acc += w[j] * st[j];
        for (int j = 0; j + 1 < K - 1; ++j) st[j] = st[j + 1];
        st[K - 2] = xin[c];
        if (B > 1 && r < B - 1) {
          float* snap = A.dn.conv_snap + (static_cast<int64_t>(r) * conv_dim + c) * (K - 1);
          for (int j = 0; j < K - 1; ++j) snap[j] = st[j];
        }
        const float y = Silu(acc);
        A.s.mix[static_cast<int64_t>(r) * conv_dim + c] = y;
        ss += y * y;
      }
      if (!is_v) {
        ss = WarpSum(ss);
        const float scale = (1.0f / sqrtf(ss + 1e-6f)) * (it < n_k ? q_scale : 1.0f);
        __syncwarp();
        for (int c = c0 + Lane(); c < c0 + width; c += 32) {
          A.s.mix[static_cast<int64_t>(r) * conv_dim + c] *= scale;
        }
      }
    }
  }
}

// DeltaNet phase 2: the delta rule, one warp per (value head, 32 state columns), rows in order.
__device__ void DeltaNetRule(const MixerArgs& A) {
  const ModelDims& D = A.dims;
  const int B = A.in->n_rows;
  const int n_k = D.ssm_n_k, n_v = D.ssm_n_v, dk = D.ssm_dk, dv = D.ssm_dv;
  const int key_dim = n_k * dk, conv_dim = D.ssm_conv_dim(), d_inner = D.ssm_d_inner();
  const int rr = n_v / n_k;
  const int col_chunks = dv / 32;
  for (int it = GlobalWarp(); it < n_v * col_chunks; it += GridWarps()) {
    const int j = it / col_chunks, vv = (it % col_chunks) * 32 + Lane();
    const int kh = D.ssm_tiled_heads ? j % n_k : j / rr;
    float* S = A.dn.ssm_state + static_cast<int64_t>(j) * dk * dv + vv;
    for (int r = 0; r < B; ++r) {
      const float* y = A.s.mix + static_cast<int64_t>(r) * conv_dim;
      const float* q = y + kh * dk;
      const float* k = y + key_dim + kh * dk;
      const float v = y[2 * key_dim + j * dv + vv];
      const float* ba = A.s.proj + static_cast<int64_t>(r) * A.s.proj_stride + conv_dim + d_inner;
      float b, alpha;
      if (D.ssm_grouped_ba) {
        const int g = j / rr, i = j % rr;
        b = ba[g * 2 * rr + i];
        alpha = ba[g * 2 * rr + rr + i];
      } else {
        b = ba[j];
        alpha = ba[n_v + j];
      }
      const float beta = Sigmoid(b);
      const float decay = expf(A.dn.a[j] * Softplus(alpha + A.dn.dt_bias[j]));
      float kv = 0;
      for (int kk = 0; kk < dk; ++kk) kv += (S[static_cast<int64_t>(kk) * dv] * decay) * k[kk];
      const float delta = (v - kv) * beta;
      float o = 0;
      float* snap = (B > 1 && r < B - 1)
                        ? A.dn.ssm_snap + (static_cast<int64_t>(r) * n_v + j) * dk * dv + vv
                        : nullptr;
      for (int kk = 0; kk < dk; ++kk) {
        const float s = S[static_cast<int64_t>(kk) * dv] * decay + k[kk] * delta;
        S[static_cast<int64_t>(kk) * dv] = s;
        if (snap != nullptr) snap[static_cast<int64_t>(kk) * dv] = s;
        o += s * q[kk];
      }
      A.s.mix2[static_cast<int64_t>(r) * d_inner + j * dv + vv] = o;
    }
  }
}

// DeltaNet phase 3: gated RMSNorm of each head (ssm_norm, times silu(z)) into shared memory,
// then the output projection added to the residual.
template <int R>
__device__ void DeltaNetOutput(const MixerArgs& A, uint8_t* smem) {
  const ModelDims& D = A.dims;
  const int B = A.in->n_rows, dv = D.ssm_dv, n_v = D.ssm_n_v, d_inner = D.ssm_d_inner();
  const int conv_dim = D.ssm_conv_dim();
  uint8_t* cursor = smem;
  float* xs;
  ActSet a = CarveActs(cursor, B, d_inner, true, &xs);
  for (int it = Warp(); it < B * n_v; it += kWarpsPerBlock) {
    const int r = it / n_v, j = it % n_v;
    const float* o = A.s.mix2 + static_cast<int64_t>(r) * d_inner + j * dv;
    const float* z = A.s.proj + static_cast<int64_t>(r) * A.s.proj_stride + conv_dim + j * dv;
    float ss = 0;
    for (int d = Lane(); d < dv; d += 32) ss += o[d] * o[d];
    ss = WarpSum(ss);
    const float scale = 1.0f / sqrtf(ss / static_cast<float>(dv) + D.rms_eps);
    for (int d = Lane(); d < dv; d += 32) {
      xs[static_cast<int64_t>(r) * d_inner + j * dv + d] = o[d] * scale * A.dn.norm[d] * Silu(z[d]);
    }
  }
  __syncthreads();
  QuantizeRows(xs, d_inner, B, a);
  SetJob(0, A.dn.out, PublishActs(0, a), RowMask(B), A.s.x, D.n_embd, OutMode::kAdd);
  __syncthreads();
  RunJobs<R>(Plan().job, 1);
}

template <int R>
__device__ void MixerPhase(const MixerArgs& A, int phase, uint8_t* smem) {
  if (A.recurrent) {
    switch (phase) {
      case 0: MixerProjections<R>(A, smem); break;
      case 1: DeltaNetConv(A); break;
      case 2: DeltaNetRule(A); break;
      case 3: DeltaNetOutput<R>(A, smem); break;
    }
  } else {
    switch (phase) {
      case 0: MixerProjections<R>(A, smem); break;
      case 1: AttentionNormRope(A); break;
      case 2: AttentionPartials(A); break;
      case 3: AttentionCombine(A); break;
      case 4: AttentionOutput<R>(A, smem); break;
    }
  }
}

}  // namespace tandem::megakernel
