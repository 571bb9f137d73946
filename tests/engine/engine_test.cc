// Engine/Session behaviour and bad input: each mistake a user or a file can make is one clear
// error, and nothing is left half-done.
#include "runtime/engine/engine.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "runtime/engine/convert.h"
#include "runtime/format/gguf.h"
#include "tests/support/fixtures.h"

namespace tandem::engine {
namespace {

namespace fs = std::filesystem;

const std::string kHfDir = testing_support::FixturePath("hf/qwen3_next").string();
const std::string kTokenizer =
    testing_support::FixturePath("tokenizer/qwen2/tokenizer.json").string();

fs::path TempPath(const std::string& name) {
  return fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
}

TEST(EngineTest, GeneratesFromAnHfDirectoryWithATokenizer) {
  EngineOptions o;
  o.model = kHfDir;
  o.tokenizer = kTokenizer;
  o.n_ctx = 64;
  o.backend = "reference";
  auto engine = Engine::Load(o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  ASSERT_NE((*engine)->tokenizer(), nullptr);
  EXPECT_EQ((*engine)->backend_name(), "reference");
  auto ids = (*engine)->tokenizer()->Encode("The sea looks blue because", true);
  ASSERT_TRUE(ids.ok());
  auto session = (*engine)->NewSession();
  std::vector<float> logits;
  ASSERT_TRUE(session->Prefill(*ids, false, &logits).ok());
  EXPECT_EQ(logits.size(), static_cast<size_t>((*engine)->hparams().n_vocab));
  ASSERT_TRUE(session->Decode(5, &logits).ok());
  EXPECT_EQ(session->n_past(), static_cast<int>(ids->size()) + 1);
  EXPECT_EQ(session->stats().prompt_tokens, static_cast<int>(ids->size()));
  EXPECT_EQ(session->stats().decode_steps, 1);
}

// Engine::Load(o) refuses o as an invalid argument, before any weight is read, with a message
// that holds `what` (the value it refused and the choices).
void ExpectRefused(const EngineOptions& o, const std::string& what) {
  auto e = Engine::Load(o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find(what), std::string::npos) << e.status();
}

// --kernels names one of the CUDA backend's launch modes and --cache-type one of the KV cache's
// element types; a misspelt one is refused with the choices.
TEST(EngineTest, RefusesUnknownKernelModesAndCacheTypes) {
  EngineOptions o;
  o.model = kHfDir;
  o.kernels = "per-layer";
  ExpectRefused(o, "unknown --kernels 'per-layer' (choose auto, megakernel, per-phase or per-op)");
  o.kernels = "auto";
  o.cache_type = "q8_0";
  ExpectRefused(o, "unknown --cache-type 'q8_0' (choose f32 or f16)");
}

// The CPU backends take --cache-type f16 by rounding as the card does, and say that they keep
// f32 storage.
TEST(EngineTest, AnF16CacheOnTheReferenceBackendIsNoted) {
  EngineOptions o;
  o.model = kHfDir;
  o.backend = "reference";
  o.cache_type = "f16";
  auto e = Engine::Load(o);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_TRUE((*e)->f16_kv_cache());
  bool noted = false;
  for (const std::string& n : (*e)->notes()) noted |= n.find("held in f32") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(EngineTest, RefusesUnknownOrMissingBackends) {
  EngineOptions o;
  o.model = kHfDir;
  o.backend = "tpu";
  auto e = Engine::Load(o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("unknown backend 'tpu'"), std::string::npos);
  o.backend = "cuda";
  e = Engine::Load(o);
  if (!CudaBackendUnavailableReason().empty()) {
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.status().message().find("--backend reference"), std::string::npos);
  }
}

TEST(EngineTest, NamesMissingModelsAndUnreadableTokenizers) {
  EngineOptions o;
  o.model = "/nonexistent/model.gguf";
  auto e = Engine::Load(o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("/nonexistent/model.gguf"), std::string::npos);

  o.model = kHfDir;
  o.tokenizer = "/nonexistent/tokenizer.json";
  e = Engine::Load(o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("/nonexistent/tokenizer.json"), std::string::npos);

  const fs::path garbage = TempPath("tandem_bad_tokenizer.json");
  { std::ofstream(garbage) << "{ not json"; }
  o.tokenizer = garbage.string();
  e = Engine::Load(o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find(garbage.string()), std::string::npos) << e.status();
  fs::remove(garbage);
}

TEST(EngineTest, PromptLongerThanContextAndBadTokenIds) {
  EngineOptions o;
  o.model = kHfDir;
  o.n_ctx = 8;
  auto engine = Engine::Load(o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto session = (*engine)->NewSession();
  std::vector<float> logits;
  std::vector<int32_t> long_prompt(9, 1);
  absl::Status s = session->Prefill(long_prompt, false, &logits);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("exceed the context of 8"), std::string::npos) << s;
  EXPECT_EQ(session->n_past(), 0);
  s = session->Decode((*engine)->hparams().n_vocab + 3, &logits);
  EXPECT_NE(s.message().find("outside the vocabulary"), std::string::npos) << s;
  s = session->Decode(-1, &logits);
  EXPECT_NE(s.message().find("outside the vocabulary"), std::string::npos) << s;
}

TEST(EngineTest, RoutingLogGetsOneRecordPerToken) {
  const fs::path log = TempPath("tandem_engine_routing.log");
  fs::remove(log);
  EngineOptions o;
  o.model = kHfDir;
  o.routing_log = log.string();
  auto engine = Engine::Load(o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto session = (*engine)->NewSession();
  std::vector<float> logits;
  const std::vector<int32_t> prompt = {3, 4, 5, 6, 7};
  ASSERT_TRUE(session->Prefill(prompt, false, &logits).ok());
  ASSERT_TRUE(session->Decode(8, &logits).ok());
  ASSERT_TRUE(session->Decode(9, &logits).ok());
  const model::HParams& hp = (*engine)->hparams();
  scheduler::RoutingLogHeader h;
  h.n_layer = hp.n_layer;
  h.n_expert_used = hp.n_expert_used;
  h.model_name = kHfDir;
  EXPECT_EQ(fs::file_size(log), scheduler::EncodeRoutingLogHeader(h).size() + 7 * scheduler::RoutingRecordBytes(h));
  fs::remove(log);
}

// A converted fixture with one tensor dropped, or relabelled as another architecture.
absl::Status WriteVariant(const fs::path& src, const fs::path& dst, const std::string& drop,
                          const std::string& arch) {
  auto file = format::GgufFile::Open(src.string());
  if (!file.ok()) return file.status();
  format::Metadata md = (*file)->metadata();
  if (!arch.empty()) md.Set("general.architecture", format::Value::Str(arch));
  format::GgufWriter writer(md);
  for (const format::TensorInfo& t : (*file)->tensors()) {
    if (t.name == drop) continue;
    absl::Status s = writer.AddTensor(t.name, t.dims, t.type, std::span(t.data, t.nbytes));
    if (!s.ok()) return s;
  }
  return writer.Write(dst.string());
}

TEST(EngineTest, RefusesMissingTensorsAndUnknownArchitectures) {
  const fs::path good = TempPath("tandem_engine_good.gguf");
  const fs::path bad = TempPath("tandem_engine_bad.gguf");
  ASSERT_TRUE(ConvertHfToGguf(kHfDir, good.string(), "f32").ok());
  EngineOptions o;
  o.model = bad.string();

  ASSERT_TRUE(WriteVariant(good, bad, "blk.1.attn_k.weight", "").ok());
  auto e = Engine::Load(o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("blk.1.attn_k.weight"), std::string::npos) << e.status();

  ASSERT_TRUE(WriteVariant(good, bad, "", "llama").ok());
  e = Engine::Load(o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("llama"), std::string::npos) << e.status();
  EXPECT_NE(e.status().message().find("qwen3next"), std::string::npos) << e.status();
  fs::remove(good);
  fs::remove(bad);
}

}  // namespace
}  // namespace tandem::engine
