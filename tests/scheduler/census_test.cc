#include "scheduler/census.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/scheduler/test_logs.h"

namespace tandem::scheduler {
namespace {

using testing::SmallHeader;
using testing::TempPath;
using testing::WriteLog;

TEST(CensusTest, CountsMassConcentrationAndReuseExactly) {
  const std::string path = TempPath("sched_census");
  // Layer 0: expert 1 every token; layer 1: expert 3 at positions 0 and 2 (distance 2).
  WriteLog(path, SmallHeader(),
           {{0, 0, {{1, 2}, {3, 4}}}, {0, 1, {{1, 5}, {6, 4}}}, {0, 2, {{1, 0}, {3, 7}}},
            {1, 0, {{1, 2}, {3, 4}}}});
  auto trace = ReadRoutingLog(path);
  ASSERT_TRUE(trace.ok());
  const Census c = ComputeCensus(*trace);
  EXPECT_EQ(c.tokens, 4u);
  EXPECT_EQ(c.sequences, 2u);
  EXPECT_EQ(c.count(0, 1), 4u);
  EXPECT_EQ(c.count(0, 2), 2u);
  EXPECT_EQ(c.count(1, 3), 3u);
  EXPECT_EQ(c.count(1, 4), 3u);
  EXPECT_DOUBLE_EQ(c.mass[1], 2.0);  // four routes of weight 0.5
  // Layer 0 routes: 1x4, 2x2, 5, 0 = 8 routes; top 10% of 8 experts = 1 expert = 4/8.
  EXPECT_DOUBLE_EQ(c.TopShare(0, 0.10), 0.5);
  EXPECT_DOUBLE_EQ(c.TopShare(0, 0.25), 6.0 / 8);
  EXPECT_DOUBLE_EQ(c.ExpertsForShare(0, 0.9), 4.0 / 8);
  // Reuse within sequence 0: layer 0 expert 1 at d=1 twice; layer 1: expert 4 d=1, expert 3 d=2.
  EXPECT_EQ(c.reuse[0], 3u);
  EXPECT_EQ(c.reuse[1], 1u);
  EXPECT_EQ(c.first_use, 16u - 4u);
  EXPECT_EQ(c.MedianReuseDistance(), 1);
  std::filesystem::remove(path);
}

TEST(CensusTest, JsonRoundTripsAndBadJsonIsAnError) {
  const std::string path = TempPath("sched_census_json");
  WriteLog(path, SmallHeader(), {{0, 0, {{1, 2}, {3, 4}}}, {0, 1, {{1, 5}, {6, 4}}}});
  auto trace = ReadRoutingLog(path);
  ASSERT_TRUE(trace.ok());
  const Census c = ComputeCensus(*trace);
  auto back = CensusFromJson(CensusToJson(c), "mem");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->counts, c.counts);
  EXPECT_EQ(back->reuse, c.reuse);
  EXPECT_EQ(back->model_fingerprint, c.model_fingerprint);
  nlohmann::json bad = CensusToJson(c);
  bad["layers"][0]["counts"].erase(0);
  EXPECT_FALSE(CensusFromJson(bad, "bad").ok());
  EXPECT_FALSE(CensusFromJson(nlohmann::json{{"format", "x"}}, "x").ok());
  const std::string summary = CensusSummary(c);
  EXPECT_NE(summary.find("top41%"), std::string::npos);
  EXPECT_NE(summary.find("median"), std::string::npos);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace tandem::scheduler
