// SentencePiece-style BPE with byte fallback: tokenizer.json and GGUF loaders feeding one validated
// vocabulary; added-token split, literal normalizer / pre-tokenizer, rank-ordered merges over UTF-8
// characters (linked list + min-heap), byte-exact decode.
#include "io/hf_tokenizer.h"
#include "io/literal_split.h"

#include <algorithm>
#include <filesystem>
#include <unordered_set>

#include "core/error.h"
#include "io/gguf.h"
#include "io/json.h"
#include "io/tokenizer.h"
#include "io/utf8.h"

namespace canvas {
namespace {

using Json = nlohmann::json;
using Kind = HfVocab::Kind;

const char* const kSpaceMarker = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's space

std::string replace_all(std::string_view text, const std::string& from, const std::string& to) {
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  size_t begin = 0;
  while (true) {
    const size_t hit = text.find(from, begin);
    if (hit == std::string_view::npos) break;
    out.append(text.substr(begin, hit - begin));
    out += to;
    begin = hit + from.size();
  }
  out.append(text.substr(begin));
  return out;
}

std::string escape(std::string_view s) {
  std::string out;
  for (char ch : s) {
    const auto c = uint8_t(ch);
    if (out.size() > 80) return out + "...";
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += ch;
    }
  }
  return out;
}

const char* const kBehaviors[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                  "Contiguous"};

// Splits "left right" (the older tokenizer.json form and GGUF's). With exactly one space that is the
// separator; otherwise (a token holding a space) the first split whose parts are both tokens wins.
template <class IsToken>
bool split_merge(const std::string& m, IsToken is_token, std::pair<std::string, std::string>& out) {
  const size_t first = m.find(' ');
  if (first == std::string::npos) return false;
  if (m.find(' ', first + 1) == std::string::npos) {
    out = {m.substr(0, first), m.substr(first + 1)};
    return !out.first.empty() && !out.second.empty();
  }
  for (size_t sp = first; sp != std::string::npos; sp = m.find(' ', sp + 1)) {
    std::string left = m.substr(0, sp), right = m.substr(sp + 1);
    if (!left.empty() && !right.empty() && is_token(left) && is_token(right)) {
      out = {std::move(left), std::move(right)};
      return true;
    }
  }
  return false;
}

// --- tokenizer.json sections -------------------------------------------------------------------------

// A {"String": s} pattern; a Regex pattern (or anything else) is refused, naming the key.
std::string string_pattern(const JsonDocument& doc, const std::string& path) {
  const Json& pattern = doc.require(path);
  if (pattern.is_object() && pattern.size() == 1 && pattern.contains("String") &&
      pattern["String"].is_string())
    return pattern["String"].get<std::string>();
  if (pattern.is_object() && pattern.contains("Regex"))
    throw Error(doc.origin() + ": " + path +
                " is a Regex pattern; only literal {\"String\": ...} patterns are supported");
  throw Error(doc.origin() + ": " + path + " should be {\"String\": ...} but is " + json_excerpt(pattern));
}

void read_normalizer(const JsonDocument& doc, const std::string& path, HfVocab& v) {
  if (!doc.has(path)) return;  // absent or null
  const std::string type = doc.require_string(path + ".type");
  if (type == "Replace") {
    v.replacements.emplace_back(string_pattern(doc, path + ".pattern"),
                                doc.require_string(path + ".content"));
  } else if (type == "Sequence") {
    const Json& list = doc.require(path + ".normalizers");
    if (!list.is_array()) throw Error(doc.origin() + ": " + path + ".normalizers should be an array");
    for (size_t i = 0; i < list.size(); ++i)
      read_normalizer(doc, path + ".normalizers." + std::to_string(i), v);
  } else {
    throw Error(doc.origin() + ": unsupported normalizer type '" + type + "' at " + path +
                " (supported: Replace with a String pattern, Sequence)");
  }
}

void read_pre_tokenizer(const JsonDocument& doc, const std::string& path, HfVocab& v) {
  if (!doc.has(path)) return;
  const std::string type = doc.require_string(path + ".type");
  if (type == "Split") {
    if (doc.get_bool(path + ".invert", false))
      throw Error(doc.origin() + ": " + path + ".invert = true is not supported");
    v.splits.emplace_back(string_pattern(doc, path + ".pattern"), doc.require_string(path + ".behavior"));
  } else if (type == "Sequence") {
    const Json& list = doc.require(path + ".pretokenizers");
    if (!list.is_array()) throw Error(doc.origin() + ": " + path + ".pretokenizers should be an array");
    for (size_t i = 0; i < list.size(); ++i)
      read_pre_tokenizer(doc, path + ".pretokenizers." + std::to_string(i), v);
  } else {
    throw Error(doc.origin() + ": unsupported pre_tokenizer type '" + type + "' at " + path +
                " (supported: Split with a String pattern, Sequence)");
  }
}

}  // namespace

