// Structural validation: each kind of problem is caught and names its tensor; byte accounting of
// flash-next-125b matches numbers computed by hand from the block sizes.
#include "runtime/model/validate.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "runtime/model/synth.h"

namespace tandem::model {
namespace {

using quant::GgmlType;

std::unique_ptr<SynthPlan> Plan(const char* shape, const std::string& quant = "") {
  SynthOptions options;
  options.quant = quant;
  absl::StatusOr<std::unique_ptr<SynthPlan>> plan = PlanSynth(shape, options);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return std::move(*plan);
}

bool HasProblem(const ValidationReport& r, ProblemKind kind, const std::string& tensor) {
  return std::any_of(r.problems.begin(), r.problems.end(), [&](const Problem& p) {
    return p.kind == kind && p.tensor == tensor && p.message.find(tensor) != std::string::npos;
  });
}

TEST(ValidateTest, SynthPlansAreValid) {
  for (const SynthShape& shape : SynthShapes()) {
    std::unique_ptr<SynthPlan> plan = Plan(shape.name.c_str());
    const ValidationReport r = ValidateTensors(plan->map, plan->tensors);
    EXPECT_TRUE(r.ok()) << shape.name << ": " << r.Summary();
    EXPECT_EQ(r.total_bytes, plan->total_bytes);
    EXPECT_EQ(r.n_tensors, static_cast<int64_t>(plan->tensors.size()));
  }
}

TEST(ValidateTest, CatchesEachProblemByName) {
  std::unique_ptr<SynthPlan> plan = Plan("tiny-qwen3next");
  std::vector<format::TensorInfo> tensors = plan->tensors;
  auto find = [&](const std::string& name) {
    return std::find_if(tensors.begin(), tensors.end(),
                        [&](const auto& t) { return t.name == name; });
  };
  // Missing.
  tensors.erase(find("blk.1.attn_k.weight"));
  // Duplicate.
  tensors.push_back(*find("blk.2.ssm_out.weight"));
  // Wrong shape.
  auto q = find("blk.3.attn_q.weight");
  q->dims[1] = 256;
  q->nbytes = static_cast<uint64_t>(quant::RowBytes(q->type, q->dims[0]) * 256);
  // Wrong type: a norm must be f32.
  auto norm = find("blk.0.attn_norm.weight");
  norm->type = GgmlType::kF16;
  norm->nbytes = static_cast<uint64_t>(norm->dims[0] * 2);
  // Type whose block size does not divide ne[0]: ffn_down_exps has ne[0] = 128 < 256.
  auto down = find("blk.0.ffn_down_exps.weight");
  down->type = GgmlType::kQ4_K;
  // Unknown.
  format::TensorInfo extra;
  extra.name = "blk.0.rope_freqs.weight";
  extra.dims = {32};
  extra.nbytes = 128;
  tensors.push_back(extra);
  // Wrong byte count.
  auto gate = find("blk.2.ffn_gate_inp.weight");
  gate->nbytes += 4;

  const ValidationReport r = ValidateTensors(plan->map, tensors);
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(HasProblem(r, ProblemKind::kMissing, "blk.1.attn_k.weight")) << r.Summary();
  EXPECT_TRUE(HasProblem(r, ProblemKind::kDuplicate, "blk.2.ssm_out.weight")) << r.Summary();
  EXPECT_TRUE(HasProblem(r, ProblemKind::kWrongShape, "blk.3.attn_q.weight")) << r.Summary();
  EXPECT_TRUE(HasProblem(r, ProblemKind::kUnsupportedType, "blk.0.attn_norm.weight"))
      << r.Summary();
  EXPECT_TRUE(HasProblem(r, ProblemKind::kUnsupportedType, "blk.0.ffn_down_exps.weight"))
      << r.Summary();
  EXPECT_TRUE(HasProblem(r, ProblemKind::kUnknown, "blk.0.rope_freqs.weight")) << r.Summary();
  EXPECT_TRUE(HasProblem(r, ProblemKind::kWrongSize, "blk.2.ffn_gate_inp.weight")) << r.Summary();
  EXPECT_EQ(r.problems.size(), 7u) << r.Summary();

  // Messages carry expected vs found.
  for (const Problem& p : r.problems) {
    if (p.kind == ProblemKind::kWrongShape) {
      EXPECT_NE(p.message.find("expected [256, 512]"), std::string::npos) << p.message;
      EXPECT_NE(p.message.find("found [256, 256]"), std::string::npos) << p.message;
    }
    if (p.tensor == "blk.0.ffn_down_exps.weight") {
      EXPECT_NE(p.message.find("q4_k"), std::string::npos) << p.message;
      EXPECT_NE(p.message.find("256"), std::string::npos) << p.message;
    }
  }
  const std::vector<std::string> lines = r.Lines();
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0], "INVALID: 7 problems");
}

