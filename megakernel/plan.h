// What the CUDA backend needs from a model, decided on the host before the card is touched: the
// shapes and tensor types its kernels read (errors name the tensor or field and say what to do),
// the kernel dimensions, and the bytes it will allocate against a VRAM budget. Host-only, no CUDA
// calls, so it is tested without a GPU.
#pragma once

#include <cstdint>
#include <functional>
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

// Dynamic shared memory a block of each half's kernels needs for steps of up to `rows` rows: the
// largest carve of any of its phases (device/*.cuh), counted as the kernels carve it.
struct HalfSmem {
  int64_t mixer = 0, moe = 0, head = 0;
};
HalfSmem SmemForRows(const ModelDims& dims, bool hybrid, int rows);

// The rows variants a GPU can run for a model: every variant up to max_rows has each half's
// SmemForRows within limit(variant index), the dynamic shared memory that GPU allows a block of
// that half's kernels. max_rows is 0 when not even the one-row kernels fit; `why` names the first
// variant and half that does not fit, with what it needs and what the GPU allows ("" when all do).
// The 8-row kernels of the hybrid shapes need 105-168 KiB a block; compute capability 8.6 and 8.9
// allow 99 KiB, 8.0 163 KiB.
struct RowsFit {
  int max_rows = 0;
  std::string why;
};
RowsFit FitRows(const ModelDims& dims, bool hybrid,
                const std::function<HalfSmem(int variant)>& limit);

// OK when `plan` fits `budget` (0: no limit), else an error that says how much is needed.
absl::Status CheckBudget(const VramPlan& plan, uint64_t budget, const std::string& source,
                         int n_ctx);

}  // namespace tandem::megakernel
