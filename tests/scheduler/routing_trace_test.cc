#include "scheduler/routing_trace.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "tests/scheduler/test_logs.h"

namespace tandem::scheduler {
namespace {

using testing::HandToken;
using testing::SmallHeader;
using testing::TempPath;
using testing::WriteLog;

std::vector<uint8_t> ReadAll(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::vector<HandToken> ThreeTokens() {
  return {{0, 0, {{1, 2}, {3, 4}}}, {0, 1, {{1, 5}, {3, 6}}}, {0, 2, {{7, 0}, {2, 4}}}};
}

TEST(RoutingTraceTest, ReadsWhatTheEngineWriterWrote) {
  const std::string path = TempPath("sched_read");
  WriteLog(path, SmallHeader(), ThreeTokens());
  auto trace = ReadRoutingLog(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->header.model_name, "synth:test-model");
  EXPECT_EQ(trace->header.model_fingerprint, 0xfeedu);
  ASSERT_EQ(trace->n_tokens(), 3u);
  EXPECT_TRUE(trace->warnings.empty());
  EXPECT_EQ(trace->Ids(1, 0)[1], 5);
  EXPECT_EQ(trace->Ids(2, 1)[0], 2);
  EXPECT_EQ(trace->position[2], 2u);
  EXPECT_FLOAT_EQ(trace->Weights(0, 0)[0], 0.5f);
  std::filesystem::remove(path);
}

TEST(RoutingTraceTest, TornTailIsCutWithAWarning) {
  const std::string path = TempPath("sched_torn");
  WriteLog(path, SmallHeader(), ThreeTokens());
  std::vector<uint8_t> bytes = ReadAll(path);
  const uint64_t rec = scheduler::RoutingRecordBytes(SmallHeader());
  // Drop half of the last record: two whole records remain.
  bytes.resize(bytes.size() - rec / 2);
  auto trace = ParseRoutingLog(bytes, "torn.log");
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->n_tokens(), 2u);
  ASSERT_EQ(trace->warnings.size(), 1u);
  EXPECT_NE(trace->warnings[0].find("torn.log"), std::string::npos);
  // A flipped byte inside record 1 (its CRC fails): only record 0 is kept.
  bytes = ReadAll(path);
  const size_t header = scheduler::EncodeRoutingLogHeader(SmallHeader()).size();
  bytes[header + rec + 18] ^= 0x40;
  trace = ParseRoutingLog(bytes, "flipped.log");
  ASSERT_TRUE(trace.ok());
  EXPECT_EQ(trace->n_tokens(), 1u);
  EXPECT_EQ(trace->warnings.size(), 1u);
  std::filesystem::remove(path);
}

TEST(RoutingTraceTest, BadMagicVersionAndHeaderAreErrors) {
  const std::string path = TempPath("sched_bad");
  WriteLog(path, SmallHeader(), ThreeTokens());
  const std::vector<uint8_t> good = ReadAll(path);
  std::vector<uint8_t> bytes = good;
  bytes[0] = 'X';
  auto r = ParseRoutingLog(bytes, "magic.log");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("bad magic"), std::string::npos) << r.status();
  bytes = good;
  bytes[8] = 9;  // version 9
  r = ParseRoutingLog(bytes, "version.log");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("version 9"), std::string::npos) << r.status();
  bytes = good;
  bytes[20] ^= 1;  // n_expert changed: header CRC fails
  r = ParseRoutingLog(bytes, "crc.log");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("CRC"), std::string::npos) << r.status();
  EXPECT_FALSE(ParseRoutingLog(std::span(good).first(20), "short.log").ok());
  EXPECT_FALSE(ReadRoutingLog("/nonexistent/tandem.log").ok());
  std::filesystem::remove(path);
}

TEST(RoutingTraceTest, MergesLogsOfOneModelAndRefusesAnother) {
  const std::string a = TempPath("sched_a"), b = TempPath("sched_b"), c = TempPath("sched_c");
  WriteLog(a, SmallHeader(), ThreeTokens());
  WriteLog(b, SmallHeader(), ThreeTokens());
  scheduler::RoutingLogHeader other = SmallHeader(0xbeefull);
  other.model_name = "synth:other-model";
  WriteLog(c, other, ThreeTokens());
  auto merged = ReadRoutingLogs({a, b});
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(merged->n_tokens(), 6u);
  // Both files used sequence 0; the merge keeps them apart.
  EXPECT_NE(merged->sequence[0], merged->sequence[3]);
  auto refused = ReadRoutingLogs({a, c});
  ASSERT_FALSE(refused.ok());
  const std::string msg(refused.status().message());
  EXPECT_NE(msg.find("synth:other-model"), std::string::npos) << msg;
  EXPECT_NE(msg.find("synth:test-model"), std::string::npos) << msg;
  for (const auto& p : {a, b, c}) std::filesystem::remove(p);
}

// Random damage of every kind never crashes or reads out of bounds (run under ASan).
TEST(RoutingTraceTest, SurvivesRandomCorruption) {
  const std::string path = TempPath("sched_fuzz");
  WriteLog(path, SmallHeader(), ThreeTokens());
  const std::vector<uint8_t> good = ReadAll(path);
  std::mt19937 rng(5);
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<uint8_t> bytes = good;
    const int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits; ++e) bytes[rng() % bytes.size()] = uint8_t(rng());
    if (rng() % 3 == 0) bytes.resize(rng() % (bytes.size() + 1));
    auto r = ParseRoutingLog(bytes, "fuzz.log");
    if (r.ok()) {
      for (size_t t = 0; t < r->n_tokens(); ++t) {
        for (int l = 0; l < r->n_layer(); ++l) {
          for (uint16_t id : r->Ids(t, l)) ASSERT_LT(id, r->n_expert());
        }
      }
    }
  }
  std::filesystem::remove(path);
}

TEST(RoutingTraceTest, SplitsBySequence) {
  const std::string path = TempPath("sched_split");
  WriteLog(path, SmallHeader(),
           {{5, 0, {{1, 2}, {3, 4}}}, {9, 0, {{1, 5}, {3, 6}}}, {5, 1, {{7, 0}, {2, 4}}}});
  auto trace = ReadRoutingLog(path);
  ASSERT_TRUE(trace.ok());
  const RoutingTrace even = SplitBySequence(*trace, false), odd = SplitBySequence(*trace, true);
  EXPECT_EQ(even.n_tokens(), 2u);
  EXPECT_EQ(odd.n_tokens(), 1u);
  EXPECT_EQ(odd.sequence[0], 9u);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace tandem::scheduler
