// GGUF v2/v3 reader and v3 writer (layout: /work/shared/specs/gguf-and-quants.md §1).
// The reader walks the bytes with a bounds-checked cursor: every length is checked against the
// bytes that remain before anything is read or allocated, so no input can make it read out of
// bounds. It does not interpret keys (that is the model layer's job) except general.alignment.
#include "runtime/format/gguf.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include "absl/functional/function_ref.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/base/status_macros.h"

namespace tandem::format {
namespace {

constexpr uint8_t kMagicBytes[4] = {'G', 'G', 'U', 'F'};
constexpr uint8_t kSwappedMagicBytes[4] = {'F', 'U', 'G', 'G'};
constexpr char kAlignmentKey[] = "general.alignment";
constexpr int kNumValueTypes = 13;

// Keys and names from a file may hold any bytes: print them escaped and abbreviated.
std::string Quote(std::string_view s) {
  constexpr size_t kMaxShown = 80;
  std::string shown = absl::CEscape(absl::string_view(s.data(), std::min(s.size(), kMaxShown)));
  if (s.size() > kMaxShown) absl::StrAppend(&shown, "...");
  return absl::StrCat("'", shown, "'");
}

bool IsPowerOfTwo(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

uint64_t PadTo(uint64_t x, uint64_t alignment) { return (x + alignment - 1) & ~(alignment - 1); }

// Reads little-endian fields from a span. Every read is checked first; on failure it names the
// section ("header", "metadata", ...), the field, the offset and what is left.
class Cursor {
 public:
  using What = absl::FunctionRef<std::string()>;

  Cursor(std::span<const uint8_t> bytes, const std::string& file) : bytes_(bytes), file_(file) {}

  void set_section(const char* section) { section_ = section; }
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return bytes_.size() - pos_; }

  absl::Status Need(uint64_t n, What what) const {
    if (n <= remaining()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        file_, ": truncated ", section_, ": ", what(), " needs ", n, " bytes at offset ", pos_,
        " but only ", remaining(), " remain (file is ", bytes_.size(), " bytes)"));
  }

  // Copies n bytes out; only after Need(n) succeeded.
  void Take(void* out, size_t n) {
    std::memcpy(out, bytes_.data() + pos_, n);
    pos_ += n;
  }

  template <typename T>
  absl::Status Read(T* out, What what) {
    static_assert(std::is_trivially_copyable_v<T>);
    TANDEM_RETURN_IF_ERROR(Need(sizeof(T), what));
    Take(out, sizeof(T));
    return absl::OkStatus();
  }

  // A gguf_string: u64 length, then bytes. `max_len` is checked before anything is allocated.
  absl::Status ReadString(std::string* out, uint64_t max_len, What what) {
    uint64_t len = 0;
    TANDEM_RETURN_IF_ERROR(Read(&len, [&] { return absl::StrCat("length of ", what()); }));
    if (len > max_len) {
      return absl::InvalidArgumentError(absl::StrCat(file_, ": ", what(), " has length ", len,
                                                     ", more than the limit of ", max_len,
                                                     " bytes (at offset ", pos_ - 8, ")"));
    }
    TANDEM_RETURN_IF_ERROR(Need(len, what));
    out->assign(reinterpret_cast<const char*>(bytes_.data() + pos_), len);
    pos_ += len;
    return absl::OkStatus();
  }

  absl::Status Error(std::string_view message) const {
    return absl::InvalidArgumentError(
        absl::StrCat(file_, ": ", absl::string_view(message.data(), message.size())));
  }

