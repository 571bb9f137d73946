#include "scheduler/routing_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/quant/float16.h"

namespace tandem::scheduler {
namespace {

void PutU32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void PutU64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
uint32_t GetU32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

absl::Status WriteAll(int fd, const uint8_t* data, size_t n, const std::string& what) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat(what, ": write failed: ", std::strerror(errno)));
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

}  // namespace

uint32_t Crc32(std::span<const uint8_t> bytes, uint32_t crc) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  crc = ~crc;
  for (uint8_t b : bytes) crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

uint64_t RoutingRecordBytes(const RoutingLogHeader& h) {
  return 16 + uint64_t{h.n_layer} * h.n_expert_used * 4 + 4;
}

std::vector<uint8_t> EncodeRoutingLogHeader(const RoutingLogHeader& h) {
  std::vector<uint8_t> out(kRoutingLogMagic, kRoutingLogMagic + 8);
  const uint32_t header_bytes = 8 + 4 * 6 + 8 + 4 + static_cast<uint32_t>(h.model_name.size()) + 4;
  PutU32(out, kRoutingLogVersion);
  PutU32(out, header_bytes);
  PutU32(out, h.n_layer);
  PutU32(out, h.n_expert);
  PutU32(out, h.n_expert_used);
  PutU32(out, static_cast<uint32_t>(RoutingRecordBytes(h)));
  PutU64(out, h.model_fingerprint);
  PutU32(out, static_cast<uint32_t>(h.model_name.size()));
  out.insert(out.end(), h.model_name.begin(), h.model_name.end());
  PutU32(out, Crc32(out));
  return out;
}

RoutingLogWriter::RoutingLogWriter(int fd, RoutingLogHeader header)
    : fd_(fd), header_(std::move(header)) {
  const size_t n = size_t{header_.n_layer} * header_.n_expert_used;
  ids_.assign(n, 0);
  weights_.assign(n, 0);
  record_.reserve(RoutingRecordBytes(header_));
}

RoutingLogWriter::~RoutingLogWriter() { ::close(fd_); }

absl::StatusOr<std::unique_ptr<RoutingLogWriter>> RoutingLogWriter::Open(
    const std::string& path, const RoutingLogHeader& header) {
  if (header.n_expert > 65536 || header.n_layer == 0 || header.n_expert_used == 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": routing log needs 1..65536 experts"));
  }
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open routing log: ", std::strerror(errno)));
  }
  const std::vector<uint8_t> encoded = EncodeRoutingLogHeader(header);
  struct stat st {};
  ::fstat(fd, &st);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size == 0) {
    absl::Status s = WriteAll(fd, encoded.data(), encoded.size(), path);
    if (!s.ok()) {
      ::close(fd);
      return s;
    }
  } else {
    // Appending: the existing header must be byte-identical (same model, same format version).
    std::vector<uint8_t> existing(encoded.size());
    ssize_t got = ::pread(fd, existing.data(), existing.size(), 0);
    if (got != static_cast<ssize_t>(existing.size()) || existing != encoded) {
      ::close(fd);
      std::string detail = "it belongs to another model or format version";
      if (got >= 12 && std::memcmp(existing.data(), kRoutingLogMagic, 8) != 0) {
        detail = "it is not a Tandem routing log";
      } else if (got >= 12 && GetU32(existing.data() + 8) != kRoutingLogVersion) {
        detail = absl::StrCat("it has format version ", GetU32(existing.data() + 8));
      }
      return absl::FailedPreconditionError(
          absl::StrCat(path, ": cannot append to this routing log: ", detail,
                       " (use a new file for ", header.model_name, ")"));
    }
    // Cut a torn record left by a crash so that new records stay aligned.
    const uint64_t rec = RoutingRecordBytes(header);
    const uint64_t whole = (size - encoded.size()) / rec;
    const uint64_t keep = encoded.size() + whole * rec;
    if (keep != size && ::ftruncate(fd, static_cast<off_t>(keep)) != 0) {
      ::close(fd);
      return absl::InternalError(absl::StrCat(path, ": cannot cut torn record: ", std::strerror(errno)));
    }
  }
  if (::lseek(fd, 0, SEEK_END) < 0) {
    ::close(fd);
    return absl::InternalError(absl::StrCat(path, ": seek failed"));
  }
  return std::unique_ptr<RoutingLogWriter>(new RoutingLogWriter(fd, header));
}

void RoutingLogWriter::SetLayer(int layer, std::span<const int32_t> experts,
                                std::span<const float> weights) {
  const size_t k = header_.n_expert_used;
  for (size_t i = 0; i < k && i < experts.size(); ++i) {
    ids_[layer * k + i] = static_cast<uint16_t>(experts[i]);
    weights_[layer * k + i] = quant::F32ToFp16(weights[i]);
  }
}

absl::Status RoutingLogWriter::WriteToken(uint32_t sequence_id, uint32_t position,
                                          int32_t token_id) {
  record_.clear();
  PutU32(record_, kRoutingRecordMagic);
  PutU32(record_, sequence_id);
  PutU32(record_, position);
  PutU32(record_, static_cast<uint32_t>(token_id));
  for (uint16_t id : ids_) {
    record_.push_back(static_cast<uint8_t>(id));
    record_.push_back(static_cast<uint8_t>(id >> 8));
  }
  for (uint16_t w : weights_) {
    record_.push_back(static_cast<uint8_t>(w));
    record_.push_back(static_cast<uint8_t>(w >> 8));
  }
  PutU32(record_, Crc32(record_));
  // One write per record: a crash leaves whole records plus at most one torn tail.
  return WriteAll(fd_, record_.data(), record_.size(), "routing log");
}

}  // namespace tandem::scheduler
