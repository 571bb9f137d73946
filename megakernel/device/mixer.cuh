// The mixer half of one layer as phases of a persistent kernel: gated attention (projections;
// q/k norm + partial NeoX RoPE + KV append, split-key attention and the chunk merge + sigmoid gate
// in one phase, behind per-head flags and per-head chunk counters; output projection) or Gated
// DeltaNet (projections; causal conv and the delta rule with the q/k L2 norms in one phase, behind
// per-head flags; gated RMSNorm + output projection), each ending in the residual add. Phase p
// reads what phases < p wrote, and the heads and chunks its own flags and counters publish; the
// caller puts a grid barrier (megakernel) or a kernel boundary (per-op mode) between phases. C++17,
// device only.
#pragma once

#include <cuda/atomic>

#include "megakernel/device/matvec.cuh"

namespace tandem::megakernel {

inline constexpr int kAttentionPhases = 3;
inline constexpr int kDeltaNetPhases = 3;
inline constexpr int kMaxHeadDim = 256;       // attention head_dim (checked on the host)
inline constexpr int kMaxConvKernel = 8;      // DeltaNet conv taps (checked on the host)

// How the attention phases split their work. At long contexts a warp serves a team of query heads
// of one KV group over one key chunk, so each key and value row it loads serves the whole team;
// with a warp per head, each key row was loaded once per head of its group (qwen3-30b-a3b at 16k
// keys: 134 us a layer, 49 with teams; 2026-11-30, docs/perf/megakernel.md). Teams run when
// (row, team, 32 keys) items fill at least half the grid's warps; at shorter contexts a warp
// serves one head, so that the phase still has a warp per (row, head, 32 keys) (teams at 512 keys
// doubled the phase). In a multi-row step a one-head warp serves its head for a pair of rows
// (`rows`, QueryRowsPerWarp), so that each key and value row it loads serves both. Chunks are at
// least kMinAttentionChunk keys, as many per (row group, team) as the grid has warps for
// (params.h). Both attention phases derive the same split.
struct AttentionSplit {
  int step_rows;  // the step's rows (StepRows: a constant in the one-row kernels)
  int heads;      // query heads per warp
  int rows;       // step rows per warp (one-head path; 1 with teams)
  int teams;      // warps per (row group, KV group, chunk)
  int chunk;      // keys per chunk
  int n_chunks;   // chunks of the longest row
  // The team paths: a warp per several query heads of a KV group, the queries normed once and
  // flagged (a one-head warp norms its own query, also where a KV group is one head).
  __device__ __forceinline__ bool team_paths() const { return heads > 1; }
};

// The most step rows a one-head warp serves. Measured on the 4-row attention phase at 512 keys
// (docs/perf/megakernel.md, session 34): qwen3-30b-a3b (head_dim 128) 25 us a layer with a warp
// per row, 19 with two rows a warp, 24 with four; flash-next-125b (head_dim 256) 28 with one row,
// 31 with two, 47 with four.
__host__ __device__ constexpr int QueryRowsPerWarp(int dims_per_lane) {
  return dims_per_lane <= 4 ? 2 : 1;
}
static_assert(QueryRowsPerWarp(1) <= kMaxQueryRowsPerWarp, "the partials buffer's bound");

// ceil(a / d) for a ≥ 0, d ≥ 1, by SmallDivisor (a divisor used once: its reciprocal and the
// quotient are still shorter than an integer division's chain).
__device__ __forceinline__ int CeilQuotient(int a, int d) {
  return Quotient(a + d - 1, MakeSmallDivisor(d));
}

// Everything after the load of StepInput::first_pos (and, in the multi-row kernels, n_rows) is on
// the path of every attention item's first load, so it divides by SmallDivisor.
template <int R>
__device__ __forceinline__ AttentionSplit SplitAttention(const MixerArgs& A) {
  static_assert(kMaxQueryRowsPerWarp == 2, "row groups are rows or pairs of rows");
  const ModelDims& D = A.dims;
  const int group = D.n_head / D.n_head_kv;
  const int team_heads = TeamHeads(group, D.head_dim);
  const int team_teams = TeamsPerKvGroup(D);
  const int B = StepRows<R>(A.in);
  const int n_keys = A.in->first_pos + B;
  const int key_blocks = (n_keys + 31) >> 5;
  AttentionSplit s;
  s.step_rows = B;
  const bool team_paths =
      A.force_teams || B * D.n_head_kv * team_teams * key_blocks >= GridWarps() / 2;
  s.heads = team_paths ? team_heads : 1;
  s.teams = team_paths ? team_teams : group;
  s.rows = R > 1 && s.heads == 1 ? min(B, QueryRowsPerWarp(DimsPerLane(D.head_dim))) : 1;
  const int row_groups = s.rows == 1 ? B : (B + 1) >> 1;
  const int wanted =
      max(1, Quotient(GridWarps(), MakeSmallDivisor(row_groups * D.n_head_kv * s.teams)));
  const int len = CeilQuotient(n_keys, wanted);
  s.chunk = max(kMinAttentionChunk,
                (len + kMinAttentionChunk - 1) / kMinAttentionChunk * kMinAttentionChunk);
  s.n_chunks = CeilQuotient(n_keys, s.chunk);
  return s;
}

// Calls add(matrix, column offset in the projections row) for each input projection of the layer,
// in order: q, k, v (attention) or qkv, z, then ba or beta and alpha (DeltaNet).
template <class F>
__device__ __forceinline__ void ForEachInputProjection(const MixerArgs& A, F&& add) {
  const ModelDims& D = A.dims;
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
}

// How many projections ForEachInputProjection calls `add` with (per-op mode launches one each).
__host__ __device__ inline int InputProjectionCount(const MixerArgs& A) {
  return A.recurrent && !A.dims.ssm_grouped_ba ? 4 : 3;
}

// Phase 0 of both kinds: RMSNorm(x) into shared memory, quantised, then the input projections.
template <int R>
__device__ void MixerProjections(const MixerArgs& A, uint8_t* smem) {
  const ModelDims& D = A.dims;
  const int B = StepRows<R>(A.in);
  uint8_t* cursor = smem;
  const ActSet* act =
      PublishActs(0, NormedActs<PrologueBatch(R)>(cursor, A.s.x, B, D.n_embd, A.norm, D.rms_eps));
  const unsigned mask = RowMask(B);
  float* proj = A.s.proj;
  const int ps = A.s.proj_stride;
  int n = 0;
  ForEachInputProjection(
      A, [&](const Matrix& m, int offset) { SetJob(n++, m, act, mask, proj + offset, ps); });
  __syncthreads();
  RunJobs<R>(Plan().job, n);
}

// KV cache elements (AttentionLayer::f16_cache): float, or __half rounded to nearest as they are
// stored (the reference rounds the same way: SequenceState::f16_kv_cache). The element type is a
// template argument of the attention layers' kernels (kernels.cu), not a branch in one kernel:
// with both loops in one kernel, ptxas spilled more and the f32 cache's 16k attention phase
// lengthened by 1.4 us (qwen3-30b-a3b) and 8 us (flash-next-125b) a layer (session 44). Reads are
// streaming (LoadStreaming); LoadKv4 reads 4 consecutive elements of a 16-byte (f32) or 8-byte
// (f16) aligned group.
__device__ __forceinline__ float LoadKv(const float* p) { return LoadStreaming(p); }
__device__ __forceinline__ float LoadKv(const __half* p) {
  return __half2float(__ushort_as_half(LoadStreaming(reinterpret_cast<const unsigned short*>(p))));
}
__device__ __forceinline__ float4 LoadKv4(const float* p) {
  return LoadStreaming(reinterpret_cast<const float4*>(p));
}
__device__ __forceinline__ float4 LoadKv4(const __half* p) {
  const uint2 u = LoadStreaming(reinterpret_cast<const uint2*>(p));
  const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&u.x));
  const float2 hi = __half22float2(*reinterpret_cast<const __half2*>(&u.y));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}
__device__ __forceinline__ void StoreKv(float* p, float x) { *p = x; }
__device__ __forceinline__ void StoreKv(__half* p, float x) { *p = __float2half_rn(x); }

// The step's new key heads (and, for the team paths, its query heads) are normed and roped inside
// the attention phase, not in a phase of their own (that phase and its grid barrier cost 6.5 us
// per attention layer on qwen3-30b-a3b at 512 keys, 2026-11-30). The first warps of the phase take
// the heads (NormRopeHeads); each publishes a flag per (row, head) once its head is in place (a
// key head appended with its value head to the caches), and the warps that read a head wait for
// its flag. The flag holds the step's number: positions repeat after a rejected draft, step
// numbers do not. Every block is resident in both launch modes, and a warp finishes its heads
// before it waits on any, so the waits end.
__device__ __forceinline__ uint32_t* StepFlag(const MixerArgs& A, int i) {
  return A.s.head_ready +
         (static_cast<int64_t>(A.layer) * A.dims.step_flags_per_layer() + i) * kFlagStride;
}
__device__ __forceinline__ uint32_t* HeadFlag(const MixerArgs& A, int row, int head) {
  return StepFlag(A, row * A.dims.step_flags_per_row() + head);
}

