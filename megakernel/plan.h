// What the CUDA backend needs from a model, decided on the host before the card is touched: the
// shapes and tensor types its kernels read (errors name the tensor or field and say what to do),
// the kernel dimensions, and the bytes it will allocate against a VRAM budget. Host-only, no CUDA
// calls, so it is tested without a GPU.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "megakernel/params.h"
#include "runtime/format/tensor_info.h"
#include "runtime/model/model.h"

namespace tandem::megakernel {

// Bytes added to every device allocation. The codecs' realigned loads once read up to 31 bytes past
// a row's last block; since the device layouts (codecs.h) every weight load lies inside its row,
// and the slack only guards against a load rounded up past a buffer's end.
inline constexpr uint64_t kAllocationSlack = 64;

// Kernel dimensions of `model` at context n_ctx (rope_inv_freq is left null), or an error listing
// every shape the kernels do not support.
absl::StatusOr<ModelDims> DimsForModel(const model::Model& model, int n_ctx);

// True for tensors of the forward pass (MTP blocks after the decoder are not).
bool UsedByForward(const format::TensorInfo& t, const model::HParams& hp);

// Bytes of tensor t on the device: its rows in the device layout (DeviceRowBytes).
uint64_t DeviceBytes(const format::TensorInfo& t);

// Every tensor the forward pass reads has a device codec and whole slices per row; 1-D tensors
// are f32. The first offender is named with its type and the supported types.
absl::Status CheckTensors(const model::Model& model);

// Bytes of one attention layer's K (or V) cache at context n_ctx: f16 or f32 elements. The VRAM
// plan counts it and the runner allocates it.
uint64_t KvCacheBytes(const ModelDims& dims, int n_ctx, bool f16_kv_cache);

struct VramPlan {
  uint64_t weights = 0;  // every used tensor in the device layout, with per-allocation slack
  uint64_t caches = 0;   // KV caches of attention layers, DeltaNet states with row snapshots
  uint64_t total() const { return weights + caches; }
};

// Bytes of weights and caches at context n_ctx, the KV caches in f16 or f32 (scratch comes on top
// and is small).
VramPlan PlanVram(const model::Model& model, const ModelDims& dims, int n_ctx, bool f16_kv_cache);

// OK when `plan` fits `budget` (0: no limit), else an error that says how much is needed.
absl::Status CheckBudget(const VramPlan& plan, uint64_t budget, const std::string& source,
                         int n_ctx);

}  // namespace tandem::megakernel
