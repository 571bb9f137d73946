// Vocabulary loaders: GGUF tokenizer.* keys and Hugging Face tokenizer.json. See vocabulary.h.
#include "runtime/text/vocabulary.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "runtime/base/status_macros.h"

namespace tandem::text {
namespace {

using format::Array;
using format::Metadata;
using format::Value;
using format::ValueType;

struct PreName {
  std::string_view name;
  PreTokenizerKind kind;
};

// Names llama.cpp maps to the two Qwen splitters (spec §4.1).
constexpr PreName kPreNames[] = {
    {"qwen2", PreTokenizerKind::kQwen2},   {"deepseek-r1-qwen", PreTokenizerKind::kQwen2},
    {"kormo", PreTokenizerKind::kQwen2},   {"f2llmv2", PreTokenizerKind::kQwen2},
    {"qwen35", PreTokenizerKind::kQwen35},
};

// Texts that end a turn or a document; llama.cpp forces such tokens to CONTROL (spec §4.2).
constexpr std::string_view kEndOfGenerationTexts[] = {
    "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<end_of_turn>",
};

bool LooksLikeControl(std::string_view text) {
  return text.size() >= 4 && text.substr(0, 2) == "<|" && text.substr(text.size() - 2) == "|>";
}

// Forces end-of-generation texts to CONTROL and derives eot from <|im_end|> when no key set it.
void FinalizeSpecialTokens(Vocabulary* vocab) {
  for (int32_t id = 0; id < vocab->size(); ++id) {
    if (!IsEndOfGenerationText(vocab->tokens[id])) continue;
    vocab->types[id] = TokenType::kControl;
    if (vocab->eot_id < 0 && vocab->tokens[id] == "<|im_end|>") vocab->eot_id = id;
  }
}

std::string PadTokenText(int32_t id) { return absl::StrCat("[PAD", id, "]"); }

// ---- GGUF ----------------------------------------------------------------------------------

absl::StatusOr<const std::vector<std::string>*> StringArray(const Metadata& md, const char* key) {
  const Value* value = md.Find(key);
  if (value == nullptr) return absl::NotFoundError(absl::StrCat("GGUF tokenizer: missing ", key));
  const Array* array = value->AsArray();
  if (array == nullptr || array->elem_type != ValueType::kString) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GGUF tokenizer: ", key, " must be an array of strings, found ", value->ToString()));
  }
  return &std::get<std::vector<std::string>>(array->values);
}

// Any integer array, widened to int64.
absl::StatusOr<std::vector<int64_t>> IntArray(const Value& value, const char* key) {
  const Array* array = value.AsArray();
  if (array == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF tokenizer: ", key, " must be an integer array"));
  }
  std::vector<int64_t> out;
  bool ok = true;
  std::visit(
      [&](const auto& values) {
        using T = typename std::decay_t<decltype(values)>::value_type;
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          out.assign(values.begin(), values.end());
        } else {
          ok = false;
        }
      },
      array->values);
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat("GGUF tokenizer: ", key,
                                                   " must be an integer array, found ",
                                                   ValueTypeName(array->elem_type), " elements"));
  }
  return out;
}

absl::Status ReadSpecialId(const Metadata& md, const char* key, int32_t vocab_size, int32_t* id) {
  const Value* value = md.Find(key);
  if (value == nullptr) return absl::OkStatus();
  const std::optional<int64_t> v = value->AsInt();
  if (!v.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF tokenizer: ", key, " must be an integer, found ", value->ToString()));
  }
  if (*v < 0 || *v >= vocab_size) {
    return absl::OutOfRangeError(absl::StrCat("GGUF tokenizer: ", key, " = ", *v,
                                              " is outside the vocabulary of ", vocab_size,
                                              " tokens"));
  }
  *id = static_cast<int32_t>(*v);
  return absl::OkStatus();
}

