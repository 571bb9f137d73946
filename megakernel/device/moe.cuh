// The MoE half of one layer as phases of a persistent kernel: RMSNorm, router and shared-expert
// gate/up; softmax top-k (every block routes for itself, block 0 publishes the route table) and
// gate/up + SwiGLU of the union of chosen experts plus the shared expert's down projection; the
// experts' down projections; the weighted combine + sigmoid-gated shared expert + residual.
// Experts marked off-card in the residency table go to the CPU through the mailbox instead.
// C++17, device only.
#pragma once

#include <cuda/atomic>

#include "megakernel/device/matvec.cuh"
#include "offload/mailbox.h"

namespace tandem::megakernel {

inline constexpr int kMoePhases = 4;
// Every block computes the routing of all rows into `rt` (shared memory); `scratch` is
// RouteScratchBytes(n_expert, rows) of shared memory.
//
// The top-k runs on the whole block, every row at once: thread t holds elements t and
// t + kBlockThreads of each row, and a round is a warp reduction of the threads' best untaken
// elements, one __syncthreads, and a reduction of the warps' winners that every warp repeats; the
// winner's holder takes its next best. As one warp's serial chain per row (a round two warp
// reductions and a rescan by the lane whose element was taken) the top-k took 3.1 µs of
// qwen3-30b-a3b's MoE half (8 of 128 experts) and 9.0 µs of flash-next-125b's (10 of 512): block
// 0's probe stamps, 2026-12-01, docs/perf/megakernel.md (session 21); on the whole block the
// route + gate/up phase went 16.4 -> 14.9 µs and 30.2 -> 24.6 µs (session 22). The choices are the
// same: the largest logit first, ties to the smaller index; the softmax is warp r's for row r,
// with the probabilities summed in choice order, as the reference does.
template <int R>
__device__ void RouteRows(const MoeArgs& A, RouteTable& rt, uint8_t* scratch) {
  const ModelDims& D = A.dims;
  const int B = StepRows<R>(A.in), E = D.n_expert, k = D.n_expert_used;
  uint32_t* expert_rows = reinterpret_cast<uint32_t*>(scratch);
  float* logits = reinterpret_cast<float*>(scratch + Align16(int64_t{E} * 4));
  for (int e = threadIdx.x; e < E; e += kBlockThreads) expert_rows[e] = 0;
  for (int i = threadIdx.x; i < B * E; i += kBlockThreads) logits[i] = A.s.router[i];
  __syncthreads();

  // Each round's warp winners (two buffers, so that one __syncthreads a round suffices: a warp
  // writes a buffer again only after every warp has passed the barrier behind its last reads).
  __shared__ uint2 warp_best[2][R][kWarpsPerBlock];
  __shared__ uint32_t chosen_key[R][kMaxExpertsUsed];
  __shared__ int chosen_id[R][kMaxExpertsUsed];
  static_assert(kMaxExperts <= 2 * kBlockThreads, "`taken` holds two elements a thread and row");
  uint32_t cand_key[R];  // this thread's best untaken element of each row (key 0: none)
  int cand_id[R];
  uint32_t taken = 0;  // bit 2r + j: element threadIdx.x + j * kBlockThreads of row r is chosen
  auto candidate = [&](int r) {
    cand_key[r] = 0;
    cand_id[r] = E;
#pragma unroll
    for (int j = 0; j < kMaxExperts / kBlockThreads; ++j) {
      const int e = static_cast<int>(threadIdx.x) + j * kBlockThreads;
      if (e < E && !(taken >> (2 * r + j) & 1u)) {
        const uint32_t key = OrderedKey(logits[r * E + e]);
        if (key > cand_key[r]) {
          cand_key[r] = key;
          cand_id[r] = e;
        }
      }
    }
  };
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r < B) candidate(r);
  }
  for (int i = 0; i < k; ++i) {
    uint2(*best)[kWarpsPerBlock] = warp_best[i & 1];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r >= B) continue;
      uint32_t top;
      int at;
      WarpMaxKey(cand_key[r], cand_id[r], &top, &at);
      if (Lane() == 0) best[r][Warp()] = make_uint2(top, static_cast<uint32_t>(at));
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r >= B) continue;
      const uint2 w = Lane() < kWarpsPerBlock ? best[r][Lane()] : make_uint2(0u, E);
      uint32_t top;
      int at;
      WarpMaxKey(w.x, static_cast<int>(w.y), &top, &at);
      if (threadIdx.x == 0) {
        chosen_key[r][i] = top;
        chosen_id[r][i] = at;
      }
      if (at == cand_id[r]) {  // this thread held the winner
        taken |= 1u << (2 * r + at / kBlockThreads);
        candidate(r);
      }
    }
  }
  __syncthreads();

  // Warp r: row r's probabilities. Lane i < k holds the i-th choice.
  int my_id = -1;
  float my_w = 0;
  if (Warp() < B) {
    const int r = Warp();
    const float* logit = logits + r * E;
    const float mx = KeyValue(chosen_key[r][0]);  // the largest logit
    float sum = 0;
    for (int e = Lane(); e < E; e += 32) sum += expf(logit[e] - mx);
    sum = WarpSum(sum);
    if (Lane() < k) {
      my_id = chosen_id[r][Lane()];
      my_w = expf(KeyValue(chosen_key[r][Lane()]) - mx) / sum;
    }
    float wsum = 0;  // summed in choice order, as the reference does
    for (int i = 0; i < k; ++i) wsum += __shfl_sync(kFullMask, my_w, i);
    if (Lane() < k) {
      if (D.norm_topk_prob) my_w /= wsum;
      if (D.expert_weights_scale != 0.0f && D.expert_weights_scale != 1.0f) {
        my_w *= D.expert_weights_scale;
      }
      atomicOr(&expert_rows[my_id], 1u << r);
    }
  }
  __syncthreads();
  // Slots in ascending expert id with their pair offsets. Warp w counts chunks w, w + 16, ... of
  // 32 experts (slots, pairs, off-card), then places its chunks' slots after the counts of the
  // chunks before them: one warp walking every chunk in turn took 1.0 µs of qwen3-30b-a3b's
  // routing and 3.3 µs of flash-next-125b's 512 experts (probe build, 2026-12-01).
  __shared__ int chunk_count[kMaxExperts / 32][3];
  const int n_chunks = (E + 31) / 32;
  const unsigned upto = 0xffffffffu >> (31 - Lane());  // lanes up to this one
  for (int c = Warp(); c < n_chunks; c += kWarpsPerBlock) {
    const int e = 32 * c + Lane();
    const uint32_t rows = e < E ? expert_rows[e] : 0u;
    const unsigned has = __ballot_sync(kFullMask, rows != 0);
    int pairs = 0;
    for (int r = 0; r < B; ++r) pairs += __popc(__ballot_sync(kFullMask, rows >> r & 1u));
    const unsigned off = __ballot_sync(
        kFullMask, rows != 0 && A.residency != nullptr && A.residency[e < E ? e : 0] < 0);
    if (Lane() == 0) {
      chunk_count[c][0] = __popc(has);
      chunk_count[c][1] = pairs;
      chunk_count[c][2] = __popc(off);
    }
  }
  __syncthreads();
  for (int c = Warp(); c < n_chunks; c += kWarpsPerBlock) {
    if (chunk_count[c][0] == 0) continue;
    // Slots and pairs of the chunks before c: lane j reads chunk j (at most 32 chunks).
    const int slot0 = WarpSumInt(Lane() < c ? chunk_count[Lane()][0] : 0);
    const int pair0 = WarpSumInt(Lane() < c ? chunk_count[Lane()][1] : 0);
    const int e = 32 * c + Lane();
    const uint32_t rows = e < E ? expert_rows[e] : 0u;
    const unsigned has = __ballot_sync(kFullMask, rows != 0);
    // Inclusive prefix of the pair counts: one ballot per step row.
    int prefix = 0;
    for (int r = 0; r < B; ++r) prefix += __popc(__ballot_sync(kFullMask, rows >> r & 1u) & upto);
    if (rows != 0) {
      const int s = slot0 + __popc(has & ((1u << Lane()) - 1u));
      rt.slot_expert[s] = e;
      rt.slot_device[s] = A.residency != nullptr ? A.residency[e] : e;
      rt.slot_rows[s] = rows;
      rt.slot_pair0[s] = pair0 + prefix - __popc(rows);
    }
  }
  if (Warp() == kWarpsPerBlock - 1) {
    const bool mine = Lane() < n_chunks;
    const int n_slots = WarpSumInt(mine ? chunk_count[Lane()][0] : 0);
    const int n_pairs = WarpSumInt(mine ? chunk_count[Lane()][1] : 0);
    const int n_off = WarpSumInt(mine ? chunk_count[Lane()][2] : 0);
    if (Lane() == 0) {
      rt.n_slots = n_slots;
      rt.n_pairs = n_pairs;
      rt.n_off_card = n_off;
    }
  }
  __syncthreads();
  // Warp r: its experts in ascending id with pair indices and weights.
  if (Warp() < B) {
    const int r = Warp();
    int filled = 0;
    for (int s0 = 0; s0 < rt.n_slots; s0 += 32) {
      const int s = s0 + Lane();
      const bool mine = s < rt.n_slots && (rt.slot_rows[s] >> r & 1u);
      const unsigned ballot = __ballot_sync(kFullMask, mine);
      // The weight of this slot's expert for row r, from the lane that chose it.
      const int e = s < rt.n_slots ? rt.slot_expert[s] : -1;
      float w = 0;
      for (int i = 0; i < k; ++i) {
        const int id_i = __shfl_sync(kFullMask, my_id, i);
        const float w_i = __shfl_sync(kFullMask, my_w, i);
        if (id_i == e) w = w_i;
      }
      if (mine) {
        const int at = filled + __popc(ballot & ((1u << Lane()) - 1u));
        const uint32_t rows = rt.slot_rows[s];
        rt.row_pair[r][at] = rt.slot_device[s] >= 0
                                 ? rt.slot_pair0[s] + __popc(rows & ((1u << r) - 1u))
                                 : -1 - e;
        rt.row_weight[r][at] = w;
      }
      filled += __popc(ballot);
    }
  }
  __syncthreads();
}

