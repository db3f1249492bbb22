// Strict JSON parsing (duplicate keys rejected) and typed look-ups by dotted key path.
#include "io/json.h"

#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_set>

#include "core/error.h"
#include "io/input_file.h"

namespace canvas {
namespace {

using Json = nlohmann::json;

// Where the parser is, for naming a duplicated key: one frame per open object or array.
struct Frame {
  bool is_object = false;
  std::unordered_set<std::string> keys;  // objects: keys seen so far
  std::string key;                       // objects: the current key
  size_t index = 0;                      // arrays: index of the current element
};

std::string frames_path(const std::vector<Frame>& frames) {
  std::string path;
  for (const Frame& f : frames) {
    if (f.is_object) {
      if (!path.empty()) path += '.';
      path += f.key;
    } else {
      path += "[" + std::to_string(f.index) + "]";
    }
  }
  return path;
}

// Splits "a.b.3" into components.
std::vector<std::string_view> split_path(std::string_view path) {
  std::vector<std::string_view> parts;
  size_t begin = 0;
  while (true) {
    const size_t dot = path.find('.', begin);
    parts.push_back(path.substr(begin, dot == std::string_view::npos ? std::string_view::npos : dot - begin));
    if (dot == std::string_view::npos) break;
    begin = dot + 1;
  }
  return parts;
}

bool all_digits(std::string_view s) {
  if (s.empty() || s.size() > 18) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

// Deepest nesting of arrays/objects parse_json accepts. Real files nest a handful of levels; the bound
// keeps every recursive walk of a parsed value (nlohmann's dump(), comparisons, our own) off the end of
// the stack whatever the input holds.
constexpr size_t kMaxJsonDepth = 128;

// Byte offset where `text` first opens more than kMaxJsonDepth arrays/objects, or npos. Brackets inside
// strings do not count; malformed text is left to the parser to report.
size_t too_deep_at(std::string_view text) {
  size_t depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::string_view::npos;
}

}  // namespace

std::string json_excerpt(const nlohmann::json& value, size_t max_chars) {
  std::string shown = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (shown.size() > max_chars) shown = shown.substr(0, max_chars) + "...";
  return shown;
}

namespace {

// Builds the document from the parser's events, tracking the keys of every open object to find a repeated
// one (nlohmann would silently keep the last). nlohmann's own callback parser is not used: each time a
// member object closes it rescans the enclosing object, which is quadratic in the members (a 100,000-key
// JSON Schema took a minute to parse).
// Json is nlohmann::json (keys sorted) or nlohmann::ordered_json (keys in document order).
template <class Json>
class StrictDomBuilder : public nlohmann::json_sax<Json> {
 public:
  using typename nlohmann::json_sax<Json>::number_integer_t;
  using typename nlohmann::json_sax<Json>::number_unsigned_t;
  using typename nlohmann::json_sax<Json>::number_float_t;
  using typename nlohmann::json_sax<Json>::string_t;
  using typename nlohmann::json_sax<Json>::binary_t;
  explicit StrictDomBuilder(Json& root) : root_(root) {}

  bool null() override { return add(nullptr); }
  bool boolean(bool v) override { return add(v); }
  bool number_integer(number_integer_t v) override { return add(v); }
  bool number_unsigned(number_unsigned_t v) override { return add(v); }
  bool number_float(number_float_t v, const string_t&) override { return add(v); }
  bool string(string_t& v) override { return add(std::move(v)); }
  bool binary(binary_t& v) override { return add(Json::binary(std::move(v))); }
  bool start_object(std::size_t) override { return open(Json::object(), true); }
  bool start_array(std::size_t) override { return open(Json::array(), false); }
  bool key(string_t& k) override {
    Frame& f = frames_.back();
    f.key = k;
    if (!f.keys.insert(f.key).second && duplicate_.empty()) duplicate_ = frames_path(frames_);
    return true;
  }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
    std::string what = e.what();
    if (e.id >= 100 && e.id < 200) {  // a syntax error: "[json.exception.parse_error.101] parse error at line 1,
      const size_t close = what.find("] ");  // column 5: ..." -> without the bracketed id, with the byte
      if (!what.empty() && what[0] == '[' && close != std::string::npos) what = what.substr(close + 2);
      error_ = what + " (byte " + std::to_string(position) + ")";
    } else {  // e.g. out_of_range.406, a number too large for a double: the message quotes the whole number
      error_ = what.size() > 160 ? what.substr(0, 160) + "..." : what;
    }
    return false;
  }

