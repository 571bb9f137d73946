// Safetensors reader (u64 LE header length, JSON header, raw little-endian data) and Hugging Face
// checkpoint directories. JSON is parsed without exceptions and every field's type is checked
// before use; every data range is checked against the file. Shapes stay in torch order.
#include "runtime/format/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/base/status_macros.h"

namespace tandem::format {
namespace {

using nlohmann::json;

constexpr char kMetadataKey[] = "__metadata__";
constexpr char kConfigFile[] = "config.json";
constexpr char kIndexFile[] = "model.safetensors.index.json";
constexpr char kSingleFile[] = "model.safetensors";

std::string Quote(std::string_view s) {
  constexpr size_t kMaxShown = 80;
  std::string shown = absl::CEscape(absl::string_view(s.data(), std::min(s.size(), kMaxShown)));
  if (s.size() > kMaxShown) absl::StrAppend(&shown, "...");
  return absl::StrCat("'", shown, "'");
}

absl::Status Invalid(const std::string& file, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(file, ": ", what));
}

struct DtypeInfo {
  const char* name;
  quant::GgmlType type;
  uint64_t bytes;
};
constexpr DtypeInfo kDtypes[] = {
    {"F32", quant::GgmlType::kF32, 4},
    {"F16", quant::GgmlType::kF16, 2},
    {"BF16", quant::GgmlType::kBF16, 2},
};

// A JSON value for a message: compact, abbreviated, and never throwing (bad UTF-8 is replaced).
std::string Show(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 40) + "...";
  return s;
}

// A JSON non-negative integer that fits in uint64 (floats and negatives are rejected).
bool AsUnsigned(const json& j, uint64_t* out) {
  if (!j.is_number_unsigned()) return false;
  *out = j.get<uint64_t>();
  return true;
}

// Reads and parses a JSON file without exceptions.
absl::StatusOr<json> ReadJsonFile(const std::string& path) {
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> map, MappedFile::Open(path));
  const std::span<const uint8_t> text = map->bytes();
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Invalid(path, "invalid JSON");
  return j;
}

