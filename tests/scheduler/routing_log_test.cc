#include "scheduler/routing_log.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "runtime/quant/float16.h"

namespace tandem::scheduler {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
uint32_t U32(const uint8_t* p) { return p[0] | p[1] << 8 | p[2] << 16 | uint32_t(p[3]) << 24; }
uint16_t U16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }

RoutingLogHeader Header() {
  RoutingLogHeader h;
  h.n_layer = 2;
  h.n_expert = 300;
  h.n_expert_used = 3;
  h.model_fingerprint = 0x1234567890abcdefull;
  h.model_name = "synth:test";
  return h;
}

class RoutingLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = fs::temp_directory_path() / ("tandem_routing_" + std::to_string(::getpid()) + ".log");
    fs::remove(path_);
  }
  void TearDown() override { fs::remove(path_); }
  void WriteTokens(int n, uint32_t first_pos) {
    auto w = RoutingLogWriter::Open(path_.string(), Header());
    ASSERT_TRUE(w.ok()) << w.status();
    for (int t = 0; t < n; ++t) {
      for (int l = 0; l < 2; ++l) {
        const int32_t ids[3] = {t + l, 299 - t, 100 + l};
        const float weights[3] = {0.5f, 0.25f + 0.125f * l, 0.125f};
        (*w)->SetLayer(l, ids, weights);
      }
      ASSERT_TRUE((*w)->WriteToken(7, first_pos + t, 1000 + t).ok());
    }
  }
  fs::path path_;
};

TEST_F(RoutingLogTest, RecordsDecodeAsWritten) {
  WriteTokens(3, 0);
  const std::vector<uint8_t> bytes = ReadAll(path_);
  const std::vector<uint8_t> header = EncodeRoutingLogHeader(Header());
  const uint64_t rec = RoutingRecordBytes(Header());
  ASSERT_EQ(rec, 16u + 2 * 3 * 4 + 4);
  ASSERT_EQ(bytes.size(), header.size() + 3 * rec);
  EXPECT_TRUE(std::equal(header.begin(), header.end(), bytes.begin()));
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 8), "TNDMRLOG");
  EXPECT_EQ(U32(&bytes[8]), kRoutingLogVersion);
  EXPECT_EQ(U32(&bytes[12]), header.size());
  EXPECT_EQ(U32(&bytes[28]), rec);
  EXPECT_EQ(U32(&bytes[header.size() - 4]),
            Crc32(std::span(bytes).first(header.size() - 4)));
  for (int t = 0; t < 3; ++t) {
    const uint8_t* r = &bytes[header.size() + t * rec];
    EXPECT_EQ(U32(r), kRoutingRecordMagic);
    EXPECT_EQ(U32(r + 4), 7u);
    EXPECT_EQ(U32(r + 8), static_cast<uint32_t>(t));
    EXPECT_EQ(U32(r + 12), static_cast<uint32_t>(1000 + t));
    EXPECT_EQ(U16(r + 16), t);            // layer 0, first id
    EXPECT_EQ(U16(r + 16 + 2 * 3), t + 1);  // layer 1, first id
    EXPECT_EQ(U16(r + 16 + 2 * 4), 299 - t);
    EXPECT_EQ(quant::Fp16ToF32(U16(r + 16 + 12 + 2 * 4)), 0.375f);  // layer 1, second weight
    EXPECT_EQ(U32(r + rec - 4), Crc32(std::span(r, rec - 4)));
  }
}

TEST_F(RoutingLogTest, AppendsAndCutsATornTail) {
  WriteTokens(2, 0);
  const uint64_t whole = fs::file_size(path_);
  {
    std::ofstream out(path_, std::ios::binary | std::ios::app);
    out.write("RTOK\x07", 5);  // a crash in the middle of a record
  }
  WriteTokens(1, 2);
  const uint64_t rec = RoutingRecordBytes(Header());
  EXPECT_EQ(fs::file_size(path_), whole + rec);
  const std::vector<uint8_t> bytes = ReadAll(path_);
  const uint8_t* last = &bytes[bytes.size() - rec];
  EXPECT_EQ(U32(last), kRoutingRecordMagic);
  EXPECT_EQ(U32(last + 8), 2u);
}

TEST_F(RoutingLogTest, RefusesAnotherModelsLog) {
  WriteTokens(1, 0);
  RoutingLogHeader other = Header();
  other.model_fingerprint ^= 1;
  auto w = RoutingLogWriter::Open(path_.string(), other);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("another model"), std::string::npos) << w.status();
  {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out << "not a log at all, just some text";
  }
  w = RoutingLogWriter::Open(path_.string(), Header());
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("not a Tandem routing log"), std::string::npos);
}

}  // namespace
}  // namespace tandem::scheduler
