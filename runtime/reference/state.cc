#include "runtime/reference/state.h"

namespace tandem::reference {

SequenceState SequenceState::Create(const model::HParams& hp, int n_ctx, bool f16_kv_cache) {
  SequenceState s;
  s.n_ctx = n_ctx;
  s.f16_kv_cache = f16_kv_cache;
  s.layers.resize(hp.n_layer);
  for (int il = 0; il < hp.n_layer; ++il) {
    LayerState& l = s.layers[il];
    if (hp.IsRecurrentLayer(il)) {
      l.conv.assign(static_cast<size_t>(hp.ssm_conv_dim()) * (hp.ssm_conv_kernel - 1), 0.0f);
      l.ssm.assign(static_cast<size_t>(hp.ssm_dt_rank) * hp.ssm_d_state * hp.head_v_dim(), 0.0f);
    } else {
      size_t kv = static_cast<size_t>(n_ctx) * hp.n_head_kv * hp.head_dim;
      l.k_cache.assign(kv, 0.0f);
      l.v_cache.assign(kv, 0.0f);
    }
  }
  return s;
}

uint64_t SequenceState::bytes() const {
  uint64_t total = 0;
  for (const LayerState& l : layers) {
    total += (l.k_cache.size() + l.v_cache.size() + l.conv.size() + l.ssm.size()) * sizeof(float);
  }
  return total;
}

}  // namespace tandem::reference
