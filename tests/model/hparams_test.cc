// Hyper-parameters from GGUF metadata and from config.json samples (values of model-math §2.1,
// §3.1, §4.2), the GGUF round trip, and the errors users see for bad or unsupported input.
#include "runtime/model/hparams.h"

#include <gtest/gtest.h>

#include "nlohmann/json.hpp"

namespace tandem::model {
namespace {

using format::Metadata;
using format::Value;

// Qwen3-30B-A3B config.json (the keys that matter; model-math §2.1).
const char kQwen3MoeConfig[] = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
  "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
  "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
  "num_experts_per_tok": 8, "norm_topk_prob": true, "decoder_sparse_step": 1, "mlp_only_layers": [],
  "rope_theta": 1000000.0, "rope_scaling": null, "rms_norm_eps": 1e-06, "vocab_size": 151936,
  "max_position_embeddings": 40960, "tie_word_embeddings": false, "bos_token_id": 151643,
  "eos_token_id": 151645})";

// Qwen3-Next-80B-A3B-Instruct (model-math §3.1).
const char kQwen3NextConfig[] = R"({
  "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
  "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 16, "num_key_value_heads": 2,
  "head_dim": 256, "partial_rotary_factor": 0.25, "rope_theta": 10000000, "intermediate_size": 5120,
  "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512, "num_experts": 512,
  "num_experts_per_tok": 10, "norm_topk_prob": true, "decoder_sparse_step": 1, "mlp_only_layers": [],
  "full_attention_interval": 4, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
  "linear_num_key_heads": 16, "linear_value_head_dim": 128, "linear_num_value_heads": 32,
  "rms_norm_eps": 1e-06, "vocab_size": 151936, "max_position_embeddings": 262144,
  "mtp_num_hidden_layers": 1, "tie_word_embeddings": false})";

// Qwen3.5-35B-A3B: multimodal wrapper, language model under text_config, rope_parameters (§4.2).
const char kQwen35MoeConfig[] = R"({
  "architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
  "image_token_id": 248056, "video_token_id": 248057,
  "text_config": {
    "model_type": "qwen3_5_moe_text", "hidden_size": 2048, "num_hidden_layers": 40,
    "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
    "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512, "num_experts": 256,
    "num_experts_per_tok": 8, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
    "linear_num_key_heads": 16, "linear_value_head_dim": 128, "linear_num_value_heads": 32,
    "full_attention_interval": 4, "rms_norm_eps": 1e-06, "vocab_size": 248320,
    "max_position_embeddings": 262144, "mtp_num_hidden_layers": 1,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
                        "mrope_section": [11, 11, 10], "mrope_interleaved": true}
  },
  "vision_config": {"depth": 27, "hidden_size": 1152}
})";

TEST(ArchTest, NamesRoundTrip) {
  for (Arch arch : {Arch::kQwen3Moe, Arch::kQwen3Next, Arch::kQwen35Moe}) {
    absl::StatusOr<Arch> back = ArchFromGgufName(ArchGgufName(arch));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, arch);
  }
  EXPECT_STREQ(ArchGgufName(Arch::kQwen35Moe), "qwen35moe");
  EXPECT_STREQ(ArchHfName(Arch::kQwen3Next), "qwen3_next");
}

TEST(ArchTest, UnknownArchListsSupported) {
  absl::StatusOr<Arch> a = ArchFromGgufName("llama");
  ASSERT_FALSE(a.ok());
  const std::string msg(a.status().message());
  EXPECT_NE(msg.find("llama"), std::string::npos);
  EXPECT_NE(msg.find("qwen3moe, qwen3next, qwen35moe"), std::string::npos) << msg;
}

TEST(HfConfigTest, Qwen3Moe30B) {
  absl::StatusOr<HParams> hp = HParamsFromHfConfig(nlohmann::json::parse(kQwen3MoeConfig));
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->arch, Arch::kQwen3Moe);
  EXPECT_EQ(hp->n_layer, 48);
  EXPECT_EQ(hp->n_embd, 2048);
  EXPECT_EQ(hp->n_head, 32);
  EXPECT_EQ(hp->n_head_kv, 4);
  EXPECT_EQ(hp->head_dim, 128);
  EXPECT_EQ(hp->n_rot, 128);
  EXPECT_FLOAT_EQ(hp->rope_theta, 1e6f);
  EXPECT_EQ(hp->n_expert, 128);
  EXPECT_EQ(hp->n_expert_used, 8);
  EXPECT_EQ(hp->n_ff_exp, 768);
  EXPECT_EQ(hp->n_ff_shexp, 0);
  EXPECT_EQ(hp->n_ff, 6144);
  EXPECT_EQ(hp->n_vocab, 151936);
  EXPECT_EQ(hp->n_ctx_train, 40960);
  EXPECT_TRUE(hp->norm_topk_prob);
  EXPECT_FALSE(hp->is_hybrid());
}