  const std::string& error() const { return error_; }
  const std::string& duplicate() const { return duplicate_; }  // path of the first repeated key, or ""

 private:
  // Places a value where the parser is: the root, the current key of the innermost object, or the end of
  // the innermost array. Containers on the stack are never moved: an enclosing container grows only
  // after the inner one has closed.
  Json* place(Json&& value) {
    if (stack_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    Json& parent = *stack_.back();
    if (parent.is_object()) {
      auto& members = parent.template get_ref<typename Json::object_t&>();
      if constexpr (std::is_same_v<Json, nlohmann::ordered_json>) {
        // ordered_map's operator[] searches linearly (quadratic over an object); keys are known to be new
        // here (duplicates are reported), so append to the underlying vector.
        using Members = std::vector<typename Json::object_t::value_type>;
        static_cast<Members&>(members).emplace_back(frames_.back().key, std::move(value));
        return &members.back().second;
      } else {
        Json& slot = members[frames_.back().key];
        slot = std::move(value);
        return &slot;
      }
    }
    parent.push_back(std::move(value));
    return &parent.back();
  }
  bool add(Json&& value) {
    place(std::move(value));
    element_done();
    return true;
  }
  bool open(Json&& container, bool is_object) {
    stack_.push_back(place(std::move(container)));
    frames_.push_back(Frame{is_object, {}, {}, 0});
    return true;
  }
  bool close() {
    stack_.pop_back();
    frames_.pop_back();
    element_done();
    return true;
  }
  // Called once an element of the innermost array is complete.
  void element_done() {
    if (!frames_.empty() && !frames_.back().is_object) ++frames_.back().index;
  }

  Json& root_;
  std::vector<Json*> stack_;   // the open containers, innermost last
  std::vector<Frame> frames_;  // and where the parser is inside each
  std::string duplicate_, error_;
};

template <class Json>
Json parse_strict(std::string_view text, const std::string& origin) {
  if (const size_t at = too_deep_at(text); at != std::string_view::npos)
    throw Error(origin + ": malformed JSON: arrays/objects nested more than " + std::to_string(kMaxJsonDepth) +
                " deep (byte " + std::to_string(at) + ")");
  Json root;
  StrictDomBuilder<Json> builder(root);
  if (!Json::sax_parse(text.begin(), text.end(), &builder)) throw Error(origin + ": malformed JSON: " + builder.error());
  if (!builder.duplicate().empty())
    throw Error(origin + ": malformed JSON: key '" + builder.duplicate() + "' appears twice");
  return root;
}

}  // namespace

nlohmann::json parse_json(std::string_view text, const std::string& origin) {
  return parse_strict<nlohmann::json>(text, origin);
}

nlohmann::ordered_json parse_json_ordered(std::string_view text, const std::string& origin) {
  return parse_strict<nlohmann::ordered_json>(text, origin);
}

std::string read_text_file(const std::string& path) {
  // A FIFO or a device would block the read forever (or never end); a huge file would fill the memory.
  return read_regular_file_bounded(path, kMaxJsonBytes, "file", "kMaxJsonBytes");
}

nlohmann::json load_json_file(const std::string& path) {
  return parse_json(read_text_file(path), path);
}

std::string json_type_name(const nlohmann::json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::object:
      return "object";
    case Json::value_t::array:
      return "array";
    case Json::value_t::string:
      return "string";
    case Json::value_t::boolean:
      return "boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "integer";
    case Json::value_t::number_float:
      return "float";
    case Json::value_t::binary:
      return "binary";
    case Json::value_t::discarded:
      return "discarded";
  }
  return "unknown";
}

const nlohmann::json* JsonDocument::find(std::string_view path) const {
  const Json* node = &root_;
  for (std::string_view part : split_path(path)) {
    if (node->is_object()) {
      const auto it = node->find(std::string(part));
      if (it == node->end()) return nullptr;
      node = &*it;
    } else if (node->is_array() && all_digits(part)) {
      size_t index = 0;
      const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), index);
      if (ec != std::errc() || index >= node->size()) return nullptr;
      node = &(*node)[index];
    } else {
      return nullptr;
    }
  }
  return node->is_null() ? nullptr : node;
}