 private:
  std::span<const uint8_t> bytes_;
  const std::string& file_;
  const char* section_ = "file";
  uint64_t pos_ = 0;
};

template <typename T>
absl::Status ReadFixedArray(Cursor& cur, uint64_t n, const std::string& key, Array* out) {
  // n <= 2^30 and sizeof(T) <= 8, so the product cannot overflow.
  TANDEM_RETURN_IF_ERROR(cur.Need(n * sizeof(T), [&] {
    return absl::StrCat("array of key ", Quote(key), " (", n, " elements of ", sizeof(T),
                        " bytes)");
  }));
  std::vector<T> values(n);
  if constexpr (std::is_same_v<T, bool>) {
    for (uint64_t i = 0; i < n; ++i) {
      uint8_t b = 0;
      cur.Take(&b, 1);
      values[i] = b != 0;  // ggml's reading: any non-zero byte is true
    }
  } else {
    if (n > 0) cur.Take(values.data(), n * sizeof(T));
  }
  out->values = std::move(values);
  return absl::OkStatus();
}

absl::Status ReadArray(Cursor& cur, const std::string& key, Value* out) {
  uint32_t elem_id = 0;
  TANDEM_RETURN_IF_ERROR(
      cur.Read(&elem_id, [&] { return absl::StrCat("array element type of key ", Quote(key)); }));
  if (elem_id >= kNumValueTypes) {
    return cur.Error(absl::StrCat("key ", Quote(key), ": bad value type id ", elem_id,
                                  " for the array elements (valid ids are 0..12)"));
  }
  ValueType elem_type = static_cast<ValueType>(elem_id);
  if (elem_type == ValueType::kArray) {
    return cur.Error(absl::StrCat("key ", Quote(key), ": nested arrays are not supported"));
  }
  uint64_t n = 0;
  TANDEM_RETURN_IF_ERROR(
      cur.Read(&n, [&] { return absl::StrCat("array length of key ", Quote(key)); }));
  if (n > kGgufMaxArrayElements) {
    return cur.Error(absl::StrCat("key ", Quote(key), ": array has ", n,
                                  " elements, more than the limit of 2^30"));
  }
  Array array;
  array.elem_type = elem_type;
  switch (elem_type) {
    case ValueType::kUint8:
      TANDEM_RETURN_IF_ERROR(ReadFixedArray<uint8_t>(cur, n, key, &array));
      break;
    case ValueType::kInt8:
      TANDEM_RETURN_IF_ERROR(ReadFixedArray<int8_t>(cur, n, key, &array));
      break;
    case ValueType::kUint16:
      TANDEM_RETURN_IF_ERROR(ReadFixedArray<uint16_t>(cur, n, key, &array));
      break;
    case ValueType::kInt16:
      TANDEM_RETURN_IF_ERROR(ReadFixedArray<int16_t>(cur, n, key, &array));
      break;
    case ValueType::kUint32:
      TANDEM_RETURN_IF_ERROR(ReadFixedArray<uint32_t>(cur, n, key, &array));
      break;
    case ValueType::kInt32:
      TANDEM_RETURN_IF_ERROR(ReadFixedArray<int32_t>(cur, n, key, &array));
      break;
    case ValueType::kFloat32:
      TANDEM_RETURN_IF_ERROR(ReadFixedArray<float>(cur, n, key, &array));
      break;
    case ValueType::kBool:
      TANDEM_RETURN_IF_ERROR(ReadFixedArray<bool>(cur, n, key, &array));
      break;
    case ValueType::kUint64:
      TANDEM_RETURN_IF_ERROR(ReadFixedArray<uint64_t>(cur, n, key, &array));
      break;
    case ValueType::kInt64:
      TANDEM_RETURN_IF_ERROR(ReadFixedArray<int64_t>(cur, n, key, &array));
      break;
    case ValueType::kFloat64:
      TANDEM_RETURN_IF_ERROR(ReadFixedArray<double>(cur, n, key, &array));
      break;
    case ValueType::kString: {
      // Each element takes at least its 8-byte length: reject impossible counts before allocating.
      TANDEM_RETURN_IF_ERROR(cur.Need(n * 8, [&] {
        return absl::StrCat("string array of key ", Quote(key), " (", n, " elements)");
      }));
      std::vector<std::string> strings(n);
      for (uint64_t i = 0; i < n; ++i) {
        TANDEM_RETURN_IF_ERROR(cur.ReadString(&strings[i], kGgufMaxStringBytes, [&] {
          return absl::StrCat("string ", i, " of the array of key ", Quote(key));
        }));
      }
      array.values = std::move(strings);
      break;
    }
    case ValueType::kArray:
      break;  // rejected above
  }
  *out = Value::Arr(std::move(array));
  return absl::OkStatus();
}

template <typename T>
absl::Status ReadScalar(Cursor& cur, const std::string& key, Value* out) {
  T v{};
  TANDEM_RETURN_IF_ERROR(cur.Read(&v, [&] {
    return absl::StrCat("value of key ", Quote(key), " (", sizeof(T), "-byte scalar)");
  }));
  *out = Value(Value::Storage(v));
  return absl::OkStatus();
}

absl::Status ReadValue(Cursor& cur, ValueType type, const std::string& key, Value* out) {
  switch (type) {
    case ValueType::kUint8:
      return ReadScalar<uint8_t>(cur, key, out);
    case ValueType::kInt8:
      return ReadScalar<int8_t>(cur, key, out);
    case ValueType::kUint16:
      return ReadScalar<uint16_t>(cur, key, out);
    case ValueType::kInt16:
      return ReadScalar<int16_t>(cur, key, out);
    case ValueType::kUint32:
      return ReadScalar<uint32_t>(cur, key, out);
    case ValueType::kInt32:
      return ReadScalar<int32_t>(cur, key, out);
    case ValueType::kFloat32:
      return ReadScalar<float>(cur, key, out);
    case ValueType::kUint64:
      return ReadScalar<uint64_t>(cur, key, out);
    case ValueType::kInt64:
      return ReadScalar<int64_t>(cur, key, out);
    case ValueType::kFloat64:
      return ReadScalar<double>(cur, key, out);
    case ValueType::kBool: {
      uint8_t b = 0;
      TANDEM_RETURN_IF_ERROR(
          cur.Read(&b, [&] { return absl::StrCat("bool value of key ", Quote(key)); }));
      *out = Value::Bool(b != 0);
      return absl::OkStatus();
    }
    case ValueType::kString: {
      std::string s;
      TANDEM_RETURN_IF_ERROR(cur.ReadString(&s, kGgufMaxStringBytes, [&] {
        return absl::StrCat("string value of key ", Quote(key));
      }));
      *out = Value::Str(std::move(s));
      return absl::OkStatus();
    }
    case ValueType::kArray:
      return ReadArray(cur, key, out);
  }
  return cur.Error("internal: unhandled value type");
}

absl::Status ReadMetadata(Cursor& cur, uint64_t kv_count, Metadata* metadata) {
  cur.set_section("metadata");
  for (uint64_t i = 0; i < kv_count; ++i) {
    std::string key;
    TANDEM_RETURN_IF_ERROR(cur.ReadString(&key, kGgufMaxKeyBytes, [&] {
      return absl::StrCat("key of key/value #", i, " of ", kv_count);
    }));
    if (key.empty()) {
      return cur.Error(absl::StrCat("metadata key/value #", i, " has an empty key"));
    }
    uint32_t type_id = 0;
    TANDEM_RETURN_IF_ERROR(
        cur.Read(&type_id, [&] { return absl::StrCat("value type of key ", Quote(key)); }));
    if (type_id >= kNumValueTypes) {
      return cur.Error(absl::StrCat("key ", Quote(key), " has bad value type id ", type_id,
                                    " (valid ids are 0..12)"));
    }
    Value value;
    TANDEM_RETURN_IF_ERROR(ReadValue(cur, static_cast<ValueType>(type_id), key, &value));
    if (metadata->Find(key) != nullptr) {
      return cur.Error(
          absl::StrCat("duplicate metadata key ", Quote(key), " (key/value #", i, ")"));
    }
    metadata->Add(std::move(key), std::move(value));
  }
  return absl::OkStatus();
}

// The alignment from general.alignment (UINT32, non-zero power of two), or the default.
absl::StatusOr<uint32_t> AlignmentFrom(const Metadata& metadata, const std::string& file) {
  const Value* v = metadata.Find(kAlignmentKey);
  if (v == nullptr) return kGgufDefaultAlignment;
  if (v->type() != ValueType::kUint32) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", kAlignmentKey, " has type ",
                                                   ValueTypeName(v->type()), " (value ",
                                                   v->ToString(), "); it must be uint32"));
  }
  uint32_t alignment = std::get<uint32_t>(v->storage());
  if (!IsPowerOfTwo(alignment)) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", kAlignmentKey, " = ", alignment,
                                                   " is not a non-zero power of two"));
  }
  return alignment;
}