TEST(ValidateTest, MtpTensorsAreReportedNotUnknown) {
  std::unique_ptr<SynthPlan> plan = Plan("tiny-qwen35moe");
  std::vector<format::TensorInfo> tensors = plan->tensors;
  format::TensorInfo extra;  // optional MTP extra that the map does not list
  extra.name = "blk.4.nextn.shared_head_head.weight";
  extra.dims = {256, 16};
  extra.nbytes = 256 * 16 * 4;
  tensors.push_back(extra);
  const ValidationReport r = ValidateTensors(plan->map, tensors);
  EXPECT_TRUE(r.ok()) << r.Summary();
  EXPECT_GT(r.n_mtp_tensors, 1);
  EXPECT_GT(r.mtp_bytes, 0u);
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].find("MTP (unused)"), std::string::npos) << r.notes[0];

  // Without the MTP block the model is still valid (the block is optional).
  std::vector<format::TensorInfo> no_mtp;
  for (const auto& t : plan->tensors) {
    if (!plan->map.IsMtpName(t.name)) no_mtp.push_back(t);
  }
  EXPECT_LT(no_mtp.size(), plan->tensors.size());
  EXPECT_TRUE(ValidateTensors(plan->map, no_mtp).ok());
}

TEST(ValidateTest, FlashNextByteTotals) {
  std::unique_ptr<SynthPlan> plan = Plan("flash-next-125b");
  EXPECT_EQ(plan->mix.experts, GgmlType::kQ3_K);
  const ValidationReport r = ValidateTensors(plan->map, plan->tensors);
  ASSERT_TRUE(r.ok()) << r.Summary();
  ASSERT_EQ(r.layers.size(), 48u);
  EXPECT_EQ(r.total_experts(), 24576);

  // One expert: gate, up and down slices of 2048 x 768 at q3_k (110 bytes per 256 elements).
  const uint64_t per_expert = 3ull * 2048 * 768 / 256 * 110;
  EXPECT_EQ(per_expert, 2027520u);
  for (const LayerBytes& l : r.layers) {
    EXPECT_EQ(l.bytes_per_expert, per_expert);
    EXPECT_EQ(l.expert_bytes, per_expert * 512);
    EXPECT_EQ(l.expert_type, GgmlType::kQ3_K);
    EXPECT_EQ(l.recurrent, (l.layer + 1) % 4 != 0);
  }
  EXPECT_EQ(r.expert_bytes(), per_expert * 512 * 48);

  // Embedding and output at q6_k: 210 bytes per 256 elements; output_norm 2048 f32.
  const uint64_t table = 248320ull * 2048 / 256 * 210;
  EXPECT_EQ(r.embedding_bytes, table);
  EXPECT_EQ(r.output_bytes, table + 2048 * 4);

  // Dense bytes of a DeltaNet layer and an attention layer (q8_0: 34 bytes per 32 elements).
  auto q8 = [](uint64_t n) { return n / 32 * 34; };
  const uint64_t moe_common = 2048ull * 512 * 4 /*router f32*/ + 2048 * 4 /*shexp gate*/ +
                              q8(3ull * 2048 * 768) /*shared expert*/ + 2 * 2048 * 4 /*two norms*/;
  const uint64_t deltanet = q8(2048ull * 8192) + q8(2048ull * 4096) + q8(2048ull * 64) +
                            4 * 8192 * 4 + 32 * 4 + 32 * 4 + 128 * 4 + q8(4096ull * 2048);
  const uint64_t attention =
      q8(2048ull * 8192) + 2 * q8(2048ull * 512) + q8(4096ull * 2048) + 2 * 256 * 4;
  EXPECT_EQ(r.layers[0].dense_bytes, moe_common + deltanet);
  EXPECT_EQ(r.layers[3].dense_bytes, moe_common + attention);
  EXPECT_EQ(r.dense_bytes(), 36 * (moe_common + deltanet) + 12 * (moe_common + attention));
  EXPECT_EQ(r.total_bytes, r.dense_bytes() + r.expert_bytes() + r.embedding_bytes + r.output_bytes);
  EXPECT_EQ(r.bytes_by_type.at(GgmlType::kQ3_K), r.expert_bytes());
}