// Lane 0 after the warp's writes: the warp barrier orders the lanes' writes before lane 0's
// release store (device scope), so a reader that acquires the flag sees the whole head.
__device__ __forceinline__ void PublishHead(uint32_t* flag, uint32_t seq) {
  __syncwarp();
  if (Lane() != 0) return;
  cuda::atomic_ref<uint32_t, cuda::thread_scope_device>(*flag).store(seq,
                                                                     cuda::memory_order_release);
}

// Lanes 0 .. n - 1 (n ≤ 32) wait until first[lane * stride] == want (a head's flag holding this
// step's number, a head's chunk count), backing off between loads, then load the word once more
// with acquire (device scope), and the warp barrier orders the other lanes' reads after theirs.
// - The words are polled at once, a lane each: one after another, a team item's eight query flags
//   cost a round trip each even once all were set (10 us of waiting a qwen3-30b-a3b item at 16k
//   keys; docs/perf/megakernel.md, session 42).
// - One lane a word: a merging warp may wait for most of the phase, and 32 lanes loading without
//   pause slowed the key and value streams of the other warps (qwen3-30b-a3b at 16k keys,
//   2026-11-30).
// - The polls are relaxed: an acquire load empties the multiprocessor's L1 (CCTL.IVALL) for every
//   warp on it, and at 16k keys 2,052 team items poll their query flags for 8 us. Relaxed polls
//   took qwen3-30b-a3b's attention phase from 50.6 to 49.5 us a layer at 16k keys (session 43).
__device__ __forceinline__ void WaitCounts(uint32_t* first, int stride, int n, uint32_t want) {
  if (Lane() < n) {
    cuda::atomic_ref<uint32_t, cuda::thread_scope_device> w(first[Lane() * stride]);
    while (w.load(cuda::memory_order_relaxed) != want) {
#if __CUDA_ARCH__ >= 700
      __nanosleep(64);
#endif
    }
    (void)w.load(cuda::memory_order_acquire);  // `want` again (words only grow in a phase)
  }
  __syncwarp();
}

// The keys of this step that a chunk [k0, k1) of row r sees: wait for their (and their values')
// append by rows max(0, k0 - first_pos) .. min(r, k1 - 1 - first_pos) of KV head g.
__device__ __forceinline__ void WaitNewKeys(const MixerArgs& A, int r, int g, int k0, int k1) {
  const int first = A.in->first_pos;
  const int first_row = max(0, k0 - first), last_row = min(r, k1 - 1 - first);
  if (last_row < first_row) return;
  const int row_stride = static_cast<int>(HeadFlag(A, 1, g) - HeadFlag(A, 0, g));
  WaitCounts(HeadFlag(A, first_row, g), row_stride, last_row - first_row + 1, A.in->seq);
}

// The merge of a (row, head)'s key chunks runs in the attention phase too, not in a phase of its
// own (that phase and its barrier cost 5.8 us per attention layer on qwen3-30b-a3b at 512 keys,
// 2026-11-30): each warp that writes a chunk's partials then adds one to the head's counter with a
// release increment, and the merging warps (the grid's last, which at short contexts have no
// chunk to score) wait for the count with acquire loads. A warp finishes its chunks before it
// merges, so these waits end too.
__device__ __forceinline__ uint32_t* ChunksDone(const MixerArgs& A, int row, int head) {
  return A.s.chunks_done + (row * A.dims.n_head + head) * kFlagStride;
}

// Zeroes the step's chunk counters for the next attention layer, once every merge is done: this
// thread takes counters first, first + stride, ...
template <int R>
__device__ __forceinline__ void ZeroChunkCounts(const MixerArgs& A, int first, int stride) {
  const int nh = A.dims.n_head;
  for (int i = first; i < StepRows<R>(A.in) * nh; i += stride) {
    int r, h;
    DivMod(i, A.dims.divisors.n_head, &r, &h);
    *ChunksDone(A, r, h) = 0;
  }
}

// After the warp's partials of n (row, head) pairs (n ≤ 32), the i-th being (r + i * dr, h + i *
// dh): lane i's release increment of the i-th's counter, all at once. Lane 0 making them one after
// another cost a device-scope fence and a round trip each, eight per team item (qwen3-30b-a3b at
// 16k keys, 2026-11-30).
__device__ __forceinline__ void PublishChunks(const MixerArgs& A, int r, int h, int dr, int dh,
                                              int n) {
  __syncwarp();
  if (Lane() >= n) return;
  cuda::atomic_ref<uint32_t, cuda::thread_scope_device>(
      *ChunksDone(A, r + Lane() * dr, h + Lane() * dh))
      .fetch_add(1, cuda::memory_order_release);
}

// Partial NeoX RoPE of a head at position pos, in place, lanes over rotation pairs.
__device__ __forceinline__ void RopeHead(const ModelDims& D, float* head, int pos) {
  const int half = D.n_rot / 2;
  for (int i = Lane(); i < half; i += 32) {
    float s, c;
    sincosf(static_cast<float>(pos) * D.rope_inv_freq[i], &s, &c);
    const float x0 = head[i], x1 = head[i + half];
    head[i] = x0 * c - x1 * s;
    head[i + half] = x1 * c + x0 * s;
  }
}

// A head's RMSNorm (weights w) and partial NeoX RoPE at position pos, from src into dst (which
// may be src), lanes over head dimensions.
__device__ __forceinline__ void NormRopeHead(const ModelDims& D, const float* src, float* dst,
                                             const float* w, int pos) {
  const int hd = D.head_dim;
  float ss = 0;
  for (int i = Lane(); i < hd; i += 32) ss += src[i] * src[i];
  ss = WarpSum(ss);
  const float scale = 1.0f / sqrtf(ss / static_cast<float>(hd) + D.rms_eps);
  for (int i = Lane(); i < hd; i += 32) dst[i] = src[i] * scale * w[i];
  __syncwarp();
  RopeHead(D, dst, pos);
  __syncwarp();
}

// The step's heads, each normed and roped in this warp's shared-memory slice and its flag
// published: the key heads (HeadFlag index = the KV head; appended with their value heads to the
// caches), then, where `queries`, the query heads (index n_head_kv + head; stored back in place).
// Queries are normed here only for the team paths (long contexts), where every head is read by many
// chunks; a one-head chunk norms its own query from the raw projection (NormQuery), which took the
// wait for a flag out of each short item (+1.7% on qwen3-30b-a3b at 512 keys), where a team item
// norming up to 8 heads for each of its chunks lengthened the phase by 11 us at 16k
// (docs/perf/megakernel.md, session 30).
template <int R, class KV>
__device__ inline void NormRopeHeads(const MixerArgs& A, bool queries, uint8_t* smem) {
  constexpr int kBatch = 4;  // loads a lane issues before its stores (hd / 128 round trips)
  const ModelDims& D = A.dims;
  const int B = StepRows<R>(A.in), hd = D.head_dim, n_kv = D.n_head_kv;
  const int q_stride = D.q_head_stride();
  const int per_row = n_kv + (queries ? D.n_head : 0);
  const SmallDivisor heads_per_row = MakeSmallDivisor(per_row);
  float* head = reinterpret_cast<float*>(smem + Warp() * kAttentionBytesPerWarp);
  for (int it = GlobalWarp(); it < B * per_row; it += GridWarps()) {
    int r, i;
    DivMod(it, heads_per_row, &r, &i);
    const int pos = A.in->first_pos + r;
    float* row = A.s.proj + static_cast<int64_t>(r) * A.s.proj_stride;
    __syncwarp();  // the previous head's reads of `head` are done
    if (i >= n_kv) {
      float* q = row + (i - n_kv) * q_stride;
      NormRopeHead(D, q, head, A.att.q_norm, pos);
      for (int d = Lane(); d < hd; d += 32) q[d] = head[d];
    } else {
      NormRopeHead(D, row + D.q_rows() + i * hd, head, A.att.k_norm, pos);
      const int64_t at = static_cast<int64_t>(pos) * D.kv_dim() + i * hd;
      const float* v = row + D.q_rows() + D.kv_dim() + i * hd;
      for (int d0 = 0; d0 < hd; d0 += 32 * kBatch) {
        float vb[kBatch];
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          const int d = d0 + 32 * b + Lane();
          vb[b] = d < hd ? v[d] : 0.0f;
        }
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          const int d = d0 + 32 * b + Lane();
          if (d < hd) {
            StoreKv(static_cast<KV*>(A.att.k_cache) + at + d, head[d]);
            StoreKv(static_cast<KV*>(A.att.v_cache) + at + d, vb[b]);
          }
        }
      }
    }
    PublishHead(HeadFlag(A, r, i), A.in->seq);
  }
}