// Checks dims and type of one tensor and returns its byte size. Shared by reader and writer.
absl::StatusOr<uint64_t> TensorBytes(const std::string& file, const std::string& name,
                                     const std::vector<int64_t>& dims, uint32_t type_id) {
  auto fail = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": tensor ", Quote(name), " ", what));
  };
  if (dims.empty() || dims.size() > kGgufMaxDims) {
    return fail(absl::StrCat("has ", dims.size(), " dimensions; GGUF allows 1 to 4"));
  }
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] <= 0) {
      return fail(absl::StrCat("has dimension ", d, " = ", dims[d], " in ", DimsToString(dims),
                               "; dimensions must be positive"));
    }
  }
  const quant::TypeInfo* info = quant::FindTypeInfo(type_id);
  if (info == nullptr) {
    return fail(absl::StrCat("has unknown ggml type id ", type_id));
  }
  int64_t elements = 1;
  for (int64_t d : dims) {
    if (__builtin_mul_overflow(elements, d, &elements)) {
      return fail(absl::StrCat("dims ", DimsToString(dims), ": element count overflows int64"));
    }
  }
  if (dims[0] % info->block_elems != 0) {
    return fail(absl::StrCat("(", info->name, "): ne[0] = ", dims[0],
                             " is not a multiple of the block size ", info->block_elems));
  }
  int64_t nbytes = elements / info->block_elems;
  if (__builtin_mul_overflow(nbytes, int64_t{info->block_bytes}, &nbytes)) {
    return fail(absl::StrCat("(", info->name, ") dims ", DimsToString(dims),
                             ": byte size overflows int64"));
  }
  return static_cast<uint64_t>(nbytes);
}

