// Typed key/value metadata as GGUF stores it (13 value types and arrays). Used by the GGUF reader
// and writer, and by in-memory synthetic models, so that every model source describes itself the
// same way.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tandem::format {

enum class ValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

const char* ValueTypeName(ValueType type);

// An array of one element type. Nested arrays are not supported (ggml rejects them too).
struct Array {
  ValueType elem_type = ValueType::kUint8;
  std::variant<std::vector<uint8_t>, std::vector<int8_t>, std::vector<uint16_t>,
               std::vector<int16_t>, std::vector<uint32_t>, std::vector<int32_t>,
               std::vector<float>, std::vector<bool>, std::vector<std::string>,
               std::vector<uint64_t>, std::vector<int64_t>, std::vector<double>>
      values;
  size_t size() const;
  bool operator==(const Array&) const = default;
};

// One metadata value. The variant index is not the ValueType; use type().
class Value {
 public:
  using Storage = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                               std::string, Array, uint64_t, int64_t, double>;
  Value() : storage_(uint8_t{0}) {}
  explicit Value(Storage storage) : storage_(std::move(storage)) {}

  static Value U8(uint8_t v) { return Value(Storage(v)); }
  static Value I8(int8_t v) { return Value(Storage(v)); }
  static Value U16(uint16_t v) { return Value(Storage(v)); }
  static Value I16(int16_t v) { return Value(Storage(v)); }
  static Value U32(uint32_t v) { return Value(Storage(v)); }
  static Value I32(int32_t v) { return Value(Storage(v)); }
  static Value F32(float v) { return Value(Storage(v)); }
  static Value Bool(bool v) { return Value(Storage(v)); }
  static Value Str(std::string v) { return Value(Storage(std::move(v))); }
  static Value U64(uint64_t v) { return Value(Storage(v)); }
  static Value I64(int64_t v) { return Value(Storage(v)); }
  static Value F64(double v) { return Value(Storage(v)); }
  static Value Arr(Array v) { return Value(Storage(std::move(v))); }

  ValueType type() const;
  const Storage& storage() const { return storage_; }

  // Any integer type that fits, as the docs recommend for counts (u32 and u64 both accepted).
  std::optional<int64_t> AsInt() const;
  // Float32 or Float64 (and integers, converted).
  std::optional<double> AsFloat() const;
  std::optional<bool> AsBool() const;
  const std::string* AsString() const;
  const Array* AsArray() const;
  // Short human-readable rendering; long arrays are abbreviated.
  std::string ToString() const;

  bool operator==(const Value&) const = default;

 private:
  Storage storage_;
};

// Metadata in file order, with lookup by key.
class Metadata {
 public:
  // Returns false (and changes nothing) when the key is already present.
  bool Add(std::string key, Value value);
  // Replaces or appends.
  void Set(std::string key, Value value);
  const Value* Find(std::string_view key) const;
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }

  std::optional<int64_t> GetInt(std::string_view key) const;
  std::optional<double> GetFloat(std::string_view key) const;
  std::optional<std::string> GetString(std::string_view key) const;

  bool operator==(const Metadata& other) const { return entries_ == other.entries_; }

 private:
  std::vector<std::pair<std::string, Value>> entries_;
  std::map<std::string, size_t, std::less<>> index_;
};

}  // namespace tandem::format
