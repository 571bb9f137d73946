// The tensor map per architecture: counts, names, ggml dims and types of the tensors llama.cpp
// loads (model-math §2.4, §3.6, §4.3), HF source names, and MTP recognition.
#include "runtime/model/tensor_map.h"

#include <gtest/gtest.h>

#include "runtime/model/synth.h"

namespace tandem::model {
namespace {

using quant::GgmlType;

const HParams& ShapeHParams(const char* name) {
  absl::StatusOr<const SynthShape*> shape = FindSynthShape(name);
  EXPECT_TRUE(shape.ok()) << shape.status();
  return (*shape)->hparams;
}

std::vector<int64_t> Dims(const TensorMap& map, const std::string& name) {
  const TensorSpec* spec = map.Find(name);
  EXPECT_NE(spec, nullptr) << name;
  return spec ? spec->dims : std::vector<int64_t>{};
}

TEST(TensorMapTest, FlashNextCounts) {
  const TensorMap map(ShapeHParams("flash-next-125b"));
  EXPECT_EQ(map.hparams().n_layer, 48);
  EXPECT_EQ(map.n_recurrent_layers(), 36);
  EXPECT_EQ(map.n_attention_layers(), 12);
  // DeltaNet block: 2 norms + 8 ssm tensors + 8 FFN; attention block: 2 norms + 6 + 8; 3 globals.
  EXPECT_EQ(map.tensors().size(), 36u * 18 + 12u * 16 + 3);
  EXPECT_EQ(map.n_required(), map.tensors().size());
}

TEST(TensorMapTest, FlashNextDims) {
  const TensorMap map(ShapeHParams("flash-next-125b"));
  EXPECT_EQ(Dims(map, "token_embd.weight"), (std::vector<int64_t>{2048, 248320}));
  EXPECT_EQ(Dims(map, "output.weight"), (std::vector<int64_t>{2048, 248320}));
  EXPECT_EQ(Dims(map, "output_norm.weight"), (std::vector<int64_t>{2048}));
  // Layer 0: Gated DeltaNet.
  EXPECT_EQ(Dims(map, "blk.0.attn_qkv.weight"), (std::vector<int64_t>{2048, 8192}));
  EXPECT_EQ(Dims(map, "blk.0.attn_gate.weight"), (std::vector<int64_t>{2048, 4096}));
  EXPECT_EQ(Dims(map, "blk.0.ssm_ba.weight"), (std::vector<int64_t>{2048, 64}));
  EXPECT_EQ(Dims(map, "blk.0.ssm_conv1d.weight"), (std::vector<int64_t>{4, 8192}));
  EXPECT_EQ(Dims(map, "blk.0.ssm_dt.bias"), (std::vector<int64_t>{32}));
  EXPECT_EQ(Dims(map, "blk.0.ssm_a"), (std::vector<int64_t>{32}));
  EXPECT_EQ(Dims(map, "blk.0.ssm_norm.weight"), (std::vector<int64_t>{128}));
  EXPECT_EQ(Dims(map, "blk.0.ssm_out.weight"), (std::vector<int64_t>{4096, 2048}));
  EXPECT_EQ(map.Find("blk.0.attn_q.weight"), nullptr);
  // Layer 3: gated full attention (query + gate projected together).
  EXPECT_EQ(Dims(map, "blk.3.attn_q.weight"), (std::vector<int64_t>{2048, 8192}));
  EXPECT_EQ(Dims(map, "blk.3.attn_k.weight"), (std::vector<int64_t>{2048, 512}));
  EXPECT_EQ(Dims(map, "blk.3.attn_v.weight"), (std::vector<int64_t>{2048, 512}));
  EXPECT_EQ(Dims(map, "blk.3.attn_output.weight"), (std::vector<int64_t>{4096, 2048}));
  EXPECT_EQ(Dims(map, "blk.3.attn_q_norm.weight"), (std::vector<int64_t>{256}));
  EXPECT_EQ(map.Find("blk.3.ssm_a"), nullptr);
  // MoE of every layer.
  EXPECT_EQ(Dims(map, "blk.47.ffn_gate_inp.weight"), (std::vector<int64_t>{2048, 512}));
  EXPECT_EQ(Dims(map, "blk.47.ffn_gate_exps.weight"), (std::vector<int64_t>{2048, 768, 512}));
  EXPECT_EQ(Dims(map, "blk.47.ffn_up_exps.weight"), (std::vector<int64_t>{2048, 768, 512}));
  EXPECT_EQ(Dims(map, "blk.47.ffn_down_exps.weight"), (std::vector<int64_t>{768, 2048, 512}));
  EXPECT_EQ(Dims(map, "blk.47.ffn_gate_inp_shexp.weight"), (std::vector<int64_t>{2048}));
  EXPECT_EQ(Dims(map, "blk.47.ffn_gate_shexp.weight"), (std::vector<int64_t>{2048, 768}));
  EXPECT_EQ(Dims(map, "blk.47.ffn_down_shexp.weight"), (std::vector<int64_t>{768, 2048}));
  EXPECT_NE(map.Find("blk.47.post_attention_norm.weight"), nullptr);
  EXPECT_EQ(map.Find("blk.47.ffn_norm.weight"), nullptr);
  EXPECT_EQ(map.Find("blk.48.attn_norm.weight"), nullptr);
}

TEST(TensorMapTest, RolesCategoriesAndTypes) {
  const TensorMap map(ShapeHParams("flash-next-125b"));
  const TensorSpec* a = map.Find("blk.0.ssm_a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->role, TensorRole::kSsm);
  EXPECT_EQ(a->type_rule, TypeRule::kF32Only);
  EXPECT_TRUE(a->AllowsType(GgmlType::kF32));
  EXPECT_FALSE(a->AllowsType(GgmlType::kF16));
  const TensorSpec* exps = map.Find("blk.5.ffn_down_exps.weight");
  ASSERT_NE(exps, nullptr);
  EXPECT_EQ(exps->role, TensorRole::kRoutedExperts);
  EXPECT_EQ(exps->category, QuantCategory::kExperts);
  EXPECT_EQ(exps->layer, 5);
  EXPECT_TRUE(exps->AllowsType(GgmlType::kQ3_K));  // 768 = 3 * 256
  EXPECT_TRUE(exps->AllowsType(GgmlType::kBF16));
  EXPECT_FALSE(exps->AllowsType(GgmlType::kI8));  // no codec
  const TensorSpec* gate = map.Find("blk.5.ffn_gate_inp_shexp.weight");
  ASSERT_NE(gate, nullptr);
  EXPECT_EQ(gate->role, TensorRole::kSharedExpert);
  EXPECT_EQ(gate->type_rule, TypeRule::kF32Only);
  EXPECT_EQ(map.Find("blk.5.ffn_gate_inp.weight")->category, QuantCategory::kRouter);
  EXPECT_EQ(map.Find("blk.7.attn_k.weight")->category, QuantCategory::kDense);
  EXPECT_EQ(map.Find("token_embd.weight")->role, TensorRole::kEmbedding);
  EXPECT_EQ(map.Find("output.weight")->category, QuantCategory::kOutput);
  EXPECT_EQ(map.Find("blk.0.ssm_conv1d.weight")->type_rule, TypeRule::kF32Only);
  EXPECT_EQ(map.Find("blk.0.ssm_dt.bias")->type_rule, TypeRule::kF32Only);
}

TEST(TensorMapTest, Qwen3Moe30B) {
  const TensorMap map(ShapeHParams("qwen3-30b-a3b"));
  EXPECT_EQ(map.n_recurrent_layers(), 0);
  EXPECT_EQ(map.n_attention_layers(), 48);
  // Block: attn_norm, q, k, v, output, q_norm, k_norm, ffn_norm, router, 3 expert tensors.
  EXPECT_EQ(map.tensors().size(), 48u * 12 + 3);
  EXPECT_EQ(Dims(map, "blk.0.attn_q.weight"), (std::vector<int64_t>{2048, 4096}));
  EXPECT_EQ(Dims(map, "blk.0.attn_k.weight"), (std::vector<int64_t>{2048, 512}));
  EXPECT_EQ(Dims(map, "blk.0.attn_output.weight"), (std::vector<int64_t>{4096, 2048}));
  EXPECT_EQ(Dims(map, "blk.0.attn_q_norm.weight"), (std::vector<int64_t>{128}));
  EXPECT_EQ(Dims(map, "blk.0.ffn_gate_inp.weight"), (std::vector<int64_t>{2048, 128}));
  EXPECT_EQ(Dims(map, "blk.0.ffn_down_exps.weight"), (std::vector<int64_t>{768, 2048, 128}));
  EXPECT_NE(map.Find("blk.0.ffn_norm.weight"), nullptr);
  EXPECT_EQ(map.Find("blk.0.post_attention_norm.weight"), nullptr);
  EXPECT_EQ(map.Find("blk.0.ffn_gate_shexp.weight"), nullptr);
  // Plain norms: no +1 in the HF source.
  EXPECT_EQ(map.Find("blk.0.attn_norm.weight")->hf_transforms & kHfAddOne, 0u);
  EXPECT_EQ(map.Find("blk.0.attn_norm.weight")->hf_names[0],
            "model.layers.0.input_layernorm.weight");
}

TEST(TensorMapTest, Qwen3NextHfSources) {
  const TensorMap map(ShapeHParams("qwen3next-80b-a3b"));
  const TensorSpec* qkv = map.Find("blk.0.attn_qkv.weight");
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->hf_names[0], "model.layers.0.linear_attn.in_proj_qkvz.weight");
  EXPECT_TRUE(qkv->hf_transforms & kHfQkvOfQkvz);
  EXPECT_TRUE(map.Find("blk.0.attn_gate.weight")->hf_transforms & kHfZOfQkvz);
  EXPECT_TRUE(map.Find("blk.0.ssm_a")->hf_transforms & kHfNegExp);
  EXPECT_EQ(map.Find("blk.0.ssm_a")->hf_names[0], "model.layers.0.linear_attn.A_log");
  EXPECT_TRUE(map.Find("blk.0.attn_norm.weight")->hf_transforms & kHfAddOne);
  EXPECT_FALSE(map.Find("blk.0.ssm_norm.weight")->hf_transforms & kHfAddOne);  // gated norm: raw
  EXPECT_TRUE(map.Find("output_norm.weight")->hf_transforms & kHfAddOne);
  const TensorSpec* up = map.Find("blk.2.ffn_up_exps.weight");
  EXPECT_EQ(up->hf_names[0], "model.layers.2.mlp.experts.{e}.up_proj.weight");
  EXPECT_TRUE(up->hf_transforms & kHfStackExperts);
  EXPECT_EQ(map.Find("output.weight")->hf_names[0], "lm_head.weight");
}

TEST(TensorMapTest, Qwen35MoeSplitProjectionsAndMtp) {
  const HParams& hp = ShapeHParams("qwen35-35b-a3b");
  const TensorMap map(hp);
  EXPECT_EQ(map.n_recurrent_layers(), 30);
  EXPECT_EQ(map.n_attention_layers(), 10);
  EXPECT_EQ(Dims(map, "blk.0.ssm_beta.weight"), (std::vector<int64_t>{2048, 32}));
  EXPECT_EQ(Dims(map, "blk.0.ssm_alpha.weight"), (std::vector<int64_t>{2048, 32}));
  EXPECT_EQ(map.Find("blk.0.ssm_ba.weight"), nullptr);
  EXPECT_EQ(map.Find("blk.0.attn_qkv.weight")->hf_names[0],
            "model.language_model.layers.0.linear_attn.in_proj_qkv.weight");
  EXPECT_TRUE(map.Find("blk.0.attn_gate.weight")->hf_transforms & kHfVHeadsTiled);
  // The MTP block is block 40: optional, role kMtp, recognised by name.
  const TensorSpec* eh = map.Find("blk.40.nextn.eh_proj.weight");
  ASSERT_NE(eh, nullptr);
  EXPECT_EQ(eh->dims, (std::vector<int64_t>{4096, 2048}));
  EXPECT_FALSE(eh->required);
  EXPECT_EQ(eh->role, TensorRole::kMtp);
  EXPECT_EQ(map.Find("blk.40.ffn_up_exps.weight")->role, TensorRole::kMtp);
  EXPECT_EQ(map.Find("blk.40.ffn_up_exps.weight")->hf_names[0],
            "mtp.layers.0.mlp.experts.{e}.up_proj.weight");
  EXPECT_TRUE(map.IsMtpName("blk.40.nextn.embed_tokens.weight"));
  EXPECT_FALSE(map.IsMtpName("blk.39.attn_norm.weight"));
  EXPECT_FALSE(map.IsMtpName("blk.41.attn_norm.weight"));
  size_t required = 0;
  for (const TensorSpec& t : map.tensors()) required += t.required ? 1 : 0;
  EXPECT_EQ(required, 30u * 19 + 10u * 16 + 3);  // qwen35moe DeltaNet blocks: beta and alpha
  EXPECT_EQ(map.n_required(), required);
}

TEST(TensorMapTest, LayerOfTensorName) {
  EXPECT_EQ(LayerOfTensorName("blk.12.attn_q.weight"), 12);
  EXPECT_EQ(LayerOfTensorName("blk.0.ssm_a"), 0);
  EXPECT_EQ(LayerOfTensorName("token_embd.weight"), -1);
  EXPECT_EQ(LayerOfTensorName("blk.x.attn_q.weight"), -1);
  EXPECT_EQ(LayerOfTensorName("blk.3"), -1);
  EXPECT_EQ(LayerOfTensorName("blk.-1.a"), -1);
}

}  // namespace
}  // namespace tandem::model
