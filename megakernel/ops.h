// The operations of per-op mode (`--kernels per-op`): each layer half, and the head, as one
// ordinary launch per operation, the baseline the megakernel is measured against. The operations
// run the device functions of the megakernel's phases; what a phase keeps in shared memory
// between its steps (normed and quantised rows) goes through global memory instead
// (Scratch::op_act), so both modes compute the same values. The kernels and their launchers live
// in per_op.cu, apart from the megakernels' kernels.cu. C++17, host and device.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "megakernel/launch.h"
#include "megakernel/params.h"

namespace tandem::megakernel {

enum class MixerOp : int32_t {
  kNorm,            // RMSNorm of the input rows into op_act[0] (one block)
  kQuantize,        // op_act[0]'s rows as int8 blocks (one block)
  kProject,         // input projection number `arg` (ForEachInputProjection's order)
  kNormRope,        // attention: k (and, for teams, q) RMSNorm, RoPE, KV append
  kAttention,       // attention: every key chunk's partials
  kAttentionMerge,  // attention: chunk merge and sigmoid gate
  kConvDeltaRule,   // DeltaNet: causal conv + SiLU, q/k L2 norms, the state update and its output
  kGatedNorm,       // DeltaNet: gated RMSNorm into op_act[1]
  kOutQuantize,     // the output projection's input as int8 blocks in op_act[1] (one block)
  kOutProject,      // output projection added to the residual
};

enum class MoeOp : int32_t {
  kNorm,                // RMSNorm of the input rows into op_act[0] (one block)
  kQuantize,            // op_act[0]'s rows as int8 blocks (one block)
  kRouter,              // router logits
  kSharedUp,            // shared expert gate/up + SwiGLU
  kSharedGate,          // shared expert gate logit
  kRoute,               // softmax top-k and the route table (one block)
  kExpertUp,            // chosen experts' gate/up + SwiGLU
  kSharedDownQuantize,  // shared expert activations as int8 blocks in op_act[1] (one block)
  kSharedDown,          // shared expert down projection
  kDownQuantize,        // chosen experts' activations as int8 blocks in op_act[1] (one block)
  kExpertDown,          // chosen experts' down projections
  kCombine,             // weighted sum, shared expert, residual
};

enum class HeadOp : int32_t {
  kNorm,         // final RMSNorm of the logit rows into op_act[0] (one block)
  kQuantize,     // op_act[0]'s rows as int8 blocks (one block)
  kLogits,       // LM head
  kBlockArgmax,  // each block's best logit
  kFinalArgmax,  // the row's argmax
};

// The per-op kernel of `half` takes up to `smem` bytes of dynamic shared memory (PrepareHalf).
cudaError_t PrepareOps(Half half, int rows_variant, int64_t smem);
// The static shared memory of that kernel (MaxDynamicSmem).
cudaError_t OpsStaticSmem(Half half, int rows_variant, int64_t* bytes);

// Every operation of a half, or of the head, in order: one ordinary launch each, on one block or
// on shape.grid blocks.
cudaError_t LaunchMixerOps(const MixerArgs& args, int rows_variant, const LaunchShape& shape,
                           cudaStream_t stream);
cudaError_t LaunchMoeOps(const MoeArgs& args, int rows_variant, const LaunchShape& shape,
                         cudaStream_t stream);
cudaError_t LaunchHeadOps(const HeadArgs& args, int rows_variant, const LaunchShape& shape,
                          cudaStream_t stream);

}  // namespace tandem::megakernel