// Phase 0: RMSNorm, router logits, shared-expert gate/up (SwiGLU) and gate logit.
template <int R>
__device__ void MoeRouterPhase(const MoeArgs& A, uint8_t* smem) {
  const ModelDims& D = A.dims;
  const int B = StepRows<R>(A.in);
  uint8_t* cursor = smem;
  const ActSet* act =
      PublishActs(0, NormedActs<PrologueBatch(R)>(cursor, A.s.x, B, D.n_embd, A.norm, D.rms_eps));
  int n = 0;
  SetJob(n++, A.router, act, RowMask(B), A.s.router, D.n_expert);
  if (A.has_shexp) {
    SetJob(n++, A.sh_gate, act, RowMask(B), A.s.sh_act, D.n_ff_shexp, OutMode::kSwiGlu, &A.sh_up);
    SetJob(n++, A.sh_gate_inp, act, RowMask(B), A.s.sh_gate, 1);
  }
  __syncthreads();
  RunJobs<R>(Plan().job, n);
}

// Expert `slot`'s matrix in a stacked bank.
__device__ __forceinline__ const uint8_t* ExpertData(const ExpertBank& bank, int slot) {
  return bank.data + static_cast<int64_t>(slot) * bank.expert_bytes;
}
__device__ __forceinline__ Matrix ExpertMatrix(const ExpertBank& bank, int slot) {
  Matrix m;
  m.data = ExpertData(bank, slot);
  m.type = bank.type;
  m.rows = bank.rows;
  m.cols = bank.cols;
  m.row_bytes = bank.row_bytes;
  return m;
}