absl::Status ReadFlag(const Metadata& md, const char* key, bool* flag) {
  const Value* value = md.Find(key);
  if (value == nullptr) return absl::OkStatus();
  const std::optional<bool> v = value->AsBool();
  if (!v.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF tokenizer: ", key, " must be a bool, found ", value->ToString()));
  }
  *flag = *v;
  return absl::OkStatus();
}

// Splits "left right" at the first space at index >= 1 (spec §4.2).
bool SplitMerge(std::string_view merge, std::pair<std::string, std::string>* out) {
  const size_t space = merge.find(' ', 1);
  if (space == std::string_view::npos || space + 1 >= merge.size()) return false;
  out->first = std::string(merge.substr(0, space));
  out->second = std::string(merge.substr(space + 1));
  return true;
}

// ---- Hugging Face ----------------------------------------------------------------------------

using nlohmann::json;

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("cannot read ", path));
  return std::move(buffer).str();
}

absl::StatusOr<json> ParseJsonFile(const std::string& path) {
  TANDEM_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    // Parse again with exceptions only to obtain the position and reason.
    try {
      const json reparsed = json::parse(text);
      (void)reparsed;
    } catch (const json::parse_error& e) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": malformed JSON: ", e.what()));
    }
    return absl::InvalidArgumentError(absl::StrCat(path, ": malformed JSON"));
  }
  return parsed;
}

// A token entry of tokenizer_config.json: a string, {"content": "..."} or null.
std::optional<std::string> ConfigTokenText(const json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto content = it->find("content");
    if (content != it->end() && content->is_string()) return content->get<std::string>();
  }
  return std::nullopt;
}

