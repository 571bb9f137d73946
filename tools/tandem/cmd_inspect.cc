// `tandem inspect MODEL`: architecture, hyper-parameters, tensor shapes, types and bytes, and the
// structural verdict, as text or JSON. It never materialises weights, so a 50 GB synthetic shape
// inspects in well under a second.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "runtime/base/sizes.h"
#include "runtime/model/model.h"
#include "runtime/model/tensor_map.h"
#include "runtime/model/validate.h"
#include "tools/tandem/commands.h"

namespace tandem::cli {
namespace {

using model::Arch;
using model::HParams;

// Exit code when the model opens but fails verification (errors exit with 1).
constexpr int kExitInvalid = 2;

std::string TypeName(quant::GgmlType type) {
  const quant::TypeInfo* info = quant::FindTypeInfo(static_cast<uint32_t>(type));
  return info ? info->name : absl::StrCat("type#", static_cast<uint32_t>(type));
}

// 24576 -> "24,576".
std::string Thousands(int64_t v) {
  std::string digits = absl::StrCat(v < 0 ? -v : v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

std::string Bytes(uint64_t b) {
  return absl::StrCat(FormatBytes(b), " (", Thousands(static_cast<int64_t>(b)), " B)");
}

// 1e-06 rather than 9.99999997e-07: the float as it was written, for JSON readers.
double ShortestDouble(float v) { return std::stod(absl::StrFormat("%g", v)); }

struct Options {
  std::string model;
  bool tensors = false;
  bool json = false;
};

nlohmann::ordered_json HParamsJson(const HParams& hp) {
  nlohmann::ordered_json j = {
      {"arch", model::ArchGgufName(hp.arch)},
      {"n_layer", hp.n_layer},
      {"n_embd", hp.n_embd},
      {"n_vocab", hp.n_vocab},
      {"n_ctx_train", hp.n_ctx_train},
      {"n_head", hp.n_head},
      {"n_head_kv", hp.n_head_kv},
      {"head_dim", hp.head_dim},
      {"n_rot", hp.n_rot},
      {"rope_theta", ShortestDouble(hp.rope_theta)},
      {"rms_eps", ShortestDouble(hp.rms_eps)},
      {"n_expert", hp.n_expert},
      {"n_expert_used", hp.n_expert_used},
      {"n_ff_exp", hp.n_ff_exp},
      {"n_ff_shexp", hp.n_ff_shexp},
      {"norm_topk_prob", hp.norm_topk_prob},
  };
  if (hp.n_ff > 0) j["n_ff"] = hp.n_ff;
  if (hp.is_hybrid()) {
    j["full_attention_interval"] = hp.full_attention_interval;
    j["ssm_conv_kernel"] = hp.ssm_conv_kernel;
    j["ssm_d_state"] = hp.ssm_d_state;
    j["ssm_n_group"] = hp.ssm_n_group;
    j["ssm_dt_rank"] = hp.ssm_dt_rank;
    j["ssm_d_inner"] = hp.ssm_d_inner;
  }
  if (hp.arch == Arch::kQwen35Moe) j["rope_sections"] = hp.rope_sections;
  if (hp.nextn_predict_layers > 0) j["nextn_predict_layers"] = hp.nextn_predict_layers;
  return j;
}

int Run(const Options& opt) {
  model::OpenOptions open;
  open.materialize = false;
  open.validate = false;
  absl::StatusOr<std::unique_ptr<model::Model>> opened = model::OpenModel(opt.model, open);
  if (!opened.ok()) {
    std::fprintf(stderr, "tandem inspect: %s\n", std::string(opened.status().message()).c_str());
    return 1;
  }
  const model::Model& m = **opened;
  const HParams& hp = m.hparams();
  const model::TensorMap map(hp);
  const model::ValidationReport report = model::ValidateTensors(map, m.tensors());

  std::map<quant::GgmlType, int> count_by_type;
  for (const format::TensorInfo& t : m.tensors()) ++count_by_type[t.type];
  uint64_t min_per_expert = UINT64_MAX, max_per_expert = 0;
  for (const model::LayerBytes& l : report.layers) {
    min_per_expert = std::min(min_per_expert, l.bytes_per_expert);
    max_per_expert = std::max(max_per_expert, l.bytes_per_expert);
  }
  if (report.layers.empty()) min_per_expert = 0;
  const std::string name = m.metadata().GetString("general.name").value_or("");

  if (opt.json) {
    nlohmann::ordered_json j;
    j["source"] = m.source();
    j["name"] = name;
    j["hparams"] = HParamsJson(hp);
    j["layers"] = nlohmann::ordered_json::array();
    for (const model::LayerBytes& l : report.layers) {
      j["layers"].push_back({{"layer", l.layer},
                             {"kind", l.recurrent ? "deltanet" : "attention"},
                             {"dense_bytes", l.dense_bytes},
                             {"expert_bytes", l.expert_bytes},
                             {"bytes_per_expert", l.bytes_per_expert},
                             {"expert_type", TypeName(l.expert_type)}});
    }
    nlohmann::ordered_json types = nlohmann::ordered_json::object();
    for (const auto& [type, bytes] : report.bytes_by_type) {
      types[TypeName(type)] = {{"tensors", count_by_type[type]}, {"bytes", bytes}};
    }
    j["types"] = types;
    j["totals"] = {{"tensors", report.n_tensors},
                   {"bytes", report.total_bytes},
                   {"embedding_bytes", report.embedding_bytes},
                   {"output_bytes", report.output_bytes},
                   {"dense_bytes", report.dense_bytes()},
                   {"expert_bytes", report.expert_bytes()},
                   {"mtp_bytes", report.mtp_bytes},
                   {"experts_per_layer", hp.n_expert},
                   {"total_experts", report.total_experts()},
                   {"recurrent_layers", map.n_recurrent_layers()},
                   {"attention_layers", map.n_attention_layers()}};
    j["valid"] = report.ok();
    j["problems"] = nlohmann::ordered_json::array();
    for (const model::Problem& p : report.problems) {
      j["problems"].push_back(
          {{"kind", model::ProblemKindName(p.kind)}, {"tensor", p.tensor}, {"message", p.message}});
    }
    j["notes"] = report.notes;
    if (opt.tensors) {
      j["tensors"] = nlohmann::ordered_json::array();
      for (const format::TensorInfo& t : m.tensors()) {
        j["tensors"].push_back(
            {{"name", t.name}, {"dims", t.dims}, {"type", TypeName(t.type)}, {"bytes", t.nbytes}});
      }
    }
    std::printf("%s\n", j.dump(2).c_str());
    return report.ok() ? 0 : kExitInvalid;
  }

  std::string out;
  absl::StrAppendFormat(&out, "model       %s\n", m.source());
  if (!name.empty()) absl::StrAppendFormat(&out, "name        %s\n", name);
  absl::StrAppendFormat(&out, "arch        %s\n", model::ArchGgufName(hp.arch));
  if (hp.is_hybrid()) {
    absl::StrAppendFormat(
        &out, "layers      %d: %d Gated DeltaNet + %d full attention (every %d%s)\n", hp.n_layer,
        map.n_recurrent_layers(), map.n_attention_layers(), hp.full_attention_interval,
        hp.full_attention_interval == 2   ? "nd"
        : hp.full_attention_interval == 3 ? "rd"
                                          : "th");
  } else {
    absl::StrAppendFormat(&out, "layers      %d, all full attention\n", hp.n_layer);
  }
  if (hp.nextn_predict_layers > 0) {
    absl::StrAppendFormat(&out, "mtp         %d block(s) after the decoder (unused)\n",
                          hp.nextn_predict_layers);
  }
  absl::StrAppendFormat(&out, "hidden      %d, vocab %d, context %d\n", hp.n_embd, hp.n_vocab,
                        hp.n_ctx_train);
  absl::StrAppendFormat(
      &out, "attention   %d query / %d KV heads of %d, rotary %d (theta %g)%s, rms eps %g\n",
      hp.n_head, hp.n_head_kv, hp.head_dim, hp.n_rot, hp.rope_theta,
      hp.arch == Arch::kQwen35Moe
          ? absl::StrCat(", mrope sections [", absl::StrJoin(hp.rope_sections, ", "), "]")
          : std::string(),
      hp.rms_eps);
  if (hp.is_hybrid()) {
    absl::StrAppendFormat(&out, "deltanet    %d key / %d value heads of %d, conv %d, inner %d\n",
                          hp.ssm_n_group, hp.ssm_dt_rank, hp.ssm_d_state, hp.ssm_conv_kernel,
                          hp.ssm_d_inner);
  }
  absl::StrAppendFormat(&out, "moe         %d experts per layer, top-%d, expert FFN %d",
                        hp.n_expert, hp.n_expert_used, hp.n_ff_exp);
  if (hp.n_ff_shexp > 0) absl::StrAppendFormat(&out, ", shared expert FFN %d", hp.n_ff_shexp);
  absl::StrAppendFormat(&out, "%s\n", hp.norm_topk_prob ? ", top-k renormalised" : "");

  if (opt.tensors) {
    absl::StrAppendFormat(&out, "\n%-40s %-22s %-6s %14s\n", "tensor", "dims", "type", "bytes");
    for (const format::TensorInfo& t : m.tensors()) {
      absl::StrAppendFormat(&out, "%-40s %-22s %-6s %14s\n", t.name, format::DimsToString(t.dims),
                            TypeName(t.type), Thousands(static_cast<int64_t>(t.nbytes)));
    }
  }

  absl::StrAppendFormat(&out, "\n%5s  %-9s %12s %12s %12s  %s\n", "layer", "kind", "dense",
                        "experts", "per expert", "expert type");
  for (const model::LayerBytes& l : report.layers) {
    absl::StrAppendFormat(&out, "%5d  %-9s %12s %12s %12s  %s\n", l.layer,
                          l.recurrent ? "deltanet" : "attention", FormatBytes(l.dense_bytes),
                          FormatBytes(l.expert_bytes), FormatBytes(l.bytes_per_expert),
                          TypeName(l.expert_type));
  }

  absl::StrAppendFormat(&out, "\nbytes by type\n");
  for (const auto& [type, bytes] : report.bytes_by_type) {
    absl::StrAppendFormat(&out, "  %-6s %5d tensors  %s\n", TypeName(type), count_by_type[type],
                          Bytes(bytes));
  }

  absl::StrAppendFormat(&out, "\ntotals\n");
  absl::StrAppendFormat(&out, "  tensors              %s\n", Thousands(report.n_tensors));
  absl::StrAppendFormat(&out, "  embeddings           %s\n", Bytes(report.embedding_bytes));
  absl::StrAppendFormat(&out, "  output (+norm)       %s\n", Bytes(report.output_bytes));
  absl::StrAppendFormat(&out, "  dense (all layers)   %s\n", Bytes(report.dense_bytes()));
  absl::StrAppendFormat(&out, "  routed experts       %s\n", Bytes(report.expert_bytes()));
  absl::StrAppendFormat(&out, "  experts              %s (%d layers x %d per layer)\n",
                        Thousands(report.total_experts()), hp.n_layer, hp.n_expert);
  if (min_per_expert == max_per_expert) {
    absl::StrAppendFormat(&out, "  bytes per expert     %s\n", Bytes(max_per_expert));
  } else {
    absl::StrAppendFormat(&out, "  bytes per expert     %s to %s (types differ by layer)\n",
                          FormatBytes(min_per_expert), FormatBytes(max_per_expert));
  }
  if (report.mtp_bytes > 0)
    absl::StrAppendFormat(&out, "  MTP (unused)         %s\n", Bytes(report.mtp_bytes));
  if (report.unknown_bytes > 0)
    absl::StrAppendFormat(&out, "  unknown tensors      %s\n", Bytes(report.unknown_bytes));
  absl::StrAppendFormat(&out, "  total                %s\n", Bytes(report.total_bytes));

  absl::StrAppendFormat(&out, "\nverdict: %s\n", absl::StrJoin(report.Lines(), "\n"));
  std::fwrite(out.data(), 1, out.size(), stdout);
  return report.ok() ? 0 : kExitInvalid;
}

}  // namespace

void RegisterInspect(CLI::App& app, int* exit_code) {
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "inspect",
      "Show a model's architecture, hyper-parameters, tensor shapes, types and bytes, and verify "
      "its\n"
      "structure against the tensor map of its architecture. Exit code 0: valid; 2: opened but\n"
      "INVALID (the problems are listed); 1: could not be opened.");
  cmd->add_option("model", opt->model, model::kModelSpecHelp)->required();
  cmd->add_flag(
      "--tensors,!--no-tensors", opt->tensors,
      "List every tensor (name, ggml dims, type, bytes). Default: per-layer summary only.");
  cmd->add_flag("--json", opt->json,
                "Print one JSON object instead of text (with --tensors: the tensor list too).");
  cmd->callback([opt, exit_code] { *exit_code = Run(*opt); });
}

}  // namespace tandem::cli
