// The per-sequence state of the reference forward pass: KV cache for attention layers, conv and
// delta-rule state for DeltaNet layers. Plain copyable data, so a caller can snapshot and roll back.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/model/hparams.h"

namespace tandem::reference {

struct LayerState {
  // Attention layers: [n_ctx][n_head_kv * head_dim] each.
  std::vector<float> k_cache;
  std::vector<float> v_cache;
  // DeltaNet layers: the last (conv_kernel - 1) pre-conv inputs per channel, oldest first,
  // laid out [conv_dim][conv_kernel - 1]; and the delta-rule state [n_v_heads][d_k][d_v].
  std::vector<float> conv;
  std::vector<float> ssm;
};

struct SequenceState {
  int n_ctx = 0;   // capacity in tokens
  int n_past = 0;  // tokens already in the caches
  // Keys and values are rounded to f16 as they enter the caches: the values an f16 cache holds
  // (the cuda backend's --cache-type f16), kept in f32 here.
  bool f16_kv_cache = false;
  std::vector<LayerState> layers;

  // Zeroed state for `n_ctx` tokens.
  static SequenceState Create(const model::HParams& hp, int n_ctx, bool f16_kv_cache = false);
  // Bytes held by the caches.
  uint64_t bytes() const;
};

}  // namespace tandem::reference
