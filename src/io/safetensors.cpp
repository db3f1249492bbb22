// safetensors reader: maps each file read-only, validates the JSON header completely, and exposes the
// tensors as TensorViews in ggml dimension order; sharded checkpoints are resolved through their index.
#include "io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/output_file.h"
#include "core/mapped_file.h"
#include "io/json.h"

namespace canvas {

static_assert(std::endian::native == std::endian::little, "safetensors reading assumes a little-endian host");

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr int kMaxDims = 4;  // TensorView holds at most 4 dimensions

// Non-negative JSON integer -> uint64; false for anything else (negative, float, string, ...).
bool json_to_u64(const Json& v, uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i < 0) return false;
    out = uint64_t(i);
    return true;
  }
  return false;
}

std::string short_dump(const Json& v) { return json_excerpt(v, 80); }

struct Parsed {
  TensorView view;
  uint64_t begin = 0, end = 0;
};

}  // namespace

DType safetensors_dtype(const std::string& name, const std::string& what) {
  if (name == "F32") return DType::F32;
  if (name == "F16") return DType::F16;
  if (name == "BF16") return DType::BF16;
  static const char* known[] = {"F64",     "I64",     "I32",     "I16",  "I8",      "U64",
                                "U32",     "U16",     "U8",      "BOOL", "F8_E4M3", "F8_E5M2",
                                "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4",   "C64"};
  for (const char* k : known)
    if (name == k)
      throw Error(what + " has dtype " + name + ", which is not supported (only F32, F16 and BF16 are read)");
  throw Error(what + " has unknown dtype '" + name + "' (only F32, F16 and BF16 are read)");
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  const std::string where = "safetensors " + path + ": ";

  file->map_ = MappedFile::open(path, where, "safetensors");
  const uint64_t size = file->map_.size();
  file->size_ = size;
  if (size < 8)
    throw Error(where + "file is " + std::to_string(size) +
                " bytes, too short for the 8-byte header length: not a safetensors file (or truncated)");
  const uint8_t* bytes = file->map_.data();

  uint64_t header_size;
  std::memcpy(&header_size, bytes, 8);
  if (header_size > size - 8)
    throw Error(where + "header length " + std::to_string(header_size) + " runs past the end of the file (" +
                std::to_string(size - 8) +
                " bytes after the length field): truncated or not a safetensors file");
  file->header_size_ = header_size;
  const uint64_t data_start = 8 + header_size;
  const uint64_t data_size = size - data_start;

  const Json root = parse_json(std::string_view(reinterpret_cast<const char*>(bytes + 8), header_size),
                               "safetensors " + path + " header");
  if (!root.is_object())
    throw Error(where + "header is JSON " + json_type_name(root) + ", expected an object of tensors");

  std::vector<Parsed> parsed;
  parsed.reserve(root.size());
  for (const auto& [name, entry] : root.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object())
        throw Error(where + "__metadata__ should be an object of strings but is " + json_type_name(entry));
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string())
          throw Error(where + "__metadata__ value of '" + key + "' should be a string but is " +
                      json_type_name(value) + " " + short_dump(value));
        file->metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string what = where + "tensor '" + name + "'";
    if (!entry.is_object()) throw Error(what + ": entry should be an object but is " + json_type_name(entry));
    const auto dtype_it = entry.find("dtype");
    const auto shape_it = entry.find("shape");
    const auto offsets_it = entry.find("data_offsets");
    if (dtype_it == entry.end() || shape_it == entry.end() || offsets_it == entry.end())
      throw Error(what + ": entry needs \"dtype\", \"shape\" and \"data_offsets\", got " + short_dump(entry));
    if (!dtype_it->is_string())
      throw Error(what + ": dtype should be a string but is " + json_type_name(*dtype_it));

    Parsed p;
    p.view.name = name;
    p.view.type = safetensors_dtype(dtype_it->get<std::string>(), what);

    if (!shape_it->is_array())
      throw Error(what + ": shape should be an array but is " + short_dump(*shape_it));
    const Json& shape = *shape_it;
    if (shape.size() > size_t(kMaxDims))
      throw Error(what + ": shape " + short_dump(shape) + " has " + std::to_string(shape.size()) +
                  " dimensions; at most 4 are supported");
    uint64_t elements = 1;
    for (size_t k = 0; k < shape.size(); ++k) {
      uint64_t dim;
      if (!json_to_u64(shape[k], dim))
        throw Error(what + ": shape " + short_dump(shape) +
                    " has a dimension that is not a non-negative integer");
      if (dim > uint64_t(INT64_MAX) || __builtin_mul_overflow(elements, dim, &elements) ||
          elements > uint64_t(INT64_MAX))
        throw Error(what + ": shape " + short_dump(shape) + " has an absurd number of elements");
      p.view.ne[shape.size() - 1 - k] = int64_t(dim);  // ggml order: the last safetensors dim is ne[0]
    }
    p.view.n_dims = std::max<int>(1, int(shape.size()));
    const uint64_t element_bytes = uint64_t(dtype_info(p.view.type).block_bytes);
    uint64_t expected_bytes;
    if (__builtin_mul_overflow(elements, element_bytes, &expected_bytes))
      throw Error(what + ": shape " + short_dump(shape) + " has an absurd byte size");

    const Json& offsets = *offsets_it;
    if (!offsets.is_array() || offsets.size() != 2 || !json_to_u64(offsets[0], p.begin) ||
        !json_to_u64(offsets[1], p.end))
      throw Error(what + ": data_offsets should be [begin, end] (non-negative integers) but is " +
                  short_dump(offsets));
    if (p.begin > p.end)
      throw Error(what + ": data_offsets [" + std::to_string(p.begin) + ", " + std::to_string(p.end) +
                  "] end before they begin");
    if (p.end > data_size)
      throw Error(what + ": data_offsets [" + std::to_string(p.begin) + ", " + std::to_string(p.end) +
                  "] run past the end of the data (" + std::to_string(data_size) +
                  " bytes after the header): truncated file?");
    if (p.end - p.begin != expected_bytes)
      throw Error(what + ": data_offsets [" + std::to_string(p.begin) + ", " + std::to_string(p.end) +
                  "] hold " + std::to_string(p.end - p.begin) + " bytes but dtype " +
                  dtype_it->get<std::string>() + " x shape " + short_dump(shape) + " needs " +
                  std::to_string(expected_bytes));
    p.view.data = bytes + data_start + p.begin;
    parsed.push_back(std::move(p));
  }

  // File order; no two non-empty tensors may share a byte.
  std::stable_sort(parsed.begin(), parsed.end(), [](const Parsed& a, const Parsed& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const Parsed* previous = nullptr;
  for (const Parsed& p : parsed) {
    if (p.begin == p.end) continue;
    if (previous && p.begin < previous->end)
      throw Error(where + "tensors '" + previous->view.name + "' [" + std::to_string(previous->begin) + ", " +
                  std::to_string(previous->end) + ") and '" + p.view.name + "' [" + std::to_string(p.begin) +
                  ", " + std::to_string(p.end) + ") overlap");
    previous = &p;
  }
  for (Parsed& p : parsed) {
    file->index_.emplace(p.view.name, file->tensors_.size());
    file->tensors_.push_back(std::move(p.view));
  }
  return file;
}

SafetensorsFile::~SafetensorsFile() = default;

const TensorView* SafetensorsFile::find_tensor(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::shared_ptr<SafetensorsModel> SafetensorsModel::open(const std::string& path) {
  auto model = std::make_shared<SafetensorsModel>();
  std::error_code ec;
  std::string target = path;
  bool is_index = false;
  if (fs::is_directory(path, ec)) {
    const fs::path index = fs::path(path) / "model.safetensors.index.json";
    const fs::path single = fs::path(path) / "model.safetensors";
    if (fs::exists(index, ec)) {
      target = index.string();
      is_index = true;
    } else if (fs::exists(single, ec)) {
      target = single.string();
    } else {
      throw Error("safetensors " + path + ": directory holds neither model.safetensors.index.json nor " +
                  "model.safetensors");
    }
  } else {
    is_index = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  }
  model->path_ = target;

  if (!is_index) {
    model->files_.push_back(SafetensorsFile::open(target));
    const SafetensorsFile& f = *model->files_.back();
    for (const TensorView& t : f.tensors()) {
      model->index_.emplace(t.name, model->tensors_.size());
      model->tensors_.push_back(t);
      model->file_index_.push_back(0);
    }
    return model;
  }

  const std::string where = "safetensors index " + target + ": ";
  const JsonDocument doc = JsonDocument::load(target);
  if (!doc.root().is_object())
    throw Error(where + "should be a JSON object but is " + json_type_name(doc.root()));
  const Json* weight_map = doc.find("weight_map");
  if (!weight_map) throw Error(where + "missing key 'weight_map'");
  if (!weight_map->is_object())
    throw Error(where + "'weight_map' should be an object (tensor name -> shard file) but is " +
                json_type_name(*weight_map));
  const fs::path folder = fs::path(target).parent_path();
  std::unordered_map<std::string, size_t> shard_index;  // shard file name -> index into files_
  for (const auto& [name, shard_value] : weight_map->items()) {
    if (!shard_value.is_string())
      throw Error(where + "weight_map entry of tensor '" + name + "' should be a shard file name but is " +
                  short_dump(shard_value));
    const std::string shard = shard_value.get<std::string>();
    auto it = shard_index.find(shard);
    if (it == shard_index.end()) {
      const fs::path rel(shard);
      bool escapes = shard.empty() || rel.is_absolute();
      for (const fs::path& part : rel)
        if (part == "..") escapes = true;
      if (escapes)
        throw Error(where + "shard name '" + shard + "' (tensor '" + name +
                    "') must be a file name inside the index's folder");
      const fs::path shard_path = folder / rel;
      if (!fs::exists(shard_path, ec))
        throw Error(where + "shard '" + shard + "' (listed for tensor '" + name +
                    "') is missing: " + shard_path.string() + " does not exist");
      try {
        model->files_.push_back(SafetensorsFile::open(shard_path.string()));
      } catch (const Error& e) {
        throw Error(where + "shard '" + shard + "': " + e.what());
      }
      it = shard_index.emplace(shard, model->files_.size() - 1).first;
    }
    const TensorView* t = model->files_[it->second]->find_tensor(name);
    if (!t)
      throw Error(where + "tensor '" + name + "' is listed in shard '" + shard +
                  "' but that file does not hold it");
    model->index_.emplace(name, model->tensors_.size());
    model->tensors_.push_back(*t);
    model->file_index_.push_back(it->second);
  }
  if (model->files_.empty()) throw Error(where + "'weight_map' is empty: the checkpoint has no tensors");
  return model;
}

const TensorView* SafetensorsModel::find_tensor(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorView& SafetensorsModel::require_tensor(const std::string& name) const {
  const TensorView* t = find_tensor(name);
  if (!t) throw Error("safetensors " + path_ + ": missing tensor '" + name + "'");
  return *t;
}

const std::string& SafetensorsModel::file_of(const std::string& name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) throw Error("safetensors " + path_ + ": missing tensor '" + name + "'");
  return files_[file_index_[it->second]]->path();
}

const std::map<std::string, std::string>& SafetensorsModel::metadata() const {
  static const std::map<std::string, std::string> empty;
  return files_.empty() ? empty : files_.front()->metadata();
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) {
    Json meta = Json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = meta;
  }
  uint64_t offset = 0;
  for (const SafetensorsEntry& t : tensors) {
    const char* dtype = t.type == DType::F32 ? "F32" : t.type == DType::F16 ? "F16" : t.type == DType::BF16 ? "BF16" : nullptr;
    check(dtype != nullptr, path + ": tensor '" + t.name + "' has dtype " + dtype_name(t.type) +
                                "; safetensors export writes F32, F16 and BF16");
    check(!header.contains(t.name), path + ": tensor '" + t.name + "' is written twice");
    uint64_t n = t.type == DType::F32 ? 4 : 2;
    for (int64_t d : t.shape) n *= uint64_t(d);
    check(n == t.bytes, path + ": tensor '" + t.name + "' has " + std::to_string(t.bytes) + " bytes for a shape of " +
                            std::to_string(n) + " bytes");
    header[t.name] = {{"dtype", dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  // nlohmann orders object keys; the data follows the order of `tensors`, which the offsets record.
  std::string text = header.dump();
  while (text.size() % 8 != 0) text += ' ';
  write_file(path, [&](std::ostream& out) {
    const uint64_t n = text.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out.write(text.data(), std::streamsize(text.size()));
    for (const SafetensorsEntry& t : tensors) out.write(static_cast<const char*>(t.data), std::streamsize(t.bytes));
  });
}

}  // namespace canvas
