// Synthetic models: named shapes (tiny test shapes for each architecture and full-size shapes such
// as flash-next-125b) with random weights scaled so that activations stay finite through every
// layer. Built in memory (`synth:NAME`) or streamed into a GGUF file tensor by tensor. Output is a
// pure function of (shape, quant mix, seed): the thread count never changes a byte.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/format/metadata.h"
#include "runtime/format/tensor_info.h"
#include "runtime/model/hparams.h"
#include "runtime/model/model.h"
#include "runtime/model/tensor_map.h"
#include "runtime/quant/ggml_type.h"

namespace tandem::model {

// The type of each quant-mix category. Tensors of category kF32 are always f32.
struct QuantMix {
  quant::GgmlType experts = quant::GgmlType::kQ8_0;  // routed experts
  quant::GgmlType shexp = quant::GgmlType::kQ8_0;    // shared expert matrices
  quant::GgmlType dense = quant::GgmlType::kQ8_0;    // attention / DeltaNet matrices
  quant::GgmlType router = quant::GgmlType::kF32;    // ffn_gate_inp
  quant::GgmlType embed = quant::GgmlType::kQ8_0;    // token_embd
  quant::GgmlType output = quant::GgmlType::kQ8_0;   // output (LM head)

  quant::GgmlType TypeFor(QuantCategory category) const;
  bool operator==(const QuantMix&) const = default;
};

// Applies "experts=q3_k,dense=q8_0,embed=q6_k" on top of `mix`. Categories: experts, shexp,
// dense, router, embed, output; types: any name with a Tandem codec. Errors name the bad part.
absl::Status ApplyQuantMix(std::string_view text, QuantMix* mix);
// "experts=q3_k,shexp=q8_0,dense=q8_0,router=f32,embed=q6_k,output=q6_k".
std::string QuantMixToString(const QuantMix& mix);

struct SynthShape {
  std::string name;
  std::string description;
  HParams hparams;
  QuantMix default_mix;
};
// Every named shape, tiny ones first.
const std::vector<SynthShape>& SynthShapes();
// The shape called `name`, or an error listing the names.
absl::StatusOr<const SynthShape*> FindSynthShape(std::string_view name);

inline constexpr uint64_t kDefaultSynthSeed = 20261129;
// Quantised tensors larger than this are filled with quant::RandomizeBlocks (valid random blocks
// at a target RMS, memory speed) instead of generating floats and quantising them exactly.
inline constexpr uint64_t kDefaultRandomizeThreshold = uint64_t{64} << 20;

struct SynthOptions {
  std::string quant;  // overrides on the shape's default mix ("experts=q4_k,dense=q8_0")
  uint64_t seed = kDefaultSynthSeed;
  int64_t expert_ff = 0;  // > 0: the routed experts' FFN width instead of the shape's
  // > 0: the attention layers' query heads, KV heads and head width instead of the shape's (the
  // rotary share of a head is kept), so that tests can reach the GPU's wide-head and full-team
  // attention paths on a tiny model.
  int attention_heads = 0, attention_kv_heads = 0, attention_head_dim = 0;
  // > 0: the DeltaNet layers' key heads, value heads and head width (keys and values alike)
  // instead of the shape's, so that tests can reach DeltaNet head sizes on a tiny model.
  int deltanet_key_heads = 0, deltanet_value_heads = 0, deltanet_head_dim = 0;
  uint64_t randomize_threshold = kDefaultRandomizeThreshold;
  ProgressFn progress;  // bytes generated so far, of the total
};

// Splits "NAME?experts=q4_k&dense=q8_0&seed=7" (also "quant=experts=q4_k,dense=q8_0") into the
// shape name and options. Unknown keys are errors.
absl::Status ParseSynthSpec(std::string_view spec, std::string* shape, SynthOptions* options);

// What a synthetic model consists of, without bytes: hyper-parameters, GGUF metadata (including
// the tokenizer) and tensor descriptions with types from the quant mix.
struct SynthPlan {
  const SynthShape* shape = nullptr;
  HParams hparams;
  QuantMix mix;
  uint64_t seed = 0;
  TensorMap map;
  format::Metadata metadata;
  std::vector<format::TensorInfo> tensors;  // same order as map.tensors(); data == nullptr
  uint64_t total_bytes = 0;
};
absl::StatusOr<std::unique_ptr<SynthPlan>> PlanSynth(std::string_view shape_name,
                                                     const SynthOptions& options);

// Fills `out` (tensors[index].nbytes bytes) with tensor `index` of the plan. Thread-parallel;
// `progress_bytes`, when set, is called with the bytes just finished (from worker threads).
absl::Status GenerateSynthTensor(const SynthPlan& plan, size_t index, uint64_t randomize_threshold,
                                 std::span<uint8_t> out,
                                 const std::function<void(uint64_t)>& progress_bytes = {});

// The in-memory model; with materialize = false only names, dims, types and sizes.
absl::StatusOr<std::unique_ptr<Model>> Synthesize(std::string_view shape_name,
                                                  const SynthOptions& options, bool materialize);
// Streams the model into a GGUF file, one tensor in memory at a time.
absl::Status WriteSynthGguf(std::string_view shape_name, const SynthOptions& options,
                            const std::string& path);

}  // namespace tandem::model