absl::Status ReadHfConfig(const std::string& config_path, Vocabulary* vocab) {
  TANDEM_ASSIGN_OR_RETURN(json config, ParseJsonFile(config_path));
  if (!config.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(config_path, ": expected a JSON object"));
  }
  absl::flat_hash_map<std::string_view, int32_t> by_text;
  for (int32_t id = 0; id < vocab->size(); ++id) by_text.emplace(vocab->tokens[id], id);
  struct Special {
    const char* key;
    int32_t* id;
  };
  for (const Special& s :
       {Special{"bos_token", &vocab->bos_id}, Special{"eos_token", &vocab->eos_id},
        Special{"pad_token", &vocab->pad_id}, Special{"unk_token", &vocab->unk_id}}) {
    const std::optional<std::string> text = ConfigTokenText(config, s.key);
    if (!text.has_value()) continue;
    auto it = by_text.find(*text);
    if (it == by_text.end()) {
      return absl::InvalidArgumentError(absl::StrCat(config_path, ": ", s.key, " \"", *text,
                                                     "\" is not a token of the vocabulary"));
    }
    *s.id = it->second;
  }
  for (const auto& [key, flag] :
       {std::pair<const char*, bool*>{"add_bos_token", &vocab->add_bos},
        std::pair<const char*, bool*>{"add_eos_token", &vocab->add_eos}}) {
    auto it = config.find(key);
    if (it != config.end() && it->is_boolean()) *flag = it->get<bool>();
  }
  auto tmpl = config.find("chat_template");
  if (tmpl != config.end()) {
    if (tmpl->is_string()) {
      vocab->chat_template = tmpl->get<std::string>();
    } else if (tmpl->is_array()) {
      // Named templates: [{"name": "default", "template": "..."}, ...]; take "default", else the
      // first.
      for (const json& entry : *tmpl) {
        if (!entry.is_object() || !entry.contains("template") || !entry["template"].is_string()) {
          continue;
        }
        const bool is_default = entry.contains("name") && entry["name"] == "default";
        if (!vocab->chat_template.has_value() || is_default) {
          vocab->chat_template = entry["template"].get<std::string>();
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ReadHfModel(const std::string& path, const json& root, int32_t min_vocab_size,
                         Vocabulary* vocab) {
  auto fail = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
  };
  if (!root.is_object()) return fail("expected a JSON object at the top level");
  auto model_it = root.find("model");
  if (model_it == root.end() || !model_it->is_object()) return fail("missing object \"model\"");
  const json& model = *model_it;
  auto type_it = model.find("type");
  if (type_it != model.end() && !(type_it->is_string() && *type_it == "BPE")) {
    return fail(absl::StrCat("model.type is ", type_it->dump(), "; only BPE is supported"));
  }
  auto ignore_it = model.find("ignore_merges");
  if (ignore_it != model.end() && ignore_it->is_boolean() && ignore_it->get<bool>()) {
    return fail("model.ignore_merges is true; only BPE that always applies merges is supported");
  }
  auto vocab_it = model.find("vocab");
  if (vocab_it == model.end() || !vocab_it->is_object()) return fail("missing object model.vocab");

  // Collect (id -> text, type) from the base vocabulary and the added tokens.
  std::vector<std::pair<int64_t, std::string>> base;
  base.reserve(vocab_it->size());
  int64_t max_id = -1;
  for (auto it = vocab_it->begin(); it != vocab_it->end(); ++it) {
    if (!it.value().is_number_integer()) {
      return fail(absl::StrCat("model.vocab[\"", it.key(), "\"] is not an integer id"));
    }
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id >= (int64_t{1} << 31) - 1) {
      return fail(absl::StrCat("model.vocab[\"", it.key(), "\"] = ", id, " is out of range"));
    }
    base.emplace_back(id, it.key());
    max_id = std::max(max_id, id);
  }
  struct Added {
    int64_t id;
    std::string text;
    bool special;
  };
  std::vector<Added> added;
  auto added_it = root.find("added_tokens");
  if (added_it != root.end() && !added_it->is_null()) {
    if (!added_it->is_array()) return fail("added_tokens is not an array");
    for (const json& entry : *added_it) {
      if (!entry.is_object() || !entry.contains("id") || !entry["id"].is_number_integer() ||
          !entry.contains("content") || !entry["content"].is_string()) {
        return fail(absl::StrCat("added_tokens entry ", entry.dump(), " lacks an id or content"));
      }
      const int64_t id = entry["id"].get<int64_t>();
      if (id < 0 || id >= (int64_t{1} << 31) - 1) {
        return fail(absl::StrCat("added_tokens id ", id, " is out of range"));
      }
      const bool special = entry.contains("special") && entry["special"].is_boolean() &&
                           entry["special"].get<bool>();
      added.push_back({id, entry["content"].get<std::string>(), special});
      max_id = std::max(max_id, id);
    }
  }
  const int64_t size = std::max<int64_t>(max_id + 1, min_vocab_size);
  vocab->tokens.assign(size, std::string());
  vocab->types.assign(size, TokenType::kUnused);
  std::vector<bool> filled(size, false);
  for (auto& [id, text] : base) {
    if (filled[id]) return fail(absl::StrCat("model.vocab assigns id ", id, " twice"));
    vocab->tokens[id] = std::move(text);
    vocab->types[id] = TokenType::kNormal;
    filled[id] = true;
  }
  for (Added& a : added) {
    // An added token may repeat a base entry; its type and text then win, as in the converter.
    vocab->types[a.id] =
        (a.special || LooksLikeControl(a.text)) ? TokenType::kControl : TokenType::kUserDefined;
    vocab->tokens[a.id] = std::move(a.text);
    filled[a.id] = true;
  }
  for (int64_t id = 0; id < size; ++id) {
    if (!filled[id]) vocab->tokens[id] = PadTokenText(static_cast<int32_t>(id));
  }

  auto merges_it = model.find("merges");
  if (merges_it == model.end() || !merges_it->is_array()) return fail("missing array model.merges");
  vocab->merges.reserve(merges_it->size());
  size_t index = 0;
  for (const json& m : *merges_it) {
    std::pair<std::string, std::string> merge;
    if (m.is_string()) {
      if (!SplitMerge(m.get_ref<const std::string&>(), &merge)) {
        return fail(absl::StrCat("model.merges[", index, "] = ", m.dump(),
                                 " is not two parts separated by a space"));
      }
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string() &&
               !m[0].get_ref<const std::string&>().empty() &&
               !m[1].get_ref<const std::string&>().empty()) {
      merge = {m[0].get<std::string>(), m[1].get<std::string>()};
    } else {
      return fail(absl::StrCat("model.merges[", index, "] = ", m.dump(),
                               " is neither \"a b\" nor [\"a\", \"b\"]"));
    }
    vocab->merges.push_back(std::move(merge));
    ++index;
  }

  // The pre-tokenizer: find the Split regex (directly or inside a Sequence).
  std::optional<std::string> pattern;
  std::function<void(const json&)> find_split = [&](const json& node) {
    if (!node.is_object()) return;
    auto type = node.find("type");
    if (type != node.end() && *type == "Split") {
      auto pat = node.find("pattern");
      if (pat != node.end() && pat->is_object() && pat->contains("Regex") &&
          (*pat)["Regex"].is_string()) {
        pattern = (*pat)["Regex"].get<std::string>();
      }
    }
    auto children = node.find("pretokenizers");
    if (children != node.end() && children->is_array()) {
      for (const json& child : *children) {
        if (!pattern.has_value()) find_split(child);
      }
    }
  };
  auto pre_it = root.find("pre_tokenizer");
  if (pre_it != root.end()) find_split(*pre_it);
  if (!pattern.has_value()) {
    return fail("pre_tokenizer has no Split regex; expected the qwen2 or qwen35 pattern");
  }
  if (*pattern == kQwen2Pattern) {
    vocab->pre = PreTokenizerKind::kQwen2;
  } else if (*pattern == kQwen35Pattern) {
    vocab->pre = PreTokenizerKind::kQwen35;
  } else {
    return fail(absl::StrCat("pre_tokenizer Split regex ", json(*pattern).dump(),
                             " is neither the qwen2 nor the qwen35 pattern"));
  }
  return absl::OkStatus();
}

}  // namespace

const char* TokenTypeName(TokenType type) {
  switch (type) {
    case TokenType::kNormal:
      return "NORMAL";
    case TokenType::kUnknown:
      return "UNKNOWN";
    case TokenType::kControl:
      return "CONTROL";
    case TokenType::kUserDefined:
      return "USER_DEFINED";
    case TokenType::kUnused:
      return "UNUSED";
    case TokenType::kByte:
      return "BYTE";
  }
  return "?";
}

bool IsEndOfGenerationText(std::string_view text) {
  for (std::string_view eog : kEndOfGenerationTexts) {
    if (text == eog) return true;
  }
  return false;
}

absl::StatusOr<PreTokenizerKind> PreTokenizerKindFromName(std::string_view name) {
  std::vector<std::string> names;
  for (const PreName& p : kPreNames) {
    if (p.name == name) return p.kind;
    names.emplace_back(p.name);
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported tokenizer.ggml.pre \"",
                                                 std::string(name),
                                                 "\"; supported: ", absl::StrJoin(names, ", ")));
}

