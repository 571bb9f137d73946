// Structural verification of a model's tensor list against its TensorMap (names, ggml dims, types,
// byte sizes), plus the byte accounting that inspection and placement planning start from.
// It looks at descriptions only (TensorInfo), never at tensor bytes.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/format/tensor_info.h"
#include "runtime/model/hparams.h"
#include "runtime/model/tensor_map.h"
#include "runtime/quant/ggml_type.h"

namespace tandem::model {

enum class ProblemKind {
  kMissing,          // a required tensor is absent
  kDuplicate,        // a name occurs more than once
  kWrongShape,       // dims differ from the map
  kUnsupportedType,  // type not allowed for the tensor, or block size does not divide ne[0]
  kWrongSize,        // nbytes disagrees with dims and type
  kUnknown,          // a name the map does not know
};
const char* ProblemKindName(ProblemKind kind);

struct Problem {
  ProblemKind kind;
  std::string tensor;
  std::string message;  // one line naming the tensor, expected vs found
};

struct LayerBytes {
  int layer = 0;
  bool recurrent = false;         // Gated DeltaNet layer (else full attention)
  uint64_t dense_bytes = 0;       // everything of the block except routed experts
  uint64_t expert_bytes = 0;      // ffn_{gate,up,down}_exps together
  uint64_t bytes_per_expert = 0;  // expert_bytes / n_expert (one expert's gate+up+down slices)
  quant::GgmlType expert_type = quant::GgmlType::kF32;  // type of ffn_gate_exps (as found)
};

struct ValidationReport {
  std::vector<Problem> problems;
  std::vector<std::string> notes;  // informational, e.g. MTP tensors present but unused
  std::vector<LayerBytes> layers;  // one per decoder block
  uint64_t embedding_bytes = 0;    // token_embd
  uint64_t output_bytes = 0;       // output + output_norm
  uint64_t mtp_bytes = 0;          // MTP block tensors (unused)
  uint64_t unknown_bytes = 0;      // tensors the map does not know
  uint64_t total_bytes = 0;        // every tensor in the list
  int64_t n_tensors = 0;
  int64_t n_mtp_tensors = 0;
  int n_expert = 0;  // routed experts per layer
  std::map<quant::GgmlType, uint64_t> bytes_by_type;

  bool ok() const { return problems.empty(); }
  uint64_t dense_bytes() const;   // sum of per-layer dense bytes
  uint64_t expert_bytes() const;  // sum of per-layer routed-expert bytes
  int64_t total_experts() const { return static_cast<int64_t>(layers.size()) * n_expert; }
  // "VALID" or "INVALID: 3 problems" followed by one line per problem and note.
  std::vector<std::string> Lines() const;
  // Problems only, joined by "; " (for a one-line error).
  std::string Summary() const;
};

// Weight bytes one forward step of `rows` rows reads (the decode benchmark's accounting): every
// tensor of the decoder blocks in use except the routed experts, the output head and norm, `rows`
// embedding rows, and of each layer's routed experts the union the step's rows chose. route_ids is
// [row][layer][n_expert_used], as GpuRunner::Forward returns it (negative ids are ignored); when it
// is empty each layer counts n_expert_used experts, what one row reads. Blocks past n_layer (MTP)
// are not read. Fails when route_ids has another size.
absl::StatusOr<uint64_t> StepWeightBytes(const HParams& hp,
                                         std::span<const format::TensorInfo> tensors, int rows,
                                         std::span<const int32_t> route_ids);

// Compares `tensors` with `map`. Every required tensor must be present exactly once with the exact
// dims, an allowed type and a consistent byte count; MTP-block tensors are accepted as unused.
ValidationReport ValidateTensors(const TensorMap& map, std::span<const format::TensorInfo> tensors);

}  // namespace tandem::model
