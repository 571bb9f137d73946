// `tandem convert`: a Hugging Face checkpoint directory to GGUF, the way llama.cpp's converter
// writes these architectures (its names, +1 norms, ssm_a, regrouped projections, stacked experts,
// tokenizer keys), with matrices stored in one chosen type.
#include "runtime/engine/convert.h"
#include "tools/tandem/cli_util.h"
#include "tools/tandem/commands.h"

namespace tandem::cli {

void RegisterConvert(CLI::App& app, int* exit_code) {
  struct Args {
    std::string dir, out, type = "f32";
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "convert",
      "Convert a Hugging Face checkpoint (qwen3_moe, qwen3_next, qwen3_5_moe) to GGUF as llama.cpp "
      "does. Norms, ssm parameters and the router stay f32; other matrices take --type.");
  cmd->add_option("HF_DIR", args->dir, "Directory with config.json and safetensors")->required();
  cmd->add_option("-o,--output", args->out, "Output .gguf file")->required();
  cmd->add_option("--type", args->type,
                  "Type of the weight matrices: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, "
                  "q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs, mxfp4")
      ->capture_default_str();
  cmd->callback([args, exit_code] {
    absl::Status s = engine::ConvertHfToGguf(args->dir, args->out, args->type);
    if (!s.ok()) *exit_code = Fail(s);
  });
}

}  // namespace tandem::cli
