// Synthetic models: shapes and quant mixes, determinism (seed, thread count), value statistics of
// the generated weights, the RandomizeBlocks path, the vocabulary, and the GGUF round trip through
// OpenModel. Also the OpenModel errors users meet (unknown shape, not a GGUF, truncated file).
#include "runtime/model/synth.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "oneapi/tbb/task_arena.h"
#include "runtime/format/gguf.h"
#include "runtime/model/synth_vocab.h"
#include "runtime/model/validate.h"
#include "runtime/quant/codec.h"

namespace tandem::model {
namespace {

using quant::GgmlType;

constexpr const char* kTinyShapes[] = {"tiny-qwen3moe", "tiny-qwen3next", "tiny-qwen35moe",
                                       "tiny-flash-next"};

std::unique_ptr<Model> Synth(const std::string& shape, SynthOptions options = {},
                             bool materialize = true) {
  absl::StatusOr<std::unique_ptr<Model>> m = Synthesize(shape, options, materialize);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

// Unique per process, so that parallel ctest runs (and parallel builds) never share a file.
std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (std::to_string(::getpid()) + "-" + name))
      .string();
}

// Decoded values of a materialised tensor.
std::vector<float> Decode(const format::TensorInfo& t) {
  std::vector<float> out(static_cast<size_t>(t.elements()));
  const int64_t ne0 = t.dims[0];
  for (int64_t r = 0; r < t.rows(); ++r) {
    quant::DequantizeRow(t.type, t.data + r * t.row_bytes(), out.data() + r * ne0, ne0);
  }
  return out;
}

double Rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s / static_cast<double>(v.size()));
}

double Mean(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += x;
  return s / static_cast<double>(v.size());
}

TEST(SynthShapesTest, TinyShapesMeetTheirContract) {
  for (const char* name : kTinyShapes) {
    absl::StatusOr<const SynthShape*> shape = FindSynthShape(name);
    ASSERT_TRUE(shape.ok()) << shape.status();
    const HParams& hp = (*shape)->hparams;
    EXPECT_TRUE(hp.Validate().ok()) << name;
    EXPECT_GE(hp.n_layer, 4) << name;
    EXPECT_GE(hp.n_expert, 8) << name;
    EXPECT_GE(hp.n_expert_used, 2) << name;
    for (int d : {hp.n_embd, hp.n_ff_exp, hp.n_head * hp.head_dim, hp.n_vocab})
      EXPECT_EQ(d % 32, 0) << name;
    if (hp.is_hybrid()) {
      EXPECT_EQ(hp.ssm_d_inner % 32, 0);
      EXPECT_EQ(hp.n_ff_shexp % 32, 0);
      const TensorMap map(hp);
      EXPECT_GT(map.n_recurrent_layers(), 0) << name;
      EXPECT_GT(map.n_attention_layers(), 0) << name;
    }
    absl::StatusOr<std::unique_ptr<SynthPlan>> plan = PlanSynth(name, {});
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_GT((*plan)->total_bytes, 1u << 20) << name;
    EXPECT_LT((*plan)->total_bytes, 16u << 20) << name;
  }
  const HParams& flash = (*FindSynthShape("tiny-flash-next"))->hparams;
  EXPECT_GE(flash.n_layer, 8);
  EXPECT_EQ(flash.arch, Arch::kQwen3Next);
  EXPECT_EQ(flash.full_attention_interval, 4);
  EXPECT_EQ(flash.n_rot * 4, flash.head_dim);
  EXPECT_GT(flash.n_ff_shexp, 0);
}