// Calls f(u, s, unit) for this warp's units u < total of the grid loop, with u = s * upe + unit
// (slot s of upe units each; past the slots, s and unit mean nothing). Tracked by steps instead of
// a division per unit.
template <class F>
__device__ __forceinline__ void ForUnitsOfSlots(int upe, int total, F&& f) {
  if (upe <= 0) return;
  const int first = GlobalWarp(), step = GridWarps();
  const SmallDivisor units_per_slot = MakeSmallDivisor(upe);
  int s, unit, step_s, step_unit;
  DivMod(first, units_per_slot, &s, &unit);
  DivMod(step, units_per_slot, &step_s, &step_unit);
  for (int u = first; u < total; u += step) {
    f(u, s, unit);
    s += step_s;
    unit += step_unit;
    if (unit >= upe) {
      unit -= upe;
      ++s;
    }
  }
}

// Block-level: copies the block's route table to A.s.routes for the later phases, records each
// row's chosen experts (routing logs) and, when experts are off-card, publishes their jobs and the
// normed rows `xs` to the mailbox. One block calls it.
__device__ __forceinline__ void PublishRoutes(const MoeArgs& A, const RouteTable& rt,
                                              const float* xs) {
  const ModelDims& D = A.dims;
  const int B = A.in->n_rows, H = D.n_embd;
  RouteTable& out = *reinterpret_cast<RouteTable*>(A.s.routes);
  const int32_t* src = reinterpret_cast<const int32_t*>(&rt);
  int32_t* dst = reinterpret_cast<int32_t*>(&out);
  for (int i = threadIdx.x; i < static_cast<int>(sizeof(RouteTable) / 4); i += kBlockThreads) {
    dst[i] = src[i];
  }
  const int k = D.n_expert_used;
  for (int i = threadIdx.x; i < B * k; i += kBlockThreads) {
    int r, j;
    DivMod(i, D.divisors.n_expert_used, &r, &j);
    const int pair = rt.row_pair[r][j];
    int e;
    if (pair >= 0) {
      // Find the slot holding this pair (slots are few).
      int s = 0;
      while (s + 1 < rt.n_slots && rt.slot_pair0[s + 1] <= pair) ++s;
      e = rt.slot_expert[s];
    } else {
      e = -1 - pair;
    }
    const int64_t at = (static_cast<int64_t>(r) * D.n_layer + A.layer) * k + j;
    A.s.route_ids[at] = e;
    A.s.route_weights[at] = rt.row_weight[r][j];
  }
  if (rt.n_off_card > 0 && A.mailbox != nullptr) {
    // Publish the off-card jobs and the normed rows; release the posted flag system-wide.
    MoeMailbox* mb = A.mailbox;
    if (threadIdx.x == 0) {
      int n = 0;
      for (int r = 0; r < B; ++r) {
        for (int j = 0; j < k; ++j) {
          if (rt.row_pair[r][j] < 0 && n < kMaxMailboxJobs) {
            mb->jobs[n].row = r;
            mb->jobs[n].expert = -1 - rt.row_pair[r][j];
            mb->jobs[n].weight = rt.row_weight[r][j];
            ++n;
          }
        }
      }
      mb->n_jobs = n;
      mb->n_rows = B;
      mb->hidden = H;
      mb->layer = A.layer;
    }
    for (int i = threadIdx.x; i < B * H; i += kBlockThreads) mb->rows[i] = xs[i];
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence_system();
      cuda::atomic_ref<uint32_t, cuda::thread_scope_system> posted(mb->posted);
      posted.store(posted.load(cuda::memory_order_relaxed) + 1, cuda::memory_order_release);
    }
  }
}

