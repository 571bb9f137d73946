// Tensor-list verification and byte accounting. Every problem names its tensor and says what was
// expected and what was found; nothing here stops at the first problem.
#include "runtime/model/validate.h"

#include <algorithm>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/base/sizes.h"

namespace tandem::model {
namespace {

std::string TypeName(quant::GgmlType type) {
  const quant::TypeInfo* info = quant::FindTypeInfo(static_cast<uint32_t>(type));
  return info ? info->name : absl::StrCat("type#", static_cast<uint32_t>(type));
}

// Expected bytes of `t`, or -1 when the type is unknown or its block size does not divide ne[0].
int64_t ExpectedBytes(const format::TensorInfo& t) {
  const quant::TypeInfo* info = quant::FindTypeInfo(static_cast<uint32_t>(t.type));
  if (info == nullptr || t.dims.empty() || t.dims[0] % info->block_elems != 0) return -1;
  return t.rows() * (t.dims[0] / info->block_elems) * info->block_bytes;
}

}  // namespace

const char* ProblemKindName(ProblemKind kind) {
  switch (kind) {
    case ProblemKind::kMissing:
      return "missing";
    case ProblemKind::kDuplicate:
      return "duplicate";
    case ProblemKind::kWrongShape:
      return "wrong shape";
    case ProblemKind::kUnsupportedType:
      return "unsupported type";
    case ProblemKind::kWrongSize:
      return "wrong size";
    case ProblemKind::kUnknown:
      return "unknown";
  }
  return "problem";
}

uint64_t ValidationReport::dense_bytes() const {
  uint64_t n = 0;
  for (const LayerBytes& l : layers) n += l.dense_bytes;
  return n;
}

absl::StatusOr<uint64_t> StepWeightBytes(const HParams& hp,
                                         std::span<const format::TensorInfo> tensors, int rows,
                                         std::span<const int32_t> route_ids) {
  const int k = hp.n_expert_used;
  std::vector<int64_t> experts(hp.n_layer, k);
  const size_t want = static_cast<size_t>(rows) * hp.n_layer * k;
  if (!route_ids.empty() && route_ids.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat("step weight bytes: ", route_ids.size(),
                                                   " route ids for ", rows, " rows x ", hp.n_layer,
                                                   " layers x ", k, " experts (want ", want, ")"));
  }
  if (!route_ids.empty()) {
    std::vector<int32_t> ids;
    for (int l = 0; l < hp.n_layer; ++l) {
      ids.clear();
      for (int r = 0; r < rows; ++r) {
        for (int j = 0; j < k; ++j) {
          const int32_t id = route_ids[(static_cast<size_t>(r) * hp.n_layer + l) * k + j];
          if (id >= 0) ids.push_back(id);
        }
      }
      std::sort(ids.begin(), ids.end());
      experts[l] = std::unique(ids.begin(), ids.end()) - ids.begin();
    }
  }
  uint64_t bytes = 0;
  for (const format::TensorInfo& t : tensors) {
    const int layer = LayerOfTensorName(t.name);
    if (layer >= hp.n_layer) continue;
    if (t.name == "token_embd.weight") {
      bytes += static_cast<uint64_t>(rows) * t.row_bytes();
    } else if (layer >= 0 && t.name.ends_with("_exps.weight")) {
      bytes += t.nbytes / hp.n_expert * experts[layer];
    } else {
      bytes += t.nbytes;
    }
  }
  return bytes;
}

uint64_t ValidationReport::expert_bytes() const {
  uint64_t n = 0;
  for (const LayerBytes& l : layers) n += l.expert_bytes;
  return n;
}

std::vector<std::string> ValidationReport::Lines() const {
  std::vector<std::string> lines;
  if (ok()) {
    lines.push_back("VALID");
  } else {
    lines.push_back(absl::StrCat("INVALID: ", problems.size(),
                                 problems.size() == 1 ? " problem" : " problems"));
  }
  for (const Problem& p : problems) lines.push_back(absl::StrCat("  ", p.message));
  for (const std::string& n : notes) lines.push_back(absl::StrCat("  note: ", n));
  return lines;
}

std::string ValidationReport::Summary() const {
  std::vector<std::string> parts;
  for (const Problem& p : problems) parts.push_back(p.message);
  return absl::StrJoin(parts, "; ");
}

