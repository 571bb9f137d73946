#include "scheduler/routing_trace.h"

#include <array>
#include <cstring>
#include <fstream>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/base/status_macros.h"
#include "runtime/quant/float16.h"

namespace tandem::scheduler {
namespace {

uint32_t U32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
uint64_t U64(const uint8_t* p) { return uint64_t{U32(p)} | uint64_t{U32(p + 4)} << 32; }
uint16_t U16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }

// CRC-32 (IEEE, reflected, as zlib); the writer's twin, kept here so the reader needs no engine code.

constexpr size_t kFixedHeaderBytes = 44;  // up to the model name
// Bound on layers*k so that a hostile header cannot ask for absurd record sizes.
constexpr uint64_t kMaxRoutesPerToken = uint64_t{1} << 20;

std::string Identity(const RoutingLogHeader& h) {
  return absl::StrFormat("%s (fingerprint %016x, %u layers, %u experts, top-%u)", h.model_name,
                         h.model_fingerprint, h.n_layer, h.n_expert, h.n_expert_used);
}

}  // namespace

absl::StatusOr<RoutingTrace> ParseRoutingLog(std::span<const uint8_t> bytes,
                                             const std::string& name) {
  const uint8_t* p = bytes.data();
  const size_t size = bytes.size();
  if (size < 8 || std::memcmp(p, kRoutingLogMagic, 8) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": not a Tandem routing log (bad magic; expected TNDMRLOG)"));
  }
  if (size < kFixedHeaderBytes + 4) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": routing log header is truncated (",
                                                   size, " bytes)"));
  }
  const uint32_t version = U32(p + 8);
  if (version != kRoutingLogVersion) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": routing log format version ", version,
                                                   " is not supported (this build reads version ",
                                                   kRoutingLogVersion, ")"));
  }
  const uint32_t header_bytes = U32(p + 12);
  const uint32_t name_len = U32(p + 40);
  if (uint64_t{kFixedHeaderBytes} + name_len + 4 != header_bytes || header_bytes > size) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": routing log header size ", header_bytes,
                                                   " is inconsistent (model name ", name_len,
                                                   " bytes, file ", size, " bytes)"));
  }
  if (Crc32(std::span(p, header_bytes - 4)) != U32(p + header_bytes - 4)) {
    return absl::DataLossError(absl::StrCat(name, ": routing log header CRC mismatch"));
  }
  RoutingTrace trace;
  RoutingLogHeader& h = trace.header;
  h.n_layer = U32(p + 16);
  h.n_expert = U32(p + 20);
  h.n_expert_used = U32(p + 24);
  const uint32_t record_bytes = U32(p + 28);
  h.model_fingerprint = U64(p + 32);
  h.model_name.assign(reinterpret_cast<const char*>(p + kFixedHeaderBytes), name_len);
  if (h.n_layer == 0 || h.n_expert == 0 || h.n_expert > 65536 || h.n_expert_used == 0 ||
      h.n_expert_used > h.n_expert ||
      uint64_t{h.n_layer} * h.n_expert_used > kMaxRoutesPerToken) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": routing log header has impossible sizes: ", h.n_layer, " layers, ",
                     h.n_expert, " experts, top-", h.n_expert_used));
  }
  // Record: magic, sequence, position, token (16 bytes), u16 ids and f16 weights, CRC.
  const uint64_t expect_record = 16 + uint64_t{h.n_layer} * h.n_expert_used * 4 + 4;
  if (record_bytes != expect_record) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": record size ", record_bytes,
                                                   " disagrees with the header (expected ",
                                                   expect_record, ")"));
  }
  const size_t routes = size_t{h.n_layer} * h.n_expert_used;
  const size_t body = size - header_bytes;
  const size_t whole = body / record_bytes;
  trace.sequence.reserve(whole);
  trace.position.reserve(whole);
  trace.token.reserve(whole);
  trace.ids.reserve(whole * routes);
  trace.weights.reserve(whole * routes);
  size_t offset = header_bytes;
  size_t good = 0;
  while (size - offset >= record_bytes) {
    const uint8_t* r = p + offset;
    if (U32(r) != kRoutingRecordMagic || Crc32(std::span(r, record_bytes - 4)) != U32(r + record_bytes - 4)) {
      break;
    }
    bool ids_ok = true;
    for (size_t i = 0; i < routes; ++i) ids_ok &= U16(r + 16 + 2 * i) < h.n_expert;
    if (!ids_ok) break;
    trace.sequence.push_back(U32(r + 4));
    trace.position.push_back(U32(r + 8));
    trace.token.push_back(static_cast<int32_t>(U32(r + 12)));
    for (size_t i = 0; i < routes; ++i) trace.ids.push_back(U16(r + 16 + 2 * i));
    for (size_t i = 0; i < routes; ++i) {
      trace.weights.push_back(quant::Fp16ToF32(U16(r + 16 + 2 * routes + 2 * i)));
    }
    offset += record_bytes;
    ++good;
  }
  if (offset != size) {
    trace.warnings.push_back(absl::StrCat(
        name, ": ignored ", size - offset, " bytes after record ", good,
        " (a torn or corrupt tail; the log is read up to its last whole record)"));
  }
  return trace;
}

