// Typed GGUF metadata values: type mapping, lenient numeric accessors, printing, and the ordered
// map. Nothing here parses or writes files; the GGUF reader and writer build on these types.
#include "runtime/format/metadata.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tandem::format {
namespace {

// The value type of each alternative of Value::Storage and of Array::values, by variant index.
constexpr ValueType kStorageTypes[] = {
    ValueType::kUint8,   ValueType::kInt8,  ValueType::kUint16,  ValueType::kInt16,
    ValueType::kUint32,  ValueType::kInt32, ValueType::kFloat32, ValueType::kBool,
    ValueType::kString,  ValueType::kArray, ValueType::kUint64,  ValueType::kInt64,
    ValueType::kFloat64,
};
static_assert(std::size(kStorageTypes) == std::variant_size_v<Value::Storage>);
static_assert(std::is_same_v<std::variant_alternative_t<9, Value::Storage>, Array>);
static_assert(std::is_same_v<std::variant_alternative_t<12, Value::Storage>, double>);

// Arrays render at most this many elements; the rest is summarised by a count.
constexpr size_t kMaxPrintedElements = 8;
// Strings render at most this many bytes.
constexpr size_t kMaxPrintedStringBytes = 64;

std::string QuoteString(const std::string& s) {
  std::string out = "\"";
  size_t n = std::min(s.size(), kMaxPrintedStringBytes);
  for (size_t i = 0; i < n; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    } else {
      out += static_cast<char>(c);  // UTF-8 bytes pass through
    }
  }
  if (s.size() > n) absl::StrAppend(&out, "...(", s.size(), " bytes)");
  out += '"';
  return out;
}

template <typename T>
std::string ScalarToString(const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_same_v<T, std::string>) {
    return QuoteString(v);
  } else if constexpr (std::is_floating_point_v<T>) {
    return absl::StrFormat("%g", static_cast<double>(v));
  } else if constexpr (std::is_unsigned_v<T>) {
    return absl::StrCat(static_cast<uint64_t>(v));  // widen so that u8 prints as a number
  } else {
    return absl::StrCat(static_cast<int64_t>(v));
  }
}

}  // namespace

const char* ValueTypeName(ValueType type) {
  switch (type) {
    case ValueType::kUint8:
      return "uint8";
    case ValueType::kInt8:
      return "int8";
    case ValueType::kUint16:
      return "uint16";
    case ValueType::kInt16:
      return "int16";
    case ValueType::kUint32:
      return "uint32";
    case ValueType::kInt32:
      return "int32";
    case ValueType::kFloat32:
      return "float32";
    case ValueType::kBool:
      return "bool";
    case ValueType::kString:
      return "string";
    case ValueType::kArray:
      return "array";
    case ValueType::kUint64:
      return "uint64";
    case ValueType::kInt64:
      return "int64";
    case ValueType::kFloat64:
      return "float64";
  }
  return "unknown";
}

size_t Array::size() const {
  return std::visit([](const auto& v) { return v.size(); }, values);
}

ValueType Value::type() const { return kStorageTypes[storage_.index()]; }

std::optional<int64_t> Value::AsInt() const {
  return std::visit(
      [](const auto& v) -> std::optional<int64_t> {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, uint64_t>) {
          if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
          return static_cast<int64_t>(v);
        } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          return static_cast<int64_t>(v);
        } else {
          return std::nullopt;
        }
      },
      storage_);
}

std::optional<double> Value::AsFloat() const {
  return std::visit(
      [](const auto& v) -> std::optional<double> {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
          return static_cast<double>(v);
        } else {
          return std::nullopt;
        }
      },
      storage_);
}

std::optional<bool> Value::AsBool() const {
  if (const bool* b = std::get_if<bool>(&storage_)) return *b;
  return std::nullopt;
}

const std::string* Value::AsString() const { return std::get_if<std::string>(&storage_); }

const Array* Value::AsArray() const { return std::get_if<Array>(&storage_); }

std::string Value::ToString() const {
  if (const Array* array = AsArray()) {
    return std::visit(
        [&](const auto& elems) {
          std::string out = "[";
          size_t n = std::min(elems.size(), kMaxPrintedElements);
          for (size_t i = 0; i < n; ++i) {
            if (i > 0) out += ", ";
            using E = typename std::decay_t<decltype(elems)>::value_type;
            out += ScalarToString<E>(elems[i]);
          }
          if (elems.size() > n) absl::StrAppend(&out, ", ... (", elems.size(), " elements)");
          out += "]";
          return out;
        },
        array->values);
  }
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, Array>) {
          return "";  // handled above
        } else {
          return ScalarToString<T>(v);
        }
      },
      storage_);
}

bool Metadata::Add(std::string key, Value value) {
  if (index_.contains(key)) return false;
  index_.emplace(key, entries_.size());
  entries_.emplace_back(std::move(key), std::move(value));
  return true;
}

void Metadata::Set(std::string key, Value value) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    entries_[it->second].second = std::move(value);
    return;
  }
  index_.emplace(key, entries_.size());
  entries_.emplace_back(std::move(key), std::move(value));
}

const Value* Metadata::Find(std::string_view key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

std::optional<int64_t> Metadata::GetInt(std::string_view key) const {
  const Value* v = Find(key);
  return v ? v->AsInt() : std::nullopt;
}

std::optional<double> Metadata::GetFloat(std::string_view key) const {
  const Value* v = Find(key);
  return v ? v->AsFloat() : std::nullopt;
}

std::optional<std::string> Metadata::GetString(std::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr || v->AsString() == nullptr) return std::nullopt;
  return *v->AsString();
}

}  // namespace tandem::format
