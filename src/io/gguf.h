// GGUF v3 (llama.cpp's model file format): a memory-mapped reader that validates everything it
// touches, and a writer.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/mapped_file.h"
#include "core/tensor.h"

namespace canvas {

enum class GgufType : uint32_t {
  Uint8 = 0, Int8 = 1, Uint16 = 2, Int16 = 3, Uint32 = 4, Int32 = 5, Float32 = 6, Bool = 7,
  String = 8, Array = 9, Uint64 = 10, Int64 = 11, Float64 = 12,
};
const char* gguf_type_name(GgufType type);

// One metadata value. Scalars keep their exact GGUF type (so a file can be rewritten unchanged);
// numbers are also readable widened. Arrays keep their element type and hold their items widened.
struct GgufValue {
  GgufType type = GgufType::Uint8;
  GgufType array_type = GgufType::Uint8;  // element type when type == Array
  int64_t i = 0;                          // every integer type and Bool (0/1); Uint64 stored bit-cast
  double f = 0;                           // Float32 / Float64
  std::string s;                          // String
  std::vector<int64_t> ints;              // integer and Bool arrays
  std::vector<double> floats;             // float arrays
  std::vector<std::string> strings;       // string arrays

  bool is_integer() const;  // scalar of an integer type (not Bool)
  bool is_float() const;
  int64_t array_size() const;
  std::string to_string(size_t max_items = 8) const;  // for `canvas inspect`

  static GgufValue u32(uint32_t v);
  static GgufValue i32(int32_t v);
  static GgufValue u64(uint64_t v);
  static GgufValue f32(float v);
  static GgufValue boolean(bool v);
  static GgufValue string(std::string v);
  static GgufValue string_array(std::vector<std::string> v);
  static GgufValue int_array(GgufType element_type, std::vector<int64_t> v);
  static GgufValue float_array(std::vector<float> v);
  // Any integer type or Bool (range is checked when written); and Float64.
  static GgufValue integer(GgufType type, int64_t v);
  static GgufValue f64(double v);
};

class GgufFile {
 public:
  // Maps and parses the file; throws canvas::Error naming the file and exactly what is wrong
  // (bad magic, unsupported version, truncation, absurd counts, unknown dtype, offsets or sizes out of
  // range, misaligned data, duplicate names, shape/byte-size mismatch). Never reads out of bounds.
  static std::shared_ptr<GgufFile> open(const std::string& path);
  ~GgufFile();

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return size_; }
  // Start of the read-only mapping (file_size() bytes); tensor data points inside it.
  const uint8_t* mapped_data() const { return map_.data(); }
  // A tensor's bytes made writable in this process's private copy of the mapping (the file never
  // changes); for rearranging weights in place at load.
  uint8_t* writable(const TensorView& t) { return map_.writable(t.data, uint64_t(t.bytes())); }

  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* find(const std::string& key) const;
  // Typed getters: absent -> fallback; present with an incompatible type -> Error naming the key.
  int64_t get_int(const std::string& key, int64_t fallback) const;
  double get_float(const std::string& key, double fallback) const;  // accepts integer values too
  bool get_bool(const std::string& key, bool fallback) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  // Required variants: absent -> Error "missing key ...".
  int64_t require_int(const std::string& key) const;
  double require_float(const std::string& key) const;
  std::string require_string(const std::string& key) const;
  // Arrays (absent -> empty vector).
  std::vector<std::string> get_string_array(const std::string& key) const;
  std::vector<int64_t> get_int_array(const std::string& key) const;
  std::vector<double> get_float_array(const std::string& key) const;

  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find_tensor(const std::string& name) const;
  // Missing tensor -> Error naming it and the file.
  const TensorView& require_tensor(const std::string& name) const;
  // Absolute file offset of a tensor's data.
  uint64_t offset_of(const TensorView& t) const {
    return uint64_t(static_cast<const uint8_t*>(t.data) - map_.data());
  }

 private:
  GgufFile() = default;
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  uint64_t size_ = 0;
  MappedFile map_;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<TensorView> tensors_;
};

// `canvas inspect`: the header, every metadata key with its type and value (arrays cut to max_items
// items), a table of the tensors (name, dtype, shape, bytes, offset) and the parameter count.
std::string gguf_listing(const GgufFile& file, size_t max_items);

class GgufWriter {
 public:
  void set(const std::string& key, GgufValue value);  // replaces an existing key, keeps order otherwise
  // shape in ggml order (ne[0] first). `data` must stay valid until write(); bytes must equal
  // rows * row_bytes(type, shape[0]) (checked).
  void add_tensor(const std::string& name, DType type, const std::vector<int64_t>& shape, const void* data,
                  uint64_t bytes);
  // Writes to path + ".tmp" and renames, so a crash never leaves a half-written file at `path`. A file
  // with general.architecture also gets general.name, general.file_type and general.quantization_version
  // (llama.cpp's values) unless set; tokenizer.ggml.pre "gpt2" (canvas's old spelling) is written "gpt-2".
  void write(const std::string& path, uint64_t alignment = 32) const;

 private:
  struct PendingTensor {
    std::string name;
    DType type;
    std::vector<int64_t> shape;
    const void* data;
    uint64_t bytes;
  };
  static void add_llama_cpp_general_keys(std::vector<std::pair<std::string, GgufValue>>& metadata,
                                         const std::vector<PendingTensor>& tensors);

  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace canvas