// Query head h of row r, normed and roped from the raw projection (written by the previous phase,
// unchanged in this one where the path has no teams) into this warp's shared memory at q_smem.
__device__ __forceinline__ void NormQuery(const MixerArgs& A, int r, int h, float* q_smem) {
  const ModelDims& D = A.dims;
  const int q_stride = D.q_head_stride();
  const float* q = A.s.proj + static_cast<int64_t>(r) * A.s.proj_stride + h * q_stride;
  __syncwarp();  // the previous item's reads are done
  NormRopeHead(D, q, q_smem, A.att.q_norm, A.in->first_pos + r);
}

// NormQuery for query head h of rows r0 .. r0 + n_rows - 1 (at most kRows), row i at q_smem +
// 32 * PL * i: every row's loads go out before any is used, one round trip for the item instead
// of one a row.
template <int PL, int kRows>
__device__ __forceinline__ void NormQueries(const MixerArgs& A, int r0, int n_rows, int h,
                                            float* q_smem) {
  if constexpr (kRows == 1) {
    NormQuery(A, r0, h, q_smem);
  } else {
    const ModelDims& D = A.dims;
    const int hd = D.head_dim;
    const float* q = A.s.proj + static_cast<int64_t>(r0) * A.s.proj_stride + h * D.q_head_stride();
    float v[kRows][PL];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
#pragma unroll
      for (int t = 0; t < PL; ++t) {
        const int d = Lane() + 32 * t;
        v[i][t] = i < n_rows && d < hd ? q[static_cast<int64_t>(i) * A.s.proj_stride + d] : 0.0f;
      }
    }
    __syncwarp();  // the previous item's reads are done
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      float ss = 0;
#pragma unroll
      for (int t = 0; t < PL; ++t) ss += v[i][t] * v[i][t];
      ss = WarpSum(ss);
      const float scale = 1.0f / sqrtf(ss / static_cast<float>(hd) + D.rms_eps);
#pragma unroll
      for (int t = 0; t < PL; ++t) {
        const int d = Lane() + 32 * t;
        if (d < hd) q_smem[i * 32 * PL + d] = v[i][t] * scale * A.att.q_norm[d];
      }
    }
    __syncwarp();
    for (int i = 0; i < n_rows; ++i) RopeHead(D, q_smem + i * 32 * PL, A.in->first_pos + r0 + i);
    __syncwarp();
  }
}

// Waits for query heads [h0, h0 + n) of row r (see NormRopeHeads), then stages them in this
// warp's shared memory, head i at q_smem + i * stride; slots n .. slots - 1 are zeroed (a team
// whose group ends early scores zero queries there, and their results are not written). Queries
// written in this phase are read back with L2 loads (ld.global.cg): an L1 line of another
// multiprocessor may hold the raw values where a row of the projections shares it.
__device__ __forceinline__ void StageQueries(const MixerArgs& A, int r, int h0, int n, int slots,
                                             int stride, float* q_smem) {
  const int hd = A.dims.head_dim;
  const int q_stride = A.dims.q_head_stride();
  WaitCounts(HeadFlag(A, r, A.dims.n_head_kv + h0), kFlagStride, n, A.in->seq);
  const float* q = A.s.proj + static_cast<int64_t>(r) * A.s.proj_stride + h0 * q_stride;
  __syncwarp();  // the previous item's reads are done
  for (int h = 0; h < slots; ++h) {
    for (int i = Lane(); i < hd; i += 32) {
      q_smem[h * stride + i] = h < n ? __ldcg(q + h * q_stride + i) : 0.0f;
    }
  }
  __syncwarp();
}

// Value rows j0 + jj0 .. j0 + jj0 + kBatch - 1 of a 32-key step with n keys, lanes over head
// dimensions (PL a lane, per_lane of them real), all loads before any use: one round trip per
// batch instead of one per key (a loop of dependent round trips cost 33 us per layer at 512 keys,
// phase timeline 2026-11-29). Keys past the step load its last key again (a valid row); the
// caller weighs them with 0. Loaded as streaming (LoadStreaming): the cache is read once per step
// in the team path, and a few times from L2 in the one-head path.
template <int kBatch, int PL, class KV>
__device__ __forceinline__ void LoadValueRows(const KV* v_base, int kv_dim, int j0, int jj0, int n,
                                              int per_lane, float (&vb)[kBatch][PL]) {
#pragma unroll
  for (int b = 0; b < kBatch; ++b) {
    const KV* vj = v_base + static_cast<int64_t>(j0 + min(jj0 + b, n - 1)) * kv_dim;
#pragma unroll
    for (int t = 0; t < PL; ++t) {
      const KV* at = vj + Lane() + 32 * t;
      vb[b][t] = t < per_lane ? LoadKv(at) : 0.0f;
    }
  }
}

// The partial of (row r, head h) from chunk c of n_chunks (the split's): kAttnPartHeader + head_dim
// floats (params.h), a head's chunks one after another.
__device__ __forceinline__ float* PartialOf(const MixerArgs& A, int n_chunks, int r, int h, int c) {
  return A.s.attn_part + ((static_cast<int64_t>(r) * A.dims.n_head + h) * n_chunks + c) *
                             (kAttnPartHeader + A.dims.head_dim);
}

// Chunk c of n_chunks: the partial of (row r, head h): max m, sum l (lane 0), the unnormalised
// output o.
template <int PL>
__device__ __forceinline__ void WritePartial(const MixerArgs& A, int n_chunks, int r, int h, int c,
                                             float m, float l, const float (&o)[PL]) {
  const int per_lane = A.dims.head_dim / 32;
  float* part = PartialOf(A, n_chunks, r, h, c);
  if (Lane() == 0) {
    part[0] = m;
    part[1] = l;
  }
#pragma unroll
  for (int t = 0; t < PL; ++t) {
    if (t < per_lane) part[kAttnPartHeader + Lane() + 32 * t] = o[t];
  }
}

// Σ over the warp of 32 values per lane, transposed: lane i gets Σ over lanes of v[i]. 31 shuffles:
// each step halves the values a lane keeps, swapping the half its partner keeps.
template <int W>
__device__ __forceinline__ void TransposeSumStep(float (&v)[32]) {
  const bool upper = (Lane() & W) != 0;
#pragma unroll
  for (int i = 0; i < W; ++i) {
    const float send = upper ? v[i] : v[i + W];
    const float keep = upper ? v[i + W] : v[i];
    v[i] = keep + __shfl_xor_sync(kFullMask, send, W);
  }
}
__device__ __forceinline__ float TransposeSum32(float (&v)[32]) {
  TransposeSumStep<16>(v);
  TransposeSumStep<8>(v);
  TransposeSumStep<4>(v);
  TransposeSumStep<2>(v);
  TransposeSumStep<1>(v);
  return v[0];
}

