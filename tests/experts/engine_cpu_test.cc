// The engine's cpu backend (reference forward pass with routed experts and dense products in the
// expert pool) against the fp32 reference backend on tiny synthetic models of every architecture
// (Q8_0 experts): normalised logit error within a stated bound, the same logits whatever the pool's
// backup threshold, unsupported expert formats refused with a message naming the format, dense
// matrices the pool has no kernel for run in fp32 with a note saying so, and what auto picks
// without a GPU. And the pool's attention (experts/attention.h) wired into the reference alone.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "experts/attention.h"
#include "runtime/engine/engine.h"
#include "runtime/model/model.h"
#include "runtime/reference/forward.h"
#include "runtime/reference/matmul.h"
#include "tests/experts/test_util.h"

namespace tandem::engine {
namespace {

std::vector<float> Logits(const std::string& model, const std::string& backend,
                          const std::vector<int32_t>& tokens, absl::Status* status,
                          int cpu_backup_us = experts::kDefaultBackupMicros) {
  EngineOptions options;
  options.model = model;
  options.backend = backend;
  options.cpu_backup_us = cpu_backup_us;
  auto engine = Engine::Load(options);
  if (!engine.ok()) {
    *status = engine.status();
    return {};
  }
  EXPECT_EQ((*engine)->backend_name(), backend);
  auto session = (*engine)->NewSession();
  std::vector<float> logits;
  *status = session->Prefill(tokens, /*all_logits=*/true, &logits);
  return logits;
}

// Every product of the cpu backend sees quantised activations (Q8_0 for these models' experts and
// dense matrices; the routed experts twice), and the error compounds through the layers of these
// random models. Measured (9 tokens, all positions; 2026-12-01, dense products on the pool):
// tiny-qwen3next 0.065, tiny-flash-next 0.095, tiny-qwen3moe 0.112, tiny-qwen35moe 0.116 (with
// only the experts on the pool: 0.011, 0.018, 0.067, 0.113); the bound is ~1.7x the worst.
// Per-product and per-layer agreement is pinned far tighter by matmul_test.cc and pool_test.cc.
constexpr double kLogitBound = 0.2;

// The cpu backend's logits (9 tokens, all positions) against the reference's, within kLogitBound;
// the error in *err.
void ExpectCpuNearReference(const std::string& model, double* err) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < 9; ++i) tokens.push_back((i * 7919 + 13) % 200);
  absl::Status s_ref, s_cpu;
  const std::vector<float> ref = Logits(model, "reference", tokens, &s_ref);
  const std::vector<float> cpu = Logits(model, "cpu", tokens, &s_cpu);
  ASSERT_TRUE(s_ref.ok()) << s_ref;
  ASSERT_TRUE(s_cpu.ok()) << s_cpu;
  ASSERT_EQ(ref.size(), cpu.size());
  *err = experts::NormalisedError(cpu.data(), ref.data(), ref.size());
  std::printf("%s: normalised logit error %.5f\n", model.c_str(), *err);
  EXPECT_LT(*err, kLogitBound);
}

class CpuBackendTest : public ::testing::TestWithParam<const char*> {};

TEST_P(CpuBackendTest, LogitsMatchReferenceWithinBound) {
  double err = -1;
  ExpectCpuNearReference(std::string("synth:") + GetParam(), &err);
  EXPECT_GT(err, 0.0) << "cpu backend gave bit-identical logits: were the experts bypassed?";
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuBackendTest,
                         ::testing::Values("tiny-qwen3moe", "tiny-qwen3next", "tiny-qwen35moe",
                                           "tiny-flash-next"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) if (c == '-') c = '_';
                           return n;
                         });

// --cpu-backup-us reaches the pool: every late item rerun (0) or none (-1), the same logits.
TEST(CpuBackendTest, BackupThresholdDoesNotChangeLogits) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < 5; ++i) tokens.push_back((i * 131 + 7) % 200);
  absl::Status s_never, s_eager;
  const std::vector<float> never = Logits("synth:tiny-flash-next", "cpu", tokens, &s_never, -1);
  const std::vector<float> eager = Logits("synth:tiny-flash-next", "cpu", tokens, &s_eager, 0);
  ASSERT_TRUE(s_never.ok()) << s_never;
  ASSERT_TRUE(s_eager.ok()) << s_eager;
  EXPECT_EQ(never, eager);
}