absl::StatusOr<RoutingTrace> ReadRoutingLog(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open routing log"));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return ParseRoutingLog(bytes, path);
}

absl::Status MergeRoutingTrace(RoutingTrace* into, RoutingTrace more, const std::string& more_name) {
  const RoutingLogHeader& a = into->header;
  const RoutingLogHeader& b = more.header;
  if (a.model_fingerprint != b.model_fingerprint || a.n_layer != b.n_layer ||
      a.n_expert != b.n_expert || a.n_expert_used != b.n_expert_used) {
    return absl::FailedPreconditionError(
        absl::StrCat(more_name, ": routing log of another model: ", Identity(b),
                     "; the logs before it are of ", Identity(a)));
  }
  uint32_t next = 0;
  for (uint32_t s : into->sequence) next = std::max(next, s + 1);
  std::unordered_map<uint32_t, uint32_t> renumber;
  for (uint32_t& s : more.sequence) {
    auto [it, inserted] = renumber.try_emplace(s, next);
    if (inserted) ++next;
    s = it->second;
  }
  auto append = [](auto& dst, const auto& src) { dst.insert(dst.end(), src.begin(), src.end()); };
  append(into->sequence, more.sequence);
  append(into->position, more.position);
  append(into->token, more.token);
  append(into->ids, more.ids);
  append(into->weights, more.weights);
  append(into->warnings, more.warnings);
  return absl::OkStatus();
}

absl::StatusOr<RoutingTrace> ReadRoutingLogs(const std::vector<std::string>& paths) {
  if (paths.empty()) return absl::InvalidArgumentError("no routing logs given");
  TANDEM_ASSIGN_OR_RETURN(RoutingTrace trace, ReadRoutingLog(paths[0]));
  for (size_t i = 1; i < paths.size(); ++i) {
    TANDEM_ASSIGN_OR_RETURN(RoutingTrace more, ReadRoutingLog(paths[i]));
    TANDEM_RETURN_IF_ERROR(MergeRoutingTrace(&trace, std::move(more), paths[i]));
  }
  return trace;
}

RoutingTrace SplitBySequence(const RoutingTrace& trace, bool odd_half) {
  RoutingTrace out;
  out.header = trace.header;
  std::unordered_map<uint32_t, size_t> order;
  const size_t routes = size_t{trace.header.n_layer} * trace.header.n_expert_used;
  for (size_t t = 0; t < trace.n_tokens(); ++t) {
    auto [it, inserted] = order.try_emplace(trace.sequence[t], order.size());
    if ((it->second % 2 == 1) != odd_half) continue;
    out.sequence.push_back(trace.sequence[t]);
    out.position.push_back(trace.position[t]);
    out.token.push_back(trace.token[t]);
    out.ids.insert(out.ids.end(), trace.ids.begin() + t * routes, trace.ids.begin() + (t + 1) * routes);
    out.weights.insert(out.weights.end(), trace.weights.begin() + t * routes,
                       trace.weights.begin() + (t + 1) * routes);
  }
  return out;
}

}  // namespace tandem::scheduler