// Gate/up + SwiGLU of every resident chosen expert of `rt` for the rows that chose it, over all
// warps of the grid, followed by `shared_units` units of the phase's job 0 (the shared expert's
// down projection in megakernel mode).
template <int R>
__device__ __forceinline__ void RunExpertUp(const MoeArgs& A, const RouteTable& rt,
                                            const ActSet* act, int shared_units) {
  const ModelDims& D = A.dims;
  // One job for every expert: per unit only the slot's matrices, rows and pair base change.
  MatVecJob job;
  job.m = ExpertMatrix(A.gate, 0);
  job.m2 = ExpertMatrix(A.up, 0);
  job.act = act;
  job.out = A.s.exp_act;
  job.out_stride = D.n_ff_exp;
  job.mode = OutMode::kSwiGlu;
  SplitRows(job, rt.n_slots);
  const int upe = job.units;
  const int expert_units = rt.n_slots * upe;
  const int total = expert_units + shared_units;
  ForUnitsOfSlots(upe, total, [&](int u, int s, int unit) {
    if (u >= expert_units) {
      RunUnit<R>(Plan().job[0], u - expert_units);
      return;
    }
    if (rt.slot_device[s] < 0) return;
    job.m.data = ExpertData(A.gate, rt.slot_device[s]);
    job.m2.data = ExpertData(A.up, rt.slot_device[s]);
    job.mask = rt.slot_rows[s];
    job.out_base = rt.slot_pair0[s];  // input: the step rows' normed x; output: per pair
    RunUnit<R>(job, unit);
  });
}

