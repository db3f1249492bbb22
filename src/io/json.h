// JSON files (config.json, generation_config.json, tokenizer.json, safetensors headers): strict parsing
// into nlohmann::json and typed look-ups by dotted key path, with errors naming the file and the key.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace canvas {

// Parses `text` strictly: a syntax error gives Error("<origin>: malformed JSON: ... at line L, column C
// (byte B)"), and so do arrays/objects nested more than 128 deep (checked before parsing, so no input can
// exhaust the stack) and a key repeated inside one object (which nlohmann would silently collapse),
// naming the key path. `origin` names the source in messages (a file path, "safetensors header of X").
nlohmann::json parse_json(std::string_view text, const std::string& origin);
// The same, with object members kept in document order (JSON Schema: properties are written in the
// order the schema lists them).
nlohmann::ordered_json parse_json_ordered(std::string_view text, const std::string& origin);
// Reads and parses a file; a missing or unreadable file gives Error naming it.
nlohmann::json load_json_file(const std::string& path);
// A whole file's bytes; a missing or unreadable file, one that is not a regular file (a FIFO, a device) or
// one larger than kMaxJsonBytes gives Error naming it (before anything is read).
std::string read_text_file(const std::string& path);

// `value` as compact JSON text cut to at most `max_chars` (then "..."), for error messages; invalid UTF-8
// in strings is replaced rather than thrown on.
std::string json_excerpt(const nlohmann::json& value, size_t max_chars = 80);

// The JSON type name used in messages ("object", "string", "number", ...).
std::string json_type_name(const nlohmann::json& value);

// A parsed document plus where it came from, with typed getters by key path. A path is keys joined by
// '.', e.g. "text_config.rope_parameters.full_attention.rope_theta"; a component that is all digits
// indexes an array ("layer_types.3"). JSON null counts as absent (Hugging Face configs write null for
// "not set"). Getters: absent -> fallback; present with the wrong type -> Error naming the origin, the
// path, the expected and the actual type. require_* variants: absent -> Error "missing key".
class JsonDocument {
 public:
  JsonDocument() = default;
  JsonDocument(nlohmann::json root, std::string origin)
      : root_(std::move(root)), origin_(std::move(origin)) {}
  static JsonDocument load(const std::string& path) { return JsonDocument(load_json_file(path), path); }
  static JsonDocument parse(std::string_view text, const std::string& origin) {
    return JsonDocument(parse_json(text, origin), origin);
  }

  const nlohmann::json& root() const { return root_; }
  const std::string& origin() const { return origin_; }

  // nullptr when absent or null (also when a path component crosses a non-object / non-array).
  const nlohmann::json* find(std::string_view path) const;
  bool has(std::string_view path) const { return find(path) != nullptr; }
  const nlohmann::json& require(std::string_view path) const;

  // Integers: a float with an integral value is accepted (1e6 for a count); bool is not a number.
  int64_t get_int(std::string_view path, int64_t fallback) const;
  int64_t require_int(std::string_view path) const;
  // Floats: integers are accepted.
  double get_float(std::string_view path, double fallback) const;
  double require_float(std::string_view path) const;
  bool get_bool(std::string_view path, bool fallback) const;
  bool require_bool(std::string_view path) const;
  std::string get_string(std::string_view path, const std::string& fallback) const;
  std::string require_string(std::string_view path) const;
  // Arrays (absent -> empty). A scalar where an array is expected is an error, and so is a wrong item
  // type (naming "path[i]").
  std::vector<int64_t> get_int_array(std::string_view path) const;
  std::vector<double> get_float_array(std::string_view path) const;
  std::vector<std::string> get_string_array(std::string_view path) const;
  // An integer or an array of integers (e.g. generation_config's eos_token_id); absent -> empty.
  std::vector<int64_t> get_int_or_int_array(std::string_view path) const;

 private:
  [[noreturn]] void type_error(std::string_view path, const char* expected, const nlohmann::json& got) const;
  int64_t as_int(std::string_view path, const nlohmann::json& v) const;
  double as_float(std::string_view path, const nlohmann::json& v) const;

  nlohmann::json root_;
  std::string origin_;
};

}  // namespace canvas