ValidationReport ValidateTensors(const TensorMap& map,
                                 std::span<const format::TensorInfo> tensors) {
  const HParams& hp = map.hparams();
  ValidationReport r;
  r.n_expert = hp.n_expert;
  r.layers.resize(hp.n_layer);
  for (int il = 0; il < hp.n_layer; ++il) {
    r.layers[il].layer = il;
    r.layers[il].recurrent = hp.IsRecurrentLayer(il);
  }
  std::unordered_map<std::string_view, int> seen;  // name -> occurrences
  seen.reserve(tensors.size());

  for (const format::TensorInfo& t : tensors) {
    ++r.n_tensors;
    r.total_bytes += t.nbytes;
    r.bytes_by_type[t.type] += t.nbytes;
    if (++seen[t.name] == 2) {
      r.problems.push_back({ProblemKind::kDuplicate, t.name,
                            absl::StrCat(t.name, ": duplicate (the name occurs more than once)")});
    }
    const TensorSpec* spec = map.Find(t.name);
    const bool mtp = map.IsMtpName(t.name);
    if (spec == nullptr && !mtp) {
      r.unknown_bytes += t.nbytes;
      r.problems.push_back(
          {ProblemKind::kUnknown, t.name,
           absl::StrCat(t.name, ": unknown tensor (not part of a ", ArchGgufName(hp.arch),
                        " model with these hyper-parameters)")});
      continue;
    }
    if (mtp) {
      ++r.n_mtp_tensors;
      r.mtp_bytes += t.nbytes;
    }
    if (spec != nullptr) {
      if (t.dims != spec->dims) {
        r.problems.push_back(
            {ProblemKind::kWrongShape, t.name,
             absl::StrCat(t.name, ": wrong shape: expected ", format::DimsToString(spec->dims),
                          ", found ", format::DimsToString(t.dims))});
      } else if (!spec->AllowsType(t.type)) {
        std::string why;
        const quant::TypeInfo* info = quant::FindTypeInfo(static_cast<uint32_t>(t.type));
        if (spec->type_rule == TypeRule::kF32Only) {
          why = "only f32 is allowed";
        } else if (info == nullptr || !info->has_codec) {
          why = "Tandem has no codec for this type";
        } else {
          why = absl::StrCat("ne[0] = ", t.dims[0], " is not a multiple of its block size ",
                             info->block_elems);
        }
        r.problems.push_back(
            {ProblemKind::kUnsupportedType, t.name,
             absl::StrCat(t.name, ": unsupported type ", TypeName(t.type), " (", why, ")")});
      } else if (int64_t expected = ExpectedBytes(t);
                 expected >= 0 && static_cast<uint64_t>(expected) != t.nbytes) {
        r.problems.push_back(
            {ProblemKind::kWrongSize, t.name,
             absl::StrCat(t.name, ": wrong size: ", format::DimsToString(t.dims), " ",
                          TypeName(t.type), " takes ", expected, " bytes, found ", t.nbytes)});
      }
    }
    if (mtp) continue;
    if (spec->layer < 0) {
      if (spec->role == TensorRole::kEmbedding) {
        r.embedding_bytes += t.nbytes;
      } else {
        r.output_bytes += t.nbytes;
      }
      continue;
    }
    LayerBytes& layer = r.layers[spec->layer];
    if (spec->role == TensorRole::kRoutedExperts) {
      layer.expert_bytes += t.nbytes;
      if (t.name.ends_with("ffn_gate_exps.weight")) layer.expert_type = t.type;
    } else {
      layer.dense_bytes += t.nbytes;
    }
  }
  for (LayerBytes& layer : r.layers) {
    layer.bytes_per_expert = hp.n_expert > 0 ? layer.expert_bytes / hp.n_expert : 0;
  }
  for (const TensorSpec& spec : map.tensors()) {
    if (spec.required && !seen.contains(spec.name)) {
      r.problems.push_back(
          {ProblemKind::kMissing, spec.name,
           absl::StrCat(spec.name, ": missing (expected ", format::DimsToString(spec.dims), ")")});
    }
  }
  if (r.n_mtp_tensors > 0) {
    r.notes.push_back(absl::StrCat(r.n_mtp_tensors, " MTP (unused) tensors in block",
                                   hp.nextn_predict_layers > 1 ? "s " : " ", hp.n_layer,
                                   hp.nextn_predict_layers > 1
                                       ? absl::StrCat("-", hp.n_layer + hp.nextn_predict_layers - 1)
                                       : "",
                                   ", ", FormatBytes(r.mtp_bytes)));
  }
  return r;
}

}  // namespace tandem::model