// Q4_K experts repacked at load (experts/packed_experts.h, where the pool runs avx512 or avx2)
// against the reference and against the same experts read in place (--no-cpu-repack): the layout
// changes only the float order of the kernels' sums, and every product requantises its input, which
// absorbs such last-bit differences: measured (2026-12-01, 2-core VM) 0.076 against the reference
// either way and bit-identical logits (also with expert_ff=768).
TEST(CpuBackendTest, RepackedQ4KExpertsGiveTheSameLogits) {
  const std::string model = "synth:tiny-qwen3moe?expert_ff=256&experts=q4_k";
  std::vector<int32_t> tokens;
  for (int i = 0; i < 9; ++i) tokens.push_back((i * 7919 + 13) % 200);
  std::vector<float> logits[2];
  for (bool repack : {false, true}) {
    EngineOptions options;
    options.model = model;
    options.backend = "cpu";
    options.cpu_repack = repack;
    auto engine = Engine::Load(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    bool noted = false;
    for (const std::string& note : (*engine)->notes())
      noted |= note.find("repacked") != std::string::npos;
    EXPECT_EQ(noted, repack && experts::CpuSupports(experts::Isa::kAvx2));
    auto session = (*engine)->NewSession();
    ASSERT_TRUE(session->Prefill(tokens, /*all_logits=*/true, &logits[repack]).ok());
  }
  absl::Status s_ref;
  const std::vector<float> ref = Logits(model, "reference", tokens, &s_ref);
  ASSERT_TRUE(s_ref.ok()) << s_ref;
  const double in_place = experts::NormalisedError(logits[0].data(), ref.data(), ref.size());
  const double repacked = experts::NormalisedError(logits[1].data(), ref.data(), ref.size());
  const double between = experts::NormalisedError(logits[1].data(), logits[0].data(), ref.size());
  std::printf("q4_k experts: logit error %.5f in place, %.5f repacked, %.2g between\n", in_place,
              repacked, between);
  EXPECT_LT(in_place, kLogitBound);
  EXPECT_LT(repacked, kLogitBound);
  EXPECT_LT(between, 1e-3);
}

TEST(CpuBackendTest, UnsupportedExpertFormatIsRefusedByName) {
  absl::Status status;
  Logits("synth:tiny-qwen3moe?experts=q4_1", "cpu", {1, 2, 3}, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << status;
  EXPECT_NE(status.message().find("q4_1"), std::string::npos) << status;
}

// Q4_1 dense matrices: no pool kernel, so their products take the reference's fp32 path, and
// Load says so. Everything else still runs on the pool, within the same bound.
TEST(CpuBackendTest, DenseFormatWithoutKernelRunsInFp32WithANote) {
  const std::string model = "synth:tiny-qwen3moe?dense=q4_1";
  EngineOptions options;
  options.model = model;
  options.backend = "cpu";
  auto engine = Engine::Load(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::string notes;
  for (const std::string& note : (*engine)->notes()) notes += note + "\n";
  EXPECT_NE(notes.find("q4_1"), std::string::npos) << notes;
  EXPECT_NE(notes.find("fp32"), std::string::npos) << notes;

  double err = -1;
  ExpectCpuNearReference(model, &err);
}

// --backend auto without a usable GPU: cpu when the pool has kernels for the model's experts, else
// reference, each with a note that says why.
TEST(CpuBackendTest, AutoWithoutAGpuTakesCpuElseReference) {
  if (CudaBackendUnavailableReason().empty()) {
    GTEST_SKIP() << "this process has a usable CUDA device, so auto takes cuda";
  }
  for (const auto& [model, want] :
       {std::pair<std::string, std::string>{"synth:tiny-qwen3moe", "cpu"},
        {"synth:tiny-qwen3moe?experts=q4_1", "reference"}}) {
    EngineOptions options;
    options.model = model;
    auto engine = Engine::Load(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    EXPECT_EQ((*engine)->backend_name(), want) << model;
    std::string notes;
    for (const std::string& note : (*engine)->notes()) notes += note + "\n";
    EXPECT_NE(notes.find("backend auto:"), std::string::npos) << notes;
    if (want == "reference") {
      EXPECT_NE(notes.find("q4_1"), std::string::npos) << notes;
    }
  }
}

// A dense computer that runs only the attention on the pool (AttendOnPool, as the cpu backend
// does) and everything else
// as the reference does (its fp32 MatMul, loops in order on this thread), so logits differ from
// the plain reference's by the attention's float rounding alone.
class AttendOnlyComputer : public reference::DenseComputer {
 public:
  explicit AttendOnlyComputer(experts::ExpertPool* pool) : pool_(pool) {}
  absl::Status MatMul(std::span<const reference::DenseProduct> products, const float* x,
                      int T) override {
    for (const reference::DenseProduct& p : products) {
      reference::MatMul(*p.w, 0, p.n_rows, x, T, p.y);
    }
    return absl::OkStatus();
  }
  void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& body) override {
    body(0, n);
  }
  int MaxAttendRows() const override { return experts::kMaxAttendRows; }
  absl::Status Attend(const reference::AttentionRows& rows) override {
    ++calls;
    return AttendOnPool(*pool_, rows, scratch_);
  }
  int calls = 0;

 private:
  experts::ExpertPool* pool_;
  experts::AttentionScratch scratch_;
};

// A 20-token prefill (in blocks of 8, 8 and 4 rows), three decode steps and a 4-row verify step,
// with and without the pool's attention: gated (qwen3next, qwen35moe, flash-next) and plain
// (qwen3moe) attention, strides, blocks and causal rows wired right. Measured
// (2-core VM): largest normalised logit difference 2.0e-7 to 6.6e-7 over the four shapes; without
// the gate the gated shapes differ by 0.14-0.45 (checked by removing it).
class AttendWiringTest : public ::testing::TestWithParam<const char*> {};

TEST_P(AttendWiringTest, DecodeAndVerifyStepsMatchTheReferenceLoop) {
  auto model = model::OpenModel(std::string("synth:") + GetParam());
  ASSERT_TRUE(model.ok()) << model.status();
  auto fwd = reference::ReferenceForward::Create(**model);
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  const model::HParams& hp = (*model)->hparams();
  auto pool = experts::ExpertPool::Create({.threads = 2});
  ASSERT_TRUE(pool.ok());
  AttendOnlyComputer computer(pool->get());
  reference::ForwardOptions plain, attend;
  plain.all_logits = attend.all_logits = true;
  attend.dense = &computer;
  std::vector<int32_t> tokens;
  for (int i = 0; i < 27; ++i) tokens.push_back((i * 7919 + 13) % hp.n_vocab);
  reference::SequenceState s_plain = reference::SequenceState::Create(hp, 64);
  reference::SequenceState s_attend = reference::SequenceState::Create(hp, 64);
  double worst = 0;
  int at = 0;
  for (const int n : {20, 1, 1, 1, 4}) {
    const std::span<const int32_t> step = std::span<const int32_t>(tokens).subspan(at, n);
    std::vector<float> want, got;
    ASSERT_TRUE((*fwd)->Forward(step, s_plain, plain, &want).ok());
    ASSERT_TRUE((*fwd)->Forward(step, s_attend, attend, &got).ok());
    ASSERT_EQ(want.size(), got.size());
    worst = std::max(worst, experts::NormalisedError(got.data(), want.data(), got.size()));
    at += n;
  }
  std::printf("%s: largest normalised logit difference %.2g\n", GetParam(), worst);
  int attention_layers = 0;
  for (int il = 0; il < hp.n_layer; ++il) attention_layers += hp.IsRecurrentLayer(il) ? 0 : 1;
  EXPECT_EQ(computer.calls, 7 * attention_layers);  // the prefill's three blocks, four steps
  EXPECT_LT(worst, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttendWiringTest,
                         ::testing::Values("tiny-qwen3moe", "tiny-qwen3next", "tiny-qwen35moe",
                                           "tiny-flash-next"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace tandem::engine