// Attention phase 1, short contexts (teams of one head): one warp per (row group, head, key
// chunk): online softmax over the chunk's keys for each row of the group (S.rows of them, at most
// kRows), writing (max, sum, unnormalised output) per row to the partials. Keys go 32 at a time:
// each lane scores one key against every row's query with independent 16-byte loads (no
// dependent round trip per key), then the warp accumulates the 32 weighted value rows, lanes over
// head dimensions. A row sees the keys up to its own position, so a chunk may hold none of the
// group's first row. PL = head dimensions per lane (a power of two ≥ head_dim / 32); the rows'
// queries are staged in this warp's shared memory, 32 * PL floats apart. With a warp per (row,
// head), SplitAttention gave a 4-row step's items three times a decode step's keys: 2 key and 3
// value rounds a warp instead of 1 and 1 (qwen3-30b-a3b: 14 us a layer at one row, 25 at four;
// 19 with row pairs, session 34).
template <int PL, int kRows, class KV>
__device__ void AttentionHeadPartials(const MixerArgs& A, const AttentionSplit& S, uint8_t* smem) {
  static_assert(kRows * 32 * PL * 4 <= kAttentionBytesPerWarp, "");
  constexpr int kStride4 = 8 * PL;  // float4s per staged query row
  const ModelDims& D = A.dims;
  const int B = S.step_rows, hd = D.head_dim, nh = D.n_head;
  const int group = nh / D.n_head_kv;
  const int chunk = S.chunk, n_chunks = S.n_chunks;
  const int rows = kRows == 1 ? 1 : S.rows;  // constant in the one-row kernel
  const int n_groups = rows == 1 ? B : (B + 1) >> 1;  // rows or pairs of rows (SplitAttention)
  const float scale = 1.0f / sqrtf(static_cast<float>(hd));
  const int per_lane = hd / 32;
  const int kv_dim = D.kv_dim();
  for (int it = GlobalWarp(); it < n_groups * nh * n_chunks; it += GridWarps()) {
    // The query's load waits for c and h: a SmallDivisor quotient, and no division at all in the
    // one-row kernels. The integer divisions here (multi-row steps, and g, which only the key
    // loads after the query wait for) spill less than SmallDivisors (ptxas, session 48).
    int c, head_item, row_group = 0, h;
    DivMod(it, MakeSmallDivisor(n_chunks), &head_item, &c);
    if (n_groups == 1) {  // a constant in the one-row kernels
      h = head_item;
    } else {
      row_group = head_item / nh;
      h = head_item - row_group * nh;
    }
    const int r0 = row_group * rows;
    const int n_rows = kRows == 1 ? 1 : min(rows, B - r0);  // warp-uniform
    const int first_keys = A.in->first_pos + r0 + 1;        // row r0 + i sees first_keys + i
    const int k0 = c * chunk, k1 = min(first_keys + n_rows - 1, k0 + chunk);
    const int g = h / group;
    float* q_smem = reinterpret_cast<float*>(smem + Warp() * kAttentionBytesPerWarp);
    NormQueries<PL, kRows>(A, r0, n_rows, h, q_smem);
    const float4* q4 = reinterpret_cast<const float4*>(q_smem);
    WaitNewKeys(A, r0 + n_rows - 1, g, k0, k1);
    const KV* k_base = static_cast<const KV*>(A.att.k_cache) + g * hd;
    const KV* v_base = static_cast<const KV*>(A.att.v_cache) + g * hd;
    float o[kRows][PL], m[kRows], l[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      m[i] = -INFINITY;
      l[i] = 0;
#pragma unroll
      for (int t = 0; t < PL; ++t) o[i][t] = 0;
    }
    for (int j0 = k0; j0 < k1; j0 += 32) {
      const int j = j0 + Lane();
      float s[kRows];
#pragma unroll
      for (int i = 0; i < kRows; ++i) s[i] = -INFINITY;
      if (j < k1) {
        const KV* kj = k_base + static_cast<int64_t>(j) * kv_dim;
        // One row: two sums, for two independent chains; several rows are chains of their own.
        constexpr int kSums = kRows == 1 ? 2 : 1;
        float acc[kRows][kSums];
#pragma unroll
        for (int i = 0; i < kRows; ++i) {
#pragma unroll
          for (int u = 0; u < kSums; ++u) acc[i][u] = 0;
        }
#pragma unroll 8
        for (int d = 0; d < hd / 4; d += 2) {
          const float4 a = LoadKv4(kj + 4 * d), a2 = LoadKv4(kj + 4 * d + 4);
#pragma unroll
          for (int i = 0; i < kRows; ++i) {
            const float4 b = q4[i * kStride4 + d], b2 = q4[i * kStride4 + d + 1];
            acc[i][0] += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
            acc[i][kSums - 1] += a2.x * b2.x + a2.y * b2.y + a2.z * b2.z + a2.w * b2.w;
          }
        }
#pragma unroll
        for (int i = 0; i < kRows; ++i) {
          const float sum = kSums == 2 ? acc[i][0] + acc[i][kSums - 1] : acc[i][0];
          if (kRows == 1 || (i < n_rows && j < first_keys + i)) s[i] = sum * scale;
        }
      }
      float p[kRows];
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        const float m_new = fmaxf(m[i], WarpMax(s[i]));
        // A later row's key can open a step (one row: lane 0's key is always the row's), and an
        // earlier row with no key yet (m_new still -inf) keeps everything at zero.
        p[i] = (kRows == 1 ? j < k1 : s[i] > -INFINITY) ? expf(s[i] - m_new) : 0.0f;
        const float corr = kRows == 1 || m_new > -INFINITY ? expf(m[i] - m_new) : 1.0f;
        l[i] = l[i] * corr + WarpSum(p[i]);
#pragma unroll
        for (int t = 0; t < PL; ++t) o[i][t] *= corr;
        m[i] = m_new;
      }
      // Value rows kValueBatch at a time (LoadValueRows); the sum runs in key order. With the
      // accumulators sized by PL, a batch of 64 floats a lane fits: 16 keys for head_dim ≤ 128.
      const int n = min(32, k1 - j0);
      constexpr int kValueBatch = 64 / PL < 16 ? 64 / PL : 16;
      for (int jj0 = 0; jj0 < n; jj0 += kValueBatch) {
        float vb[kValueBatch][PL];
        LoadValueRows<kValueBatch, PL>(v_base, kv_dim, j0, jj0, n, per_lane, vb);
#pragma unroll
        for (int b = 0; b < kValueBatch; ++b) {
#pragma unroll
          for (int i = 0; i < kRows; ++i) {
            const float pj = __shfl_sync(kFullMask, p[i], jj0 + b);  // 0 past the row's keys
#pragma unroll
            for (int t = 0; t < PL; ++t) {
              if (t < per_lane && jj0 + b < n) o[i][t] += pj * vb[b][t];
            }
          }
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      if (i < n_rows) WritePartial(A, S.n_chunks, r0 + i, h, c, m[i], l[i], o[i]);
    }
    PublishChunks(A, r0, h, 1, 0, n_rows);
  }
}

// Attention phase 1, long contexts, head_dim > 128 (teams of 4 heads): one warp per (row, KV
// group, team of query heads, key chunk): online softmax over the chunk's keys for each head of
// the team, writing (max, sum, unnormalised output) per head to the partials. Keys go 32 at a
// time: each lane scores one key against every head of the team, then the warp accumulates the 32
// weighted value rows, lanes over head dimensions. PL = head dimensions per lane (8). The team's
// queries are staged in this warp's shared memory, so the score loop addresses every head at a
// constant offset (per-head global pointers pushed it past 128 registers). A lane keeps four
// 16-byte key loads in flight. Teams of 8 heads (head_dim <= 128) score keys with lanes over head
// dimensions instead (AttentionTeamPartialsLanesOverDims); the same scheme here, with 64
// accumulators a lane, spilled 140 bytes (session 24).
template <int PL, class KV>
__device__ void AttentionTeamPartials(const MixerArgs& A, const AttentionSplit& S, uint8_t* smem) {
  constexpr int kHeads = HeadsPerWarp(PL);
  static_assert(kHeads < 8, "8-head teams: AttentionTeamPartialsLanesOverDims");
  constexpr int kStride = 32 * PL;  // floats per staged query head
  constexpr int kKeyBatch = 4;
  static_assert(kHeads * kStride * 4 <= kAttentionBytesPerWarp, "");
  const ModelDims& D = A.dims;
  const int B = S.step_rows, hd = D.head_dim, n_kv = D.n_head_kv;
  const int group = D.n_head / n_kv;
  const float scale = 1.0f / sqrtf(static_cast<float>(hd));
  const int per_lane = hd / 32;
  const int kv_dim = D.kv_dim();
  float* q_smem = reinterpret_cast<float*>(smem + Warp() * kAttentionBytesPerWarp);
  // Integer divisions here: SmallDivisor's decode made this loop spill 12-28 bytes more (ptxas),
  // and a team item is long (the long-context path).
  for (int it = GlobalWarp(); it < B * n_kv * S.teams * S.n_chunks; it += GridWarps()) {
    const int c = it % S.n_chunks;
    const int team = (it / S.n_chunks) % S.teams;
    const int g = (it / (S.n_chunks * S.teams)) % n_kv;
    const int r = it / (S.n_chunks * S.teams * n_kv);
    const int h0 = g * group + team * S.heads;
    const int n_heads = min(S.heads, group - team * S.heads);  // warp-uniform
    const int n_keys = A.in->first_pos + r + 1;
    const int k0 = c * S.chunk, k1 = min(n_keys, k0 + S.chunk);
    StageQueries(A, r, h0, n_heads, kHeads, kStride, q_smem);
    WaitNewKeys(A, r, g, k0, k1);
    const KV* k_base = static_cast<const KV*>(A.att.k_cache) + g * hd;
    const KV* v_base = static_cast<const KV*>(A.att.v_cache) + g * hd;
    float o[kHeads][PL], m[kHeads], l[kHeads];  // l: this lane's keys only, summed at the end
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
      m[h] = -INFINITY;
      l[h] = 0;
#pragma unroll
      for (int t = 0; t < PL; ++t) o[h][t] = 0;
    }
    for (int j0 = k0; j0 < k1; j0 += 32) {
      const int j = j0 + Lane();
      float s[kHeads];
#pragma unroll
      for (int h = 0; h < kHeads; ++h) s[h] = 0;
      if (j < k1) {
        const KV* kj = k_base + static_cast<int64_t>(j) * kv_dim;
#pragma unroll 1
        for (int d0 = 0; d0 < hd / 4; d0 += kKeyBatch) {
          float4 a[kKeyBatch];
#pragma unroll
          for (int i = 0; i < kKeyBatch; ++i) a[i] = LoadKv4(kj + 4 * (d0 + i));
#pragma unroll
          for (int h = 0; h < kHeads; ++h) {
            const float4* q4 = reinterpret_cast<const float4*>(q_smem + h * kStride) + d0;
#pragma unroll
            for (int i = 0; i < kKeyBatch; ++i) {
              const float4 b = q4[i];
              s[h] += a[i].x * b.x + a[i].y * b.y + a[i].z * b.z + a[i].w * b.w;
            }
          }
        }
      }
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        const float sh = j < k1 ? s[h] * scale : -INFINITY;
        const float m_new = fmaxf(m[h], WarpMax(sh));  // lane 0's key is always in the chunk
        const float corr = expf(m[h] - m_new);
        s[h] = j < k1 ? expf(sh - m_new) : 0.0f;  // from here on, the key's weight p
        l[h] = l[h] * corr + s[h];
        m[h] = m_new;
#pragma unroll
        for (int t = 0; t < PL; ++t) o[h][t] *= corr;
      }
      // Value rows four keys at a time (LoadValueRows).
      const int n = min(32, k1 - j0);
      constexpr int kValueBatch = 4;
#pragma unroll 1
      for (int jj0 = 0; jj0 < n; jj0 += kValueBatch) {
        float vb[kValueBatch][PL];
        LoadValueRows<kValueBatch, PL>(v_base, kv_dim, j0, jj0, n, per_lane, vb);
#pragma unroll
        for (int b = 0; b < kValueBatch; ++b) {
#pragma unroll
          for (int h = 0; h < kHeads; ++h) {
            const float pj = __shfl_sync(kFullMask, s[h], jj0 + b);
#pragma unroll
            for (int t = 0; t < PL; ++t) {
              if (jj0 + b < n) o[h][t] += pj * vb[b][t];
            }
          }
        }
      }
    }
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
      const float l_sum = WarpSum(l[h]);
      if (h < n_heads) WritePartial(A, S.n_chunks, r, h0 + h, c, m[h], l_sum, o[h]);
    }
    PublishChunks(A, r, h0, 0, 1, n_heads);
  }
}

