// Each layer half of the CUDA backend against the reference's, on random hidden states: every
// layer of every tiny shape, 1, 3 and 4 rows, consecutive calls so that later calls see the
// attention/DeltaNet state the earlier ones left (attention layers up to 40 keys, two chunks).
// Attention runs both ways: warps of one query head (the default at short contexts) and teams of a
// KV group's heads (the default at long ones, forced here). Two shapes resize their attention heads
// (synth's attention=) to reach the paths the benchmark shapes run: 8 query heads of 128 per KV
// head (qwen3-30b-a3b's teams of 8, lanes over head dimensions) and of 256 (flash-next-125b's teams
// of 4). Two resize their DeltaNet heads (synth's deltanet=): to the benchmark shapes' width of
// 128, and to 256.
// Compared: the half's contribution
// (output minus input rows), normalised error. f32 weights: fp32 on both sides; q8_0: int8
// activations on the GPU. GPU suite: skips with a message where no CUDA device is usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "megakernel/runner.h"
#include "runtime/model/model.h"
#include "runtime/reference/forward.h"

namespace tandem::megakernel {
namespace {

class LayerHalfTest : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

// ‖got − want‖ / ‖want − x‖ over the half's contribution (output minus input rows); infinity
// when the GPU wrote a non-finite value.
double NormalisedUpdateError(const std::vector<float>& x, const std::vector<float>& want,
                             const std::vector<float>& got) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    const double w = static_cast<double>(want[i]) - x[i];
    const double g = static_cast<double>(got[i]) - x[i];
    err += (g - w) * (g - w);
    norm += w * w;
  }
  return std::sqrt(err / norm);
}

// "synth:" + shape, with every weight f32 when asked (shape may carry options of its own).
std::string SynthSpec(const std::string& shape, bool f32) {
  if (!f32) return "synth:" + shape;
  return "synth:" + shape + (shape.find('?') == std::string::npos ? "?" : "&") +
         "quant=experts=f32,shexp=f32,dense=f32,embed=f32,output=f32";
}

TEST_P(LayerHalfTest, MatchesTheReferenceOnRandomStates) {
  if (const std::string why = CudaUnavailableReason(); !why.empty()) {
    GTEST_SKIP() << "GPU test skipped: " << why;
  }
  const auto& [shape, f32] = GetParam();
  const std::string spec = SynthSpec(shape, f32);
  // Bounds on the normalised error of the half's contribution: fp32 against fp32 differs only in
  // summation order; q8_0 quantises the activations of every product to int8.
  const double bound = f32 ? 1e-4 : 0.1;
  auto m = model::OpenModel(spec);
  ASSERT_TRUE(m.ok()) << m.status();
  const model::HParams& hp = (*m)->hparams();
  auto ref = reference::ReferenceForward::Create(**m);
  ASSERT_TRUE(ref.ok()) << ref.status();
  std::mt19937 rng(21);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t H = static_cast<size_t>(hp.n_embd);
  double worst[2] = {0, 0};
  for (bool teams : {false, true}) {
    // 3 rows: calls at 15, 18, ... start before a 16-key chunk boundary, so the chunk after it
    // holds no key of the call's first row (a one-head warp serves two rows: SplitAttention).
    for (int rows : {1, 3, 4}) {
      RunnerOptions ro;
      ro.n_ctx = 64;
      ro.force_attention_teams = teams;
      auto gpu = GpuRunner::Create(**m, ro);
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      for (int layer = 0; layer < hp.n_layer; ++layer) {
        for (bool moe : {false, true}) {
          const bool attention = !moe && !hp.IsRecurrentLayer(layer);
          if (teams && !attention) continue;
          // Attention layers run up to 40 keys (two chunks); the others two calls, since the q8_0
          // error of a DeltaNet state grows with every call on these random inputs.
          const int calls = attention ? 40 / rows : 2;
          reference::SequenceState state = reference::SequenceState::Create(hp, 64);
          ASSERT_TRUE((*gpu)->Reset().ok());
          for (int call = 0; call < calls; ++call) {
            const int pos = call * rows;
            std::vector<float> x(rows * H);
            for (float& v : x) v = normal(rng);
            std::vector<float> want = x, got;
            ASSERT_TRUE((*ref)->LayerHalf(layer, moe, state, pos, rows, want.data()).ok());
            ASSERT_TRUE((*gpu)->RunLayerHalf(layer, moe, x, rows, pos, &got).ok());
            const double e = NormalisedUpdateError(x, want, got);
            ASSERT_TRUE(std::isfinite(e)) << "non-finite output, " << spec << " layer " << layer;
            worst[moe] = std::max(worst[moe], e);
            EXPECT_LT(e, bound) << spec << " layer " << layer << (moe ? " moe" : " mixer")
                                << " rows " << rows << " call " << call << (teams ? " teams" : "");
          }
        }
      }
    }
  }
  std::printf("[%s %s] per-half normalised error, worst: mixer %.2e, moe %.2e\n", shape.c_str(),
              f32 ? "f32" : "q8_0", worst[0], worst[1]);
}