absl::Status Vocabulary::Validate() const {
  if (tokens.empty()) return absl::InvalidArgumentError("tokenizer: the vocabulary is empty");
  if (types.size() != tokens.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer: ", tokens.size(), " tokens but ", types.size(), " token types"));
  }
  for (const auto& [name, id] : {std::pair<const char*, int32_t>{"bos", bos_id},
                                 {"eos", eos_id},
                                 {"pad", pad_id},
                                 {"eot", eot_id},
                                 {"unk", unk_id}}) {
    if (id < -1 || id >= size()) {
      return absl::OutOfRangeError(absl::StrCat(
          "tokenizer: ", name, " id ", id, " is outside the vocabulary of ", size(), " tokens"));
    }
  }
  if (add_bos && bos_id < 0) {
    return absl::InvalidArgumentError("tokenizer: add_bos is set but there is no bos token");
  }
  if (add_eos && eos_id < 0) {
    return absl::InvalidArgumentError("tokenizer: add_eos is set but there is no eos token");
  }
  for (size_t i = 0; i < merges.size(); ++i) {
    if (merges[i].first.empty() || merges[i].second.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer: merge ", i, " has an empty part"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Vocabulary> Vocabulary::FromGgufMetadata(const format::Metadata& md) {
  Vocabulary vocab;
  const std::optional<std::string> model = md.GetString("tokenizer.ggml.model");
  if (!model.has_value()) {
    return absl::NotFoundError("GGUF tokenizer: missing tokenizer.ggml.model");
  }
  if (*model != "gpt2") {
    return absl::UnimplementedError(
        absl::StrCat("GGUF tokenizer: tokenizer.ggml.model is \"", *model,
                     "\"; only \"gpt2\" (byte-level BPE, as used by Qwen models) is supported"));
  }

  TANDEM_ASSIGN_OR_RETURN(const std::vector<std::string>* tokens,
                          StringArray(md, "tokenizer.ggml.tokens"));
  if (tokens->empty())
    return absl::InvalidArgumentError("GGUF tokenizer: tokenizer.ggml.tokens is empty");
  if (tokens->size() >= (size_t{1} << 31) - 1) {
    return absl::InvalidArgumentError("GGUF tokenizer: tokenizer.ggml.tokens is too large");
  }
  vocab.tokens = *tokens;
  vocab.types.assign(vocab.tokens.size(), TokenType::kNormal);
  if (const Value* types = md.Find("tokenizer.ggml.token_type"); types != nullptr) {
    TANDEM_ASSIGN_OR_RETURN(std::vector<int64_t> raw,
                            IntArray(*types, "tokenizer.ggml.token_type"));
    if (raw.size() != vocab.tokens.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("GGUF tokenizer: tokenizer.ggml.token_type has ", raw.size(),
                       " entries but tokenizer.ggml.tokens has ", vocab.tokens.size()));
    }
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] < 0 || raw[i] > 6) {
        return absl::InvalidArgumentError(absl::StrCat("GGUF tokenizer: tokenizer.ggml.token_type[",
                                                       i, "] = ", raw[i],
                                                       " is not a token type (0..6)"));
      }
      vocab.types[i] = raw[i] == 0 ? TokenType::kNormal : static_cast<TokenType>(raw[i]);
    }
  }

  TANDEM_ASSIGN_OR_RETURN(const std::vector<std::string>* merges,
                          StringArray(md, "tokenizer.ggml.merges"));
  vocab.merges.resize(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    if (!SplitMerge((*merges)[i], &vocab.merges[i])) {
      return absl::InvalidArgumentError(absl::StrCat("GGUF tokenizer: tokenizer.ggml.merges[", i,
                                                     "] = \"", (*merges)[i],
                                                     "\" is not two parts separated by a space"));
    }
  }

  if (const Value* pre = md.Find("tokenizer.ggml.pre"); pre != nullptr) {
    const std::string* name = pre->AsString();
    if (name == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GGUF tokenizer: tokenizer.ggml.pre must be a string, found ", pre->ToString()));
    }
    TANDEM_ASSIGN_OR_RETURN(vocab.pre, PreTokenizerKindFromName(*name));
  } else {
    vocab.pre = PreTokenizerKind::kQwen2;
    vocab.warnings.push_back("GGUF tokenizer: tokenizer.ggml.pre is missing; using qwen2");
  }

  const int32_t n = vocab.size();
  TANDEM_RETURN_IF_ERROR(ReadSpecialId(md, "tokenizer.ggml.bos_token_id", n, &vocab.bos_id));
  TANDEM_RETURN_IF_ERROR(ReadSpecialId(md, "tokenizer.ggml.eos_token_id", n, &vocab.eos_id));
  TANDEM_RETURN_IF_ERROR(ReadSpecialId(md, "tokenizer.ggml.padding_token_id", n, &vocab.pad_id));
  TANDEM_RETURN_IF_ERROR(ReadSpecialId(md, "tokenizer.ggml.eot_token_id", n, &vocab.eot_id));
  TANDEM_RETURN_IF_ERROR(ReadSpecialId(md, "tokenizer.ggml.unknown_token_id", n, &vocab.unk_id));
  TANDEM_RETURN_IF_ERROR(ReadFlag(md, "tokenizer.ggml.add_bos_token", &vocab.add_bos));
  TANDEM_RETURN_IF_ERROR(ReadFlag(md, "tokenizer.ggml.add_eos_token", &vocab.add_eos));
  if (const Value* tmpl = md.Find("tokenizer.chat_template"); tmpl != nullptr) {
    const std::string* text = tmpl->AsString();
    if (text == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GGUF tokenizer: tokenizer.chat_template must be a string, found ", tmpl->ToString()));
    }
    vocab.chat_template = *text;
  }
  FinalizeSpecialTokens(&vocab);
  TANDEM_RETURN_IF_ERROR(vocab.Validate());
  return vocab;
}