// Attention phase 1, long contexts, head_dim <= 128 (teams of 8 heads): as AttentionTeamPartials,
// but lanes run over head dimensions when scoring keys, so each key row is one coalesced load (a
// lane per key loaded its row as dependent 16-byte pairs, each warp-wide load touching 32 rows 2
// KB apart), and kGroupKeys keys x 8 heads meet in one transposed reduction. Out of line: inlined
// beside the 4-head path it moved the whole mixer kernel's register allocation, and that path,
// its code unchanged, lost 16 us a layer on flash-next-125b at 16k keys (sessions 24 and 25).
template <int PL, class KV>
__device__ __noinline__ void AttentionTeamPartialsLanesOverDims(const MixerArgs& A,
                                                                const AttentionSplit& S,
                                                                uint8_t* smem) {
  constexpr int kHeads = HeadsPerWarp(PL);
  static_assert(kHeads == 8, "");
  constexpr int kStride = 32 * PL;          // floats per staged query head
  constexpr int kGroupKeys = 32 / kHeads;   // keys of one transposed reduction
  constexpr int kGroups = 32 / kGroupKeys;  // groups of a 32-key step
  constexpr int kLoadKeys = 4;              // key (or value) rows loaded at once
  static_assert(kGroupKeys % kLoadKeys == 0, "");
  static_assert(kHeads * kStride * 4 <= kAttentionBytesPerWarp, "");
  const ModelDims& D = A.dims;
  const int B = S.step_rows, hd = D.head_dim, n_kv = D.n_head_kv;
  const int group = D.n_head / n_kv;
  const float scale = 1.0f / sqrtf(static_cast<float>(hd));
  const int per_lane = hd / 32;
  const int kv_dim = D.kv_dim();
  float* q_smem = reinterpret_cast<float*>(smem + Warp() * kAttentionBytesPerWarp);
  // Integer divisions here: SmallDivisor's decode made this loop spill 12-28 bytes more (ptxas),
  // and a team item is long (the long-context path).
  for (int it = GlobalWarp(); it < B * n_kv * S.teams * S.n_chunks; it += GridWarps()) {
    const int c = it % S.n_chunks;
    const int team = (it / S.n_chunks) % S.teams;
    const int g = (it / (S.n_chunks * S.teams)) % n_kv;
    const int r = it / (S.n_chunks * S.teams * n_kv);
    const int h0 = g * group + team * S.heads;
    const int n_heads = min(S.heads, group - team * S.heads);  // warp-uniform
    const int n_keys = A.in->first_pos + r + 1;
    const int k0 = c * S.chunk, k1 = min(n_keys, k0 + S.chunk);
    StageQueries(A, r, h0, n_heads, kHeads, kStride, q_smem);
    WaitNewKeys(A, r, g, k0, k1);
    const KV* k_base = static_cast<const KV*>(A.att.k_cache) + g * hd;
    const KV* v_base = static_cast<const KV*>(A.att.v_cache) + g * hd;
    // o: this lane's dimensions of every head; m_lane, l_lane: head Lane() % kHeads's running max
    // and this lane's share of its weight sum (its keys only, summed at the end).
    float o[kHeads][PL], m_lane = -INFINITY, l_lane = 0;
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
#pragma unroll
      for (int t = 0; t < PL; ++t) o[h][t] = 0;
    }
    for (int j0 = k0; j0 < k1; j0 += 32) {
      const int n = min(32, k1 - j0);
      // Scores kGroupKeys keys x kHeads heads at a time: lanes over head dimensions (each key
      // row a coalesced load), then one transposed reduction leaves (key kGroupKeys * t +
      // Lane() / kHeads, head Lane() % kHeads) of group t in this lane's sc[t].
      float sc[kGroups];
#pragma unroll
      for (int t = 0; t < kGroups; ++t) sc[t] = -INFINITY;
#pragma unroll 1
      for (int t = 0; t < kGroups; ++t) {
        float part[32];
#pragma unroll
        for (int k4 = 0; k4 < kGroupKeys; k4 += kLoadKeys) {
          float kv[kLoadKeys][PL];
          LoadValueRows<kLoadKeys, PL>(k_base, kv_dim, j0, kGroupKeys * t + k4, n, per_lane, kv);
#pragma unroll
          for (int h = 0; h < kHeads; ++h) {
#pragma unroll
            for (int b = 0; b < kLoadKeys; ++b) {
              float acc = 0;
#pragma unroll
              for (int u = 0; u < PL; ++u) {
                if (u < per_lane) acc += kv[b][u] * q_smem[h * kStride + Lane() + 32 * u];
              }
              part[(k4 + b) * kHeads + h] = acc;
            }
          }
        }
        const float total = TransposeSum32(part);
#pragma unroll
        for (int u = 0; u < kGroups; ++u) sc[u] = u == t ? total : sc[u];
      }
      // Online softmax per head: this lane's head is Lane() % kHeads; its keys' maxima meet
      // across the lanes of that head.
      float mx = -INFINITY;
#pragma unroll
      for (int t = 0; t < kGroups; ++t) {
        const bool valid = kGroupKeys * t + Lane() / kHeads < n;
        sc[t] = valid ? sc[t] * scale : -INFINITY;
        mx = fmaxf(mx, sc[t]);
      }
#pragma unroll
      for (int o2 = kHeads; o2 < 32; o2 <<= 1) mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, o2));
      const float m_new = fmaxf(m_lane, mx);  // key j0 is in the chunk: finite
      const float corr = expf(m_lane - m_new);
      float lsum = 0;
#pragma unroll
      for (int t = 0; t < kGroups; ++t) {
        sc[t] = expf(sc[t] - m_new);  // from here on, the key's weight p (0 past the chunk)
        lsum += sc[t];
      }
      l_lane = l_lane * corr + lsum;
      m_lane = m_new;
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        const float ch = __shfl_sync(kFullMask, corr, h);  // lane h holds head h
#pragma unroll
        for (int u = 0; u < PL; ++u) o[h][u] *= ch;
      }
      // Value rows kLoadKeys at a time (LoadValueRows); the sum runs in key order.