// Runs the first attention layer of `shape` (every weight f32) on both attention paths, from
// position 0 to n_ctx keys, rows_at(pos) rows a call from position pos, and diffs every call
// against the reference (normalised error under 1e-4). Prints each path's worst error.
template <class RowsAt>
void DiffAttentionLayerAlongContext(const std::string& shape, int n_ctx, uint32_t seed,
                                    RowsAt rows_at, bool f16_kv_cache = false) {
  auto m = model::OpenModel(SynthSpec(shape, true));
  ASSERT_TRUE(m.ok()) << m.status();
  const model::HParams& hp = (*m)->hparams();
  auto ref = reference::ReferenceForward::Create(**m);
  ASSERT_TRUE(ref.ok()) << ref.status();
  int layer = 0;
  while (hp.IsRecurrentLayer(layer)) ++layer;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t H = static_cast<size_t>(hp.n_embd);
  for (bool teams : {false, true}) {
    RunnerOptions ro;
    ro.n_ctx = n_ctx;
    ro.force_attention_teams = teams;
    ro.f16_kv_cache = f16_kv_cache;
    auto gpu = GpuRunner::Create(**m, ro);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    reference::SequenceState state = reference::SequenceState::Create(hp, n_ctx, f16_kv_cache);
    double worst = 0;
    for (int pos = 0; pos < n_ctx;) {
      const int rows = rows_at(pos);
      std::vector<float> x(rows * H);
      for (float& v : x) v = normal(rng);
      std::vector<float> want = x, got;
      ASSERT_TRUE((*ref)->LayerHalf(layer, false, state, pos, rows, want.data()).ok());
      ASSERT_TRUE((*gpu)->RunLayerHalf(layer, false, x, rows, pos, &got).ok());
      const double e = NormalisedUpdateError(x, want, got);
      worst = std::max(worst, e);
      ASSERT_LT(e, 1e-4) << shape << " keys " << pos + rows << (teams ? " teams" : "");
      pos += rows;
    }
    std::printf("[%s, %d keys%s%s] normalised error, worst: %.2e\n", shape.c_str(), n_ctx,
                teams ? ", teams" : "", f16_kv_cache ? ", f16 cache" : "", worst);
  }
}

// The first attention layer of a tiny shape (f32) to 2,240 keys, 8 rows a call: past 32 chunks
// per (row, head), so the merge's lanes take chunks in more than one round, and past the point
// where the team path runs by itself on a large GPU (8 rows × 2 KV heads × 70 key blocks fill half
// of an H200's 2,112 warps). Shapes: tiny-qwen3moe (heads of 64, two to a KV head) and the two
// resized ones of LayerHalfTest.
class LongContextAttentionTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LongContextAttentionTest, MatchesTheReferencePastThirtyTwoChunks) {
  if (const std::string why = CudaUnavailableReason(); !why.empty()) {
    GTEST_SKIP() << "GPU test skipped: " << why;
  }
  ASSERT_NO_FATAL_FAILURE(
      DiffAttentionLayerAlongContext(GetParam(), 2240, 5, [](int) { return 8; }));
}