absl::Status ReadTensorInfos(Cursor& cur, uint64_t tensor_count, const std::string& file,
                             std::vector<TensorInfo>* tensors,
                             std::map<std::string, size_t, std::less<>>* index) {
  cur.set_section("tensor-info table");
  for (uint64_t i = 0; i < tensor_count; ++i) {
    TensorInfo t;
    // Read up to 64 KiB so that an over-long name is reported as such, not as truncation.
    TANDEM_RETURN_IF_ERROR(cur.ReadString(&t.name, kGgufMaxKeyBytes, [&] {
      return absl::StrCat("name of tensor #", i, " of ", tensor_count);
    }));
    if (t.name.empty()) return cur.Error(absl::StrCat("tensor #", i, " has an empty name"));
    if (t.name.size() > kGgufMaxTensorName) {
      return cur.Error(absl::StrCat("tensor #", i, " name ", Quote(t.name), " is ", t.name.size(),
                                    " bytes; the limit is ", kGgufMaxTensorName));
    }
    if (index->contains(t.name)) {
      return cur.Error(absl::StrCat("duplicate tensor name ", Quote(t.name), " (tensor #", i, ")"));
    }
    uint32_t n_dims = 0;
    TANDEM_RETURN_IF_ERROR(
        cur.Read(&n_dims, [&] { return absl::StrCat("n_dims of tensor ", Quote(t.name)); }));
    if (n_dims == 0 || n_dims > kGgufMaxDims) {
      return cur.Error(absl::StrCat("tensor ", Quote(t.name), " has n_dims = ", n_dims,
                                    "; GGUF allows 1 to ", kGgufMaxDims));
    }
    t.dims.resize(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      TANDEM_RETURN_IF_ERROR(cur.Read(
          &t.dims[d], [&] { return absl::StrCat("dimension ", d, " of tensor ", Quote(t.name)); }));
    }
    uint32_t type_id = 0;
    TANDEM_RETURN_IF_ERROR(
        cur.Read(&type_id, [&] { return absl::StrCat("type of tensor ", Quote(t.name)); }));
    TANDEM_RETURN_IF_ERROR(
        cur.Read(&t.offset, [&] { return absl::StrCat("offset of tensor ", Quote(t.name)); }));
    TANDEM_ASSIGN_OR_RETURN(t.nbytes, TensorBytes(file, t.name, t.dims, type_id));
    t.type = static_cast<quant::GgmlType>(type_id);
    index->emplace(t.name, tensors->size());
    tensors->push_back(std::move(t));
  }
  return absl::OkStatus();
}