struct Range {
  uint64_t begin;
  uint64_t end;
  size_t tensor;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> map, MappedFile::Open(path));
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, Parse(map->bytes(), path));
  file->map_ = std::move(map);  // the mapping does not move: spans stay valid
  return file;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Parse(
    std::span<const uint8_t> bytes, std::string name) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->name_ = std::move(name);
  const std::string& fname = file->name_;
  if (bytes.size() < 8) {
    return Invalid(fname, absl::StrCat("truncated: the file is ", bytes.size(),
                                       " bytes, too short for the 8-byte header length"));
  }
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);  // little-endian, like the host
  if (header_len > kSafetensorsMaxHeaderBytes) {
    return Invalid(fname, absl::StrCat("header length ", header_len, " exceeds the limit of ",
                                       kSafetensorsMaxHeaderBytes, " bytes"));
  }
  if (header_len > bytes.size() - 8) {
    return Invalid(fname,
                   absl::StrCat("truncated header: header length ", header_len,
                                " runs past the end of the file (", bytes.size(), " bytes)"));
  }
  const std::span<const uint8_t> data = bytes.subspan(8 + header_len);
  const std::span<const uint8_t> text = bytes.subspan(8, header_len);
  const json header = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) {
    return Invalid(fname, absl::StrCat("header (", header_len, " bytes) is not valid JSON"));
  }
  if (!header.is_object()) {
    return Invalid(fname,
                   absl::StrCat("header is a JSON ", header.type_name(), ", expected an object"));
  }

  std::vector<Range> ranges;
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      if (!value.is_object()) {
        return Invalid(fname, absl::StrCat(kMetadataKey, " is a JSON ", value.type_name(),
                                           ", expected an object of strings"));
      }
      for (const auto& [mkey, mvalue] : value.items()) {
        if (!mvalue.is_string()) {
          return Invalid(fname, absl::StrCat(kMetadataKey, " entry ", Quote(mkey), " is a JSON ",
                                             mvalue.type_name(), ", expected a string"));
        }
        file->user_metadata_[mkey] = mvalue.get<std::string>();
      }
      continue;
    }
    const std::string where = absl::StrCat("tensor ", Quote(key));
    if (key.empty()) return Invalid(fname, "a tensor has an empty name");
    if (!value.is_object()) {
      return Invalid(fname,
                     absl::StrCat(where, " is a JSON ", value.type_name(), ", expected an object"));
    }
    auto dtype_it = value.find("dtype");
    auto shape_it = value.find("shape");
    auto offsets_it = value.find("data_offsets");
    if (dtype_it == value.end() || !dtype_it->is_string()) {
      return Invalid(fname, absl::StrCat(where, " has no string \"dtype\""));
    }
    if (shape_it == value.end() || !shape_it->is_array()) {
      return Invalid(fname, absl::StrCat(where, " has no array \"shape\""));
    }
    if (offsets_it == value.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
      return Invalid(fname, absl::StrCat(where, " has no two-element array \"data_offsets\""));
    }
    const std::string& dtype = dtype_it->get_ref<const std::string&>();
    const DtypeInfo* info = nullptr;
    for (const DtypeInfo& d : kDtypes) {
      if (dtype == d.name) info = &d;
    }
    if (info == nullptr) {
      return Invalid(fname, absl::StrCat(where, " has dtype ", Quote(dtype),
                                         "; Tandem reads F32, F16 and BF16"));
    }
    SafetensorsTensor t;
    t.name = key;
    t.type = info->type;
    t.file = fname;
    uint64_t elements = 1;
    for (const json& d : *shape_it) {
      uint64_t dim = 0;
      if (!AsUnsigned(d, &dim) || dim > static_cast<uint64_t>(INT64_MAX)) {
        return Invalid(fname, absl::StrCat(where, " has shape entry ", t.shape.size(), " = ",
                                           Show(d), ", which is not a non-negative integer"));
      }
      if (__builtin_mul_overflow(elements, dim, &elements)) {
        return Invalid(fname, absl::StrCat(where, ": element count of the shape overflows"));
      }
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    uint64_t begin = 0;
    uint64_t end = 0;
    if (!AsUnsigned((*offsets_it)[0], &begin) || !AsUnsigned((*offsets_it)[1], &end)) {
      return Invalid(fname, absl::StrCat(where, " has data_offsets ", Show(*offsets_it),
                                         ", which are not non-negative integers"));
    }
    if (begin > end) {
      return Invalid(fname, absl::StrCat(where, " has data_offsets [", begin, ", ", end,
                                         ") with begin after end"));
    }
    if (end > data.size()) {
      return Invalid(fname,
                     absl::StrCat("truncated data: ", where, " data_offsets [", begin, ", ", end,
                                  ") run past the data section of ", data.size(), " bytes"));
    }
    uint64_t expected = 0;
    const bool overflow = __builtin_mul_overflow(elements, info->bytes, &expected);
    if (overflow || expected != end - begin) {
      return Invalid(
          fname, absl::StrCat(where, " (", dtype, ", shape [", absl::StrJoin(t.shape, ", "),
                              "]) has ", end - begin, " bytes of data but its shape needs ",
                              overflow ? std::string("more than 2^64") : absl::StrCat(expected)));
    }
    t.data = data.subspan(begin, end - begin);
    ranges.push_back({begin, end, file->tensors_.size()});
    file->tensors_.push_back(std::move(t));
  }

  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    const Range& a = ranges[i - 1];
    const Range& b = ranges[i];
    if (a.end > b.begin && a.begin != a.end && b.begin != b.end) {
      return Invalid(
          fname, absl::StrCat("tensors ", Quote(file->tensors_[a.tensor].name), " [", a.begin, ", ",
                              a.end, ") and ", Quote(file->tensors_[b.tensor].name), " [", b.begin,
                              ", ", b.end, ") overlap"));
    }
  }
  std::vector<SafetensorsTensor> ordered;
  ordered.reserve(ranges.size());
  for (const Range& r : ranges) ordered.push_back(std::move(file->tensors_[r.tensor]));
  file->tensors_ = std::move(ordered);
  return file;
}

