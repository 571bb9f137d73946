// Plain structs the host fills and the GPU kernels read: device pointers to weights, state and
// scratch, and the dimensions of one model. No behaviour lives here; every field is set by
// megakernel/runner.cc, checked there once, and passed to kernels by value. C++17 (included from
// .cu files).
#pragma once

#include <cstdint>

#include "megakernel/small_div.h"
#include "runtime/quant/host_device.h"

// Member functions callable from host and device code.
#if defined(__CUDACC__)
#define TANDEM_MEMBER_HD __host__ __device__
#else
#define TANDEM_MEMBER_HD
#endif

namespace tandem::megakernel {

struct MoeMailbox;  // offload/mailbox.h

// Rows of one step: 1 for plain decode, 2..8 for speculative verify (and prefill chunks).
inline constexpr int kMaxRows = 8;
// The longest context the CUDA kernels take (DimsForModel checks it): the attention split
// divides a context's keys plus a chunk by SmallDivisor (small_div.h), exact below 2^22.
inline constexpr int kMaxContext = 1 << 20;
// Threads of every persistent block.
inline constexpr int kBlockThreads = 512;
inline constexpr int kWarpsPerBlock = kBlockThreads / 32;

// The rows variants compiled (kernel sets for 1, 4 and kMaxRows rows); n rows run on the smallest
// that holds them, because the per-row work of a variant is unrolled for all its rows (a 4-row
// verify on the 8-row set cost 2.2-2.7 decode steps, docs/perf/megakernel.md).
inline constexpr int kNumRowsVariants = 3;
inline constexpr int kRowsVariants[kNumRowsVariants] = {1, 4, kMaxRows};
inline int RowsVariantIndex(int n_rows) { return n_rows <= 1 ? 0 : n_rows <= 4 ? 1 : 2; }
inline int RowsVariant(int n_rows) { return kRowsVariants[RowsVariantIndex(n_rows)]; }

// One weight matrix in GGUF layout on the device: `rows` rows of `cols` elements, each row
// `row_bytes` long. `type` is a quant::GgmlType value with a device codec.
struct Matrix {
  const uint8_t* data = nullptr;
  int32_t type = 0;
  int32_t rows = 0;
  int32_t cols = 0;
  int64_t row_bytes = 0;
};

// A stacked expert tensor: slot s holds one expert's `rows` x `cols` matrix at data + s * stride.
struct ExpertBank {
  const uint8_t* data = nullptr;
  int32_t type = 0;
  int32_t rows = 0;
  int32_t cols = 0;
  int64_t row_bytes = 0;
  int64_t expert_bytes = 0;
};

// What the host writes before every step (device memory, so that captured graphs replay it).
struct StepInput {
  int32_t n_rows = 0;     // B
  int32_t first_pos = 0;  // position of row 0; row r sits at first_pos + r
  int32_t tokens[kMaxRows] = {};
  int32_t logits_row0 = 0;   // first row that gets logits
  int32_t n_logit_rows = 0;  // rows from logits_row0 that get logits (and an argmax)
  // Numbers every step the host enqueues (from 1): the attention phase's head flags hold the
  // number of the step that published them. Positions repeat after a rejected draft; this does not.
  uint32_t seq = 0;
};

// A DeltaNet value head's state columns are split over at most this many blocks (DeltaNetConvRule).
inline constexpr int kMaxDeltaNetHeadParts = 4;
// Words from one step flag (Scratch::head_ready) or chunk counter (Scratch::chunks_done) to the
// next: a 128-byte line each, so that the warps polling or counting different ones meet in
// different L2 slices instead of queueing at the one slice of a shared line. Measured on the H200
// (docs/perf/megakernel.md, session 43): qwen3-30b-a3b's attention phase at 512 keys 14.0 -> 13.5
// us a layer, where 544 one-head items count on one line; unchanged at 16k keys. With the flags
// laid out per layer (step_flags_per_layer) it costs 1.8 MB (qwen3-30b-a3b) and 0.9 MB
// (flash-next-125b) of flags instead of 55 and 28 KB.
inline constexpr int kFlagStride = 32;

// Model dimensions the kernels divide flat item indices by, as SmallDivisors that DimsForModel
// makes on the host (1 where the model has no such dimension). Read from a launch's constant bank,
// their reciprocals take no registers in the item loops: made on the device, they made the one-row
// attention kernel spill 36 more bytes (ptxas, session 48).
struct DimDivisors {
  SmallDivisor n_head;
  SmallDivisor ssm_n_k;      // DeltaNet key heads
  SmallDivisor ssm_n_v;      // value heads
  SmallDivisor ssm_v_per_k;  // value heads of a key head
  SmallDivisor conv_taps;    // conv state columns: ssm_conv_kernel - 1
  SmallDivisor n_embd;
  SmallDivisor n_expert_used;
};

struct ModelDims {
  int32_t n_layer = 0, n_embd = 0, n_vocab = 0, n_ctx = 0;
  float rms_eps = 0;
  // Attention.
  int32_t n_head = 0, n_head_kv = 0, head_dim = 0, n_rot = 0;
  int32_t gated_attention = 0;  // qwen3next / qwen35moe: query rows carry a sigmoid gate
  const float* rope_inv_freq = nullptr;  // n_rot / 2 values
  // DeltaNet.
  int32_t ssm_n_k = 0, ssm_n_v = 0, ssm_dk = 0, ssm_dv = 0, ssm_conv_kernel = 0;
  int32_t ssm_tiled_heads = 0;  // qwen35moe: value head j reads key head j % n_k
  int32_t ssm_grouped_ba = 0;   // qwen3next: fused [b | a] rows grouped per key head
  // MoE.
  int32_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0, n_ff_shexp = 0;
  int32_t norm_topk_prob = 1;
  float expert_weights_scale = 0;  // 0 or 1: unused
  DimDivisors divisors;
  TANDEM_MEMBER_HD int32_t ssm_conv_dim() const { return 2 * ssm_n_k * ssm_dk + ssm_n_v * ssm_dv; }
  TANDEM_MEMBER_HD int32_t ssm_d_inner() const { return ssm_n_v * ssm_dv; }
  // A query head's rows in the q projection: the head, then its gate rows when gated.
  TANDEM_MEMBER_HD int32_t q_head_stride() const { return head_dim * (gated_attention ? 2 : 1); }
  TANDEM_MEMBER_HD int32_t q_rows() const { return n_head * q_head_stride(); }
  TANDEM_MEMBER_HD int32_t kv_dim() const { return n_head_kv * head_dim; }
  // Step flags (Scratch::head_ready) an attention layer has for each row: its KV heads, then its
  // query heads.
  TANDEM_MEMBER_HD int32_t step_flags_per_row() const { return n_head_kv + n_head; }
  // Step flags per layer: an attention layer's for kMaxRows rows, or a DeltaNet layer's, one per
  // value-head part (the conv + rule phase has no rows in its flags).
  TANDEM_MEMBER_HD int32_t step_flags_per_layer() const {
    const int32_t attention = kMaxRows * step_flags_per_row();
    const int32_t deltanet = ssm_n_v * kMaxDeltaNetHeadParts;
    return attention > deltanet ? attention : deltanet;
  }
};

// The attention phases split the keys of each (row group, KV group, team) into about as many
// chunks as the grid has warps for (SplitAttention). A fixed cap of 128 left three quarters of
// the grid idle at 16k keys; one of 512 gave 16,385 keys (a 16k context plus the new token)
// 48-key chunks, whose items each ran one and a half 32-key steps where 32-key chunks would fill
// the grid with one step each (docs/perf/megakernel.md, session 42). A chunk leaves one partial
// per query head: max, sum, two floats of padding (the output starts 16-byte aligned), head_dim
// outputs.
//
// The partials of a step are [row][query head][chunk] over the step's own chunk count. A row group
// has at most grid_warps / (n_head_kv × teams) chunks and at most kMaxQueryRowsPerWarp rows, so a
// step leaves at most kMaxQueryRowsPerWarp × grid_warps / (n_head_kv × TeamsPerKvGroup) partials a
// query head (and at least one a row), the bound the runner sizes the buffer by.
inline constexpr int kMaxQueryRowsPerWarp = 2;
// Head dimensions per lane of a warp's output accumulators, rounded up to a power of two (a
// template argument), and the most heads a team holds: 32 accumulators a lane, at most 8 heads.
TANDEM_HD constexpr int DimsPerLane(int head_dim) {
  return head_dim <= 32 ? 1 : head_dim <= 64 ? 2 : head_dim <= 128 ? 4 : 8;
}
TANDEM_HD constexpr int HeadsPerWarp(int dims_per_lane) {
  return dims_per_lane <= 4 ? 8 : 32 / dims_per_lane;
}
// The query heads of a team of a KV group of `group` heads (SplitAttention's team paths), and the
// teams a KV group's heads form there: the fewest (KV group, team) pairs any split has (a one-head
// warp's split has a team a head).
TANDEM_HD constexpr int TeamHeads(int group, int head_dim) {
  const int most = HeadsPerWarp(DimsPerLane(head_dim));
  return most < group ? most : group;
}
TANDEM_HD constexpr int TeamsPerKvGroup(const ModelDims& d) {
  const int group = d.n_head / d.n_head_kv, heads = TeamHeads(group, d.head_dim);
  return (group + heads - 1) / heads;
}
// The fewest keys a chunk holds. A chunk is one warp's serial work (scores, softmax, value
// rows), so short contexts want many small chunks: at 512 keys, 16-key chunks (1,024 warps on
// qwen3-30b-a3b) took the attention phase from 15.9 to 15.1 us a layer and flash-next-125b's
// from 21.2 to 19.0 against 32-key chunks; 8-key chunks lengthened qwen3-30b-a3b's to 17.6
// (docs/perf/megakernel.md, session 29).
inline constexpr int kMinAttentionChunk = 16;
inline constexpr int kAttnPartHeader = 4;

// Per-step scratch shared by all layers (device memory, sized for kMaxRows rows).
struct Scratch {
  float* x = nullptr;         // [B][n_embd] residual stream
  float* proj = nullptr;      // [B][proj_stride] mixer projections (q|k|v or qkv|z|b|a)
  int32_t proj_stride = 0;
  float* mix = nullptr;  // [B][mix_stride] attention output
  int32_t mix_stride = 0;
  float* mix2 = nullptr;       // [B][d_inner] DeltaNet delta-rule output before the gated norm
  // Attention partials, [B][n_head][the step's chunks][kAttnPartHeader + head_dim].
  float* attn_part = nullptr;
  float* router = nullptr;    // [B][n_expert] router logits
  float* sh_act = nullptr;    // [B][n_ff_shexp] silu(gate) * up of the shared expert
  float* sh_gate = nullptr;   // [B] shared-expert gate logit
  float* sh_out = nullptr;    // [B][n_embd] shared-expert output
  float* exp_act = nullptr;   // [B*k][n_ff_exp] silu(gate) * up per (expert, row) pair
  float* exp_out = nullptr;   // [B*k][n_embd] down projection per pair
  int32_t* routes = nullptr;  // RouteTable (see moe.cuh), written by block 0
  // [n_layer][step_flags_per_layer()], kFlagStride words apart: StepInput::seq once a row's key and
  // value head is normed, roped and appended (or, for the team paths, a query head normed and
  // roped) in that layer's attention phase ([kMaxRows][step_flags_per_row()]), or, in a DeltaNet
  // layer's conv + delta-rule phase, once a value head's block has read its key head's conv state.
  uint32_t* head_ready = nullptr;
  // [kMaxRows][n_head], kFlagStride words apart: key chunks of the running attention layer whose
  // partials are written (release increments); the output-projection phase zeroes them for the next
  // layer.
  uint32_t* chunks_done = nullptr;
  int32_t* route_ids = nullptr;  // [B][n_layer][k] chosen experts (for routing logs)
  float* route_weights = nullptr;  // [B][n_layer][k]
  float* logits = nullptr;    // [B][n_vocab]
  float* best = nullptr;      // [grid][kMaxRows][2] per-block argmax candidates (value, index)
  int32_t* argmax = nullptr;  // [B]
  // Phase timeline (the bench's): null, or [n_layer][2 (mixer, MoE)][kTimelineSlots] clocks.
  uint64_t* timeline = nullptr;
  // Per-op mode's two activation sets (device/ops.cuh OpActs), where the megakernel's phases
  // keep them in shared memory.
  uint8_t* op_act[2] = {nullptr, nullptr};
};

// Timeline slots per layer half: phase p's start at slot p (at most 5 phases), the end of the
// launch at slot `phases`.
inline constexpr int kTimelineSlots = 6;

struct AttentionLayer {
  Matrix wq, wk, wv, wo;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  // [n_ctx][kv_dim] of float, or of __half where f16_cache (RunnerOptions::f16_kv_cache).
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  int32_t f16_cache = 0;
};

struct DeltaNetLayer {
  Matrix qkv, z, ba, beta, alpha, out;  // ba (qwen3next) or beta + alpha (qwen35moe)
  const float* conv = nullptr;          // [conv_dim][K]
  const float* dt_bias = nullptr;       // [n_v]
  const float* a = nullptr;             // [n_v] = -exp(A_log)
  const float* norm = nullptr;          // [dv]
  float* conv_state = nullptr;          // [conv_dim][K-1]
  float* ssm_state = nullptr;           // [n_v][dk][dv]
  float* conv_snap = nullptr;           // [kMaxRows-1][conv_dim][K-1]: after rows 0..B-2
  float* ssm_snap = nullptr;            // [kMaxRows-1][n_v][dk][dv]
};

struct MixerArgs {
  ModelDims dims;
  Scratch s;
  const StepInput* in = nullptr;
  int32_t layer = 0;
  int32_t recurrent = 0;
  int32_t force_teams = 0;  // attention warps serve KV-group teams at any context (SplitAttention)
  const float* norm = nullptr;  // attn_norm
  AttentionLayer att;
  DeltaNetLayer dn;
};

struct MoeArgs {
  ModelDims dims;
  Scratch s;
  const StepInput* in = nullptr;
  int32_t layer = 0;
  const float* norm = nullptr;  // post-attention norm
  Matrix router;
  ExpertBank gate, up, down;
  // Residency of this layer's experts: slot in the banks above, or -1 when the expert lives in
  // host RAM and is computed by the CPU side through `mailbox`.
  const int32_t* residency = nullptr;
  Matrix sh_gate, sh_up, sh_down, sh_gate_inp;  // sh_gate_inp: 1 x n_embd (F32)
  int32_t has_shexp = 0;
  MoeMailbox* mailbox = nullptr;  // pinned mapped host memory; null: every expert resident
};

struct HeadArgs {
  ModelDims dims;
  Scratch s;
  const StepInput* in = nullptr;
  const float* norm = nullptr;  // output_norm
  Matrix output;
  Matrix embed;                 // token_embd, read by the embedding kernel
};

inline constexpr int kMaxExpertsUsed = 16;                    // checked on the host
inline constexpr int kMaxSlots = kMaxRows * kMaxExpertsUsed;  // distinct experts of one step
inline constexpr int kMaxExperts = 1024;                      // checked on the host

// The routing of one layer of one step, as block 0 writes it for the later phases. Slots are the
// distinct chosen experts in ascending id; pairs are (slot, row) in slot order, rows ascending.
struct RouteTable {
  int32_t n_slots;
  int32_t n_pairs;
  int32_t n_off_card;
  int32_t slot_expert[kMaxSlots];
  int32_t slot_device[kMaxSlots];  // slot in the device bank, or -1 (off-card)
  uint32_t slot_rows[kMaxSlots];   // row mask
  int32_t slot_pair0[kMaxSlots];   // first pair of the slot
  // Row r's chosen experts in ascending id: the pair (or -1 - expert when off-card) and weight.
  int32_t row_pair[kMaxRows][kMaxExpertsUsed];
  float row_weight[kMaxRows][kMaxExpertsUsed];
};

// RouteRows' scratch: a row mask per expert, then the rows' router logits.
TANDEM_MEMBER_HD constexpr inline int64_t RouteScratchBytes(int n_expert, int rows) {
  return ((int64_t{n_expert} * 4 + 15) & ~int64_t{15}) +
         ((int64_t{n_expert} * rows * 4 + 15) & ~int64_t{15});
}

// Shared memory of the routing phase beyond the activations, for up to `rows` rows.
TANDEM_MEMBER_HD constexpr inline int64_t RouteSmemBytes(int n_expert, int rows) {
  return ((static_cast<int64_t>(sizeof(RouteTable)) + 15) & ~int64_t{15}) +
         RouteScratchBytes(n_expert, rows);
}

}  // namespace tandem::megakernel
