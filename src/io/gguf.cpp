// GGUF v2/v3 reader (memory-mapped, every field validated before use) and v3 writer.
#include "io/gguf.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <unordered_set>

#include "core/appendf.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "core/output_file.h"
#include "io/utf8.h"

namespace canvas {

static_assert(std::endian::native == std::endian::little, "GGUF reading assumes a little-endian host");

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
constexpr uint32_t kWriteVersion = 3;
constexpr uint64_t kDefaultAlignment = 32;
constexpr int kMaxDims = 4;
constexpr const char* kAlignmentKey = "general.alignment";

// Bytes of one scalar of `type` in the file; 0 for String and Array (variable size).
uint64_t scalar_size(GgufType type) {
  switch (type) {
    case GgufType::Uint8: case GgufType::Int8: case GgufType::Bool: return 1;
    case GgufType::Uint16: case GgufType::Int16: return 2;
    case GgufType::Uint32: case GgufType::Int32: case GgufType::Float32: return 4;
    case GgufType::Uint64: case GgufType::Int64: case GgufType::Float64: return 8;
    case GgufType::String: case GgufType::Array: return 0;
  }
  return 0;
}

bool valid_type(uint32_t raw) { return raw <= uint32_t(GgufType::Float64); }

bool is_integer_type(GgufType t) {
  switch (t) {
    case GgufType::Uint8: case GgufType::Int8: case GgufType::Uint16: case GgufType::Int16:
    case GgufType::Uint32: case GgufType::Int32: case GgufType::Uint64: case GgufType::Int64: return true;
    default: return false;
  }
}
bool is_float_type(GgufType t) { return t == GgufType::Float32 || t == GgufType::Float64; }

// Readable, bounded rendering of arbitrary bytes (keys, names and string values may hold anything).
std::string escape(const std::string& s, size_t max_chars = 120) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (out.size() >= max_chars) {
      out += "...";
      break;
    }
    const unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          static const char* hex = "0123456789abcdef";
          out += "\\x";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += char(c);  // UTF-8 passes through unchanged
        }
    }
  }
  return out;
}

std::string quoted(const std::string& s) { return "'" + escape(s, 80) + "'"; }