// Phase 1: routing, then gate/up + SwiGLU of every resident chosen expert for the rows that chose
// it, and the shared expert's down projection. Block 0 publishes the route table (and the
// off-card jobs to the mailbox).
//
// The normed, quantised rows sit where phase 0 carved them; when phase 0 ran in the same launch
// (`router_in_launch`: megakernel mode) this block's shared memory still holds them, and only
// per-phase launches compute them again.
template <int R>
__device__ void MoeExpertUpPhase(const MoeArgs& A, uint8_t* smem, bool router_in_launch) {
  const ModelDims& D = A.dims;
  const int B = StepRows<R>(A.in), H = D.n_embd;
  uint8_t* cursor = smem;
  float* xs;
  ActSet a = CarveActs(cursor, B, H, true, &xs);  // the layout of phase 0's NormedActs
  RouteTable& rt = *reinterpret_cast<RouteTable*>(cursor);
  cursor += Align16(sizeof(RouteTable));
  uint8_t* route_scratch = cursor;
  cursor += RouteScratchBytes(D.n_expert, B);
  float* unused;
  ActSet sh{};
  if (A.has_shexp) {
    sh = CarveActs(cursor, B, D.n_ff_shexp, false, &unused);
    sh.x = A.s.sh_act;
  }
  if (!router_in_launch) NormRows<PrologueBatch(R)>(A.s.x, H, B, H, A.norm, D.rms_eps, xs);
  RouteRows<R>(A, rt, route_scratch);  // starts and ends with __syncthreads()
  if (!router_in_launch) QuantizeRows<PrologueBatch(R)>(xs, H, B, a);
  if (A.has_shexp) QuantizeRows<PrologueBatch(R)>(A.s.sh_act, D.n_ff_shexp, B, sh);
  const ActSet* act = PublishActs(0, a);
  const ActSet* sh_act = PublishActs(1, sh);
  if (A.has_shexp) SetJob(0, A.sh_down, sh_act, RowMask(B), A.s.sh_out, H);
  __syncthreads();

  if (blockIdx.x == 0) PublishRoutes(A, rt, xs);

  RunTileJobs<R, true>(Plan().job, A.has_shexp ? 1 : 0);  // the shared expert's down, where tiled
  RunExpertUp<R>(A, rt, act, A.has_shexp ? WarpUnits<R, true>(Plan().job[0]) : 0);
}

