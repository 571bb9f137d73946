// Attention over a key-value cache for up to kMaxAttendRows query rows (a decode or verify step,
// or a block of a prefill) on the expert pool's threads: the cpu backend's per-layer attention,
// which the reference runs as plain fp32 loops (runtime/reference). Split over keys as well as
// heads (each work item one chunk of keys for one row and key-value head, with its own running max,
// sum and weighted values, merged per head afterwards), so a single decode row spreads over every
// thread, and each key and value is read once for all query heads of its group. fp32 throughout;
// sums run in another order than the reference's, so results agree to float rounding, not bit for
// bit.
#pragma once

#include <cstdint>
#include <vector>

#include "experts/isa.h"
#include "experts/pool.h"

namespace tandem::experts {

// Most query rows Attend takes: its partial results grow with rows × heads × chunks, so callers
// hand longer batches (prefill) over in blocks of this many rows.
inline constexpr int kMaxAttendRows = 8;

struct AttentionProblem {
  // Query row t, head h: head_dim floats at q + t * q_row_stride + h * q_head_stride.
  const float* q = nullptr;
  int64_t q_row_stride = 0, q_head_stride = 0;
  // Cache position j, key-value head g: head_dim floats at k (v) + j * kv_stride + g * head_dim.
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t kv_stride = 0;
  int n_head = 0, n_head_kv = 0, head_dim = 0;  // n_head a multiple of n_head_kv
  int n_past = 0;                               // row t attends to positions 0 .. n_past + t
  int n_rows = 0;                               // 1 .. kMaxAttendRows
  float scale = 0;
  // Row t, head h: head_dim floats at out + (t * n_head + h) * head_dim, overwritten with
  // softmax_j(scale · q·k_j) · v_j over the head's key-value head h / (n_head / n_head_kv).
  float* out = nullptr;
};

// Per-call partial results, grown as needed and reused (nothing allocated once a shape was seen).
struct AttentionScratch {
  std::vector<float> partial;  // per (row, head, chunk): max, sum, then head_dim weighted values
};

// Runs `p` on the pool's threads with the kernel for `isa` (the pool's own ISA: scalar, or AVX2 +
// FMA for kAvx2 and kAvx512). A bad shape, or an ISA this CPU lacks, is an error, never a partial
// result.
absl::Status Attend(ExpertPool& pool, Isa isa, const AttentionProblem& p,
                    AttentionScratch& scratch);

}  // namespace tandem::experts
