// Internal to experts/attention*.cc: the per-ISA kernel for one work item of Attend.
#pragma once

#include <cstdint>

namespace tandem::experts {

// One chunk of cache positions [j0, j1) (j1 > j0) for `n_heads` query heads that share one
// key-value head. Query head i: head_dim floats at q + i * q_head_stride; position j's key and
// value: head_dim floats at k + j * kv_stride and v + j * kv_stride. With s_ij = scale · q_i·k_j,
// writes at partial + i * partial_stride: the chunk's max M_i = max_j s_ij, its sum
// L_i = Σ_j e^(s_ij − M_i), then O_i[d] = Σ_j e^(s_ij − M_i) · v_j[d] for d < head_dim.
// `scores`: room for n_heads × (j1 − j0) floats.
struct AttendChunkArgs {
  const float* q;
  int64_t q_head_stride;
  int n_heads;
  const float* k;
  const float* v;
  int64_t kv_stride;
  int head_dim;
  int64_t j0, j1;
  float scale;
  float* scores;
  float* partial;
  int64_t partial_stride;
};

void AttendChunkScalar(const AttendChunkArgs& a);
// head_dim a multiple of 8; the CPU has AVX2 and FMA.
void AttendChunkAvx2(const AttendChunkArgs& a);

}  // namespace tandem::experts
