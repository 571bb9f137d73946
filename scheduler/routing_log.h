// The routing log: for every token and layer, the experts the router chose and their weights, in a
// compact, versioned, append-only binary file (docs/formats/routing-log.md). Each token is one
// fixed-size record written with a single write() and closed by a CRC, so a crash leaves the file
// readable up to its last whole record. The reader lives with the placement planner (scheduler/).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::scheduler {

inline constexpr char kRoutingLogMagic[8] = {'T', 'N', 'D', 'M', 'R', 'L', 'O', 'G'};
inline constexpr uint32_t kRoutingLogVersion = 1;
inline constexpr uint32_t kRoutingRecordMagic = 0x4B4F5452;  // "RTOK" little-endian

// Identifies the model a log belongs to; logs of another model are refused when appending/merging.
struct RoutingLogHeader {
  uint32_t n_layer = 0;
  uint32_t n_expert = 0;
  uint32_t n_expert_used = 0;
  uint64_t model_fingerprint = 0;  // hash of architecture, shapes and tensor types
  std::string model_name;          // human-readable ("synth:flash-next-125b", a file name)
};

// Bytes of one record for a header: magic, sequence id, position, token id, then per layer k ids
// (u16) and k weights (f16), then a CRC32 of everything before it in the record.
uint64_t RoutingRecordBytes(const RoutingLogHeader& header);
// CRC-32 (IEEE 802.3, reflected, as zlib computes it).
uint32_t Crc32(std::span<const uint8_t> bytes, uint32_t crc = 0);

class RoutingLogWriter {
 public:
  // Creates the file with a header, or appends to an existing log of the same model (an existing log
  // of another model, or a damaged header, is an error; a torn last record is cut off first).
  static absl::StatusOr<std::unique_ptr<RoutingLogWriter>> Open(const std::string& path,
                                                                 const RoutingLogHeader& header);
  ~RoutingLogWriter();

  // Collects one layer's choice for the token being recorded.
  void SetLayer(int layer, std::span<const int32_t> experts, std::span<const float> weights);
  // Writes the collected token as one record.
  absl::Status WriteToken(uint32_t sequence_id, uint32_t position, int32_t token_id);

  const RoutingLogHeader& header() const { return header_; }

 private:
  RoutingLogWriter(int fd, RoutingLogHeader header);
  int fd_;
  RoutingLogHeader header_;
  std::vector<uint16_t> ids_;      // [layer][k]
  std::vector<uint16_t> weights_;  // [layer][k], f16 bits
  std::vector<uint8_t> record_;
};

// Serialises the header exactly as the writer does (tests and the reader use it).
std::vector<uint8_t> EncodeRoutingLogHeader(const RoutingLogHeader& header);

}  // namespace tandem::scheduler