TEST(HfConfigTest, Qwen3MoeClassDefaultsFillOmittedKeys) {
  // transformers' Qwen3MoeConfig defaults: 24 layers, norm_topk_prob false, head_dim = 2048 / 32.
  absl::StatusOr<HParams> hp = HParamsFromHfConfig(nlohmann::json{{"model_type", "qwen3_moe"}});
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->n_layer, 24);
  EXPECT_EQ(hp->head_dim, 64);
  EXPECT_FALSE(hp->norm_topk_prob);
  EXPECT_EQ(hp->n_expert, 128);
  EXPECT_FLOAT_EQ(hp->rope_theta, 10000.0f);
}

TEST(HfConfigTest, Qwen3Next80B) {
  absl::StatusOr<HParams> hp = HParamsFromHfConfig(nlohmann::json::parse(kQwen3NextConfig));
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->arch, Arch::kQwen3Next);
  EXPECT_EQ(hp->n_layer, 48);
  EXPECT_EQ(hp->head_dim, 256);
  EXPECT_EQ(hp->n_rot, 64);
  EXPECT_FLOAT_EQ(hp->rope_theta, 1e7f);
  EXPECT_EQ(hp->n_expert, 512);
  EXPECT_EQ(hp->n_expert_used, 10);
  EXPECT_EQ(hp->n_ff_exp, 512);
  EXPECT_EQ(hp->n_ff_shexp, 512);
  EXPECT_EQ(hp->full_attention_interval, 4);
  EXPECT_EQ(hp->ssm_conv_kernel, 4);
  EXPECT_EQ(hp->ssm_d_state, 128);
  EXPECT_EQ(hp->ssm_n_group, 16);
  EXPECT_EQ(hp->ssm_dt_rank, 32);
  EXPECT_EQ(hp->ssm_d_inner, 4096);
  EXPECT_EQ(hp->ssm_conv_dim(), 8192);
  EXPECT_EQ(hp->head_v_dim(), 128);
  EXPECT_EQ(hp->nextn_predict_layers, 0);  // the qwen3next converter drops MTP
  EXPECT_TRUE(hp->IsRecurrentLayer(0));
  EXPECT_FALSE(hp->IsRecurrentLayer(3));
  EXPECT_FALSE(hp->IsRecurrentLayer(47));
}

TEST(HfConfigTest, Qwen3NextLayerTypes) {
  nlohmann::json config = nlohmann::json::parse(kQwen3NextConfig);
  config["num_hidden_layers"] = 6;
  config["layer_types"] = {"linear_attention", "linear_attention", "full_attention",
                           "linear_attention", "linear_attention", "full_attention"};
  absl::StatusOr<HParams> hp = HParamsFromHfConfig(config);
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->full_attention_interval, 3);

  config["layer_types"][4] = "full_attention";
  hp = HParamsFromHfConfig(config);
  ASSERT_FALSE(hp.ok());
  EXPECT_NE(std::string(hp.status().message()).find("layer_types"), std::string::npos);
}

TEST(HfConfigTest, Qwen35MoeTextConfigNesting) {
  absl::StatusOr<HParams> hp = HParamsFromHfConfig(nlohmann::json::parse(kQwen35MoeConfig));
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->arch, Arch::kQwen35Moe);
  EXPECT_EQ(hp->n_layer, 40);
  EXPECT_EQ(hp->n_embd, 2048);
  EXPECT_EQ(hp->n_vocab, 248320);
  EXPECT_EQ(hp->n_expert, 256);
  EXPECT_EQ(hp->n_expert_used, 8);
  EXPECT_EQ(hp->n_rot, 64);
  EXPECT_FLOAT_EQ(hp->rope_theta, 1e7f);
  EXPECT_EQ(hp->rope_sections, (std::array<int, 4>{11, 11, 10, 0}));
  EXPECT_EQ(hp->nextn_predict_layers, 1);
  EXPECT_TRUE(hp->norm_topk_prob);  // always renormalises
  EXPECT_EQ(hp->ssm_d_inner, 4096);
}

TEST(HfConfigTest, Qwen35MoeAlwaysRenormalises) {
  nlohmann::json config = nlohmann::json::parse(kQwen35MoeConfig);
  config["text_config"]["norm_topk_prob"] = false;
  absl::StatusOr<HParams> hp = HParamsFromHfConfig(config);
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_TRUE(hp->norm_topk_prob);
}