// ------------------------------------------------------------------------------------------------------
// Loaders

HfTokenizer HfTokenizer::from_json(const std::string& path) {
  return from_json_text(read_text_file(path), path);
}

HfTokenizer HfTokenizer::from_json_text(std::string_view text, const std::string& origin) {
  HfVocab v = vocab_from_json_text(text, origin);
  try {
    return from_vocab(std::move(v));
  } catch (const Error& e) {
    throw Error(origin + ": " + e.what());
  }
}

HfVocab HfTokenizer::vocab_from_json(const std::string& path) {
  return vocab_from_json_text(read_text_file(path), path);
}

HfVocab HfTokenizer::vocab_from_json_text(std::string_view text, const std::string& origin) {
  const JsonDocument doc = JsonDocument::parse(text, origin);
  const std::string& where = doc.origin();
  if (!doc.root().is_object())
    throw Error(where + ": should be a JSON object but is " + json_type_name(doc.root()));
  const std::string type = doc.require_string("model.type");
  if (type != "BPE")
    throw Error(where + ": model.type is '" + type +
                "'; only \"BPE\" (SentencePiece-style with byte fallback) is supported");
  if (!doc.get_string("model.continuing_subword_prefix", "").empty() ||
      !doc.get_string("model.end_of_word_suffix", "").empty())
    throw Error(where + ": model.continuing_subword_prefix / end_of_word_suffix are not supported");
  if (doc.get_float("model.dropout", 0.0) != 0.0)
    throw Error(where + ": model.dropout is set; BPE dropout is not supported");

  HfVocab v;
  v.byte_fallback = doc.get_bool("model.byte_fallback", false);
  v.fuse_unknown = doc.get_bool("model.fuse_unk", false);
  v.ignore_merges = doc.get_bool("model.ignore_merges", false);
  const std::string unknown_text = doc.get_string("model.unk_token", "");

  // Ids: model.vocab and added_tokens together must number the tokens 0..n-1.
  const Json& vocab = doc.require("model.vocab");
  if (!vocab.is_object())
    throw Error(where + ": model.vocab should be an object (token -> id) but is " + json_type_name(vocab));
  struct Entry {
    std::string text;
    bool added = false, special = false, normalized = false;
  };
  std::vector<Entry> entries;
  std::vector<bool> filled;
  // Dense ids can never exceed the number of entries that name them, so an id at or past that count is
  // a gap: refused before anything is sized by it (a 6 KB file must not make us allocate gigabytes).
  const Json* added_tokens = doc.find("added_tokens");
  const uint64_t entry_count =
      uint64_t(vocab.size()) + (added_tokens && added_tokens->is_array() ? added_tokens->size() : 0);
  auto place = [&](int64_t id, const std::string& key) -> Entry& {
    if (id < 0 || id >= int64_t(INT32_MAX))
      throw Error(where + ": " + key + " has id " + std::to_string(id) + ", out of range");
    if (uint64_t(id) >= entry_count)
      throw Error(where + ": " + key + " has id " + std::to_string(id) + " but the file names only " +
                  std::to_string(entry_count) + " tokens (ids must be 0.." + std::to_string(entry_count - 1) +
                  " without gaps)");
    if (size_t(id) >= entries.size()) {
      entries.resize(size_t(id) + 1);
      filled.resize(size_t(id) + 1, false);
    }
    return entries[size_t(id)];
  };
  entries.reserve(vocab.size());
  filled.reserve(vocab.size());
  for (const auto& [token, id_value] : vocab.items()) {
    if (!id_value.is_number_integer())
      throw Error(where + ": model.vocab['" + escape(token) + "'] should be an integer id but is " +
                  json_excerpt(id_value));
    const int64_t id = id_value.get<int64_t>();
    if (id < 0 || id >= int64_t(INT32_MAX))
      throw Error(where + ": model.vocab['" + escape(token) + "'] has id " + std::to_string(id) +
                  ", out of range");
    Entry& e = place(id, "model.vocab");
    if (filled[size_t(id)])
      throw Error(where + ": tokens '" + escape(e.text) + "' and '" + escape(token) + "' both have id " +
                  std::to_string(id) + " in model.vocab");
    e.text = token;
    filled[size_t(id)] = true;
  }
  if (const Json* added = added_tokens) {
    if (!added->is_array())
      throw Error(where + ": added_tokens should be an array but is " + json_type_name(*added));
    for (size_t i = 0; i < added->size(); ++i) {
      const std::string key = "added_tokens." + std::to_string(i);
      const int64_t id = doc.require_int(key + ".id");
      const std::string content = doc.require_string(key + ".content");
      const bool special = doc.get_bool(key + ".special", false);
      for (const char* flag : {"lstrip", "rstrip", "single_word"})
        if (doc.get_bool(key + "." + flag, false))
          throw Error(where + ": " + key + " ('" + escape(content) + "') sets " + flag +
                      ", which is not supported");
      Entry& e = place(id, key);
      if (filled[size_t(id)] && e.text != content)
        throw Error(where + ": " + key + " gives id " + std::to_string(id) + " to '" + escape(content) +
                    "' but that id is '" + escape(e.text) + "'");
      if (content.empty()) throw Error(where + ": " + key + " has empty content");
      e.text = content;
      e.added = true;
      e.special = special;
      e.normalized = doc.get_bool(key + ".normalized", !special);
      filled[size_t(id)] = true;
    }
  }
  for (size_t id = 0; id < entries.size(); ++id)
    if (!filled[id])
      throw Error(where + ": no token has id " + std::to_string(id) + " (ids must be 0.." +
                  std::to_string(entries.size() - 1) + " without gaps)");
  if (entries.empty()) throw Error(where + ": model.vocab is empty");

  v.tokens.reserve(entries.size());
  v.kinds.reserve(entries.size());
  v.normalized.reserve(entries.size());
  std::unordered_map<std::string, int32_t> ids;  // first id of each text
  ids.reserve(entries.size());
  for (size_t id = 0; id < entries.size(); ++id) {
    const Entry& e = entries[id];
    uint8_t byte;
    Kind kind = Kind::Normal;
    if (e.added && e.text == unknown_text)
      kind = Kind::Unknown;
    else if (e.added)
      kind = e.special ? Kind::Special : Kind::Added;
    else if (parse_byte_token(e.text, byte))
      kind = Kind::Byte;
    v.tokens.push_back(e.text);
    v.kinds.push_back(kind);
    v.normalized.push_back(e.added && e.normalized);
    ids.emplace(e.text, int32_t(id));
  }
  auto id_of = [&](const std::string& text) -> int32_t {
    const auto it = ids.find(text);
    return it == ids.end() ? -1 : it->second;
  };
  if (!unknown_text.empty()) {
    v.unknown_id = id_of(unknown_text);
    if (v.unknown_id < 0)
      throw Error(where + ": model.unk_token '" + escape(unknown_text) + "' is not in the vocabulary");
  }

  const Json& merges = doc.require("model.merges");
  if (!merges.is_array())
    throw Error(where + ": model.merges should be an array but is " + json_type_name(merges));
  v.merges.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const Json& m = merges[r];
    std::pair<std::string, std::string> parts;
    if (m.is_string()) {
      if (!split_merge(
              m.get<std::string>(), [&](const std::string& t) { return id_of(t) >= 0; }, parts))
        throw Error(where + ": model.merges[" + std::to_string(r) + "] = '" + escape(m.get<std::string>()) +
                    "' is not of the form 'left right'");
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      parts = {m[0].get<std::string>(), m[1].get<std::string>()};
    } else {
      throw Error(where + ": model.merges[" + std::to_string(r) +
                  "] should be \"left right\" or [left, right] but is " + json_excerpt(m));
    }
    v.merges.push_back(std::move(parts));
  }

  read_normalizer(doc, "normalizer", v);
  read_pre_tokenizer(doc, "pre_tokenizer", v);

  // A TemplateProcessing post-processor whose single-sequence template starts with a special token
  // prepends that token (Gemma: <bos>).
  if (doc.get_string("post_processor.type", "") == "TemplateProcessing") {
    if (const Json* single = doc.find("post_processor.single");
        single && single->is_array() && !single->empty()) {
      const Json& first = (*single)[0];
      if (first.is_object() && first.contains("SpecialToken") && first["SpecialToken"].is_object() &&
          first["SpecialToken"].contains("id") && first["SpecialToken"]["id"].is_string()) {
        const std::string bos = first["SpecialToken"]["id"].get<std::string>();
        v.bos_id = id_of(bos);
        if (v.bos_id < 0)
          throw Error(where + ": post_processor.single starts with '" + escape(bos) +
                      "', which is not a token");
        v.add_bos = true;
      }
    }
  }
  if (v.bos_id < 0) v.bos_id = id_of("<bos>");
  v.eos_id = id_of("<eos>");
  v.pad_id = id_of("<pad>");
  return v;
}