// The same with --cache-type f16 on both sides (the reference rounds keys and values to f16 as
// the card stores them): the f16 loads of every path, one-head and team.
TEST_P(LongContextAttentionTest, MatchesTheReferenceWithAnF16Cache) {
  if (const std::string why = CudaUnavailableReason(); !why.empty()) {
    GTEST_SKIP() << "GPU test skipped: " << why;
  }
  ASSERT_NO_FATAL_FAILURE(DiffAttentionLayerAlongContext(
      GetParam(), 2240, 6, [](int) { return 8; }, true));
}

// A test name from a shape spec: letters and digits kept, everything else '_'.
std::string SpecName(std::string n) {
  for (char& c : n) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return n;
}

constexpr const char* kWideHeads = "tiny-qwen3moe?attention=16/2/128";
constexpr const char* kWiderHeads = "tiny-qwen3next?attention=16/2/256";
// The benchmark shapes' DeltaNet head width (128; the tiny shapes have 64), two value heads a key
// head as they have.
constexpr const char* kWideDeltaNet = "tiny-qwen3next?deltanet=4/8/128";
// Twice that: the delta rule splits each state column over dk / 32 lanes (8 here, 4 at 128) and
// the conv walks a head in two chunks of channels, publishing its rows in the second.
constexpr const char* kWiderDeltaNet = "tiny-qwen3next?deltanet=2/4/256";

INSTANTIATE_TEST_SUITE_P(Synth, LayerHalfTest,
                         ::testing::Combine(::testing::Values("tiny-qwen3moe", "tiny-qwen3next",
                                                              "tiny-qwen35moe", "tiny-flash-next",
                                                              kWideHeads, kWiderHeads,
                                                              kWideDeltaNet, kWiderDeltaNet),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return SpecName(std::get<0>(info.param) +
                                           (std::get<1>(info.param) ? "_f32" : "_q8_0"));
                         });

// Q3_K experts, as flash-next-125b has (256-wide expert rows: a Q3_K block is 256 weights), read
// from the device's padded 112-byte blocks (codecs.h); q8_0 activations only.
INSTANTIATE_TEST_SUITE_P(
    Q3K, LayerHalfTest,
    ::testing::Combine(::testing::Values("tiny-qwen3moe?expert_ff=256&quant=experts=q3_k"),
                       ::testing::Values(false)),
    [](const auto& info) { return SpecName(std::get<0>(info.param)) + "_q8_0"; });

// tiny-qwen3moe's first attention layer (f32) past 8,192 keys, then one-row steps, both attention
// paths: a one-row step splits its keys into at most the grid's warps over its (KV group, team)
// items, and with 2 KV heads that is more than 512 chunks a row on an H200 (1,056 with teams, 528
// without: 513 chunks of 16 keys). 512 was a fixed cap until 2026-12-04; the partials buffer is
// now sized from the grid (params.h). Filled 8 rows a call.
TEST(LongContextAttentionTest, OneRowStepsPastFiveHundredTwelveChunks) {
  if (const std::string why = CudaUnavailableReason(); !why.empty()) {
    GTEST_SKIP() << "GPU test skipped: " << why;
  }
  constexpr int kFilled = 8200, kOneRowSteps = 4;
  ASSERT_NO_FATAL_FAILURE(DiffAttentionLayerAlongContext(
      "tiny-qwen3moe", kFilled + kOneRowSteps, 11, [](int pos) { return pos < kFilled ? 8 : 1; }));
}

INSTANTIATE_TEST_SUITE_P(Synth, LongContextAttentionTest,
                         ::testing::Values("tiny-qwen3moe", kWideHeads, kWiderHeads),
                         [](const auto& info) { return SpecName(info.param); });

}  // namespace
}  // namespace tandem::megakernel