// Offsets aligned, inside the file, and no two tensors sharing a byte. Gaps are allowed.
absl::Status CheckTensorPlacement(const std::vector<TensorInfo>& tensors, uint64_t data_offset,
                                  uint64_t file_size, uint32_t alignment, const std::string& file) {
  for (const TensorInfo& t : tensors) {
    if (t.offset % alignment != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": tensor ", Quote(t.name), " offset ", t.offset,
                       " is not a multiple of the alignment ", alignment));
    }
    uint64_t end = 0;
    bool overflow = __builtin_add_overflow(data_offset, t.offset, &end) ||
                    __builtin_add_overflow(end, t.nbytes, &end);
    if (overflow || end > file_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": truncated data section: tensor ", Quote(t.name), " (offset ",
                       t.offset, ", ", t.nbytes, " bytes) ends at byte ",
                       overflow ? std::string("beyond 2^64") : absl::StrCat(end),
                       " but the file is ", file_size, " bytes"));
    }
  }
  std::vector<const TensorInfo*> by_offset;
  by_offset.reserve(tensors.size());
  for (const TensorInfo& t : tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& a = *by_offset[i - 1];
    const TensorInfo& b = *by_offset[i];
    if (a.offset + a.nbytes > b.offset) {  // cannot overflow: both ends are inside the file
      return absl::InvalidArgumentError(absl::StrCat(
          file, ": tensors ", Quote(a.name), " [", a.offset, ", ", a.offset + a.nbytes, ") and ",
          Quote(b.name), " [", b.offset, ", ", b.offset + b.nbytes, ") overlap"));
    }
  }
  return absl::OkStatus();
}