#pragma unroll 1
      for (int t = 0; t < kGroups && kGroupKeys * t < n; ++t) {
        float pt = sc[0];
#pragma unroll
        for (int u = 1; u < kGroups; ++u) pt = u == t ? sc[u] : pt;
#pragma unroll
        for (int k4 = 0; k4 < kGroupKeys; k4 += kLoadKeys) {
          float vb[kLoadKeys][PL];
          LoadValueRows<kLoadKeys, PL>(v_base, kv_dim, j0, kGroupKeys * t + k4, n, per_lane, vb);
#pragma unroll
          for (int b = 0; b < kLoadKeys; ++b) {
#pragma unroll
            for (int h = 0; h < kHeads; ++h) {
              const float pj = __shfl_sync(kFullMask, pt, (k4 + b) * kHeads + h);
#pragma unroll
              for (int u = 0; u < PL; ++u) o[h][u] += pj * vb[b][u];
            }
          }
        }
      }
    }
    // The sum of each head's weights over its lanes' keys, then head h's max and sum from lane h.
#pragma unroll
    for (int o2 = kHeads; o2 < 32; o2 <<= 1) l_lane += __shfl_xor_sync(kFullMask, l_lane, o2);
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
      const float m_h = __shfl_sync(kFullMask, m_lane, h);
      const float l_h = __shfl_sync(kFullMask, l_lane, h);
      if (h < n_heads) WritePartial(A, S.n_chunks, r, h0 + h, c, m_h, l_h, o[h]);
    }
    PublishChunks(A, r, h0, 0, 1, n_heads);
  }
}

// Every chunk's partials under the phase's split S (SplitAttention), in the R-row kernel.
template <int R, int PL, class KV>
__device__ __forceinline__ void HeadPartialsOfKernel(const MixerArgs& A, const AttentionSplit& S,
                                                     uint8_t* smem) {
  constexpr int kRows = R < QueryRowsPerWarp(PL) ? R : QueryRowsPerWarp(PL);
  AttentionHeadPartials<PL, kRows, KV>(A, S, smem);
}
template <int R, class KV>
__device__ inline void AttentionChunks(const MixerArgs& A, const AttentionSplit& S, uint8_t* smem) {
  const bool teams = S.team_paths();
  switch (DimsPerLane(A.dims.head_dim)) {
    case 1:
      return teams ? AttentionTeamPartialsLanesOverDims<1, KV>(A, S, smem)
                   : HeadPartialsOfKernel<R, 1, KV>(A, S, smem);
    case 2:
      return teams ? AttentionTeamPartialsLanesOverDims<2, KV>(A, S, smem)
                   : HeadPartialsOfKernel<R, 2, KV>(A, S, smem);
    case 4:
      return teams ? AttentionTeamPartialsLanesOverDims<4, KV>(A, S, smem)
                   : HeadPartialsOfKernel<R, 4, KV>(A, S, smem);
    default:
      return teams ? AttentionTeamPartials<8, KV>(A, S, smem)
                   : HeadPartialsOfKernel<R, 8, KV>(A, S, smem);
  }
}

// Attention phase 1 up to the merge: the step's heads, then every chunk's partials.
template <int R, class KV>
__device__ inline void AttentionPartials(const MixerArgs& A, uint8_t* smem) {
  const AttentionSplit S = SplitAttention<R>(A);
  NormRopeHeads<R, KV>(A, S.team_paths(), smem);
  AttentionChunks<R, KV>(A, S, smem);
}

// A merging lane's chunks c = Lane(), Lane() + 32, ... of one (row, head)'s partials at chunks,
// folded into its running max m, weight sum l and output dimensions 32 * part .. + 31 (acc),
// kUnroll chunks' loads issued before the first is merged.
template <int kUnroll>
__device__ __forceinline__ void MergeLaneChunks(const float* chunks, int n_chunks, int part_len,
                                                int part, float& m, float& l, float (&acc)[32]) {
#pragma unroll kUnroll
  for (int c = Lane(); c < n_chunks; c += 32) {
    const float* p = chunks + static_cast<int64_t>(c) * part_len;
    const float mc = __ldcg(p), lc = __ldcg(p + 1);
    const float4* o4 = reinterpret_cast<const float4*>(p + kAttnPartHeader + 32 * part);
    float4 o[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) o[i] = __ldcg(o4 + i);
    if (lc > 0) {  // a chunk past this row's keys has none
      const float m_new = fmaxf(m, mc);
      const float keep = expf(m - m_new), add = expf(mc - m_new);
      l = l * keep + lc * add;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        acc[4 * i + 0] = acc[4 * i + 0] * keep + o[i].x * add;
        acc[4 * i + 1] = acc[4 * i + 1] * keep + o[i].y * add;
        acc[4 * i + 2] = acc[4 * i + 2] * keep + o[i].z * add;
        acc[4 * i + 3] = acc[4 * i + 3] * keep + o[i].w * add;
      }
      m = m_new;
    }
  }
}

// The end of attention phase 1: merge the chunks of each (row, head), apply the sigmoid output
// gate. A warp per (row, head, 32 head dimensions), counted from the grid's last warp, waits for
// the head's chunk count (see ChunksDone); each lane merges chunks lane, lane + 32, ... with its
// own running max (all loads of a round independent), then the warp merges its lanes. Partials
// are read through L2 (ld.global.cg), as the queries are.
template <int R>
__device__ inline void AttentionCombine(const MixerArgs& A) {
  const ModelDims& D = A.dims;
  const AttentionSplit S = SplitAttention<R>(A);  // the chunk count the items used
  const int B = S.step_rows, hd = D.head_dim, nh = D.n_head, n_chunks = S.n_chunks;
  const int q_stride = D.q_head_stride();
  const int part_len = kAttnPartHeader + hd;
  const int parts = hd / 32;
  const SmallDivisor parts_of_head = MakeSmallDivisor(parts);
  for (int it = GridWarps() - 1 - GlobalWarp(); it < B * nh * parts; it += GridWarps()) {
    int part, head_item, h, r;
    DivMod(it, parts_of_head, &head_item, &part);
    DivMod(head_item, D.divisors.n_head, &r, &h);
    WaitCounts(ChunksDone(A, r, h), 0, 1, static_cast<uint32_t>(n_chunks));
    const float* chunks = PartialOf(A, n_chunks, r, h, 0);
    float m = -INFINITY, l = 0, acc[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) acc[i] = 0;
    // Two chunks' loads in flight a lane where each lane merges many (513 chunks a head at 16k
    // keys, 17 rounds: qwen3-30b-a3b's phase 54.0 -> 51.3 us); one where it merges one or two (at
    // 512 keys the unrolled loop cost 0.5 us a layer; docs/perf/megakernel.md, session 42).
    if (n_chunks > 64) {
      MergeLaneChunks<2>(chunks, n_chunks, part_len, part, m, l, acc);
    } else {
      MergeLaneChunks<1>(chunks, n_chunks, part_len, part, m, l, acc);
    }
    const float m_all = WarpMax(m);
    const float f = l > 0 ? expf(m - m_all) : 0.0f;
    const float l_all = WarpSum(l * f);
#pragma unroll
    for (int i = 0; i < 32; ++i) acc[i] *= f;
    const int d = 32 * part + Lane();
    float y = TransposeSum32(acc) / l_all;
    if (D.gated_attention) {
      y *= Sigmoid(A.s.proj[static_cast<int64_t>(r) * A.s.proj_stride + h * q_stride + hd + d]);
    }
    A.s.mix[static_cast<int64_t>(r) * nh * hd + h * hd + d] = y;
  }
}

// Attention phase 2: output projection added to the residual. Every merge of phase 1 is done, so
// the chunk counters are zeroed here for the next attention layer.
template <int R>
__device__ void AttentionOutput(const MixerArgs& A, uint8_t* smem) {
  const ModelDims& D = A.dims;
  const int B = StepRows<R>(A.in), cols = D.n_head * D.head_dim;
  ZeroChunkCounts<R>(A, blockIdx.x * kBlockThreads + threadIdx.x, gridDim.x * kBlockThreads);
  uint8_t* cursor = smem;
  float* unused;
  ActSet a = CarveActs(cursor, B, cols, false, &unused);
  a.x = A.s.mix;
  QuantizeRows<PrologueBatch(R)>(A.s.mix, cols, B, a);
  SetJob(0, A.att.wo, PublishActs(0, a), RowMask(B), A.s.x, D.n_embd, OutMode::kAdd);
  __syncthreads();
  RunJobs<R>(Plan().job, 1);
}

