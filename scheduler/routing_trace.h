// Reads routing logs (docs/formats/routing-log.md) into memory and merges several logs of one model.
// The reader trusts nothing in the file: every size is checked before use, a torn or corrupt tail
// ends the log with a warning, and a header it does not understand is an error naming the file.
// It must not depend on the engine beyond the format constants in scheduler/routing_log.h.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "scheduler/routing_log.h"

namespace tandem::scheduler {

// Every routed decision of a log: for token t and layer l, k expert ids (router order) and weights.
struct RoutingTrace {
  RoutingLogHeader header;
  std::vector<uint32_t> sequence;  // per token; unique across merged logs
  std::vector<uint32_t> position;  // per token
  std::vector<int32_t> token;      // per token
  std::vector<uint16_t> ids;       // [token][layer][k]
  std::vector<float> weights;      // [token][layer][k]
  std::vector<std::string> warnings;  // torn tails and other tolerated damage, one line each

  int n_layer() const { return static_cast<int>(header.n_layer); }
  int n_expert() const { return static_cast<int>(header.n_expert); }
  int k() const { return static_cast<int>(header.n_expert_used); }
  size_t n_tokens() const { return sequence.size(); }
  std::span<const uint16_t> Ids(size_t t, int layer) const {
    return std::span(ids).subspan((t * header.n_layer + layer) * header.n_expert_used,
                                  header.n_expert_used);
  }
  std::span<const float> Weights(size_t t, int layer) const {
    return std::span(weights).subspan((t * header.n_layer + layer) * header.n_expert_used,
                                      header.n_expert_used);
  }
};

// Parses a whole log held in memory; `name` labels messages. Bad magic, unknown version or a
// damaged header is an error; a torn or corrupt record ends the log with a warning.
absl::StatusOr<RoutingTrace> ParseRoutingLog(std::span<const uint8_t> bytes, const std::string& name);
absl::StatusOr<RoutingTrace> ReadRoutingLog(const std::string& path);
// Reads and merges logs of one model (same name-independent identity: fingerprint, layers,
// experts, k). Sequence ids are renumbered so that sequences of different files stay apart.
absl::StatusOr<RoutingTrace> ReadRoutingLogs(const std::vector<std::string>& paths);
// Appends `more` to `*into`; refuses a log of another model with a message naming both.
absl::Status MergeRoutingTrace(RoutingTrace* into, RoutingTrace more, const std::string& more_name);

// Keeps the sequences whose index (in order of first appearance) is odd (odd_half) or even: one
// half to plan on, the other held out for replay.
RoutingTrace SplitBySequence(const RoutingTrace& trace, bool odd_half);

}  // namespace tandem::scheduler