TEST(HfConfigTest, Errors) {
  absl::StatusOr<HParams> hp = HParamsFromHfConfig(nlohmann::json{{"model_type", "llama"}});
  ASSERT_FALSE(hp.ok());
  EXPECT_NE(std::string(hp.status().message()).find("qwen3_5_moe"), std::string::npos);

  nlohmann::json config = nlohmann::json::parse(kQwen3MoeConfig);
  config["num_attention_heads"] = "many";
  hp = HParamsFromHfConfig(config);
  ASSERT_FALSE(hp.ok());
  EXPECT_NE(std::string(hp.status().message()).find("num_attention_heads"), std::string::npos);

  config = nlohmann::json::parse(kQwen3MoeConfig);
  config["decoder_sparse_step"] = 2;
  EXPECT_FALSE(HParamsFromHfConfig(config).ok());

  config = nlohmann::json::parse(kQwen3MoeConfig);
  config["num_experts_per_tok"] = 200;
  hp = HParamsFromHfConfig(config);
  ASSERT_FALSE(hp.ok());
  EXPECT_NE(std::string(hp.status().message()).find("n_expert_used"), std::string::npos);
}

// Metadata as llama.cpp's converter writes it for Qwen3-30B-A3B (model-math §2.4).
Metadata Qwen3MoeGguf() {
  Metadata md;
  md.Set("general.architecture", Value::Str("qwen3moe"));
  md.Set("qwen3moe.block_count", Value::U32(48));
  md.Set("qwen3moe.context_length", Value::U32(40960));
  md.Set("qwen3moe.embedding_length", Value::U32(2048));
  md.Set("qwen3moe.feed_forward_length", Value::U32(6144));
  md.Set("qwen3moe.attention.head_count", Value::U32(32));
  md.Set("qwen3moe.attention.head_count_kv", Value::U32(4));
  md.Set("qwen3moe.attention.key_length", Value::U32(128));
  md.Set("qwen3moe.attention.value_length", Value::U32(128));
  md.Set("qwen3moe.rope.freq_base", Value::F32(1e6f));
  md.Set("qwen3moe.attention.layer_norm_rms_epsilon", Value::F32(1e-6f));
  md.Set("qwen3moe.expert_count", Value::U32(128));
  md.Set("qwen3moe.expert_used_count", Value::U32(8));
  md.Set("qwen3moe.expert_feed_forward_length", Value::U32(768));
  format::Array tokens;
  tokens.elem_type = format::ValueType::kString;
  tokens.values = std::vector<std::string>(151936, "x");
  md.Set("tokenizer.ggml.tokens", Value::Arr(std::move(tokens)));
  return md;
}

TEST(GgufHParamsTest, Qwen3Moe) {
  absl::StatusOr<HParams> hp = HParamsFromGguf(Qwen3MoeGguf());
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->arch, Arch::kQwen3Moe);
  EXPECT_EQ(hp->n_layer, 48);
  EXPECT_EQ(hp->n_vocab, 151936);
  EXPECT_EQ(hp->head_dim, 128);
  EXPECT_EQ(hp->n_rot, 128);  // rope.dimension_count absent: the whole head
  EXPECT_EQ(hp->n_ff, 6144);
  EXPECT_FLOAT_EQ(hp->rms_eps, 1e-6f);
}

TEST(GgufHParamsTest, MissingKeyIsNamed) {
  Metadata md = Qwen3MoeGguf();
  Metadata without;
  for (const auto& [key, value] : md.entries()) {
    if (key != "qwen3moe.expert_count") without.Set(key, value);
  }
  absl::StatusOr<HParams> hp = HParamsFromGguf(without);
  ASSERT_FALSE(hp.ok());
  EXPECT_NE(std::string(hp.status().message()).find("qwen3moe.expert_count"), std::string::npos)
      << hp.status();

  Metadata no_arch;
  EXPECT_NE(std::string(HParamsFromGguf(no_arch).status().message()).find("general.architecture"),
            std::string::npos);
}

TEST(GgufHParamsTest, WrongValueTypeIsNamed) {
  Metadata md = Qwen3MoeGguf();
  md.Set("qwen3moe.block_count", Value::Str("48"));
  absl::StatusOr<HParams> hp = HParamsFromGguf(md);
  ASSERT_FALSE(hp.ok());
  EXPECT_NE(std::string(hp.status().message()).find("qwen3moe.block_count"), std::string::npos);
}

TEST(GgufHParamsTest, VocabFromTokenEmbdWhenNoTokens) {
  Metadata md;
  const Metadata full = Qwen3MoeGguf();
  for (const auto& [key, value] : full.entries()) {
    if (key != "tokenizer.ggml.tokens") md.Set(key, value);
  }
  EXPECT_FALSE(HParamsFromGguf(md).ok());
  format::TensorInfo embd;
  embd.name = "token_embd.weight";
  embd.dims = {2048, 1000};
  std::vector<format::TensorInfo> tensors = {embd};
  absl::StatusOr<HParams> hp = HParamsFromGguf(md, tensors);
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->n_vocab, 1000);
}