std::string ByteString(const uint8_t* b, size_t n) {
  std::string hex;
  for (size_t i = 0; i < n; ++i) absl::StrAppendFormat(&hex, "%s%02x", i ? " " : "", b[i]);
  return absl::StrCat(hex, " (\"",
                      absl::CEscape(absl::string_view(reinterpret_cast<const char*>(b), n)), "\")");
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// Reader

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> map, MappedFile::Open(path));
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, Parse(map->bytes(), path));
  file->map_ = std::move(map);  // the mapping does not move: data pointers stay valid
  return file;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Parse(std::span<const uint8_t> bytes,
                                                          std::string name) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->name_ = std::move(name);
  file->file_size_ = bytes.size();
  const std::string& fname = file->name_;
  Cursor cur(bytes, fname);
  cur.set_section("header");

  uint8_t magic[4];
  TANDEM_RETURN_IF_ERROR(cur.Read(&magic, [] { return std::string("magic"); }));
  if (std::memcmp(magic, kSwappedMagicBytes, 4) == 0) {
    return cur.Error(
        "magic is \"FUGG\" (byte-swapped \"GGUF\"): this is a big-endian GGUF file; Tandem reads "
        "only little-endian files");
  }
  if (std::memcmp(magic, kMagicBytes, 4) != 0) {
    return cur.Error(absl::StrCat("not a GGUF file: magic is ", ByteString(magic, 4),
                                  ", expected 47 47 55 46 (\"GGUF\")"));
  }
  uint32_t version = 0;
  TANDEM_RETURN_IF_ERROR(cur.Read(&version, [] { return std::string("version"); }));
  if (version != 0 && (version & 0xFFFF) == 0) {
    return cur.Error(absl::StrFormat(
        "version reads as 0x%08x: this is a big-endian GGUF file (byte-swapped version %u); "
        "Tandem reads only little-endian files",
        version, __builtin_bswap32(version)));
  }
  if (version != 2 && version != 3) {
    return cur.Error(
        absl::StrCat("unsupported GGUF version ", version, " (Tandem reads versions 2 and 3)"));
  }
  file->version_ = version;
  uint64_t tensor_count = 0;
  uint64_t kv_count = 0;
  TANDEM_RETURN_IF_ERROR(cur.Read(&tensor_count, [] { return std::string("tensor_count"); }));
  TANDEM_RETURN_IF_ERROR(cur.Read(&kv_count, [] { return std::string("metadata_kv_count"); }));
  // ggml reads the counts as int64; "negative" counts are just absurd sizes, caught here early.
  if (tensor_count > static_cast<uint64_t>(INT64_MAX)) {
    return cur.Error(absl::StrCat("tensor_count ", tensor_count, " is negative as int64"));
  }
  if (kv_count > static_cast<uint64_t>(INT64_MAX)) {
    return cur.Error(absl::StrCat("metadata_kv_count ", kv_count, " is negative as int64"));
  }

  TANDEM_RETURN_IF_ERROR(ReadMetadata(cur, kv_count, &file->metadata_));
  TANDEM_ASSIGN_OR_RETURN(file->alignment_, AlignmentFrom(file->metadata_, fname));
  TANDEM_RETURN_IF_ERROR(
      ReadTensorInfos(cur, tensor_count, fname, &file->tensors_, &file->tensor_index_));

  file->data_offset_ = PadTo(cur.pos(), file->alignment_);
  if (tensor_count > 0 && file->data_offset_ > bytes.size()) {
    return cur.Error(absl::StrCat("truncated data section: the data section starts at byte ",
                                  file->data_offset_, " but the file is ", bytes.size(), " bytes"));
  }
  TANDEM_RETURN_IF_ERROR(CheckTensorPlacement(file->tensors_, file->data_offset_, bytes.size(),
                                              file->alignment_, fname));
  for (TensorInfo& t : file->tensors_) t.data = bytes.data() + file->data_offset_ + t.offset;
  return file;
}

const TensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

// ------------------------------------------------------------------------------------------------
// Writer