HfTokenizer HfTokenizer::from_gguf(const GgufFile& file) {
  HfVocab v = vocab_from_gguf(file);
  try {
    return from_vocab(std::move(v));
  } catch (const Error& e) {
    throw Error("gguf " + file.path() + ": " + e.what());
  }
}

std::string tokenizer_json_path(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string json;
  if (fs::is_directory(path, ec)) {
    json = (fs::path(path) / "tokenizer.json").string();
    check(fs::exists(json, ec), path + ": the directory holds no tokenizer.json");
  } else if (fs::path(path).filename() == "config.json") {
    json = (fs::path(path).parent_path() / "tokenizer.json").string();
    check(fs::exists(json, ec), path + ": there is no tokenizer.json beside it");
  } else if (fs::path(path).extension() == ".json") {
    json = path;
  }
  return json;
}

HfVocab HfTokenizer::vocab_from_file(const std::string& path, int32_t* mask_id) {
  if (mask_id) *mask_id = -1;
  const std::string json = tokenizer_json_path(path);
  if (!json.empty()) return vocab_from_json(json);
  const auto file = GgufFile::open(path);
  if (mask_id) *mask_id = int32_t(file->get_int("tokenizer.ggml.mask_token_id", -1));
  return vocab_from_gguf(*file);
}