HParams Qwen35Moe35B() {
  absl::StatusOr<HParams> hp = HParamsFromHfConfig(nlohmann::json::parse(kQwen35MoeConfig));
  EXPECT_TRUE(hp.ok());
  return *hp;
}

TEST(GgufHParamsTest, Qwen35MoeBlockCountIncludesMtp) {
  const HParams hp = Qwen35Moe35B();
  Metadata md;
  HParamsToGguf(hp, &md);
  EXPECT_EQ(md.GetInt("qwen35moe.block_count"), 41);
  EXPECT_EQ(md.GetInt("qwen35moe.nextn_predict_layers"), 1);
  const format::Value* sections = md.Find("qwen35moe.rope.dimension_sections");
  ASSERT_NE(sections, nullptr);
  ASSERT_NE(sections->AsArray(), nullptr);
  EXPECT_EQ(std::get<std::vector<int32_t>>(sections->AsArray()->values),
            (std::vector<int32_t>{11, 11, 10, 0}));
  absl::StatusOr<HParams> back = HParamsFromGguf(md);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->n_layer, 40);
  EXPECT_EQ(back->nextn_predict_layers, 1);
}

TEST(GgufHParamsTest, RoundTripAllArchitectures) {
  std::vector<HParams> all;
  for (const char* config : {kQwen3MoeConfig, kQwen3NextConfig, kQwen35MoeConfig}) {
    absl::StatusOr<HParams> hp = HParamsFromHfConfig(nlohmann::json::parse(config));
    ASSERT_TRUE(hp.ok()) << hp.status();
    all.push_back(*hp);
  }
  for (const HParams& hp : all) {
    Metadata md;
    HParamsToGguf(hp, &md);
    EXPECT_EQ(md.GetString("general.architecture"), std::string(ArchGgufName(hp.arch)));
    absl::StatusOr<HParams> back = HParamsFromGguf(md);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, hp) << ArchGgufName(hp.arch);
  }
}

TEST(GgufHParamsTest, HybridKeysWritten) {
  absl::StatusOr<HParams> hp = HParamsFromHfConfig(nlohmann::json::parse(kQwen3NextConfig));
  ASSERT_TRUE(hp.ok());
  Metadata md;
  HParamsToGguf(*hp, &md);
  EXPECT_EQ(md.GetInt("qwen3next.expert_shared_feed_forward_length"), 512);
  EXPECT_EQ(md.GetInt("qwen3next.ssm.conv_kernel"), 4);
  EXPECT_EQ(md.GetInt("qwen3next.ssm.state_size"), 128);
  EXPECT_EQ(md.GetInt("qwen3next.ssm.group_count"), 16);
  EXPECT_EQ(md.GetInt("qwen3next.ssm.time_step_rank"), 32);
  EXPECT_EQ(md.GetInt("qwen3next.ssm.inner_size"), 4096);
  EXPECT_EQ(md.GetInt("qwen3next.full_attention_interval"), 4);
  EXPECT_EQ(md.GetInt("qwen3next.rope.dimension_count"), 64);
  EXPECT_EQ(md.GetInt("qwen3next.attention.key_length"), 256);
  EXPECT_EQ(md.GetInt("qwen3next.attention.value_length"), 256);
  EXPECT_EQ(md.Find("qwen3next.rope.dimension_sections"), nullptr);
  EXPECT_EQ(md.Find("qwen3next.attention.head_count")->type(), format::ValueType::kUint32);
  EXPECT_EQ(md.Find("qwen3next.rope.freq_base")->type(), format::ValueType::kFloat32);
}

TEST(ValidateTest, NamesTheField) {
  absl::StatusOr<HParams> hp = HParamsFromHfConfig(nlohmann::json::parse(kQwen3NextConfig));
  ASSERT_TRUE(hp.ok());
  HParams bad = *hp;
  bad.ssm_dt_rank = 24;  // not a multiple of 16 key heads
  absl::Status s = bad.Validate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("ssm_dt_rank"), std::string::npos) << s;
  bad = *hp;
  bad.n_head_kv = 3;
  EXPECT_NE(std::string(bad.Validate().message()).find("n_head"), std::string::npos);
  bad = *hp;
  bad.n_ff_shexp = 0;
  EXPECT_NE(std::string(bad.Validate().message()).find("n_ff_shexp"), std::string::npos);
}

}  // namespace
}  // namespace tandem::model