TEST(SynthShapesTest, FullSizeShapes) {
  const HParams& f = (*FindSynthShape("flash-next-125b"))->hparams;
  EXPECT_EQ(f.arch, Arch::kQwen3Next);
  EXPECT_EQ(f.n_layer, 48);
  EXPECT_EQ(f.n_embd, 2048);
  EXPECT_EQ(f.full_attention_interval, 4);
  EXPECT_EQ(f.n_head, 16);
  EXPECT_EQ(f.n_head_kv, 2);
  EXPECT_EQ(f.head_dim, 256);
  EXPECT_EQ(f.n_rot, 64);
  EXPECT_FLOAT_EQ(f.rope_theta, 1e7f);
  EXPECT_EQ(f.ssm_n_group, 16);
  EXPECT_EQ(f.ssm_dt_rank, 32);
  EXPECT_EQ(f.ssm_d_state, 128);
  EXPECT_EQ(f.ssm_conv_kernel, 4);
  EXPECT_EQ(f.n_expert, 512);
  EXPECT_EQ(f.n_expert_used, 10);
  EXPECT_EQ(f.n_ff_exp, 768);
  EXPECT_EQ(f.n_ff_shexp, 768);
  EXPECT_EQ(f.n_vocab, 248320);
  EXPECT_EQ(f.n_ctx_train, 262144);
  const QuantMix& mix = (*FindSynthShape("flash-next-125b"))->default_mix;
  EXPECT_EQ(QuantMixToString(mix),
            "experts=q3_k,shexp=q8_0,dense=q8_0,router=f32,embed=q6_k,output=q6_k");
  EXPECT_EQ((*FindSynthShape("qwen3-30b-a3b"))->default_mix.experts, GgmlType::kQ4_K);
  EXPECT_EQ((*FindSynthShape("qwen3next-80b-a3b"))->default_mix.experts, GgmlType::kQ4_K);
  EXPECT_EQ((*FindSynthShape("qwen35-35b-a3b"))->hparams.n_vocab, 248320);

  absl::StatusOr<const SynthShape*> unknown = FindSynthShape("flash-next-999b");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(std::string(unknown.status().message()).find("tiny-qwen3moe"), std::string::npos);
}

TEST(QuantMixTest, ParsesAndRejects) {
  QuantMix mix;
  ASSERT_TRUE(ApplyQuantMix("experts=q3_k,dense=q4_0,embed=Q6_K", &mix).ok());
  EXPECT_EQ(mix.experts, GgmlType::kQ3_K);
  EXPECT_EQ(mix.dense, GgmlType::kQ4_0);
  EXPECT_EQ(mix.embed, GgmlType::kQ6_K);
  EXPECT_EQ(mix.router, GgmlType::kF32);
  EXPECT_EQ(mix.TypeFor(QuantCategory::kF32), GgmlType::kF32);
  EXPECT_TRUE(ApplyQuantMix("", &mix).ok());

  auto error = [](const std::string& text) {
    QuantMix m;
    absl::Status s = ApplyQuantMix(text, &m);
    EXPECT_FALSE(s.ok()) << text;
    return std::string(s.message());
  };
  EXPECT_NE(error("expert=q4_k").find("categories: experts, shexp, dense, router, embed, output"),
            std::string::npos);
  EXPECT_NE(error("experts=q9_k").find("q9_k"), std::string::npos);
  EXPECT_NE(error("experts=i8").find("no codec"), std::string::npos);
  EXPECT_NE(error("experts").find("CATEGORY=TYPE"), std::string::npos);
  EXPECT_NE(error("experts=").find("CATEGORY=TYPE"), std::string::npos);
  EXPECT_NE(error("experts=q4_k,experts=q8_0").find("twice"), std::string::npos);
}