// The down projection of every resident chosen expert of `rt` for its rows, over all warps of
// the grid; `act` holds the pairs' quantised SwiGLU outputs.
template <int R>
__device__ __forceinline__ void RunExpertDown(const MoeArgs& A, const RouteTable& rt,
                                              const ActSet* act) {
  const ModelDims& D = A.dims;
  const int n_slots = rt.n_slots;
  MatVecJob job;
  job.m = ExpertMatrix(A.down, 0);
  job.act = act;
  job.out = A.s.exp_out;
  job.out_stride = D.n_embd;
  SplitRows(job, n_slots);
  const int upe = job.units;
  ForUnitsOfSlots(upe, n_slots * upe, [&](int, int s, int unit) {
    if (rt.slot_device[s] < 0) return;
    job.m.data = ExpertData(A.down, rt.slot_device[s]);
    job.mask = rt.slot_rows[s];
    job.act_base = rt.slot_pair0[s];  // input and output per pair
    job.out_base = rt.slot_pair0[s];
    RunUnit<R>(job, unit);
  });
}

// Phase 2: the down projection of every resident chosen expert for its rows.
template <int R>
__device__ void MoeExpertDownPhase(const MoeArgs& A, uint8_t* smem) {
  const ModelDims& D = A.dims;
  const RouteTable& rt = *reinterpret_cast<const RouteTable*>(A.s.routes);
  const int n_pairs = rt.n_pairs;
  uint8_t* cursor = smem;
  float* unused;
  ActSet a = CarveActs(cursor, n_pairs, D.n_ff_exp, false, &unused);
  a.x = A.s.exp_act;
  QuantizeRows<PrologueBatch(R)>(A.s.exp_act, D.n_ff_exp, n_pairs, a);
  const ActSet* act = PublishActs(0, a);
  __syncthreads();
  RunExpertDown<R>(A, rt, act);
}

// Phase 3: x[r] += Σ weight · expert output (ascending expert id, as the reference sums) +
// sigmoid(gate) · shared expert (+ the CPU's partial sum for off-card experts).
template <int R>
__device__ inline void MoeCombinePhase(const MoeArgs& A) {
  const ModelDims& D = A.dims;
  const RouteTable& rt = *reinterpret_cast<const RouteTable*>(A.s.routes);
  const int B = StepRows<R>(A.in), H = D.n_embd, k = D.n_expert_used;
  if (rt.n_off_card > 0 && A.mailbox != nullptr) {
    // Wait for the CPU's partial sum (acquire pairs with the host's release store of done).
    cuda::atomic_ref<uint32_t, cuda::thread_scope_system> done(A.mailbox->done);
    cuda::atomic_ref<uint32_t, cuda::thread_scope_system> posted(A.mailbox->posted);
    const uint32_t want = posted.load(cuda::memory_order_acquire);
    while (done.load(cuda::memory_order_acquire) != want) {
    }
  }
  const int tid = static_cast<int>(blockIdx.x) * kBlockThreads + static_cast<int>(threadIdx.x);
  for (int i = tid; i < B * H; i += static_cast<int>(gridDim.x) * kBlockThreads) {
    int r, c;
    DivMod(i, D.divisors.n_embd, &r, &c);
    float v = 0;
    for (int j = 0; j < k; ++j) {
      const int pair = rt.row_pair[r][j];
      if (pair >= 0) v += rt.row_weight[r][j] * A.s.exp_out[static_cast<int64_t>(pair) * H + c];
    }
    if (rt.n_off_card > 0 && A.mailbox != nullptr) v += A.mailbox->partial[i];
    if (A.has_shexp) v += Sigmoid(A.s.sh_gate[r]) * A.s.sh_out[i];
    A.s.x[i] += v;
  }
}

// Phase `phase` of a launch that began at phase `begin`.
template <int R>
__device__ void MoePhase(const MoeArgs& A, int phase, int begin, uint8_t* smem) {
  switch (phase) {
    case 0: MoeRouterPhase<R>(A, smem); break;
    case 1:
      MoeExpertUpPhase<R>(A, smem, begin == 0);
      break;
    case 2: MoeExpertDownPhase<R>(A, smem); break;
    case 3:
      MoeCombinePhase<R>(A);
      break;
  }
}

}  // namespace tandem::megakernel
