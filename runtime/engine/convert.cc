// HF checkpoint directory -> GGUF file, the way llama.cpp's converter writes these architectures
// (its tensor names, +1 norms, ssm_a, regrouped projections, tiled value heads, stacked experts,
// tokenizer keys), with every weight matrix stored in one chosen type.
#include "runtime/engine/convert.h"

#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "runtime/base/sizes.h"
#include "runtime/format/gguf.h"
#include "runtime/model/hf_model.h"
#include "runtime/model/tensor_map.h"
#include "runtime/quant/codec.h"
#include "runtime/text/vocabulary.h"

namespace tandem::engine {
namespace {


using quant::GgmlType;

// llama_ftype of a file whose matrices all have `type` (general.file_type).
uint32_t FileTypeOf(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return 0;
    case GgmlType::kF16: return 1;
    case GgmlType::kQ4_0: return 2;
    case GgmlType::kQ4_1: return 3;
    case GgmlType::kQ8_0: return 7;
    case GgmlType::kQ5_0: return 8;
    case GgmlType::kQ5_1: return 9;
    case GgmlType::kQ2_K: return 10;
    case GgmlType::kQ3_K: return 11;  // Q3_K_S: every matrix Q3_K
    case GgmlType::kQ4_K: return 14;  // Q4_K_S
    case GgmlType::kQ5_K: return 16;  // Q5_K_S
    case GgmlType::kQ6_K: return 18;
    case GgmlType::kIQ4_NL: return 25;
    case GgmlType::kIQ4_XS: return 30;
    case GgmlType::kBF16: return 32;
    case GgmlType::kMXFP4: return 38;
    default: return 0;
  }
}

}  // namespace

absl::Status ConvertHfToGguf(const std::string& dir, const std::string& out,
                             const std::string& type_name) {
  auto type = quant::ParseTypeName(type_name);
  if (!type.ok()) return type.status();
  if (!quant::CanQuantize(*type) || *type == GgmlType::kQ8_K) {
    return absl::InvalidArgumentError(absl::StrCat("cannot store weights as ", type_name));
  }
  auto model = model::OpenHfModel(dir);
  if (!model.ok()) return model.status();
  const model::HParams& hp = (*model)->hparams();
  const model::TensorMap map(hp);

  format::Metadata metadata = (*model)->metadata();
  metadata.Set("general.file_type", format::Value::U32(FileTypeOf(*type)));
  metadata.Set("general.quantization_version", format::Value::U32(2));
  const std::filesystem::path tok = std::filesystem::path(dir) / "tokenizer.json";
  if (std::filesystem::exists(tok)) {
    auto vocab = text::Vocabulary::FromHfTokenizerJson(tok.string(), hp.n_vocab);
    if (!vocab.ok()) return vocab.status();
    vocab->AppendToGgufMetadata(&metadata);
  } else {
    std::fprintf(stderr, "note: %s has no tokenizer.json; the GGUF will carry no tokenizer\n",
                 dir.c_str());
  }

  format::GgufWriter writer(std::move(metadata));
  uint64_t total = 0;
  for (const format::TensorInfo& t : (*model)->tensors()) {
    const model::TensorSpec* spec = map.Find(t.name);
    if (spec == nullptr) return absl::InternalError(absl::StrCat("no tensor map entry for ", t.name));
    // Vectors and small parameters stay f32; the router stays f32 as llama.cpp keeps it.
    GgmlType dst = *type;
    if (spec->type_rule == model::TypeRule::kF32Only || spec->category == model::QuantCategory::kRouter) {
      dst = GgmlType::kF32;
    }
    if (!spec->AllowsType(dst)) {
      return absl::InvalidArgumentError(absl::StrCat(
          t.name, ": rows of ", t.dims[0], " elements cannot be stored as ",
          quant::GetTypeInfo(dst).name, " (block of ", quant::GetTypeInfo(dst).block_elems, ")"));
    }
    const format::TensorInfo src = t;
    auto fill = [src, dst](std::span<uint8_t> bytes) -> absl::Status {
      const int64_t n = src.dims[0];
      std::vector<float> row(n);
      const int64_t dst_row = quant::RowBytes(dst, n);
      for (int64_t r = 0; r < src.rows(); ++r) {
        quant::DequantizeRow(src.type, src.data + r * src.row_bytes(), row.data(), n);
        quant::QuantizeRow(dst, row.data(), bytes.data() + r * dst_row, n);
      }
      return absl::OkStatus();
    };
    absl::Status s = writer.AddTensor(t.name, t.dims, dst, fill);
    if (!s.ok()) return s;
    total += quant::RowBytes(dst, t.dims[0]) * t.rows();
  }
  absl::Status s = writer.Write(out);
  if (!s.ok()) return s;
  std::fprintf(stderr, "wrote %s: %s, %zu tensors, %s\n", out.c_str(),
               model::ArchGgufName(hp.arch), (*model)->tensors().size(), FormatBytes(total).c_str());
  return absl::OkStatus();
}


}  // namespace tandem::engine