TEST(QuantMixTest, BlockSizeMustDivideNe0) {
  SynthOptions options;
  options.quant = "experts=q4_k";
  absl::StatusOr<std::unique_ptr<SynthPlan>> plan = PlanSynth("tiny-qwen3moe", options);
  ASSERT_FALSE(plan.ok());
  const std::string msg(plan.status().message());
  EXPECT_NE(msg.find("blk.0.ffn_down_exps.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("q4_k"), std::string::npos) << msg;
  EXPECT_NE(msg.find("128"), std::string::npos) << msg;
  EXPECT_NE(msg.find("256"), std::string::npos) << msg;
}

TEST(SynthSpecTest, Parses) {
  std::string shape;
  SynthOptions options;
  ASSERT_TRUE(
      ParseSynthSpec("tiny-qwen3next?experts=q4_0&dense=q8_0&seed=7", &shape, &options).ok());
  EXPECT_EQ(shape, "tiny-qwen3next");
  EXPECT_EQ(options.seed, 7u);
  EXPECT_EQ(options.quant, "experts=q4_0,dense=q8_0");

  SynthOptions o2;
  ASSERT_TRUE(ParseSynthSpec("flash-next-125b?quant=experts=q4_k,embed=q8_0", &shape, &o2).ok());
  EXPECT_EQ(o2.quant, "experts=q4_k,embed=q8_0");
  EXPECT_EQ(o2.seed, kDefaultSynthSeed);

  SynthOptions o4;
  ASSERT_TRUE(ParseSynthSpec("tiny-qwen3moe?expert_ff=256&experts=q4_k", &shape, &o4).ok());
  EXPECT_EQ(o4.expert_ff, 256);

  SynthOptions o5;
  ASSERT_TRUE(ParseSynthSpec("tiny-qwen3moe?attention=16/2/128", &shape, &o5).ok());
  EXPECT_EQ(o5.attention_heads, 16);
  EXPECT_EQ(o5.attention_kv_heads, 2);
  EXPECT_EQ(o5.attention_head_dim, 128);

  SynthOptions o6;
  ASSERT_TRUE(ParseSynthSpec("tiny-qwen3next?deltanet=2/4/48", &shape, &o6).ok());
  EXPECT_EQ(o6.deltanet_key_heads, 2);
  EXPECT_EQ(o6.deltanet_value_heads, 4);
  EXPECT_EQ(o6.deltanet_head_dim, 48);

  SynthOptions o3;
  EXPECT_FALSE(ParseSynthSpec("tiny-qwen3moe?attention=16/2", &shape, &o3).ok());
  EXPECT_FALSE(ParseSynthSpec("tiny-qwen3moe?attention=16/0/128", &shape, &o3).ok());
  EXPECT_FALSE(ParseSynthSpec("tiny-qwen3moe?attention=16/2/128/4", &shape, &o3).ok());
  EXPECT_FALSE(ParseSynthSpec("tiny-qwen3moe?attention=a/b/c", &shape, &o3).ok());
  EXPECT_FALSE(ParseSynthSpec("tiny-qwen3next?deltanet=2/4", &shape, &o3).ok());
  EXPECT_FALSE(ParseSynthSpec("tiny-qwen3next?deltanet=2/0/48", &shape, &o3).ok());
  EXPECT_FALSE(ParseSynthSpec("tiny-qwen3moe?seed=x", &shape, &o3).ok());
  EXPECT_FALSE(ParseSynthSpec("tiny-qwen3moe?expert_ff=0", &shape, &o3).ok());
  EXPECT_FALSE(ParseSynthSpec("tiny-qwen3moe?expert_ff=-8", &shape, &o3).ok());
  EXPECT_FALSE(ParseSynthSpec("tiny-qwen3moe?expert_ff=12x", &shape, &o3).ok());
  EXPECT_FALSE(ParseSynthSpec("tiny-qwen3moe?colour=red", &shape, &o3).ok());
  EXPECT_FALSE(ParseSynthSpec("tiny-qwen3moe?experts=zz", &shape, &o3).ok());
  EXPECT_FALSE(ParseSynthSpec("?seed=1", &shape, &o3).ok());
}

TEST(SynthTest, TinyShapesMaterialiseAndValidate) {
  for (const char* name : kTinyShapes) {
    std::unique_ptr<Model> m = Synth(name);
    ASSERT_NE(m, nullptr);
    EXPECT_TRUE(m->materialized()) << name;
    EXPECT_EQ(m->source(), std::string("synth:") + name);
    const TensorMap map(m->hparams());
    const ValidationReport r = ValidateTensors(map, m->tensors());
    EXPECT_TRUE(r.ok()) << name << ": " << r.Summary();
    // The metadata describes the same hyper-parameters.
    absl::StatusOr<HParams> hp = HParamsFromGguf(m->metadata(), m->tensors());
    ASSERT_TRUE(hp.ok()) << hp.status();
    EXPECT_EQ(*hp, m->hparams()) << name;
    EXPECT_NE(m->Find("token_embd.weight"), nullptr);
    EXPECT_EQ(m->Find("no.such.tensor"), nullptr);
    // Every decoded value is finite.
    for (const format::TensorInfo& t : m->tensors()) {
      for (float v : Decode(t)) ASSERT_TRUE(std::isfinite(v)) << t.name;
    }
  }
}

TEST(SynthTest, DescribeOnlyIsFastAndHasNoBytes) {
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<Model> m = Synth("flash-next-125b", {}, /*materialize=*/false);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_NE(m, nullptr);
  EXPECT_FALSE(m->materialized());
  const TensorMap map(m->hparams());
  const ValidationReport r = ValidateTensors(map, m->tensors());
  EXPECT_TRUE(r.ok()) << r.Summary();
  EXPECT_EQ(r.layers.size(), 48u);
  EXPECT_EQ(r.total_experts(), 24576);
  EXPECT_GT(r.total_bytes, 50ull * 1000 * 1000 * 1000);
  // Generous bound (sanitizer builds are slow); typical release time is well under 0.2 s.
  EXPECT_LT(secs, 5.0);
}

TEST(SynthTest, SameSeedSameBytesOtherSeedOtherBytes) {
  SynthOptions a;
  a.seed = 11;
  std::unique_ptr<Model> m1 = Synth("tiny-qwen35moe", a);
  std::unique_ptr<Model> m2 = Synth("tiny-qwen35moe", a);
  SynthOptions b;
  b.seed = 12;
  std::unique_ptr<Model> m3 = Synth("tiny-qwen35moe", b);
  ASSERT_TRUE(m1 && m2 && m3);
  ASSERT_EQ(m1->tensors().size(), m3->tensors().size());
  for (size_t i = 0; i < m1->tensors().size(); ++i) {
    const format::TensorInfo& t1 = m1->tensors()[i];
    const format::TensorInfo& t2 = m2->tensors()[i];
    const format::TensorInfo& t3 = m3->tensors()[i];
    EXPECT_EQ(std::memcmp(t1.data, t2.data, t1.nbytes), 0) << t1.name;
    EXPECT_NE(std::memcmp(t1.data, t3.data, t1.nbytes), 0) << t1.name;
  }
  // Tensors of one model differ from each other (per-tensor seeds).
  EXPECT_NE(std::memcmp(m1->Find("blk.0.ffn_gate_exps.weight")->data,
                        m1->Find("blk.0.ffn_up_exps.weight")->data,
                        m1->Find("blk.0.ffn_up_exps.weight")->nbytes),
            0);
}

TEST(SynthTest, ThreadCountDoesNotChangeBytes) {
  SynthOptions options;
  options.randomize_threshold = 64 << 10;  // the expert tensors take the RandomizeBlocks path too
  std::unique_ptr<Model> many = Synth("tiny-flash-next", options);
  std::unique_ptr<Model> one;
  tbb::task_arena arena(1);
  arena.execute([&] { one = Synth("tiny-flash-next", options); });
  ASSERT_TRUE(many && one);
  for (size_t i = 0; i < many->tensors().size(); ++i) {
    const format::TensorInfo& a = many->tensors()[i];
    EXPECT_EQ(std::memcmp(a.data, one->tensors()[i].data, a.nbytes), 0) << a.name;
  }
}

TEST(SynthTest, ValueStatistics) {
  std::unique_ptr<Model> m = Synth("tiny-flash-next");
  ASSERT_NE(m, nullptr);
  const HParams& hp = m->hparams();
  auto values = [&](const std::string& name) {
    const format::TensorInfo* t = m->Find(name);
    EXPECT_NE(t, nullptr) << name;
    return t ? Decode(*t) : std::vector<float>{0.0f};
  };
  // Projections: RMS 1/sqrt(fan_in), mean ~0.
  std::vector<float> up = values("blk.0.ffn_up_exps.weight");
  EXPECT_NEAR(Rms(up), 1.0 / std::sqrt(hp.n_embd), 0.05 / std::sqrt(hp.n_embd));
  EXPECT_NEAR(Mean(up), 0.0, 0.01 / std::sqrt(hp.n_embd));
  std::vector<float> down = values("blk.0.ffn_down_exps.weight");
  EXPECT_NEAR(Rms(down), 1.0 / std::sqrt(hp.n_ff_exp), 0.05 / std::sqrt(hp.n_ff_exp));
  // Embeddings RMS ~1; norms near 1.
  EXPECT_NEAR(Rms(values("token_embd.weight")), 1.0, 0.05);
  std::vector<float> norm = values("blk.1.attn_norm.weight");
  EXPECT_NEAR(Mean(norm), 1.0, 0.03);
  for (float v : norm) EXPECT_GT(v, 0.5f);
  // ssm_a in [-16, -1], ssm_dt.bias in [0.5, 1.5].
  for (float v : values("blk.0.ssm_a")) {
    EXPECT_GE(v, -16.0f);
    EXPECT_LE(v, -1.0f);
  }
  for (float v : values("blk.0.ssm_dt.bias")) {
    EXPECT_GE(v, 0.5f);
    EXPECT_LE(v, 1.5f);
  }
  // Router: for a random unit-RMS input, the routing distribution is neither uniform nor one-hot.
  const std::vector<float> router = values("blk.0.ffn_gate_inp.weight");
  std::vector<float> x(hp.n_embd);
  for (int i = 0; i < hp.n_embd; ++i) x[i] = (i % 7 - 3) / 2.0f;
  const double x_rms = Rms(x);
  for (float& v : x) v = static_cast<float>(v / x_rms);
  std::vector<double> p(hp.n_expert);
  double max_logit = -1e30, sum = 0;
  for (int e = 0; e < hp.n_expert; ++e) {
    double l = 0;
    for (int i = 0; i < hp.n_embd; ++i) l += router[e * hp.n_embd + i] * x[i];
    p[e] = l;
    max_logit = std::max(max_logit, l);
  }
  for (double& v : p) sum += (v = std::exp(v - max_logit));
  const double top = *std::max_element(p.begin(), p.end()) / sum;
  EXPECT_GT(top, 1.5 / hp.n_expert);
  EXPECT_LT(top, 0.95);
}

TEST(SynthTest, RandomizeBlocksPathForBigTensors) {
  SynthOptions exact;
  SynthOptions fast;
  fast.randomize_threshold = 0;  // every tensor counts as big
  std::unique_ptr<Model> a = Synth("tiny-qwen3next", exact);
  std::unique_ptr<Model> b = Synth("tiny-qwen3next", fast);
  ASSERT_TRUE(a && b);
  const format::TensorInfo* ea = a->Find("blk.0.ffn_gate_exps.weight");
  const format::TensorInfo* eb = b->Find("blk.0.ffn_gate_exps.weight");
  // Different generator, same statistics.
  EXPECT_NE(std::memcmp(ea->data, eb->data, ea->nbytes), 0);
  const double target = 1.0 / std::sqrt(a->hparams().n_embd);
  EXPECT_NEAR(Rms(Decode(*eb)), target, 0.15 * target);
  EXPECT_NEAR(Mean(Decode(*eb)), 0.0, 0.05 * target);
  // Norms and other non-zero-mean tensors never take the RandomizeBlocks path.
  const format::TensorInfo* na = a->Find("blk.0.attn_norm.weight");
  const format::TensorInfo* nb = b->Find("blk.0.attn_norm.weight");
  EXPECT_EQ(std::memcmp(na->data, nb->data, na->nbytes), 0);
  const TensorMap map(b->hparams());
  EXPECT_TRUE(ValidateTensors(map, b->tensors()).ok());
}

TEST(SynthVocabTest, BytesMergesAndSpecials) {
  // The byte alphabet itself is runtime/text's (tests/text/utf8_test.cc).
  const SynthVocab& v = BaseSynthVocab();
  EXPECT_EQ(v.tokens[0], "!");
  std::set<std::string> unique(v.tokens.begin(), v.tokens.end());
  EXPECT_EQ(unique.size(), v.tokens.size());
  EXPECT_GE(v.merges.size(), 200u);
  EXPECT_LE(v.merges.size(), 400u);
  EXPECT_EQ(v.tokens[v.bos_id], "<|endoftext|>");
  EXPECT_EQ(v.tokens[v.eos_id], "<|im_end|>");
  EXPECT_EQ(v.token_types[v.eos_id], kTokenControl);
  auto think = std::find(v.tokens.begin(), v.tokens.end(), "<think>");
  ASSERT_NE(think, v.tokens.end());
  EXPECT_EQ(v.token_types[think - v.tokens.begin()], kTokenUserDefined);
  for (const std::string& merge : v.merges) {
    const size_t space = merge.find(' ');
    ASSERT_NE(space, std::string::npos);
    ASSERT_GT(space, 0u);
    EXPECT_EQ(merge.find(' ', space + 1), std::string::npos) << merge;
    // The merged symbol is a token.
    EXPECT_TRUE(unique.contains(merge.substr(0, space) + merge.substr(space + 1))) << merge;
  }
  EXPECT_TRUE(unique.contains("\xC4\xA0the"));  // "Ġthe": a frequent word got merged
  EXPECT_EQ(TinyVocabSize() % 32, 0);
  EXPECT_GE(TinyVocabSize(), static_cast<int>(v.tokens.size()));
}

TEST(SynthVocabTest, Metadata) {
  std::unique_ptr<Model> m = Synth("tiny-qwen35moe", {}, false);
  const format::Metadata& md = m->metadata();
  EXPECT_EQ(md.GetString("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(md.GetString("tokenizer.ggml.pre"), "qwen35");
  EXPECT_EQ(md.GetString("general.architecture"), "qwen35moe");
  EXPECT_EQ(md.GetString("general.name"), "tiny-qwen35moe");
  EXPECT_EQ(md.GetInt("general.quantization_version"), 2);
  EXPECT_EQ(md.Find("tokenizer.ggml.add_bos_token")->AsBool(), false);
  EXPECT_EQ(md.GetString("tokenizer.chat_template"), std::string(kSynthChatTemplate));
  const format::Array* tokens = md.Find("tokenizer.ggml.tokens")->AsArray();
  const format::Array* types = md.Find("tokenizer.ggml.token_type")->AsArray();
  ASSERT_TRUE(tokens && types);
  EXPECT_EQ(static_cast<int>(tokens->size()), m->hparams().n_vocab);
  EXPECT_EQ(types->elem_type, format::ValueType::kInt32);
  const auto& type_values = std::get<std::vector<int32_t>>(types->values);
  EXPECT_EQ(type_values.back(), kTokenUnused);
  EXPECT_EQ(md.Find("tokenizer.ggml.eos_token_id")->type(), format::ValueType::kUint32);

  std::unique_ptr<Model> big = Synth("qwen3-30b-a3b", {}, false);
  EXPECT_EQ(big->metadata().GetString("tokenizer.ggml.pre"), "qwen2");
  const auto& big_tokens = std::get<std::vector<std::string>>(
      big->metadata().Find("tokenizer.ggml.tokens")->AsArray()->values);
  EXPECT_EQ(big_tokens.size(), 151936u);
  EXPECT_EQ(big_tokens.back(), "[PAD151935]");
}

TEST(SynthGgufTest, WriteReadBackRevalidate) {
  const std::string path = TempPath("tandem-synth-tiny-qwen3next.gguf");
  SynthOptions options;
  options.seed = 5;
  uint64_t last_done = 0, last_total = 0;
  options.progress = [&](uint64_t done, uint64_t total) {
    EXPECT_GE(done, last_done);
    last_done = done;
    last_total = total;
  };
  ASSERT_TRUE(WriteSynthGguf("tiny-qwen3next", options, path).ok());
  EXPECT_GT(last_total, 0u);
  EXPECT_EQ(last_done, last_total);

  absl::StatusOr<std::unique_ptr<format::GgufFile>> file = format::GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  options.progress = nullptr;
  std::unique_ptr<Model> mem = Synth("tiny-qwen3next", options);
  ASSERT_NE(mem, nullptr);
  ASSERT_EQ((*file)->tensors().size(), mem->tensors().size());
  for (size_t i = 0; i < mem->tensors().size(); ++i) {
    const format::TensorInfo& f = (*file)->tensors()[i];
    const format::TensorInfo& t = mem->tensors()[i];
    EXPECT_EQ(f.name, t.name);
    EXPECT_EQ(f.dims, t.dims);
    EXPECT_EQ(f.type, t.type);
    ASSERT_EQ(f.nbytes, t.nbytes);
    EXPECT_EQ(std::memcmp(f.data, t.data, t.nbytes), 0) << t.name;
  }
  EXPECT_EQ((*file)->metadata(), mem->metadata());

  // Through OpenModel: the file validates and describes the same model.
  absl::StatusOr<std::unique_ptr<Model>> opened = OpenModel(path);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ((*opened)->hparams(), mem->hparams());
  EXPECT_TRUE((*opened)->materialized());
  const TensorMap map((*opened)->hparams());
  EXPECT_TRUE(ValidateTensors(map, (*opened)->tensors()).ok());
  std::filesystem::remove(path);
}

TEST(OpenModelTest, SynthSpecs) {
  OpenOptions describe;
  describe.materialize = false;
  absl::StatusOr<std::unique_ptr<Model>> m =
      OpenModel("synth:tiny-qwen3moe?seed=3&experts=q4_0", describe);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->Find("blk.0.ffn_up_exps.weight")->type, GgmlType::kQ4_0);
  EXPECT_EQ((*m)->source(), "synth:tiny-qwen3moe?quant=experts=q4_0&seed=3");
  EXPECT_EQ((*m)->metadata().GetInt("tandem.synth.seed"), 3);

  // expert_ff resizes the routed experts (here so that q4_k fits their down rows).
  absl::StatusOr<std::unique_ptr<Model>> wide =
      OpenModel("synth:tiny-qwen3moe?expert_ff=256&experts=q4_k", describe);
  ASSERT_TRUE(wide.ok()) << wide.status();
  EXPECT_EQ((*wide)->Find("blk.0.ffn_down_exps.weight")->dim(0), 256);
  EXPECT_EQ((*wide)->Find("blk.0.ffn_down_exps.weight")->type, GgmlType::kQ4_K);
  EXPECT_EQ((*wide)->source(), "synth:tiny-qwen3moe?expert_ff=256&quant=experts=q4_k");

  // attention resizes the attention heads and keeps the rotary share of a head.
  absl::StatusOr<std::unique_ptr<Model>> heads =
      OpenModel("synth:tiny-qwen3next?attention=16/2/256", describe);
  ASSERT_TRUE(heads.ok()) << heads.status();
  EXPECT_EQ((*heads)->hparams().n_head, 16);
  EXPECT_EQ((*heads)->hparams().n_head_kv, 2);
  EXPECT_EQ((*heads)->hparams().head_dim, 256);
  EXPECT_EQ((*heads)->hparams().n_rot, 64);  // a quarter of the head, as the shape's 16 of 64
  EXPECT_EQ((*heads)->source(), "synth:tiny-qwen3next?attention=16/2/256");
  absl::StatusOr<std::unique_ptr<Model>> full =
      OpenModel("synth:tiny-qwen3moe?attention=16/2/128", describe);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ((*full)->hparams().n_rot, 128);
  // Shapes whose rotary sections are fixed, and heads that break the model's rules, are refused.
  absl::StatusOr<std::unique_ptr<Model>> sections =
      OpenModel("synth:tiny-qwen35moe?attention=16/2/128", describe);
  ASSERT_FALSE(sections.ok());
  EXPECT_NE(std::string(sections.status().message()).find("M-RoPE"), std::string::npos);
  EXPECT_FALSE(OpenModel("synth:tiny-qwen3moe?attention=16/3/128", describe).ok());

  // deltanet resizes the DeltaNet heads (keys and values share the head width).
  absl::StatusOr<std::unique_ptr<Model>> dn =
      OpenModel("synth:tiny-qwen3next?deltanet=2/4/48", describe);
  ASSERT_TRUE(dn.ok()) << dn.status();
  EXPECT_EQ((*dn)->hparams().ssm_n_group, 2);
  EXPECT_EQ((*dn)->hparams().ssm_dt_rank, 4);
  EXPECT_EQ((*dn)->hparams().ssm_d_state, 48);
  EXPECT_EQ((*dn)->hparams().head_v_dim(), 48);
  EXPECT_EQ((*dn)->source(), "synth:tiny-qwen3next?deltanet=2/4/48");
  // Value heads must be a multiple of key heads; shapes without DeltaNet layers refuse the key.
  EXPECT_FALSE(OpenModel("synth:tiny-qwen3next?deltanet=4/6/48", describe).ok());
  absl::StatusOr<std::unique_ptr<Model>> no_dn =
      OpenModel("synth:tiny-qwen3moe?deltanet=2/4/48", describe);
  ASSERT_FALSE(no_dn.ok());
  EXPECT_NE(std::string(no_dn.status().message()).find("DeltaNet"), std::string::npos);

  absl::StatusOr<std::unique_ptr<Model>> bad = OpenModel("synth:nope");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("unknown synth shape"), std::string::npos);
}

TEST(OpenModelTest, ErrorsForOtherInputs) {
  absl::StatusOr<std::unique_ptr<Model>> missing = OpenModel("/nonexistent/model.gguf");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(std::string(missing.status().message()).find("/nonexistent/model.gguf"),
            std::string::npos);

  // An empty directory is no model (no GGUF, no config.json).
  const std::string dir = TempPath("tandem-model-dir");
  std::filesystem::create_directories(dir);
  EXPECT_FALSE(OpenModel(dir).ok());
  std::filesystem::remove_all(dir);

  // A file that is neither GGUF nor named .gguf: one line naming the file and what is accepted.
  const std::string text = TempPath("tandem-not-a-model.txt");
  std::ofstream(text) << "hello";
  absl::StatusOr<std::unique_ptr<Model>> t = OpenModel(text);
  ASSERT_FALSE(t.ok());
  const std::string msg(t.status().message());
  EXPECT_NE(msg.find(text), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  std::filesystem::remove(text);
}

TEST(OpenModelTest, TruncatedAndInvalidGguf) {
  const std::string path = TempPath("tandem-trunc.gguf");
  ASSERT_TRUE(WriteSynthGguf("tiny-qwen3moe", {}, path).ok());
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size / 2);
  absl::StatusOr<std::unique_ptr<Model>> m = OpenModel(path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(std::string(m.status().message()).find("trunc"), std::string::npos) << m.status();
  std::filesystem::remove(path);

  // A structurally invalid file (a tensor missing): an error listing it, unless validate = false.
  absl::StatusOr<std::unique_ptr<SynthPlan>> plan = PlanSynth("tiny-qwen3moe", {});
  ASSERT_TRUE(plan.ok());
  format::GgufWriter writer((*plan)->metadata);
  std::vector<uint8_t> zeros(1 << 20);
  for (const format::TensorInfo& t : (*plan)->tensors) {
    if (t.name == "blk.2.attn_v.weight") continue;
    ASSERT_TRUE(writer
                    .AddTensor(t.name, t.dims, t.type,
                               [](std::span<uint8_t> out) {
                                 std::fill(out.begin(), out.end(), 0);
                                 return absl::OkStatus();
                               })
                    .ok());
  }
  const std::string invalid = TempPath("tandem-invalid.gguf");
  ASSERT_TRUE(writer.Write(invalid).ok());
  absl::StatusOr<std::unique_ptr<Model>> strict = OpenModel(invalid);
  ASSERT_FALSE(strict.ok());
  EXPECT_NE(std::string(strict.status().message()).find("blk.2.attn_v.weight: missing"),
            std::string::npos)
      << strict.status();
  OpenOptions inspect;
  inspect.materialize = false;
  inspect.validate = false;
  absl::StatusOr<std::unique_ptr<Model>> lenient = OpenModel(invalid, inspect);
  ASSERT_TRUE(lenient.ok()) << lenient.status();
  const TensorMap map((*lenient)->hparams());
  const ValidationReport r = ValidateTensors(map, (*lenient)->tensors());
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_EQ(r.problems[0].kind, ProblemKind::kMissing);
  std::filesystem::remove(invalid);
}

}  // namespace
}  // namespace tandem::model
