// Hand-made routing logs for the scheduler tests, written with the engine's own writer.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "scheduler/routing_log.h"

namespace tandem::scheduler::testing {

inline scheduler::RoutingLogHeader SmallHeader(uint64_t fingerprint = 0xfeedull, int layers = 2,
                                            int experts = 8, int k = 2) {
  scheduler::RoutingLogHeader h;
  h.n_layer = layers;
  h.n_expert = experts;
  h.n_expert_used = k;
  h.model_fingerprint = fingerprint;
  h.model_name = "synth:test-model";
  return h;
}

// One token: its sequence, position and, per layer, its k expert ids.
struct HandToken {
  uint32_t seq;
  uint32_t pos;
  std::vector<std::vector<int32_t>> ids;  // [layer][k]
};

inline std::string TempPath(const std::string& stem) {
  return (std::filesystem::temp_directory_path() /
          (stem + "_" + std::to_string(::getpid()) + ".log"))
      .string();
}

inline void WriteLog(const std::string& path, const scheduler::RoutingLogHeader& h,
                     const std::vector<HandToken>& tokens) {
  std::filesystem::remove(path);
  auto w = scheduler::RoutingLogWriter::Open(path, h);
  ASSERT_TRUE(w.ok()) << w.status();
  for (const HandToken& t : tokens) {
    for (size_t l = 0; l < t.ids.size(); ++l) {
      std::vector<float> weights(t.ids[l].size(), 1.0f / t.ids[l].size());
      (*w)->SetLayer(int(l), t.ids[l], weights);
    }
    ASSERT_TRUE((*w)->WriteToken(t.seq, t.pos, 7).ok());
  }
}

}  // namespace tandem::scheduler::testing