namespace {

// Appends to a file descriptor, retrying short writes.
absl::Status WriteAll(int fd, std::span<const uint8_t> bytes, const std::string& path) {
  const uint8_t* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat(path, ": write failed: ", std::strerror(errno)));
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// Little-endian serialisation of the header, metadata and tensor infos into memory.
class HeaderBuilder {
 public:
  template <typename T>
  void Put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const uint8_t* p = reinterpret_cast<const uint8_t*>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  void PutString(const std::string& s) {
    Put<uint64_t>(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

// The ValueType of each alternative of Array::values, by variant index.
constexpr ValueType kArrayElemTypes[] = {
    ValueType::kUint8,  ValueType::kInt8,   ValueType::kUint16,  ValueType::kInt16,
    ValueType::kUint32, ValueType::kInt32,  ValueType::kFloat32, ValueType::kBool,
    ValueType::kString, ValueType::kUint64, ValueType::kInt64,   ValueType::kFloat64,
};
static_assert(std::size(kArrayElemTypes) == std::variant_size_v<decltype(Array::values)>);

absl::Status PutValue(HeaderBuilder& out, const std::string& key, const Value& value) {
  out.Put<uint32_t>(static_cast<uint32_t>(value.type()));
  if (const Array* array = value.AsArray()) {
    ValueType held = kArrayElemTypes[array->values.index()];
    if (array->elem_type != held) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GGUF writer: key ", Quote(key), ": array elem_type is ", ValueTypeName(array->elem_type),
          " but the array holds ", ValueTypeName(held)));
    }
    if (array->size() > kGgufMaxArrayElements) {
      return absl::InvalidArgumentError(absl::StrCat("GGUF writer: key ", Quote(key), ": array of ",
                                                     array->size(), " elements exceeds 2^30"));
    }
    out.Put<uint32_t>(static_cast<uint32_t>(held));
    out.Put<uint64_t>(array->size());
    absl::Status status;
    std::visit(
        [&](const auto& elems) {
          using E = typename std::decay_t<decltype(elems)>::value_type;
          for (const E& e : elems) {
            if constexpr (std::is_same_v<E, std::string>) {
              if (e.size() > kGgufMaxStringBytes) {
                status = absl::InvalidArgumentError(absl::StrCat(
                    "GGUF writer: key ", Quote(key), ": an array string exceeds 2^30 bytes"));
              }
              out.PutString(e);
            } else if constexpr (std::is_same_v<E, bool>) {
              out.Put<uint8_t>(e ? 1 : 0);
            } else {
              out.Put<E>(e);
            }
          }
        },
        array->values);
    return status;
  }
  absl::Status status;
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          if (v.size() > kGgufMaxStringBytes) {
            status = absl::InvalidArgumentError(
                absl::StrCat("GGUF writer: key ", Quote(key), ": string exceeds 2^30 bytes"));
          }
          out.PutString(v);
        } else if constexpr (std::is_same_v<T, bool>) {
          out.Put<uint8_t>(v ? 1 : 0);
        } else if constexpr (!std::is_same_v<T, Array>) {
          out.Put<T>(v);
        }
      },
      value.storage());
  return status;
}

}  // namespace

absl::Status GgufWriter::AddTensor(std::string name, std::vector<int64_t> dims,
                                   quant::GgmlType type, Fill fill) {
  if (name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF writer: tensor #", tensors_.size(), " has an empty name"));
  }
  if (name.size() > kGgufMaxTensorName) {
    return absl::InvalidArgumentError(absl::StrCat("GGUF writer: tensor name ", Quote(name), " is ",
                                                   name.size(), " bytes; the limit is ",
                                                   kGgufMaxTensorName));
  }
  if (names_.contains(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF writer: duplicate tensor name ", Quote(name)));
  }
  if (!fill) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF writer: tensor ", Quote(name), " has no fill callback"));
  }
  TANDEM_ASSIGN_OR_RETURN(uint64_t nbytes,
                          TensorBytes("GGUF writer", name, dims, static_cast<uint32_t>(type)));
  Pending p;
  p.info.name = name;
  p.info.dims = std::move(dims);
  p.info.type = type;
  p.info.nbytes = nbytes;
  p.fill = std::move(fill);
  names_.insert(std::move(name));
  tensors_.push_back(std::move(p));
  return absl::OkStatus();
}

absl::Status GgufWriter::AddTensor(std::string name, std::vector<int64_t> dims,
                                   quant::GgmlType type, std::span<const uint8_t> bytes) {
  TANDEM_ASSIGN_OR_RETURN(uint64_t nbytes,
                          TensorBytes("GGUF writer", name, dims, static_cast<uint32_t>(type)));
  if (nbytes != bytes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GGUF writer: tensor ", Quote(name), " (", quant::GetTypeInfo(type).name, ", dims ",
        DimsToString(dims), ") needs ", nbytes, " bytes but ", bytes.size(), " were given"));
  }
  return AddTensor(std::move(name), std::move(dims), type, [bytes](std::span<uint8_t> out) {
    std::memcpy(out.data(), bytes.data(), out.size());
    return absl::OkStatus();
  });
}