template <class T>
std::string shortest(T v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// Bounds-checked little-endian cursor over the mapped file. `context_` names what is being parsed
// (e.g. "key 'general.name'") so that a failure says where it happened.
class Cursor {
 public:
  Cursor(const uint8_t* data, uint64_t size, const std::string& path) : data_(data), size_(size), path_(path) {}

  [[noreturn]] void fail(const std::string& what) const { throw Error("gguf " + path_ + ": " + what); }
  void set_context(std::string context) { context_ = std::move(context); }
  const std::string& context() const { return context_; }
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  void need(uint64_t n, const char* field) const {
    if (n > size_ - pos_)
      fail("truncated header: end of file while reading " + std::string(field) +
           (context_.empty() ? "" : " of " + context_) + " at byte " + std::to_string(pos_) + " (file is " +
           std::to_string(size_) + " bytes)");
  }
  template <class T>
  T read(const char* field) {
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const char* field) {
    const uint64_t length = read<uint64_t>(field);
    if (length > remaining())
      fail("string length " + std::to_string(length) + " of " + field +
           (context_.empty() ? "" : " of " + context_) + " at byte " + std::to_string(pos_ - 8) +
           " runs past the end of file (" + std::to_string(remaining()) + " bytes left)");
    std::string s(reinterpret_cast<const char*>(data_ + pos_), length);
    pos_ += length;
    return s;
  }
  // Rejects a count of items of at least `min_item_bytes` each that cannot fit in the rest of the file,
  // before anything is allocated for them.
  void check_count(uint64_t count, uint64_t min_item_bytes, const std::string& what) const {
    if (count > remaining() / min_item_bytes)
      fail(what + " count " + std::to_string(count) + " is absurd: it cannot fit in the remaining " +
           std::to_string(remaining()) + " bytes of the file");
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& path_;
  std::string context_;
};

int64_t read_int(Cursor& in, GgufType type, const char* field) {
  switch (type) {
    case GgufType::Uint8: return in.read<uint8_t>(field);
    case GgufType::Int8: return in.read<int8_t>(field);
    case GgufType::Uint16: return in.read<uint16_t>(field);
    case GgufType::Int16: return in.read<int16_t>(field);
    case GgufType::Uint32: return in.read<uint32_t>(field);
    case GgufType::Int32: return in.read<int32_t>(field);
    case GgufType::Uint64: return std::bit_cast<int64_t>(in.read<uint64_t>(field));
    case GgufType::Int64: return in.read<int64_t>(field);
    case GgufType::Bool: {
      const uint8_t b = in.read<uint8_t>(field);
      if (b > 1)
        in.fail("bool " + std::string(field) + " of " + in.context() + " has byte value " + std::to_string(b) +
                ", not 0 or 1");
      return b;
    }
    default: in.fail("internal: not an integer type");
  }
}

double read_float(Cursor& in, GgufType type, const char* field) {
  if (type == GgufType::Float32) return in.read<float>(field);
  return in.read<double>(field);
}

GgufValue read_value(Cursor& in, GgufType type, const std::string& key) {
  GgufValue v;
  v.type = type;
  if (type == GgufType::String) {
    v.s = in.read_string("string value");
  } else if (is_float_type(type)) {
    v.f = read_float(in, type, "value");
  } else if (type != GgufType::Array) {
    v.i = read_int(in, type, "value");
  } else {
    const uint32_t raw = in.read<uint32_t>("array element type");
    if (!valid_type(raw)) in.fail("unknown array element value type " + std::to_string(raw) + " of key " + quoted(key));
    v.array_type = GgufType(raw);
    if (v.array_type == GgufType::Array) in.fail("nested arrays are not supported (key " + quoted(key) + ")");
    const uint64_t count = in.read<uint64_t>("array length");
    const uint64_t item_bytes = v.array_type == GgufType::String ? 8 : scalar_size(v.array_type);
    in.check_count(count, item_bytes, "array length of key " + quoted(key) + ":");
    if (v.array_type == GgufType::String) {
      v.strings.reserve(count);
      for (uint64_t k = 0; k < count; ++k) v.strings.push_back(in.read_string("array item"));
    } else if (is_float_type(v.array_type)) {
      v.floats.reserve(count);
      for (uint64_t k = 0; k < count; ++k) v.floats.push_back(read_float(in, v.array_type, "array item"));
    } else {
      v.ints.reserve(count);
      for (uint64_t k = 0; k < count; ++k) v.ints.push_back(read_int(in, v.array_type, "array item"));
    }
  }
  return v;
}

uint64_t align_up(uint64_t x, uint64_t alignment) { return (x + alignment - 1) / alignment * alignment; }

}  // namespace

// ---------------------------------------------------------------------------------------------------
// GgufValue

const char* gguf_type_name(GgufType type) {
  switch (type) {
    case GgufType::Uint8: return "uint8";
    case GgufType::Int8: return "int8";
    case GgufType::Uint16: return "uint16";
    case GgufType::Int16: return "int16";
    case GgufType::Uint32: return "uint32";
    case GgufType::Int32: return "int32";
    case GgufType::Float32: return "float32";
    case GgufType::Bool: return "bool";
    case GgufType::String: return "string";
    case GgufType::Array: return "array";
    case GgufType::Uint64: return "uint64";
    case GgufType::Int64: return "int64";
    case GgufType::Float64: return "float64";
  }
  return "unknown";
}

bool GgufValue::is_integer() const { return is_integer_type(type); }
bool GgufValue::is_float() const { return is_float_type(type); }

int64_t GgufValue::array_size() const {
  if (type != GgufType::Array) return 0;
  if (array_type == GgufType::String) return int64_t(strings.size());
  if (is_float_type(array_type)) return int64_t(floats.size());
  return int64_t(ints.size());
}

namespace {
std::string render_int(GgufType type, int64_t i) {
  if (type == GgufType::Bool) return i ? "true" : "false";
  if (type == GgufType::Uint64) return std::to_string(std::bit_cast<uint64_t>(i));
  return std::to_string(i);
}
std::string render_float(GgufType type, double f) {
  return type == GgufType::Float32 ? shortest(float(f)) : shortest(f);
}
}  // namespace

std::string GgufValue::to_string(size_t max_items) const {
  // max_items = SIZE_MAX (inspect --all): every item and every string whole.
  const bool whole = max_items == size_t(-1);
  if (type == GgufType::String) return "\"" + escape(s, whole ? size_t(-1) : 120) + "\"";
  if (is_float()) return render_float(type, f);
  if (type != GgufType::Array) return render_int(type, i);
  const size_t n = size_t(array_size());
  std::string out = "[";
  for (size_t k = 0; k < n && k < max_items; ++k) {
    if (k) out += ", ";
    if (array_type == GgufType::String)
      out += "\"" + escape(strings[k], whole ? size_t(-1) : 40) + "\"";
    else if (is_float_type(array_type))
      out += render_float(array_type, floats[k]);
    else
      out += render_int(array_type, ints[k]);
  }
  if (n > max_items) out += ", ...";
  return out + "] (" + std::to_string(n) + " x " + gguf_type_name(array_type) + ")";
}

GgufValue GgufValue::u32(uint32_t v) { return integer(GgufType::Uint32, v); }
GgufValue GgufValue::i32(int32_t v) { return integer(GgufType::Int32, v); }
GgufValue GgufValue::u64(uint64_t v) { return integer(GgufType::Uint64, std::bit_cast<int64_t>(v)); }
GgufValue GgufValue::boolean(bool v) { return integer(GgufType::Bool, v ? 1 : 0); }

GgufValue GgufValue::integer(GgufType type, int64_t v) {
  check(is_integer_type(type) || type == GgufType::Bool,
        std::string("GgufValue::integer: ") + gguf_type_name(type) + " is not an integer type");
  GgufValue r;
  r.type = type;
  r.i = v;
  return r;
}

GgufValue GgufValue::f32(float v) {
  GgufValue r;
  r.type = GgufType::Float32;
  r.f = v;
  return r;
}

GgufValue GgufValue::f64(double v) {
  GgufValue r;
  r.type = GgufType::Float64;
  r.f = v;
  return r;
}

GgufValue GgufValue::string(std::string v) {
  GgufValue r;
  r.type = GgufType::String;
  r.s = std::move(v);
  return r;
}

GgufValue GgufValue::string_array(std::vector<std::string> v) {
  GgufValue r;
  r.type = GgufType::Array;
  r.array_type = GgufType::String;
  r.strings = std::move(v);
  return r;
}

GgufValue GgufValue::int_array(GgufType element_type, std::vector<int64_t> v) {
  check(is_integer_type(element_type) || element_type == GgufType::Bool,
        std::string("GgufValue::int_array: ") + gguf_type_name(element_type) + " is not an integer type");
  GgufValue r;
  r.type = GgufType::Array;
  r.array_type = element_type;
  r.ints = std::move(v);
  return r;
}

GgufValue GgufValue::float_array(std::vector<float> v) {
  GgufValue r;
  r.type = GgufType::Array;
  r.array_type = GgufType::Float32;
  r.floats.assign(v.begin(), v.end());
  return r;
}

// ---------------------------------------------------------------------------------------------------
// GgufFile

std::shared_ptr<GgufFile> GgufFile::open(const std::string& path) {
  std::shared_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  const std::string where = "gguf " + path + ": ";

  file->map_ = MappedFile::open(path, where, "GGUF");
  file->size_ = file->map_.size();
  if (file->size_ == 0) throw Error(where + "empty file (0 bytes), not a GGUF file");

  Cursor in(file->map_.data(), file->size_, file->path_);

  // Header.
  const uint32_t magic = in.read<uint32_t>("magic");
  if (magic != kMagic) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%08x", magic);
    in.fail(std::string("bad magic ") + buf + " (expected \"GGUF\"): not a GGUF file");
  }
  file->version_ = in.read<uint32_t>("version");
  if (file->version_ == 1)
    in.fail("unsupported GGUF version 1 (only versions 2 and 3 are supported; reconvert the model)");
  if (file->version_ != 2 && file->version_ != 3)
    in.fail("unsupported GGUF version " + std::to_string(file->version_) + " (only versions 2 and 3 are supported)");
  const uint64_t tensor_count = in.read<uint64_t>("tensor count");
  const uint64_t kv_count = in.read<uint64_t>("metadata key/value count");
  // Smallest possible entries: a KV is key length (8) + type (4) + a 1-byte value; a tensor info is
  // name length (8) + n_dims (4) + one dim (8) + type (4) + offset (8).
  in.check_count(kv_count, 13, "metadata key/value");
  in.check_count(tensor_count, 32, "tensor");

  // Metadata.
  file->metadata_.reserve(kv_count);
  std::unordered_set<std::string> keys;
  for (uint64_t k = 0; k < kv_count; ++k) {
    in.set_context("metadata entry " + std::to_string(k));
    std::string key = in.read_string("key");
    in.set_context("key " + quoted(key));
    if (!keys.insert(key).second) in.fail("duplicate metadata key " + quoted(key));
    const uint32_t raw = in.read<uint32_t>("value type");
    if (!valid_type(raw)) in.fail("unknown value type " + std::to_string(raw) + " of key " + quoted(key));
    GgufValue value = read_value(in, GgufType(raw), key);
    file->metadata_.emplace_back(std::move(key), std::move(value));
  }

  // Alignment.
  if (const GgufValue* a = file->find(kAlignmentKey)) {
    if (!a->is_integer())
      in.fail(std::string("bad alignment: ") + kAlignmentKey + " has type " + gguf_type_name(a->type) +
              ", expected uint32");
    const uint64_t value = std::bit_cast<uint64_t>(a->i);
    if (a->i <= 0 || !std::has_single_bit(value) || value > (uint64_t(1) << 30))
      in.fail(std::string("bad alignment value ") + a->to_string() + " of " + kAlignmentKey +
              " (must be a power of two, at most 2^30)");
    file->alignment_ = value;
  }

  // Tensor infos.
  struct Placement {
    uint64_t offset, bytes;
    size_t index;
  };
  std::vector<Placement> placements;
  placements.reserve(tensor_count);
  file->tensors_.reserve(tensor_count);
  std::unordered_set<std::string> names;
  for (uint64_t t = 0; t < tensor_count; ++t) {
    in.set_context("tensor info " + std::to_string(t));
    TensorView view;
    view.name = in.read_string("name");
    const std::string tname = "tensor " + quoted(view.name);
    in.set_context(tname);
    if (!names.insert(view.name).second) in.fail("duplicate tensor name " + quoted(view.name));
    const uint32_t n_dims = in.read<uint32_t>("n_dims");
    if (n_dims < 1 || n_dims > kMaxDims)
      in.fail(tname + " has n_dims " + std::to_string(n_dims) + ", out of range 1.." + std::to_string(kMaxDims));
    view.n_dims = int(n_dims);
    int64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = in.read<uint64_t>("dimension");
      if (ne == 0 || ne > uint64_t(std::numeric_limits<int64_t>::max()))
        in.fail(tname + " has invalid dimension ne[" + std::to_string(d) + "] = " + std::to_string(int64_t(ne)) +
                " (must be positive)");
      view.ne[d] = int64_t(ne);
      if (__builtin_mul_overflow(elements, int64_t(ne), &elements))
        in.fail(tname + " has an element count that overflows 64 bits (shape " + view.shape_string() + "...)");
    }
    const uint32_t type_id = in.read<uint32_t>("ggml type");
    const DTypeInfo* info = dtype_info(type_id);
    if (info == nullptr) in.fail(tname + " has unknown ggml dtype id " + std::to_string(type_id));
    view.type = DType(type_id);
    if (view.ne[0] % info->block_size != 0)
      in.fail(tname + " of dtype " + info->name + " has ne[0] = " + std::to_string(view.ne[0]) +
              ", not a multiple of the block size " + std::to_string(info->block_size));
    const int64_t rows = elements / view.ne[0];
    int64_t row_size = 0, bytes = 0;
    if (__builtin_mul_overflow(view.ne[0] / info->block_size, info->block_bytes, &row_size) ||
        __builtin_mul_overflow(row_size, rows, &bytes))
      in.fail(tname + " byte size overflows 64 bits (shape " + view.shape_string() + ")");
    const uint64_t offset = in.read<uint64_t>("data offset");
    if (offset % file->alignment_ != 0)
      in.fail(tname + " data offset " + std::to_string(offset) + " is not aligned to " +
              std::to_string(file->alignment_) + " bytes");
    placements.push_back({offset, uint64_t(bytes), file->tensors_.size()});
    file->tensors_.push_back(std::move(view));
  }
  in.set_context("");

  // Tensor data: starts at the first multiple of the alignment after the header.
  file->data_offset_ = align_up(in.pos(), file->alignment_);
  for (const Placement& p : placements) {
    const std::string tname = "tensor " + quoted(file->tensors_[p.index].name);
    uint64_t begin = 0, end = 0;
    if (__builtin_add_overflow(file->data_offset_, p.offset, &begin) || __builtin_add_overflow(begin, p.bytes, &end) ||
        end > file->size_)
      in.fail(tname + " data (offset " + std::to_string(p.offset) + ", " + std::to_string(p.bytes) +
              " bytes, data section at byte " + std::to_string(file->data_offset_) +
              ") runs past the end of file (file is " + std::to_string(file->size_) +
              " bytes; truncated file?)");
    file->tensors_[p.index].data = file->map_.data() + begin;
  }
  std::sort(placements.begin(), placements.end(),
            [](const Placement& a, const Placement& b) { return a.offset < b.offset; });
  for (size_t k = 1; k < placements.size(); ++k)
    if (placements[k - 1].offset + placements[k - 1].bytes > placements[k].offset)
      in.fail("data of tensors " + quoted(file->tensors_[placements[k - 1].index].name) + " and " +
              quoted(file->tensors_[placements[k].index].name) + " overlap");
  return file;
}

