// Fast generation of valid random tensor data, for synthetic models of any size: random quant bits
// with scale fields chosen so that decoded values have a target RMS and a mean near zero. No float
// quantisation happens here (well over 1 GB/s per core). C++17 and free of absl so device tests
// can use it; the implementation is host-only.
#pragma once

#include <cstdint>

#include "runtime/quant/ggml_type.h"

namespace tandem::quant {

// Fills n_blocks blocks of `type` at dst (for F32/F16/BF16 a block is one element). Decoded values
// are finite, have RMS close to target_rms (over many blocks) and mean close to 0; asymmetric types
// get min terms that centre each sub-block. The same (type, seed, target_rms, n_blocks) always
// gives the same bytes. Aborts if `type` has no codec or target_rms is not a positive finite
// number.
void RandomizeBlocks(GgmlType type, uint64_t seed, float target_rms, void* dst, int64_t n_blocks);

}  // namespace tandem::quant