absl::Status GgufWriter::WriteTo(const Append& append) const {
  TANDEM_ASSIGN_OR_RETURN(uint32_t alignment, AlignmentFrom(metadata_, "GGUF writer"));

  HeaderBuilder header;
  for (uint8_t b : kMagicBytes) header.Put<uint8_t>(b);
  header.Put<uint32_t>(kGgufVersion);
  header.Put<uint64_t>(tensors_.size());
  header.Put<uint64_t>(metadata_.size());
  for (const auto& [key, value] : metadata_.entries()) {
    if (key.empty() || key.size() > kGgufMaxKeyBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("GGUF writer: metadata key ", Quote(key), " must be 1 to 65535 bytes"));
    }
    header.PutString(key);
    TANDEM_RETURN_IF_ERROR(PutValue(header, key, value));
  }
  uint64_t offset = 0;
  uint64_t largest = 0;
  for (const Pending& p : tensors_) {
    header.PutString(p.info.name);
    header.Put<uint32_t>(static_cast<uint32_t>(p.info.dims.size()));
    for (int64_t d : p.info.dims) header.Put<int64_t>(d);
    header.Put<uint32_t>(static_cast<uint32_t>(p.info.type));
    header.Put<uint64_t>(offset);
    offset += PadTo(p.info.nbytes, alignment);
    largest = std::max(largest, p.info.nbytes);
  }
  header.bytes().resize(PadTo(header.bytes().size(), alignment), 0);
  TANDEM_RETURN_IF_ERROR(append(header.bytes()));

  // One buffer for all tensors, sized to the largest: a model bigger than RAM streams through it.
  std::vector<uint8_t> buffer(largest);
  const std::vector<uint8_t> zeros(alignment, 0);
  for (const Pending& p : tensors_) {
    std::span<uint8_t> out(buffer.data(), p.info.nbytes);
    absl::Status filled = p.fill(out);
    if (!filled.ok()) {
      return absl::Status(filled.code(), absl::StrCat("GGUF writer: filling tensor ",
                                                      Quote(p.info.name), ": ", filled.message()));
    }
    TANDEM_RETURN_IF_ERROR(append(out));
    uint64_t pad = PadTo(p.info.nbytes, alignment) - p.info.nbytes;
    TANDEM_RETURN_IF_ERROR(append(std::span<const uint8_t>(zeros.data(), pad)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint8_t>> GgufWriter::WriteToBuffer() const {
  std::vector<uint8_t> out;
  TANDEM_RETURN_IF_ERROR(WriteTo([&out](std::span<const uint8_t> bytes) {
    out.insert(out.end(), bytes.begin(), bytes.end());
    return absl::OkStatus();
  }));
  return out;
}

absl::Status GgufWriter::Write(const std::string& path) const {
  const std::string tmp = absl::StrCat(path, ".tmp-", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat(tmp, ": cannot create: ", std::strerror(errno)));
  }
  absl::Status status =
      WriteTo([&](std::span<const uint8_t> bytes) { return WriteAll(fd, bytes, tmp); });
  if (status.ok() && ::fsync(fd) != 0) {
    status = absl::InternalError(absl::StrCat(tmp, ": fsync failed: ", std::strerror(errno)));
  }
  if (::close(fd) != 0 && status.ok()) {
    status = absl::InternalError(absl::StrCat(tmp, ": close failed: ", std::strerror(errno)));
  }
  if (status.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    status = absl::InternalError(
        absl::StrCat("cannot rename ", tmp, " to ", path, ": ", std::strerror(errno)));
  }
  if (!status.ok()) ::unlink(tmp.c_str());  // nothing half-written stays behind
  return status;
}

}  // namespace tandem::format