GgufFile::~GgufFile() = default;

const GgufValue* GgufFile::find(const std::string& key) const {
  for (const auto& [k, v] : metadata_)
    if (k == key) return &v;
  return nullptr;
}

namespace {
[[noreturn]] void wrong_type(const std::string& path, const std::string& key, const GgufValue& v,
                             const char* expected) {
  std::string actual = gguf_type_name(v.type);
  if (v.type == GgufType::Array) actual += std::string(" of ") + gguf_type_name(v.array_type);
  throw Error("gguf " + path + ": key " + quoted(key) + " has type " + actual + ", expected " + expected);
}
}  // namespace

int64_t GgufFile::get_int(const std::string& key, int64_t fallback) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_integer()) wrong_type(path_, key, *v, "an integer");
  if (v->type == GgufType::Uint64 && v->i < 0)
    throw Error("gguf " + path_ + ": key " + quoted(key) + " value " + v->to_string() + " does not fit in int64");
  return v->i;
}

double GgufFile::get_float(const std::string& key, double fallback) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return fallback;
  if (v->is_float()) return v->f;
  if (v->is_integer()) return v->type == GgufType::Uint64 ? double(std::bit_cast<uint64_t>(v->i)) : double(v->i);
  wrong_type(path_, key, *v, "a number");
}