absl::StatusOr<Vocabulary> Vocabulary::FromHfTokenizerJson(const std::string& path,
                                                           int32_t min_vocab_size) {
  Vocabulary vocab;
  TANDEM_ASSIGN_OR_RETURN(json root, ParseJsonFile(path));
  TANDEM_RETURN_IF_ERROR(ReadHfModel(path, root, min_vocab_size, &vocab));

  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  const std::filesystem::path config_path = dir / "tokenizer_config.json";
  std::error_code ec;
  if (std::filesystem::exists(config_path, ec)) {
    TANDEM_RETURN_IF_ERROR(ReadHfConfig(config_path.string(), &vocab));
  }
  const std::filesystem::path jinja_path = dir / "chat_template.jinja";
  if (!vocab.chat_template.has_value() && std::filesystem::exists(jinja_path, ec)) {
    TANDEM_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(jinja_path.string()));
    vocab.chat_template = std::move(text);
  }
  FinalizeSpecialTokens(&vocab);
  TANDEM_RETURN_IF_ERROR(vocab.Validate());
  return vocab;
}

}  // namespace tandem::text

namespace tandem::text {

void Vocabulary::AppendToGgufMetadata(format::Metadata* md) const {
  using format::Array;
  using format::Value;
  Array tokens_arr{format::ValueType::kString, std::vector<std::string>(tokens)};
  std::vector<int32_t> type_ids(types.size());
  for (size_t i = 0; i < types.size(); ++i) type_ids[i] = static_cast<int32_t>(types[i]);
  Array types_arr{format::ValueType::kInt32, std::move(type_ids)};
  std::vector<std::string> merge_strings;
  merge_strings.reserve(merges.size());
  for (const auto& [left, right] : merges) merge_strings.push_back(left + " " + right);
  Array merges_arr{format::ValueType::kString, std::move(merge_strings)};
  md->Set("tokenizer.ggml.model", Value::Str("gpt2"));
  md->Set("tokenizer.ggml.pre", Value::Str(PreTokenizerKindName(pre)));
  md->Set("tokenizer.ggml.tokens", Value::Arr(std::move(tokens_arr)));
  md->Set("tokenizer.ggml.token_type", Value::Arr(std::move(types_arr)));
  md->Set("tokenizer.ggml.merges", Value::Arr(std::move(merges_arr)));
  const std::pair<const char*, int32_t> ids[] = {{"tokenizer.ggml.bos_token_id", bos_id},
                                                 {"tokenizer.ggml.eos_token_id", eos_id},
                                                 {"tokenizer.ggml.padding_token_id", pad_id},
                                                 {"tokenizer.ggml.eot_token_id", eot_id},
                                                 {"tokenizer.ggml.unknown_token_id", unk_id}};
  for (const auto& [key, id] : ids) {
    if (id >= 0) md->Set(key, Value::U32(static_cast<uint32_t>(id)));
  }
  md->Set("tokenizer.ggml.add_bos_token", Value::Bool(add_bos));
  md->Set("tokenizer.ggml.add_eos_token", Value::Bool(add_eos));
  if (chat_template.has_value()) md->Set("tokenizer.chat_template", Value::Str(*chat_template));
}

}  // namespace tandem::text