HfTokenizer HfTokenizer::from_file(const std::string& path) {
  HfVocab v = vocab_from_file(path);
  try {
    return from_vocab(std::move(v));
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

HfVocab HfTokenizer::vocab_from_gguf(const GgufFile& file) {
  const std::string where = "gguf " + file.path() + ": ";
  const std::string model = file.require_string("tokenizer.ggml.model");
  if (model != "gemma4" && model != "llama")
    throw Error(where + "tokenizer.ggml.model is '" + model +
                "'; HfTokenizer reads \"gemma4\" and \"llama\" (SentencePiece-style BPE)");
  HfVocab v;
  v.tokens = file.get_string_array("tokenizer.ggml.tokens");
  if (v.tokens.empty()) throw Error(where + "tokenizer.ggml.tokens is missing or empty");
  const size_t n = v.tokens.size();
  const std::vector<int64_t> types = file.get_int_array("tokenizer.ggml.token_type");
  if (!types.empty() && types.size() != n)
    throw Error(where + "tokenizer.ggml.token_type has " + std::to_string(types.size()) +
                " entries but tokenizer.ggml.tokens has " + std::to_string(n));
  v.kinds.assign(n, Kind::Normal);
  v.normalized.assign(n, false);
  for (size_t i = 0; i < types.size(); ++i) {
    switch (types[i]) {
      case 0:
      case 1:
      case 5:
        v.kinds[i] = Kind::Normal;
        break;  // undefined, normal, unused
      case 2:
        v.kinds[i] = Kind::Unknown;
        break;
      case 3:
        v.kinds[i] = Kind::Special;
        break;
      case 4:
        v.kinds[i] = Kind::Added;
        v.normalized[i] = true;
        break;
      case 6:
        v.kinds[i] = Kind::Byte;
        break;
      default:
        throw Error(where + "tokenizer.ggml.token_type[" + std::to_string(i) +
                    "] = " + std::to_string(types[i]) + " is not a known token type (0-6)");
    }
  }
  std::unordered_set<std::string> texts(v.tokens.begin(), v.tokens.end());
  const std::vector<std::string> merges = file.get_string_array("tokenizer.ggml.merges");
  if (merges.empty())
    throw Error(where +
                "tokenizer.ggml.merges is missing: merging by scores (SentencePiece BPE without a merge "
                "list) is not supported");
  v.merges.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    std::pair<std::string, std::string> parts;
    if (!split_merge(
            merges[r], [&](const std::string& t) { return texts.count(t) > 0; }, parts))
      throw Error(where + "tokenizer.ggml.merges[" + std::to_string(r) + "] = '" + escape(merges[r]) +
                  "' is not of the form 'left right'");
    v.merges.push_back(std::move(parts));
  }
  auto id = [&](const char* key) -> int32_t {
    const int64_t value = file.get_int(key, -1);
    if (value < -1 || value >= int64_t(n))
      throw Error(where + key + " = " + std::to_string(value) + " is out of range for " + std::to_string(n) +
                  " tokens");
    return int32_t(value);
  };
  v.bos_id = id("tokenizer.ggml.bos_token_id");
  v.eos_id = id("tokenizer.ggml.eos_token_id");
  v.pad_id = id("tokenizer.ggml.padding_token_id");
  v.unknown_id = id("tokenizer.ggml.unknown_token_id");
  if (v.unknown_id < 0)
    for (size_t i = 0; i < n && v.unknown_id < 0; ++i)
      if (v.kinds[i] == Kind::Unknown) v.unknown_id = int32_t(i);
  v.add_bos = file.get_bool("tokenizer.ggml.add_bos_token", false);
  v.replacements = {{" ", kSpaceMarker}};
  v.byte_fallback = true;
  v.fuse_unknown = true;
  return v;
}

// The twin of from_gguf: what it reads back as the same tokenizer (token types as it maps them).
std::string HfTokenizer::gguf_problem(const HfVocab& v) {
  if (v.replacements.size() != 1 || v.replacements[0].first != " " || v.replacements[0].second != kSpaceMarker)
    return "its normalizer is not Gemma's (' ' -> U+2581 and nothing else)";
  for (const auto& [pattern, behavior] : v.splits)
    if (pattern.find(' ') == std::string::npos)
      return "its pre-tokenizer splits on '" + escape(pattern) + "', which the normalized text can hold";
  if (!v.byte_fallback) return "byte_fallback is off";
  if (!v.fuse_unknown) return "fuse_unk is off";
  if (v.ignore_merges) return "ignore_merges is on";
  const size_t n = v.tokens.size();
  if ((!v.kinds.empty() && v.kinds.size() != n) || (!v.normalized.empty() && v.normalized.size() != n))
    return "token kinds or normalized flags do not number the tokens";
  for (size_t i = 0; i < n && !v.kinds.empty(); ++i) {
    const Kind kind = v.kinds[i];
    if (kind == Kind::Normal || kind == Kind::Byte) continue;
    const bool gguf_normalized = kind == Kind::Added;  // from_gguf: user defined in normalized text
    const bool normalized = v.normalized.empty() ? gguf_normalized : bool(v.normalized[i]);
    const std::string& text = v.tokens[i];
    if (normalized != gguf_normalized &&
        (text.find(' ') != std::string::npos || text.find(kSpaceMarker) != std::string::npos))
      return "added token " + std::to_string(i) + " '" + escape(text) + "' is matched in the " +
             (normalized ? "normalized" : "raw") + " text, and GGUF would match it in the " +
             (gguf_normalized ? "normalized" : "raw") + " text";
  }
  std::unordered_set<std::string> texts(v.tokens.begin(), v.tokens.end());
  for (size_t r = 0; r < v.merges.size(); ++r) {
    const auto& [left, right] = v.merges[r];
    std::pair<std::string, std::string> back;
    if (!split_merge(
            left + " " + right, [&](const std::string& t) { return texts.count(t) > 0; }, back) ||
        back.first != left || back.second != right)
      return "merge " + std::to_string(r) + " ('" + escape(left) + "' + '" + escape(right) +
             "') does not read back from the string 'left right'";
  }
  return "";
}

void HfTokenizer::write_gguf(const HfVocab& v, GgufWriter& out) {
  for (auto& [key, value] : gguf_metadata(v)) out.set(key, std::move(value));
}

std::vector<std::pair<std::string, GgufValue>> HfTokenizer::gguf_metadata(const HfVocab& v) {
  from_vocab(v);  // validates (a copy): what is written must load
  const std::string problem = gguf_problem(v);
  check(problem.empty(), "the tokenizer cannot be written as a GGUF \"gemma4\" tokenizer: " + problem);
  std::vector<int64_t> types;
  types.reserve(v.tokens.size());
  for (Kind kind : v.kinds.empty() ? std::vector<Kind>(v.tokens.size(), Kind::Normal) : v.kinds) {
    switch (kind) {
      case Kind::Normal:
        types.push_back(1);
        break;
      case Kind::Unknown:
        types.push_back(2);
        break;
      case Kind::Special:
        types.push_back(3);
        break;
      case Kind::Added:
        types.push_back(4);
        break;
      case Kind::Byte:
        types.push_back(6);
        break;
    }
  }
  std::vector<std::string> merges;
  merges.reserve(v.merges.size());
  for (const auto& [left, right] : v.merges) merges.push_back(left + " " + right);
  std::vector<std::pair<std::string, GgufValue>> out;
  out.emplace_back("tokenizer.ggml.model", GgufValue::string("gemma4"));
  out.emplace_back("tokenizer.ggml.tokens", GgufValue::string_array(v.tokens));
  out.emplace_back("tokenizer.ggml.token_type", GgufValue::int_array(GgufType::Int32, std::move(types)));
  out.emplace_back("tokenizer.ggml.merges", GgufValue::string_array(std::move(merges)));
  out.emplace_back("tokenizer.ggml.scores", GgufValue::float_array(std::vector<float>(v.tokens.size(), 0.f)));
  for (const auto& [key, id] : {std::pair<const char*, int32_t>{"tokenizer.ggml.bos_token_id", v.bos_id},
                                {"tokenizer.ggml.eos_token_id", v.eos_id},
                                {"tokenizer.ggml.padding_token_id", v.pad_id},
                                {"tokenizer.ggml.unknown_token_id", v.unknown_id}})
    if (id >= 0) out.emplace_back(key, GgufValue::u32(uint32_t(id)));
  out.emplace_back("tokenizer.ggml.add_bos_token", GgufValue::boolean(v.add_bos));
  return out;
}

HfTokenizer HfTokenizer::from_vocab(HfVocab v) {
  const size_t n = v.tokens.size();
  check(n > 0, "the vocabulary is empty");
  check(n <= size_t(INT32_MAX), "the vocabulary has too many tokens");
  if (v.kinds.empty()) v.kinds.assign(n, Kind::Normal);
  check(v.kinds.size() == n,
        "token kinds: " + std::to_string(v.kinds.size()) + " entries for " + std::to_string(n) + " tokens");
  if (v.normalized.empty())
    for (Kind k : v.kinds) v.normalized.push_back(k == Kind::Added);
  check(v.normalized.size() == n, "normalized flags: " + std::to_string(v.normalized.size()) +
                                      " entries for " + std::to_string(n) + " tokens");
  for (const auto& [name, id] : {std::pair<const char*, int32_t>{"unknown", v.unknown_id},
                                 {"bos", v.bos_id},
                                 {"eos", v.eos_id},
                                 {"pad", v.pad_id}})
    check(id >= -1 && int64_t(id) < int64_t(n), std::string(name) + " id " + std::to_string(id) +
                                                    " is out of range for " + std::to_string(n) + " tokens");
  for (const auto& [pattern, content] : v.replacements)
    check(!pattern.empty(), "a normalizer replacement has an empty pattern");
  for (const auto& [pattern, behavior] : v.splits) {
    check(!pattern.empty(), "a pre-tokenizer split has an empty pattern");
    check(std::find(std::begin(kBehaviors), std::end(kBehaviors), behavior) != std::end(kBehaviors),
          "pre-tokenizer split behavior '" + behavior +
              "' is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
  }

  HfTokenizer t;
  t.tokens_ = std::move(v.tokens);
  t.kinds_ = std::move(v.kinds);
  t.replacements_ = std::move(v.replacements);
  t.splits_ = std::move(v.splits);
  t.byte_fallback_ = v.byte_fallback;
  t.fuse_unknown_ = v.fuse_unknown;
  t.ignore_merges_ = v.ignore_merges;
  t.unknown_id_ = v.unknown_id;
  t.bos_id_ = v.bos_id;
  t.eos_id_ = v.eos_id;
  t.pad_id_ = v.pad_id;
  t.add_bos_ = v.add_bos;
  t.byte_token_.fill(-1);
  t.ascii_token_.fill(-1);

  t.token_to_id_.reserve(n);
  t.pieces_.resize(n);
  std::vector<int32_t> raw_added, normalized_added;
  for (size_t i = 0; i < n; ++i) {
    const std::string& text = t.tokens_[i];
    const int32_t id = int32_t(i);
    t.token_to_id_.emplace(text, id);  // the lowest id of a repeated text
    t.token_pairs_.add(text);
    switch (t.kinds_[i]) {
      case Kind::Byte: {
        uint8_t byte;
        check(parse_byte_token(text, byte), "token " + std::to_string(i) + " '" + escape(text) +
                                                "' is marked as a byte token but is not of the form <0xNN>");
        t.pieces_[i] = std::string(1, char(byte));
        if (t.byte_token_[byte] < 0) t.byte_token_[byte] = id;
        break;
      }
      case Kind::Special:
      case Kind::Unknown:
      case Kind::Added: {
        std::string piece = text;
        if (t.kinds_[i] == Kind::Added)
          for (auto r = t.replacements_.rbegin(); r != t.replacements_.rend(); ++r)
            piece = replace_all(piece, r->second, r->first);
        t.pieces_[i] = std::move(piece);
        if (!text.empty()) (v.normalized[i] ? normalized_added : raw_added).push_back(id);
        break;
      }
      case Kind::Normal: {
        std::string piece = text;
        for (auto r = t.replacements_.rbegin(); r != t.replacements_.rend(); ++r)
          piece = replace_all(piece, r->second, r->first);
        t.pieces_[i] = std::move(piece);
        break;
      }
    }
  }
  for (int c = 0; c < 128; ++c) {
    const auto it = t.token_to_id_.find(std::string(1, char(c)));
    if (it != t.token_to_id_.end()) t.ascii_token_[c] = it->second;
  }
  auto build_matcher = [&](std::vector<int32_t>& ids, Matcher& m) {
    std::stable_sort(ids.begin(), ids.end(),
                     [&](int32_t a, int32_t b) { return t.tokens_[a].size() > t.tokens_[b].size(); });
    for (int32_t id : ids) m.by_first_byte[uint8_t(t.tokens_[id][0])].push_back(id);
    m.empty = ids.empty();
  };
  build_matcher(raw_added, t.raw_added_);
  build_matcher(normalized_added, t.normalized_added_);

  t.merges_.reserve(v.merges.size());
  for (size_t r = 0; r < v.merges.size(); ++r) {
    // Plain references, not a structured binding: clang 14 cannot capture bindings in a lambda.
    const std::string& left = v.merges[r].first;
    const std::string& right = v.merges[r].second;
    auto need = [&](const std::string& text) -> int32_t {
      const auto it = t.token_to_id_.find(text);
      check(it != t.token_to_id_.end(), "merge " + std::to_string(r) + " ('" + escape(left) + "' + '" +
                                            escape(right) + "'): '" + escape(text) +
                                            "' is not in the vocabulary");
      return it->second;
    };
    const int32_t l = need(left), rt = need(right), result = need(left + right);
    t.merges_.add(l, rt, int32_t(r), result);  // a repeated pair keeps its first rank
  }
  return t;
}

// ------------------------------------------------------------------------------------------------------
// Encoding

template <class OnText, class OnToken>
void HfTokenizer::split_added(std::string_view text, const Matcher& matcher, OnText on_text,
                              OnToken on_token) const {
  split_at_literals(text, matcher.by_first_byte, tokens_, on_text, on_token);
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 2);
  if (add_bos && bos_id_ >= 0) ids.push_back(bos_id_);
  if (parse_special && !raw_added_.empty) {
    split_added(
        text, raw_added_, [&](std::string_view span) { encode_raw_span(span, true, ids); },
        [&](int32_t id) { ids.push_back(id); });
  } else {
    encode_raw_span(text, parse_special, ids);
  }
  return ids;
}

void HfTokenizer::encode_raw_span(std::string_view span, bool parse_special,
                                  std::vector<int32_t>& out) const {
  if (span.empty()) return;
  std::string normalized(span);
  for (const auto& [pattern, content] : replacements_) normalized = replace_all(normalized, pattern, content);
  if (parse_special && !normalized_added_.empty) {
    split_added(
        normalized, normalized_added_, [&](std::string_view s) { encode_normalized_span(s, out); },
        [&](int32_t id) { out.push_back(id); });
  } else {
    encode_normalized_span(normalized, out);
  }
}

void HfTokenizer::encode_normalized_span(std::string_view span, std::vector<int32_t>& out) const {
  if (splits_.empty()) {
    encode_long_word(span, out);
    return;
  }
  std::vector<std::string_view> words{span}, next;
  for (const auto& [pattern, behavior] : splits_) {
    next.clear();
    auto emit = [&](std::string_view w) {
      if (!w.empty()) next.push_back(w);
    };
    for (std::string_view w : words) {
      size_t cursor = 0, pos = 0;                 // cursor: end of what has been emitted or held
      size_t run_begin = std::string_view::npos;  // Contiguous: start of the held run of matches
      while ((pos = w.find(pattern, pos)) != std::string_view::npos) {
        const size_t end = pos + pattern.size();
        if (behavior == "Removed") {
          emit(w.substr(cursor, pos - cursor));
        } else if (behavior == "Isolated") {
          emit(w.substr(cursor, pos - cursor));
          emit(w.substr(pos, pattern.size()));
        } else if (behavior == "MergedWithPrevious") {
          emit(w.substr(cursor, end - cursor));
        } else if (behavior == "MergedWithNext") {
          emit(w.substr(cursor, pos - cursor));
          cursor = pos;
          pos = end;
          continue;  // the match starts the next piece
        } else if (run_begin != std::string_view::npos && pos == cursor) {
          // Contiguous: a match right after the held run extends it.
        } else {
          if (run_begin != std::string_view::npos) emit(w.substr(run_begin, cursor - run_begin));
          emit(w.substr(cursor, pos - cursor));
          run_begin = pos;
        }
        cursor = end;
        pos = end;
      }
      if (run_begin != std::string_view::npos) emit(w.substr(run_begin, cursor - run_begin));
      emit(w.substr(cursor));
    }
    words.swap(next);
  }
  for (std::string_view w : words) encode_long_word(w, out);
}

void HfTokenizer::encode_long_word(std::string_view word, std::vector<int32_t>& out) const {
  // Both characters at a cut must be tokens themselves: one spelled in byte tokens could merge in ways its
  // text does not show.
  auto both_tokens = [&](size_t i) {
    size_t before = i - 1;
    while (before > 0 && (uint8_t(word[before]) & 0xC0) == 0x80) --before;
    return char_id(word.substr(before, i - before)) >= 0 && char_id(word.substr(i, utf8_length(word, i))) >= 0;
  };
  encode_in_pieces(
      word, piece_bytes_, [&](size_t from) { return token_pairs_.cut(word, from, both_tokens); },
      [&](std::string_view piece, bool whole) { encode_word(piece, out, whole); });
}

int32_t HfTokenizer::char_id(std::string_view ch) const {
  if (ch.size() == 1 && uint8_t(ch[0]) < 0x80) return ascii_token_[uint8_t(ch[0])];
  const auto it = token_to_id_.find(std::string(ch));  // at most 4 bytes: no allocation (SSO)
  return it == token_to_id_.end() ? -1 : it->second;
}

void HfTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out, bool whole_word_lookup) const {
  if (word.empty()) return;
  if (ignore_merges_ && whole_word_lookup) {
    const auto it = token_to_id_.find(std::string(word));
    if (it != token_to_id_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  // Initial symbols: one per UTF-8 character that is a token; a character that is not becomes its
  // byte tokens (byte fallback) or the unknown token.
  std::vector<int32_t> sym;
  sym.reserve(word.size());
  bool last_unknown = false;
  for (size_t i = 0; i < word.size();) {
    const size_t len = utf8_length(word, i);
    const std::string_view ch = word.substr(i, len);
    i += len;
    const int32_t id = char_id(ch);
    if (id >= 0) {
      sym.push_back(id);
      last_unknown = false;
      continue;
    }
    bool all_bytes = byte_fallback_;
    for (size_t k = 0; all_bytes && k < ch.size(); ++k) all_bytes = byte_token_[uint8_t(ch[k])] >= 0;
    if (all_bytes) {
      for (char c : ch) sym.push_back(byte_token_[uint8_t(c)]);
      last_unknown = false;
      continue;
    }
    if (unknown_id_ < 0) {
      std::string hex;
      for (char c : ch) {
        static const char* digits = "0123456789ABCDEF";
        hex += std::string(hex.empty() ? "" : " ") + digits[uint8_t(c) >> 4] + digits[uint8_t(c) & 15];
      }
      throw Error("cannot encode the character with bytes " + hex +
                  ": it is not in the vocabulary, and there is neither a byte fallback token for it nor an "
                  "unknown token");
    }
    if (!(fuse_unknown_ && last_unknown)) sym.push_back(unknown_id_);
    last_unknown = true;
  }

  for (int32_t i : merges_.apply(sym)) out.push_back(sym[size_t(i)]);
}

// ------------------------------------------------------------------------------------------------------
// Decoding and queries

std::string HfTokenizer::decode(const std::vector<int32_t>& ids, bool render_special) const {
  std::string out;
  for (int32_t id : ids) {
    check(id >= 0 && id < vocab_size(), "cannot decode token id " + std::to_string(id) +
                                            ": out of range for a vocabulary of " +
                                            std::to_string(vocab_size()) + " tokens");
    if (!render_special && is_special(id)) continue;
    out += pieces_[size_t(id)];
  }
  return out;
}

std::string HfTokenizer::token_piece(int32_t id) const {
  check(id >= 0 && id < vocab_size(), "token id " + std::to_string(id) +
                                          " is out of range for a vocabulary of " +
                                          std::to_string(vocab_size()) + " tokens");
  return pieces_[size_t(id)];
}

const std::string& HfTokenizer::token_text(int32_t id) const {
  check(id >= 0 && id < vocab_size(), "token id " + std::to_string(id) +
                                          " is out of range for a vocabulary of " +
                                          std::to_string(vocab_size()) + " tokens");
  return tokens_[size_t(id)];
}

int32_t HfTokenizer::token_id(std::string_view text) const {
  const auto it = token_to_id_.find(std::string(text));
  return it == token_to_id_.end() ? -1 : it->second;
}

HfVocab::Kind HfTokenizer::kind(int32_t id) const {
  check(id >= 0 && id < vocab_size(), "token id " + std::to_string(id) +
                                          " is out of range for a vocabulary of " +
                                          std::to_string(vocab_size()) + " tokens");
  return kinds_[size_t(id)];
}

bool HfTokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() &&
         (kinds_[size_t(id)] == Kind::Special || kinds_[size_t(id)] == Kind::Unknown);
}

}  // namespace canvas
