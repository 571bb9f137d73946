// Model lookups and OpenModel: the one place that turns a user's MODEL argument into a Model.
// Dispatch is by form: "synth:" prefix, then what the path is (a directory is a Hugging Face
// checkpoint, a .gguf name or GGUF magic a GGUF file; anything else is refused with one line).
#include "runtime/model/model.h"

#include <cstdio>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "runtime/format/gguf.h"
#include "runtime/model/hf_model.h"
#include "runtime/model/synth.h"
#include "runtime/model/tensor_map.h"
#include "runtime/model/validate.h"

namespace tandem::model {
namespace {

// Problems listed in the error of an invalid GGUF before "... and N more".
constexpr size_t kMaxListedProblems = 8;

class GgufModel : public Model {
 public:
  static absl::StatusOr<std::unique_ptr<Model>> Open(const std::string& path,
                                                     const OpenOptions& options) {
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<format::GgufFile> file, format::GgufFile::Open(path));
    auto model = std::unique_ptr<GgufModel>(new GgufModel());
    absl::StatusOr<HParams> hp = HParamsFromGguf(file->metadata(), file->tensors());
    if (!hp.ok())
      return absl::Status(hp.status().code(), absl::StrCat(path, ": ", hp.status().message()));
    if (options.validate) {
      const TensorMap map(*hp);
      const ValidationReport report = ValidateTensors(map, file->tensors());
      if (!report.ok()) {
        std::string message = absl::StrCat(path, ": not a valid ", ArchGgufName(hp->arch),
                                           " model (", report.problems.size(), " problems): ");
        for (size_t i = 0; i < report.problems.size() && i < kMaxListedProblems; ++i) {
          absl::StrAppend(&message, i > 0 ? "; " : "", report.problems[i].message);
        }
        if (report.problems.size() > kMaxListedProblems) {
          absl::StrAppend(&message, "; ... and ", report.problems.size() - kMaxListedProblems,
                          " more");
        }
        return absl::InvalidArgumentError(message);
      }
    }
    model->source_ = path;
    model->hparams_ = *hp;
    model->metadata_ = file->metadata();
    model->tensors_ = file->tensors();
    model->file_ = std::move(file);
    model->IndexTensors();
    return std::unique_ptr<Model>(std::move(model));
  }

 private:
  GgufModel() = default;
  std::unique_ptr<format::GgufFile> file_;  // owns the mapping the tensors point into
};

bool HasGgufMagic(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  unsigned char magic[4] = {};
  const size_t n = std::fread(magic, 1, sizeof(magic), f);
  std::fclose(f);
  return n == 4 && magic[0] == 'G' && magic[1] == 'G' && magic[2] == 'U' && magic[3] == 'F';
}

}  // namespace

const char kModelSpecHelp[] =
    "MODEL is a .gguf file, a Hugging Face directory (config.json + safetensors) or synth:NAME,\n"
    "a random-weight model of a named shape built in memory"
    " (see `tandem synth --list`).\n"
    "synth: takes options after '?', joined by '&':\n"
    "  seed=N                    random seed (default 20261129)\n"
    "  expert_ff=N               the routed experts' FFN width instead of the shape's\n"
    "                            (e.g. 256, so that tiny shapes can take q4_k experts)\n"
    "  attention=H/KV/D          the attention layers' query heads, KV heads and head width\n"
    "                            instead of the shape's (e.g. 16/2/128); keeps the rotary share\n"
    "  deltanet=K/V/D            the DeltaNet layers' key heads, value heads and head width\n"
    "                            instead of the shape's (e.g. 16/32/128; hybrid shapes only)\n"
    "  experts=TYPE, shexp=TYPE, dense=TYPE, router=TYPE, embed=TYPE, output=TYPE\n"
    "                            quant type per category (routed experts, shared expert,\n"
    "                            attention/DeltaNet matrices, ffn_gate_inp, token_embd, output)\n"
    "  quant=CAT=TYPE,CAT=TYPE   the same as one list\n"
    "  e.g. synth:flash-next-125b?experts=q4_k&dense=q8_0&seed=7";

void Model::IndexTensors() {
  index_.clear();
  index_.reserve(tensors_.size());
  for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
}

const format::TensorInfo* Model::Find(std::string_view name) const {
  if (!index_.empty() && index_.size() <= tensors_.size()) {
    auto it = index_.find(std::string(name));
    return it == index_.end() || it->second >= tensors_.size() ? nullptr : &tensors_[it->second];
  }
  for (const format::TensorInfo& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

bool Model::materialized() const {
  for (const format::TensorInfo& t : tensors_) {
    if (t.data == nullptr) return false;
  }
  return true;
}

absl::StatusOr<std::unique_ptr<Model>> OpenModel(const std::string& spec,
                                                 const OpenOptions& options) {
  constexpr std::string_view kSynthPrefix = "synth:";
  if (spec.starts_with(kSynthPrefix)) {
    std::string shape;
    SynthOptions synth_options;
    TANDEM_RETURN_IF_ERROR(
        ParseSynthSpec(std::string_view(spec).substr(kSynthPrefix.size()), &shape, &synth_options));
    synth_options.progress = options.progress;
    return Synthesize(shape, synth_options, options.materialize);
  }

  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(spec, ec);
  if (ec || !std::filesystem::exists(status)) {
    return absl::NotFoundError(absl::StrCat(spec, ": no such file or directory"));
  }
  if (std::filesystem::is_directory(status)) return OpenHfModel(spec);
  // A .gguf name or the GGUF magic goes to the GGUF reader, whose messages say what is wrong with
  // a truncated or corrupt file; anything else is not a model Tandem reads.
  if (spec.ends_with(".gguf") || HasGgufMagic(spec)) return GgufModel::Open(spec, options);
  return absl::InvalidArgumentError(absl::StrCat(
      spec, ": not a model: expected a .gguf file, a Hugging Face directory or synth:NAME"));
}

}  // namespace tandem::model