const nlohmann::json& JsonDocument::require(std::string_view path) const {
  const Json* v = find(path);
  if (!v) throw Error(origin_ + ": missing key '" + std::string(path) + "'");
  return *v;
}

void JsonDocument::type_error(std::string_view path, const char* expected, const nlohmann::json& got) const {
  const std::string shown = json_excerpt(got, 60);
  throw Error(origin_ + ": key '" + std::string(path) + "' should be " + expected + " but is " +
              json_type_name(got) + " " + shown);
}

int64_t JsonDocument::as_int(std::string_view path, const nlohmann::json& v) const {
  if (v.is_number_integer() && !v.is_number_unsigned()) return v.get<int64_t>();
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > uint64_t(INT64_MAX)) type_error(path, "an integer in the int64 range", v);
    return int64_t(u);
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18) return int64_t(d);
    type_error(path, "an integer", v);
  }
  type_error(path, "an integer", v);
}

double JsonDocument::as_float(std::string_view path, const nlohmann::json& v) const {
  if (!v.is_number()) type_error(path, "a number", v);
  return v.get<double>();
}

int64_t JsonDocument::get_int(std::string_view path, int64_t fallback) const {
  const Json* v = find(path);
  return v ? as_int(path, *v) : fallback;
}
int64_t JsonDocument::require_int(std::string_view path) const {
  return as_int(path, require(path));
}

double JsonDocument::get_float(std::string_view path, double fallback) const {
  const Json* v = find(path);
  return v ? as_float(path, *v) : fallback;
}
double JsonDocument::require_float(std::string_view path) const {
  return as_float(path, require(path));
}

bool JsonDocument::get_bool(std::string_view path, bool fallback) const {
  const Json* v = find(path);
  if (!v) return fallback;
  if (!v->is_boolean()) type_error(path, "a boolean", *v);
  return v->get<bool>();
}
bool JsonDocument::require_bool(std::string_view path) const {
  const Json& v = require(path);
  if (!v.is_boolean()) type_error(path, "a boolean", v);
  return v.get<bool>();
}

std::string JsonDocument::get_string(std::string_view path, const std::string& fallback) const {
  const Json* v = find(path);
  if (!v) return fallback;
  if (!v->is_string()) type_error(path, "a string", *v);
  return v->get<std::string>();
}
std::string JsonDocument::require_string(std::string_view path) const {
  const Json& v = require(path);
  if (!v.is_string()) type_error(path, "a string", v);
  return v.get<std::string>();
}

std::vector<int64_t> JsonDocument::get_int_array(std::string_view path) const {
  std::vector<int64_t> out;
  const Json* v = find(path);
  if (!v) return out;
  if (!v->is_array()) type_error(path, "an array of integers", *v);
  for (size_t i = 0; i < v->size(); ++i)
    out.push_back(as_int(std::string(path) + "[" + std::to_string(i) + "]", (*v)[i]));
  return out;
}

std::vector<double> JsonDocument::get_float_array(std::string_view path) const {
  std::vector<double> out;
  const Json* v = find(path);
  if (!v) return out;
  if (!v->is_array()) type_error(path, "an array of numbers", *v);
  for (size_t i = 0; i < v->size(); ++i)
    out.push_back(as_float(std::string(path) + "[" + std::to_string(i) + "]", (*v)[i]));
  return out;
}

std::vector<std::string> JsonDocument::get_string_array(std::string_view path) const {
  std::vector<std::string> out;
  const Json* v = find(path);
  if (!v) return out;
  if (!v->is_array()) type_error(path, "an array of strings", *v);
  for (size_t i = 0; i < v->size(); ++i) {
    const Json& item = (*v)[i];
    if (!item.is_string()) type_error(std::string(path) + "[" + std::to_string(i) + "]", "a string", item);
    out.push_back(item.get<std::string>());
  }
  return out;
}

std::vector<int64_t> JsonDocument::get_int_or_int_array(std::string_view path) const {
  const Json* v = find(path);
  if (!v) return {};
  if (v->is_array()) return get_int_array(path);
  return {as_int(path, *v)};
}

}  // namespace canvas