// DeltaNet phase 1: the causal conv (+ SiLU), the q/k L2 norms and the delta rule, a block per
// value head part (block b takes part b / n_v of head b % n_v; the runner checks that the grid
// has a block for each head). A part is 1/parts of the head's state columns, parts = 2 to the
// DeltaNetHeadPartsLog2: up to 4 blocks share a head where the grid has room. The block convolves
// the channels its part reads, the q and k of its key head and its own value channels, into shared
// memory, norms q and k there, and runs the rule from there, so that no row waits on another
// multiprocessor. Split over 4 blocks, flash-next-125b's phase went from 8.4 to 7.2 us at one row
// and from 16.8 to 11.5 at four (session 38): a block loads, updates and snapshots a quarter of
// the state. With the conv in warps of its own, publishing each row's heads with
// flags that the rule warps waited for, a row paid the conv's loads, its stores and release, the
// rule's acquire and its loads of the conv output: flash-next-125b's phase took 10.4 us at one row
// and 20.0 at four, on one block 8.0 and 16.4 (session 37).
//
// The state of a value head is dk rows × dv columns; a warp takes chunks of 32 / G columns, G =
// dk / 32 lanes to a column, and lane (column c, group g) holds rows g, g + G, ..., g + 31·G of its
// column in registers from before the conv to after its last row, so that each row is 32
// multiply-adds a lane and two sums over G lanes. Held in global memory instead, each row's two
// passes over the state were chains of L2 round trips (3.0 and 3.8 us a pass at flash-next-125b's
// dk = 128, session 26; in registers its phase went from 13.9 to 11.1 us at one row and from 42.5
// to 24.0 at four, session 36). Group g's lanes read q and k at g + G·i: G consecutive words, no
// bank conflict.
//
// The rr value heads of a key head all read its q and k channels' conv state; the last of them in
// index order (KeyGroupMember) writes it, once the others' blocks have flagged that they have read
// it (StepFlag(A, part · n_v + j), release after the block barrier that follows their reads);
// so do the other parts' blocks of all of them. Every block is resident and the readers publish
// before they wait on anything, so the wait ends. (Waited for after the rule instead, so that the
// writer's rows would not wait for the group's slowest conv, the phase got 1.8 us longer at one
// row: the wait and the 768 stores then ended the phase; session 38.)
inline constexpr int kRuleRowsPerLane = 32;

__device__ __forceinline__ float Softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// The key head value head j reads, and the i-th of the value heads that read key head kh.
__device__ __forceinline__ int KeyHeadOf(const ModelDims& D, int j) {
  int q, r;
  DivMod(j, D.ssm_tiled_heads ? D.divisors.ssm_n_k : D.divisors.ssm_v_per_k, &q, &r);
  return D.ssm_tiled_heads ? r : q;  // j % n_k, or j / (n_v / n_k)
}
__device__ __forceinline__ int KeyGroupMember(const ModelDims& D, int kh, int i) {
  return D.ssm_tiled_heads ? kh + i * D.ssm_n_k : kh * D.divisors.ssm_v_per_k.d + i;
}

// The sum of v over the `groups` neighbouring lanes of a column (lanes c·groups .. c·groups +
// groups - 1); every lane gets the same bits, since each butterfly step adds the same two values.
__device__ __forceinline__ float ColumnSum(float v, int groups) {
  for (int o = groups / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

// Causal conv + SiLU of channel c over the step's rows, into out[r · out_stride]; where `snaps`,
// the state after each row but the last into the rollback snapshot. `next` gets the state after
// the last row, for the caller to store. The taps, state and inputs are all loaded before any is
// used (loaded channel by channel, the conv took 7 of the phase's 16 us, flash-next-125b, session
// 26); tap, state and row indices are clamped, not guarded, so that no load sits behind a branch.
template <int R>
__device__ __forceinline__ void ConvChannel(const MixerArgs& A, int c, float* out, int out_stride,
                                            bool snaps, float (&next)[kMaxConvKernel - 1]) {
  const ModelDims& D = A.dims;
  const int B = StepRows<R>(A.in), K = D.ssm_conv_kernel, conv_dim = D.ssm_conv_dim();
  constexpr int kTaps = kMaxConvKernel, kState = kMaxConvKernel - 1;
  float w[kTaps], st[kState], x[R];
#pragma unroll
  for (int j = 0; j < kTaps; ++j) w[j] = A.dn.conv[static_cast<int64_t>(c) * K + min(j, K - 1)];
#pragma unroll
  for (int j = 0; j < kState; ++j) {
    st[j] = A.dn.conv_state[static_cast<int64_t>(c) * (K - 1) + min(j, K - 2)];
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    x[r] = A.s.proj[static_cast<int64_t>(min(r, B - 1)) * A.s.proj_stride + c];
  }
  // Tap K - 1, which meets the input, loaded again: a select over w by K made w a stack array.
  const float w_last = A.dn.conv[static_cast<int64_t>(c) * K + K - 1];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r >= B) break;
    float acc = w_last * x[r];
#pragma unroll
    for (int j = 0; j < kState; ++j) {
      if (j < K - 1) acc += w[j] * st[j];
    }
#pragma unroll
    for (int j = 0; j < kState; ++j) {
      st[j] = j + 1 < K - 1 ? st[j + 1 < kState ? j + 1 : j] : (j == K - 2 ? x[r] : st[j]);
    }
    if (snaps && r < B - 1) {
      float* snap = A.dn.conv_snap + (static_cast<int64_t>(r) * conv_dim + c) * (K - 1);
#pragma unroll
      for (int j = 0; j < kState; ++j) {
        if (j < K - 1) snap[j] = st[j];
      }
    }
    out[r * out_stride] = Silu(acc);
  }
#pragma unroll
  for (int j = 0; j < kState; ++j) next[j] = st[j];
}

// log2 of the blocks a value head's state columns are split over: the most, up to
// kMaxDeltaNetHeadParts, that the grid has room for and that leave each block a whole number of
// the head's n_chunks.
__device__ __forceinline__ int DeltaNetHeadPartsLog2(const ModelDims& D, int n_chunks) {
  int lg = 0;
  while ((2 << lg) <= kMaxDeltaNetHeadParts &&
         (2 << lg) * D.ssm_n_v <= static_cast<int>(gridDim.x) &&
         (n_chunks & ((2 << lg) - 1)) == 0) {
    ++lg;
  }
  return lg;
}