// The decode benchmark's accounting: dense tensors, head, one embedding row per step row, and per
// layer the union of the experts the step's rows chose.
TEST(ValidateTest, StepWeightBytesCountTheUnionOfChosenExperts) {
  std::unique_ptr<SynthPlan> plan = Plan("flash-next-125b");
  const HParams& hp = plan->hparams;
  const ValidationReport r = ValidateTensors(plan->map, plan->tensors);
  ASSERT_TRUE(r.ok()) << r.Summary();
  const uint64_t per_expert = r.layers[0].bytes_per_expert;
  const uint64_t embedding_row = r.embedding_bytes / hp.n_vocab;
  const uint64_t fixed = r.dense_bytes() + r.output_bytes;
  const int k = hp.n_expert_used, L = hp.n_layer;

  absl::StatusOr<uint64_t> one = StepWeightBytes(hp, plan->tensors, 1, {});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(*one, fixed + embedding_row + uint64_t(L) * k * per_expert);

  // Two rows: row 0 takes experts 0..k-1 everywhere; row 1 the same in layer 0, k..2k-1 in layer
  // 1, and elsewhere 1..k-1 plus a negative id (ignored), so those layers stay at k experts.
  std::vector<int32_t> ids(size_t{2} * L * k);
  for (int l = 0; l < L; ++l) {
    for (int j = 0; j < k; ++j) {
      ids[size_t(0 * L + l) * k + j] = j;
      ids[size_t(1 * L + l) * k + j] = l == 0 ? j : l == 1 ? k + j : (j == 0 ? -1 : j);
    }
  }
  absl::StatusOr<uint64_t> two = StepWeightBytes(hp, plan->tensors, 2, ids);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(*two, fixed + 2 * embedding_row + uint64_t(L + 1) * k * per_expert);

  ids.pop_back();
  EXPECT_EQ(StepWeightBytes(hp, plan->tensors, 2, ids).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ValidateTest, BytesPerExpertFollowTypesPerLayer) {
  std::unique_ptr<SynthPlan> plan = Plan("tiny-flash-next");
  std::vector<format::TensorInfo> tensors = plan->tensors;
  // Layer 2 experts at q4_0 instead of q8_0 (18 vs 34 bytes per 32 elements).
  for (format::TensorInfo& t : tensors) {
    if (t.name.starts_with("blk.2.ffn_") && t.name.find("_exps") != std::string::npos) {
      t.type = GgmlType::kQ4_0;
      t.nbytes = t.nbytes / 34 * 18;
    }
  }
  const ValidationReport r = ValidateTensors(plan->map, tensors);
  ASSERT_TRUE(r.ok()) << r.Summary();
  const uint64_t q8_expert = 3ull * 256 * 64 / 32 * 34;
  EXPECT_EQ(r.layers[1].bytes_per_expert, q8_expert);
  EXPECT_EQ(r.layers[2].bytes_per_expert, 3ull * 256 * 64 / 32 * 18);
  EXPECT_EQ(r.layers[2].expert_type, GgmlType::kQ4_0);
}

}  // namespace
}  // namespace tandem::model