bool GgufFile::get_bool(const std::string& key, bool fallback) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return fallback;
  if (v->type != GgufType::Bool) wrong_type(path_, key, *v, "bool");
  return v->i != 0;
}

std::string GgufFile::get_string(const std::string& key, const std::string& fallback) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return fallback;
  if (v->type != GgufType::String) wrong_type(path_, key, *v, "string");
  return v->s;
}

int64_t GgufFile::require_int(const std::string& key) const {
  check(find(key) != nullptr, "gguf " + path_ + ": missing key " + quoted(key));
  return get_int(key, 0);
}

double GgufFile::require_float(const std::string& key) const {
  check(find(key) != nullptr, "gguf " + path_ + ": missing key " + quoted(key));
  return get_float(key, 0);
}

std::string GgufFile::require_string(const std::string& key) const {
  check(find(key) != nullptr, "gguf " + path_ + ": missing key " + quoted(key));
  return get_string(key, "");
}

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return {};
  if (v->type != GgufType::Array || v->array_type != GgufType::String)
    wrong_type(path_, key, *v, "array of string");
  return v->strings;
}

std::vector<int64_t> GgufFile::get_int_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return {};
  if (v->type != GgufType::Array || !(is_integer_type(v->array_type) || v->array_type == GgufType::Bool))
    wrong_type(path_, key, *v, "array of integers");
  return v->ints;
}