absl::StatusOr<std::unique_ptr<HfCheckpoint>> HfCheckpoint::Open(const std::string& dir) {
  namespace fs = std::filesystem;
  std::unique_ptr<HfCheckpoint> ckpt(new HfCheckpoint());
  ckpt->dir_ = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat(dir, ": not a directory"));
  }
  const std::string config_path = (fs::path(dir) / kConfigFile).string();
  if (!fs::exists(config_path, ec)) {
    return absl::NotFoundError(
        absl::StrCat(dir, ": not a Hugging Face model directory: ", kConfigFile, " is missing"));
  }
  TANDEM_ASSIGN_OR_RETURN(ckpt->config_, ReadJsonFile(config_path));
  if (!ckpt->config_.is_object()) {
    return Invalid(config_path,
                   absl::StrCat("is a JSON ", ckpt->config_.type_name(), ", expected an object"));
  }

  const std::string index_path = (fs::path(dir) / kIndexFile).string();
  const std::string single_path = (fs::path(dir) / kSingleFile).string();
  std::map<std::string, std::string> weight_map;  // tensor -> shard file name
  std::vector<std::string> shard_names;
  if (fs::exists(index_path, ec)) {
    TANDEM_ASSIGN_OR_RETURN(json index, ReadJsonFile(index_path));
    auto wm = index.is_object() ? index.find("weight_map") : index.end();
    if (!index.is_object() || wm == index.end() || !wm->is_object()) {
      return Invalid(index_path, "has no \"weight_map\" object");
    }
    std::set<std::string> seen;
    for (const auto& [tensor, shard] : wm->items()) {
      if (!shard.is_string()) {
        return Invalid(index_path, absl::StrCat("weight_map entry ", Quote(tensor), " is a JSON ",
                                                shard.type_name(), ", expected a file name"));
      }
      const std::string& shard_name = shard.get_ref<const std::string&>();
      fs::path p(shard_name);
      bool escapes = shard_name.empty() || p.is_absolute();
      for (const fs::path& part : p) escapes |= part == "..";
      if (escapes) {
        return Invalid(index_path, absl::StrCat("weight_map entry ", Quote(tensor), " names shard ",
                                                Quote(shard_name),
                                                ", which is not a file inside the directory"));
      }
      weight_map[tensor] = shard_name;
      if (seen.insert(shard_name).second) shard_names.push_back(shard_name);
    }
    if (shard_names.empty()) return Invalid(index_path, "weight_map is empty");
  } else if (fs::exists(single_path, ec)) {
    shard_names.push_back(kSingleFile);
  } else {
    return absl::NotFoundError(
        absl::StrCat(dir, ": neither ", kIndexFile, " nor ", kSingleFile, " exists"));
  }

  for (const std::string& shard_name : shard_names) {
    const std::string path = (fs::path(dir) / shard_name).string();
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> shard, SafetensorsFile::Open(path));
    for (const SafetensorsTensor& t : shard->tensors()) {
      auto [it, inserted] = ckpt->tensors_.emplace(t.name, t);
      if (!inserted) {
        return Invalid(dir, absl::StrCat("tensor ", Quote(t.name), " appears in both ",
                                         it->second.file, " and ", path));
      }
    }
    ckpt->shards_.push_back(std::move(shard));
  }
  for (const auto& [tensor, shard_name] : weight_map) {
    const SafetensorsTensor* t = ckpt->Find(tensor);
    const std::string path = (fs::path(dir) / shard_name).string();
    if (t == nullptr || t->file != path) {
      return Invalid(index_path, absl::StrCat("weight_map puts tensor ", Quote(tensor), " in ",
                                              shard_name, ", but that shard has no such tensor"));
    }
  }
  return ckpt;
}

const SafetensorsTensor* HfCheckpoint::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

}  // namespace tandem::format