template <int R>
__device__ inline void DeltaNetConvRule(const MixerArgs& A, uint8_t* smem) {
  const ModelDims& D = A.dims;
  const int B = StepRows<R>(A.in);
  const int n_k = D.ssm_n_k, n_v = D.ssm_n_v, dk = D.ssm_dk, dv = D.ssm_dv;
  const int key_dim = n_k * dk, conv_dim = D.ssm_conv_dim(), d_inner = D.ssm_d_inner();
  const int rr = D.divisors.ssm_v_per_k.d, K = D.ssm_conv_kernel;
  const int row_floats = DeltaNetRowFloats(dk, dv);
  // No integer division from here to the first state load: shifts, as dk / 32 lanes share a
  // column (a power of two from 1 to 16) and dv is a multiple of 32 (plan.cc), and one
  // SmallDivisor quotient for the block's head and part.
  const int groups_log2 = CeilLog2(dk / kRuleRowsPerLane), groups = 1 << groups_log2;
  const int g = Lane() & (groups - 1), cols = 32 >> groups_log2;
  const int n_chunks = dv >> (5 - groups_log2);  // dv / cols
  const int parts_log2 = DeltaNetHeadPartsLog2(D, n_chunks), parts = 1 << parts_log2;
  int part, j;  // the runner checks that the grid has n_v blocks
  DivMod(static_cast<int>(blockIdx.x), D.divisors.ssm_n_v, &part, &j);
  const int part_dv = dv >> parts_log2;
  const int n_ch = 2 * dk + part_dv;
  const int chunk0 = part * (n_chunks >> parts_log2), chunk_end = chunk0 + (n_chunks >> parts_log2);
  const int64_t row_step = static_cast<int64_t>(groups) * dv;
  const float q_scale = 1.0f / sqrtf(static_cast<float>(dk));
  float* y = reinterpret_cast<float*>(smem);
  if (part >= parts) return;
  const int kh = KeyHeadOf(D, j);
  const bool writes_keys = part == 0 && KeyGroupMember(D, kh, rr - 1) == j;
  // A lane's rows of its column in chunk `chunk`.
  auto column = [&](int chunk) {
    return A.dn.ssm_state + static_cast<int64_t>(j) * dk * dv + static_cast<int64_t>(g) * dv +
           chunk * cols + (Lane() >> groups_log2);
  };
  int chunk = chunk0 + Warp();
  float s[kRuleRowsPerLane];  // the first chunk's, loaded before the conv so the two overlap
  if (chunk < chunk_end) {
    const float* S = column(chunk);
#pragma unroll
    for (int i = 0; i < kRuleRowsPerLane; ++i) s[i] = S[i * row_step];
  }

  // The conv, a thread a channel: q, k, then the value head's, whose state only this block
  // reads. The key head's next state waits in shared memory for the group's readers.
  float* keys_next = y + B * row_floats;
  for (int t = threadIdx.x; t < n_ch; t += kBlockThreads) {
    const bool is_key = t < 2 * dk;
    const int c = t < dk       ? kh * dk + t
                  : t < 2 * dk ? key_dim + kh * dk + (t - dk)
                               : 2 * key_dim + j * dv + part * part_dv + (t - 2 * dk);
    float next[kMaxConvKernel - 1];
    ConvChannel<R>(A, c, y + t, row_floats, !is_key || writes_keys, next);
    float* out =
        is_key ? keys_next + t * (K - 1) : A.dn.conv_state + static_cast<int64_t>(c) * (K - 1);
#pragma unroll
    for (int i = 0; i < kMaxConvKernel - 1; ++i) {
      if (i < K - 1) out[i] = next[i];
    }
  }
  {  // the rows' beta and decay, on the last warp
    const int r = static_cast<int>(threadIdx.x) - (kBlockThreads - 32);
    if (r >= 0 && r < B) {
      const float* ba = A.s.proj + static_cast<int64_t>(r) * A.s.proj_stride + conv_dim + d_inner;
      float b, alpha;
      if (D.ssm_grouped_ba) {
        int gb, i;
        DivMod(j, D.divisors.ssm_v_per_k, &gb, &i);
        b = ba[gb * 2 * rr + i];
        alpha = ba[gb * 2 * rr + rr + i];
      } else {
        b = ba[j];
        alpha = ba[n_v + j];
      }
      y[r * row_floats + n_ch] = Sigmoid(b);
      y[r * row_floats + n_ch + 1] = expf(A.dn.a[j] * Softplus(alpha + A.dn.dt_bias[j]));
    }
  }
  __syncthreads();
  if (!writes_keys) {
    // This block's reads of the key head's conv state are done (the barrier above).
    if (threadIdx.x == 0) {
      cuda::atomic_ref<uint32_t, cuda::thread_scope_device>(*StepFlag(A, part * n_v + j))
          .store(A.in->seq, cuda::memory_order_release);
    }
  } else if (Warp() == 0) {
    for (int i = Lane(); i < rr * parts - 1; i += 32) {  // every other block of the key head
      const int b = i < rr - 1 ? i : i + 1;  // part b / rr of member b % rr, skipping this block
      int reader_part, member;
      DivMod(b, D.divisors.ssm_v_per_k, &reader_part, &member);
      const int reader = reader_part * n_v + KeyGroupMember(D, kh, member);
      // Relaxed polls, then one acquire load, as WaitCounts (an acquire load empties the L1).
      cuda::atomic_ref<uint32_t, cuda::thread_scope_device> w(*StepFlag(A, reader));
      while (w.load(cuda::memory_order_relaxed) != A.in->seq) {
#if __CUDA_ARCH__ >= 700
        __nanosleep(64);
#endif
      }
      (void)w.load(cuda::memory_order_acquire);
    }
    __syncwarp();
  }
  // The L2 norms of each row's q and k (queries also scaled by 1/sqrt(dk)), a warp a vector.
  for (int v = Warp(); v < 2 * B; v += kWarpsPerBlock) {
    float* e = y + (v / 2) * row_floats + (v % 2) * dk;
    float ss = 0;
    for (int i = Lane(); i < dk; i += 32) ss += e[i] * e[i];
    const float scale = (1.0f / sqrtf(WarpSum(ss) + 1e-6f)) * (v % 2 == 0 ? q_scale : 1.0f);
    for (int i = Lane(); i < dk; i += 32) e[i] *= scale;
  }
  __syncthreads();
  if (writes_keys) {  // the q and k channels' state, now that the group has read it
    for (int i = threadIdx.x; i < 2 * dk * (K - 1); i += kBlockThreads) {
      int t, tap;
      DivMod(i, D.divisors.conv_taps, &t, &tap);
      const int c = t < dk ? kh * dk + t : key_dim + kh * dk + (t - dk);
      A.dn.conv_state[static_cast<int64_t>(c) * (K - 1) + tap] = keys_next[i];
    }
  }

  for (; chunk < chunk_end; chunk += kWarpsPerBlock) {
    float* S = column(chunk);
    if (chunk != chunk0 + Warp()) {
#pragma unroll
      for (int i = 0; i < kRuleRowsPerLane; ++i) s[i] = S[i * row_step];
    }
    const int vv = chunk * cols + (Lane() >> groups_log2);
    for (int r = 0; r < B; ++r) {
      const float* q = y + r * row_floats;
      const float* k = q + dk;
      const float v = q[2 * dk + vv - part * part_dv], beta = q[n_ch], decay = q[n_ch + 1];
      float kv = 0;
#pragma unroll
      for (int i = 0; i < kRuleRowsPerLane; ++i) kv += (s[i] * decay) * k[i * groups + g];
      const float delta = (v - ColumnSum(kv, groups)) * beta;
      float o = 0;
#pragma unroll
      for (int i = 0; i < kRuleRowsPerLane; ++i) {
        s[i] = s[i] * decay + k[i * groups + g] * delta;
        o += s[i] * q[i * groups + g];
      }
      if (B > 1 && r < B - 1) {  // the state after this row, for a rollback to it
        float* snap =
            A.dn.ssm_snap + static_cast<int64_t>(r) * n_v * dk * dv + (S - A.dn.ssm_state);
#pragma unroll
        for (int i = 0; i < kRuleRowsPerLane; ++i) snap[i * row_step] = s[i];
      }
      o = ColumnSum(o, groups);
      if (g == 0) A.s.mix2[static_cast<int64_t>(r) * d_inner + j * dv + vv] = o;
    }
#pragma unroll
    for (int i = 0; i < kRuleRowsPerLane; ++i) S[i * row_step] = s[i];
  }
}

// xs[r] = RMSNorm(delta-rule output of each value head) * ssm_norm * silu(z), a warp per (row,
// head): items first, first + step, ...
template <int R>
__device__ __forceinline__ void GatedNormHeads(const MixerArgs& A, float* xs, int first, int step) {
  const ModelDims& D = A.dims;
  const int B = StepRows<R>(A.in), dv = D.ssm_dv, n_v = D.ssm_n_v, d_inner = D.ssm_d_inner();
  const int conv_dim = D.ssm_conv_dim();
  for (int it = first; it < B * n_v; it += step) {
    int r, j;
    DivMod(it, D.divisors.ssm_n_v, &r, &j);
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
}

// DeltaNet phase 2: gated RMSNorm of each head (ssm_norm, times silu(z)) into shared memory,
// then the output projection added to the residual.
template <int R>
__device__ void DeltaNetOutput(const MixerArgs& A, uint8_t* smem) {
  const ModelDims& D = A.dims;
  const int B = StepRows<R>(A.in), d_inner = D.ssm_d_inner();
  uint8_t* cursor = smem;
  float* xs;
  ActSet a = CarveActs(cursor, B, d_inner, true, &xs);
  GatedNormHeads<R>(A, xs, Warp(), kWarpsPerBlock);
  __syncthreads();
  QuantizeRows<PrologueBatch(R)>(xs, d_inner, B, a);
  SetJob(0, A.dn.out, PublishActs(0, a), RowMask(B), A.s.x, D.n_embd, OutMode::kAdd);
  __syncthreads();
  RunJobs<R>(Plan().job, 1);
}

// Phase `phase` of a mixer layer; kRecurrent: a DeltaNet layer (A.recurrent), else attention.
// Each layer kind has its own kernel (kernels.cu), so that neither carries the other's code.
template <int R, bool kRecurrent, class KV>
__device__ void MixerPhase(const MixerArgs& A, int phase, uint8_t* smem) {
  if constexpr (kRecurrent) {
    switch (phase) {
      case 0: MixerProjections<R>(A, smem); break;
      case 1:
        DeltaNetConvRule<R>(A, smem);
        break;
      case 2:
        DeltaNetOutput<R>(A, smem);
        break;
    }
  } else {
    switch (phase) {
      case 0: MixerProjections<R>(A, smem); break;
      case 1:
        AttentionPartials<R, KV>(A, smem);
        AttentionCombine<R>(A);
        break;
      case 2:
        AttentionOutput<R>(A, smem);
        break;
    }
  }
}

}  // namespace tandem::megakernel