std::vector<double> GgufFile::get_float_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return {};
  if (v->type == GgufType::Array && is_float_type(v->array_type)) return v->floats;
  if (v->type == GgufType::Array && is_integer_type(v->array_type)) {
    std::vector<double> out;
    out.reserve(v->ints.size());
    for (int64_t x : v->ints)
      out.push_back(v->array_type == GgufType::Uint64 ? double(std::bit_cast<uint64_t>(x)) : double(x));
    return out;
  }
  wrong_type(path_, key, *v, "array of numbers");
}

const TensorView* GgufFile::find_tensor(const std::string& name) const {
  for (const TensorView& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

const TensorView& GgufFile::require_tensor(const std::string& name) const {
  const TensorView* t = find_tensor(name);
  check(t != nullptr, "gguf " + path_ + ": missing tensor " + quoted(name));
  return *t;
}

// ---------------------------------------------------------------------------------------------------
// GgufWriter

namespace {

class ByteBuffer {
 public:
  template <class T>
  void put(T v) {
    const size_t at = bytes.size();
    bytes.resize(at + sizeof(T));
    std::memcpy(bytes.data() + at, &v, sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
  std::vector<uint8_t> bytes;
};

void put_int(ByteBuffer& out, GgufType type, int64_t v, const std::string& key) {
  auto in_range = [&](int64_t lo, int64_t hi) {
    check(v >= lo && v <= hi, "gguf writer: value " + std::to_string(v) + " of key " + quoted(key) +
                                  " does not fit in " + gguf_type_name(type));
  };
  switch (type) {
    case GgufType::Uint8: in_range(0, UINT8_MAX); out.put<uint8_t>(uint8_t(v)); break;
    case GgufType::Int8: in_range(INT8_MIN, INT8_MAX); out.put<int8_t>(int8_t(v)); break;
    case GgufType::Uint16: in_range(0, UINT16_MAX); out.put<uint16_t>(uint16_t(v)); break;
    case GgufType::Int16: in_range(INT16_MIN, INT16_MAX); out.put<int16_t>(int16_t(v)); break;
    case GgufType::Uint32: in_range(0, UINT32_MAX); out.put<uint32_t>(uint32_t(v)); break;
    case GgufType::Int32: in_range(INT32_MIN, INT32_MAX); out.put<int32_t>(int32_t(v)); break;
    case GgufType::Uint64: out.put<uint64_t>(std::bit_cast<uint64_t>(v)); break;
    case GgufType::Int64: out.put<int64_t>(v); break;
    case GgufType::Bool: in_range(0, 1); out.put<uint8_t>(uint8_t(v)); break;
    default: throw Error("gguf writer: key " + quoted(key) + ": " + gguf_type_name(type) + " is not an integer type");
  }
}

void put_float(ByteBuffer& out, GgufType type, double v) {
  if (type == GgufType::Float32)
    out.put<float>(float(v));
  else
    out.put<double>(v);
}

void put_value(ByteBuffer& out, const std::string& key, const GgufValue& v) {
  out.put<uint32_t>(uint32_t(v.type));
  if (v.type == GgufType::String) {
    out.put_string(v.s);
  } else if (v.is_float()) {
    put_float(out, v.type, v.f);
  } else if (v.type != GgufType::Array) {
    put_int(out, v.type, v.i, key);
  } else {
    check(valid_type(uint32_t(v.array_type)) && v.array_type != GgufType::Array,
          "gguf writer: key " + quoted(key) + " has an unsupported array element type");
    out.put<uint32_t>(uint32_t(v.array_type));
    out.put<uint64_t>(uint64_t(v.array_size()));
    if (v.array_type == GgufType::String)
      for (const std::string& s : v.strings) out.put_string(s);
    else if (is_float_type(v.array_type))
      for (double x : v.floats) put_float(out, v.array_type, x);
    else
      for (int64_t x : v.ints) put_int(out, v.array_type, x, key);
  }
}

}  // namespace

void GgufWriter::set(const std::string& key, GgufValue value) {
  for (auto& [k, v] : metadata_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(key, std::move(value));
}

void GgufWriter::add_tensor(const std::string& name, DType type, const std::vector<int64_t>& shape, const void* data,
                            uint64_t bytes) {
  const std::string what = "gguf writer: tensor " + quoted(name);
  for (const PendingTensor& t : tensors_) check(t.name != name, what + " added twice (duplicate tensor name)");
  check(dtype_info(uint32_t(type)) != nullptr, what + " has unknown dtype id " + std::to_string(uint32_t(type)));
  check(!shape.empty() && shape.size() <= size_t(kMaxDims),
        what + " must have 1.." + std::to_string(kMaxDims) + " dimensions, got " + std::to_string(shape.size()));
  int64_t rows = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    check(shape[d] > 0, what + " has non-positive dimension " + std::to_string(shape[d]));
    if (d > 0) check(!__builtin_mul_overflow(rows, shape[d], &rows), what + " shape overflows");
  }
  const DTypeInfo& info = dtype_info(type);
  check(shape[0] / info.block_size <= std::numeric_limits<int64_t>::max() / info.block_bytes,
        what + " row size overflows");
  int64_t expected = 0;
  check(!__builtin_mul_overflow(row_bytes(type, shape[0]), rows, &expected), what + " byte size overflows");
  check(bytes == uint64_t(expected), what + " (" + dtype_name(type) + ") needs " + std::to_string(expected) +
                                         " bytes, got " + std::to_string(bytes));
  check(data != nullptr, what + " has no data");
  tensors_.push_back({name, type, shape, data, bytes});
}

namespace {

// llama.cpp's llama_ftype for the type most 2-D weights are stored in; -1 when it has no equivalent.
int64_t llama_file_type(DType type) {
  switch (type) {
    case DType::F32: return 0;   // LLAMA_FTYPE_ALL_F32
    case DType::F16: return 1;   // MOSTLY_F16
    case DType::Q4_0: return 2;  // MOSTLY_Q4_0
    case DType::Q4_1: return 3;  // MOSTLY_Q4_1
    case DType::Q8_0: return 7;  // MOSTLY_Q8_0
    case DType::Q5_0: return 8;  // MOSTLY_Q5_0
    case DType::Q5_1: return 9;  // MOSTLY_Q5_1
    case DType::Q4_K: return 15; // MOSTLY_Q4_K_M
    case DType::Q5_K: return 17; // MOSTLY_Q5_K_M
    case DType::Q6_K: return 18; // MOSTLY_Q6_K
    case DType::BF16: return 32; // MOSTLY_BF16
    default: return -1;
  }
}

}  // namespace

// A model file (one with general.architecture) gets the general keys llama.cpp's converters always write
// when the writer did not set them: general.name (the architecture), general.file_type (from the type
// most matrix elements are stored in) and general.quantization_version. Every file gets tokenizer.ggml.pre
// in llama.cpp's spelling.
void GgufWriter::add_llama_cpp_general_keys(std::vector<std::pair<std::string, GgufValue>>& metadata,
                                            const std::vector<PendingTensor>& tensors) {
  auto find = [&](const std::string& key) -> const GgufValue* {
    for (const auto& [k, v] : metadata)
      if (k == key) return &v;
    return nullptr;
  };
  // canvas wrote "gpt2" before; llama.cpp accepts only its own spelling "gpt-2" (the same regex).
  for (auto& [k, v] : metadata)
    if (k == "tokenizer.ggml.pre" && v.type == GgufType::String && v.s == "gpt2") v.s = "gpt-2";
  const GgufValue* arch = find("general.architecture");
  if (!arch || arch->type != GgufType::String) return;
  if (!find("general.name")) metadata.emplace_back("general.name", *arch);
  if (!find("general.file_type")) {
    std::map<DType, int64_t> elements;
    for (const PendingTensor& t : tensors) {
      if (t.shape.size() < 2) continue;
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      elements[t.type] += n;
    }
    DType most = DType::F32;
    int64_t best = -1;
    for (const auto& [type, n] : elements) {
      if (n > best) {
        most = type;
        best = n;
      }
    }
    if (const int64_t ftype = llama_file_type(most); ftype >= 0)
      metadata.emplace_back("general.file_type", GgufValue::u32(uint32_t(ftype)));
  }
  // llama.cpp's converters write the ggml block-format version (GGML_QUANT_VERSION, 2) into every model.
  if (!find("general.quantization_version")) metadata.emplace_back("general.quantization_version", GgufValue::u32(2));
}

void GgufWriter::write(const std::string& path, uint64_t alignment) const {
  check(alignment > 0 && std::has_single_bit(alignment) && alignment <= (uint64_t(1) << 30),
        "gguf writer: alignment " + std::to_string(alignment) + " is not a power of two up to 2^30");

  // Metadata, with general.alignment kept consistent with what is actually written.
  std::vector<std::pair<std::string, GgufValue>> metadata = metadata_;
  bool has_alignment = false;
  for (auto& [k, v] : metadata) {
    if (k == kAlignmentKey) {
      v = GgufValue::u32(uint32_t(alignment));
      has_alignment = true;
    }
  }
  if (!has_alignment && alignment != kDefaultAlignment)
    metadata.emplace_back(kAlignmentKey, GgufValue::u32(uint32_t(alignment)));
  add_llama_cpp_general_keys(metadata, tensors_);

  ByteBuffer header;
  header.put<uint32_t>(kMagic);
  header.put<uint32_t>(kWriteVersion);
  header.put<uint64_t>(tensors_.size());
  header.put<uint64_t>(metadata.size());
  for (const auto& [key, value] : metadata) {
    header.put_string(key);
    put_value(header, key, value);
  }
  std::vector<uint64_t> offsets;
  uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    header.put_string(t.name);
    header.put<uint32_t>(uint32_t(t.shape.size()));
    for (int64_t ne : t.shape) header.put<uint64_t>(uint64_t(ne));
    header.put<uint32_t>(uint32_t(t.type));
    offsets.push_back(offset);
    header.put<uint64_t>(offset);
    offset = align_up(offset + t.bytes, alignment);
  }
  header.bytes.resize(align_up(header.bytes.size(), alignment), 0);

  write_file(path, [&](std::ostream& out) {
    out.write(reinterpret_cast<const char*>(header.bytes.data()), std::streamsize(header.bytes.size()));
    static const char zeros[256] = {};
    for (size_t k = 0; out && k < tensors_.size(); ++k) {
      const PendingTensor& t = tensors_[k];
      out.write(static_cast<const char*>(t.data), std::streamsize(t.bytes));
      if (k + 1 < tensors_.size()) {  // pad up to the next tensor; nothing after the last one
        for (uint64_t pad = offsets[k + 1] - offsets[k] - t.bytes; out && pad > 0;) {
          const size_t n = size_t(std::min<uint64_t>(pad, sizeof zeros));
          out.write(zeros, std::streamsize(n));
          pad -= n;
        }
      }
    }
  });
}

std::string gguf_listing(const GgufFile& file, size_t max_items) {
  std::string out;
  appendf(out, "file: %s\nGGUF version %u, %llu bytes, alignment %llu, data at offset %llu\n",
          file.path().c_str(), file.version(), (unsigned long long)file.file_size(), (unsigned long long)file.alignment(),
          (unsigned long long)file.data_offset());
  appendf(out, "\nmetadata (%zu keys):\n", file.metadata().size());
  for (const auto& [key, value] : file.metadata()) {
    std::string type = gguf_type_name(value.type);
    if (value.type == GgufType::Array)
      type += std::string("<") + gguf_type_name(value.array_type) + ">[" + std::to_string(value.array_size()) + "]";
    appendf(out, "  %-44s %-22s %s\n", key.c_str(), type.c_str(), sanitize_utf8(value.to_string(max_items)).c_str());
  }
  int64_t total_bytes = 0, total_elements = 0;
  appendf(out, "\ntensors (%zu):\n  %-40s %-6s %-26s %14s %14s\n", file.tensors().size(), "name", "dtype", "shape",
          "bytes", "offset");
  for (const TensorView& t : file.tensors()) {
    appendf(out, "  %-40s %-6s %-26s %14lld %14llu\n", t.name.c_str(), dtype_name(t.type), t.shape_string().c_str(),
            (long long)t.bytes(), (unsigned long long)file.offset_of(t));
    total_bytes += t.bytes();
    total_elements += t.elements();
  }
  appendf(out, "\n%lld parameters, %.2f MiB of tensor data\n", (long long)total_elements, double(total_bytes) / 1048576.0);
  return out;
}

}  // namespace canvas
