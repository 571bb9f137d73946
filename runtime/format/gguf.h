// GGUF v3: a validating mmap reader and a writer with llama.cpp's layout (alignment 32 unless
// general.alignment says otherwise, tight contiguous offsets). The reader never reads outside the
// file: every malformed input becomes an absl::Status naming the file, the field and the value.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/base/mapped_file.h"
#include "runtime/format/metadata.h"
#include "runtime/format/tensor_info.h"

namespace tandem::format {

inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as little-endian u32
inline constexpr uint32_t kGgufVersion = 3;
inline constexpr uint32_t kGgufDefaultAlignment = 32;
// Reader and writer limits (ggml's): names are C strings of at most 63 bytes plus the NUL; one
// string or one array holds at most 2^30 bytes or elements; keys are at most 65535 bytes.
inline constexpr size_t kGgufMaxTensorName = 63;
inline constexpr uint32_t kGgufMaxDims = 4;
inline constexpr uint64_t kGgufMaxStringBytes = uint64_t{1} << 30;
inline constexpr uint64_t kGgufMaxArrayElements = uint64_t{1} << 30;
inline constexpr uint64_t kGgufMaxKeyBytes = 65535;

class GgufFile {
 public:
  // Maps and validates `path`. Tensor data pointers point into the mapping.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses bytes that stay owned by the caller (fuzzing, tests). `name` appears in messages.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Parse(std::span<const uint8_t> bytes,
                                                         std::string name);

  const std::string& name() const { return name_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  const Metadata& metadata() const { return metadata_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* FindTensor(std::string_view name) const;
  // Size of the whole file in bytes.
  uint64_t file_size() const { return file_size_; }

 private:
  GgufFile() = default;
  std::unique_ptr<MappedFile> map_;  // null when parsed from caller-owned bytes
  std::string name_;
  uint64_t file_size_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  Metadata metadata_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;  // name -> index in tensors_
};

// Writes a GGUF v3 file. Tensors are laid out in the order added, each at an aligned offset; their
// bytes come from a callback so that a model larger than RAM can be written tensor by tensor.
// The file appears under `path` only when complete (written to a temporary name, then renamed).
// Metadata is written as given (key names and types are the caller's business), except that
// general.alignment, when present, must be a UINT32 non-zero power of two.
class GgufWriter {
 public:
  // Fills `out` (exactly TensorInfo::nbytes bytes) with the tensor's data.
  using Fill = std::function<absl::Status(std::span<uint8_t> out)>;

  explicit GgufWriter(Metadata metadata) : metadata_(std::move(metadata)) {}
  // dims in ggml order; dims[0] must be a multiple of the type's block size.
  absl::Status AddTensor(std::string name, std::vector<int64_t> dims, quant::GgmlType type,
                         Fill fill);
  // Convenience: copies from memory that outlives Write().
  absl::Status AddTensor(std::string name, std::vector<int64_t> dims, quant::GgmlType type,
                         std::span<const uint8_t> bytes);
  // Calls each Fill once, in order, with one reusable buffer sized to the largest tensor.
  absl::Status Write(const std::string& path) const;
  // The whole file in memory (tests, fuzz seeds).
  absl::StatusOr<std::vector<uint8_t>> WriteToBuffer() const;

 private:
  struct Pending {
    TensorInfo info;
    Fill fill;
  };
  // Emits the whole file, in order, through `append`.
  using Append = std::function<absl::Status(std::span<const uint8_t> bytes)>;
  absl::Status WriteTo(const Append& append) const;

  Metadata metadata_;
  std::vector<Pending> tensors_;
  std::set<std::string, std::less<>> names_;
};

}  // namespace tandem::format
