// Byte-level BPE tokenizer.json <-> the GGUF "gpt2" tokenizer arrays.
#include "io/bpe_json.h"

#include <map>

#include "core/error.h"
#include "io/gguf.h"
#include "io/json.h"
#include "io/tokenizer.h"

namespace canvas {
namespace {

using Json = nlohmann::json;

// The pre-tokenizer regexes of tokenizer.json files, as stored (backslashes literal), and the
// tokenizer.ggml.pre names whose hand-written rules (io/tokenizer.h) match them.
constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// j[key] when it is a string (else `fallback`); never throws, whatever the file holds.
std::string string_or(const Json& j, const char* key, const std::string& fallback) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : fallback;
}
bool bool_or(const Json& j, const char* key, bool fallback) {
  return j.is_object() && j.contains(key) && j[key].is_boolean() ? j[key].get<bool>() : fallback;
}

bool is_type(const Json& j, const char* type) {
  return j.is_object() && j.contains("type") && j["type"].is_string() && j["type"].get<std::string>() == type;
}

bool mentions_byte_level(const Json& j) {
  if (is_type(j, "ByteLevel")) return true;
  if (is_type(j, "Sequence"))
    for (const char* list : {"pretokenizers", "decoders"})
      if (j.contains(list) && j[list].is_array())
        for (const Json& item : j[list])
          if (is_type(item, "ByteLevel")) return true;
  return false;
}

// The pre name for a tokenizer.json pre_tokenizer section; throws naming the file for one canvas has no rules for.
std::string pre_name_of(const Json& pre, bool ignore_merges, const std::string& path) {
  if (is_type(pre, "ByteLevel")) {
    check(!pre.contains("use_regex") || !pre["use_regex"].is_boolean() || pre["use_regex"].get<bool>(),
          path + ": pre_tokenizer ByteLevel without use_regex would not split words; not supported");
    return "gpt2";
  }
  check(is_type(pre, "Sequence") && pre.contains("pretokenizers") && pre["pretokenizers"].is_array() &&
            pre["pretokenizers"].size() == 2,
        path + ": pre_tokenizer must be ByteLevel or a Sequence of a Split and a ByteLevel, is " + json_excerpt(pre));
  const Json& split = pre["pretokenizers"][0];
  const Json& bytes = pre["pretokenizers"][1];
  check(is_type(split, "Split") && split.contains("pattern") && split["pattern"].is_object() &&
            split["pattern"].contains("Regex") && split["pattern"]["Regex"].is_string(),
        path + ": pre_tokenizer.pretokenizers.0 must be a Split with a Regex pattern, is " + json_excerpt(split));
  check(is_type(bytes, "ByteLevel") && (!bytes.contains("use_regex") || !bytes["use_regex"].is_boolean() ||
                                        !bytes["use_regex"].get<bool>()),
        path + ": pre_tokenizer.pretokenizers.1 must be a ByteLevel with use_regex false, is " + json_excerpt(bytes));
  const std::string behavior = string_or(split, "behavior", "");
  check(behavior == "Isolated" && !bool_or(split, "invert", false),
        path + ": pre_tokenizer Split must have behavior Isolated and invert false");
  const std::string regex = split["pattern"]["Regex"].get<std::string>();
  if (regex == kLlama3Regex) return ignore_merges ? "llama-bpe" : "smaug-bpe";
  if (regex == kQwen2Regex) return "qwen2";
  throw Error(path + ": pre_tokenizer regex " + json_excerpt(Json(regex), 200) +
              " is not one canvas implements (GPT-2's, Llama 3's or Qwen2's)");
}

std::string merge_text(const Json& m, const std::string& path) {
  if (m.is_string()) return m.get<std::string>();
  check(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
        path + ": model.merges entries must be \"left right\" or [left, right], found " + json_excerpt(m));
  return m[0].get<std::string>() + " " + m[1].get<std::string>();
}

}  // namespace

bool is_byte_level_tokenizer_json(const std::string& path) {
  const Json root = load_json_file(path);
  if (!root.is_object()) return false;
  for (const char* section : {"pre_tokenizer", "decoder"})
    if (root.contains(section) && mentions_byte_level(root[section])) return true;
  return false;
}

BpeVocab bpe_vocab_from_json(const std::string& path, int64_t min_size) {
  const JsonDocument doc = JsonDocument::load(path);
  const Json& root = doc.root();
  check(root.is_object(), path + ": a tokenizer.json must be a JSON object");
  const Json* model = doc.find("model");
  check(model && model->is_object(), path + ": missing key model");
  check(doc.get_string("model.type", "BPE") == "BPE",
        path + ": model.type is '" + doc.get_string("model.type", "") + "'; only BPE is read");
  check(doc.get_string("model.continuing_subword_prefix", "").empty() && doc.get_string("model.end_of_word_suffix", "").empty(),
        path + ": model.continuing_subword_prefix / end_of_word_suffix are not supported");
  check(!doc.get_bool("model.byte_fallback", false), path + ": model.byte_fallback is not byte-level BPE");
  const Json* normalizer = doc.find("normalizer");
  check(!normalizer || is_type(*normalizer, "NFC"),
        path + ": normalizer " + (normalizer ? json_excerpt(*normalizer) : "") + " is not supported (null or NFC)");
  const Json* pre = doc.find("pre_tokenizer");
  check(pre != nullptr, path + ": missing key pre_tokenizer (a byte-level tokenizer needs one)");

  BpeVocab v;
  v.pre = pre_name_of(*pre, doc.get_bool("model.ignore_merges", false), path);
  std::map<int64_t, std::pair<std::string, int32_t>> by_id;  // id -> (text, type)
  const Json* vocab = doc.find("model.vocab");
  check(vocab && vocab->is_object(), path + ": model.vocab must be an object of token -> id");
  for (const auto& [text, id] : vocab->items()) {
    check(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < (int64_t(1) << 31),
          path + ": model.vocab entry '" + text + "' has an invalid id " + json_excerpt(id));
    check(by_id.emplace(id.get<int64_t>(), std::make_pair(text, 1)).second,
          path + ": model.vocab id " + std::to_string(id.get<int64_t>()) + " is used twice");
  }
  if (const Json* added = doc.find("added_tokens")) {
    check(added->is_array(), path + ": added_tokens must be an array");
    for (const Json& t : *added) {
      check(t.is_object() && t.contains("id") && t["id"].is_number_integer() && t.contains("content") &&
                t["content"].is_string(),
            path + ": added_tokens entry " + json_excerpt(t) + " needs an integer id and a string content");
      const int64_t id = t["id"].get<int64_t>();
      check(id >= 0 && id < (int64_t(1) << 31), path + ": added_tokens id " + std::to_string(id) + " is invalid");
      const std::string text = t["content"].get<std::string>();
      const int32_t type = bool_or(t, "special", false) ? 3 : 4;
      auto it = by_id.find(id);
      check(it == by_id.end() || it->second.first == text,
            path + ": added token " + std::to_string(id) + " '" + text + "' disagrees with model.vocab ('" +
                (it == by_id.end() ? "" : it->second.first) + "')");
      by_id[id] = {text, type};
    }
  }
  check(!by_id.empty(), path + ": the vocabulary is empty");
  // Ids are dense: the highest is below the number of distinct ids named, so nothing is sized by an id a
  // small file merely claims (one added token with id 5e8 must not allocate 5e8 strings).
  check(by_id.rbegin()->first < int64_t(by_id.size()),
        path + ": token id " + std::to_string(by_id.rbegin()->first) + " but the file names only " +
            std::to_string(by_id.size()) + " tokens (ids must be 0.." + std::to_string(by_id.size() - 1) +
            " without gaps)");
  const int64_t size = std::max<int64_t>(by_id.rbegin()->first + 1, min_size);
  v.tokens.resize(size_t(size));
  v.token_types.assign(size_t(size), 5);
  for (int64_t id = 0; id < size; ++id) v.tokens[size_t(id)] = "[PAD" + std::to_string(id) + "]";
  for (const auto& [id, entry] : by_id) {
    v.tokens[size_t(id)] = entry.first;
    v.token_types[size_t(id)] = entry.second;
  }
  const Json* merges = doc.find("model.merges");
  check(merges && merges->is_array(), path + ": model.merges must be an array");
  v.merges.reserve(merges->size());
  for (const Json& m : *merges) v.merges.push_back(merge_text(m, path));
  // A TemplateProcessing post-processor whose single template starts with a special token adds BOS.
  if (const Json* post = doc.find("post_processor"); post && is_type(*post, "TemplateProcessing"))
    if (post->contains("single") && (*post)["single"].is_array() && !(*post)["single"].empty())
      v.add_bos = (*post)["single"][0].contains("SpecialToken");
  return v;
}

Tokenizer bpe_tokenizer_from_json(const std::string& path, int32_t bos, int32_t eos, int32_t pad, int32_t mask) {
  BpeVocab v = bpe_vocab_from_json(path);
  if (mask < 0)
    for (size_t i = 0; i < v.tokens.size(); ++i)
      if (v.tokens[i] == "<|mdm_mask|>" && v.token_types[i] == 3) mask = int32_t(i);
  const int64_t n = int64_t(v.tokens.size());
  auto in_range = [n](int32_t id) { return id < n ? id : -1; };  // a config id past the tokenizer's tokens
  std::vector<int32_t> types = v.token_types;
  try {
    return Tokenizer::from_vocab("gpt2", v.pre, std::move(v.tokens), std::move(types), std::move(v.merges),
                                 in_range(bos), in_range(eos), in_range(pad), in_range(mask), v.add_bos);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

std::string bpe_json_from_gguf(const GgufFile& file) {
  const std::string model = file.get_string("tokenizer.ggml.model", "");
  check(model == "gpt2", file.path() + ": tokenizer.ggml.model is '" + model +
                             "'; only byte-level BPE (gpt2) vocabularies are written as this tokenizer.json");
  const std::string pre = file.get_string("tokenizer.ggml.pre", "gpt2");
  const std::vector<std::string> tokens = file.get_string_array("tokenizer.ggml.tokens");
  std::vector<int64_t> types = file.find("tokenizer.ggml.token_type") ? file.get_int_array("tokenizer.ggml.token_type")
                                                                      : std::vector<int64_t>();
  if (types.empty()) types.assign(tokens.size(), 1);
  check(types.size() == tokens.size(), file.path() + ": tokenizer.ggml.token_type has " + std::to_string(types.size()) +
                                           " entries for " + std::to_string(tokens.size()) + " tokens");
  const std::vector<std::string> merges = file.find("tokenizer.ggml.merges")
                                              ? file.get_string_array("tokenizer.ggml.merges")
                                              : std::vector<std::string>();

  Json pre_tokenizer;
  bool ignore_merges = false;
  if (pre == "gpt2" || pre == "gpt-2" || pre == "default" || pre == "olmo") {
    pre_tokenizer = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  } else {
    const char* regex = nullptr;
    if (pre == "llama3" || pre == "llama-bpe" || pre == "llama-v3") {
      regex = kLlama3Regex;
      ignore_merges = true;
    } else if (pre == "dbrx" || pre == "smaug-bpe" || pre == "llada" || pre == "llada-moe") {
      regex = kLlama3Regex;
    } else if (pre == "qwen2" || pre == "dream" || pre == "deepseek-r1-qwen") {
      regex = kQwen2Regex;
    }
    check(regex != nullptr, file.path() + ": tokenizer.ggml.pre '" + pre + "' has no regex canvas can write");
    pre_tokenizer = {{"type", "Sequence"},
                     {"pretokenizers",
                      Json::array({{{"type", "Split"},
                                    {"pattern", {{"Regex", regex}}},
                                    {"behavior", "Isolated"},
                                    {"invert", false}},
                                   {{"type", "ByteLevel"},
                                    {"add_prefix_space", false},
                                    {"trim_offsets", false},
                                    {"use_regex", false}}})}};
  }
  Json vocab = Json::object();
  Json added = Json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int64_t type = types[i];
    if (type == 5) continue;  // unused padding: no text of its own
    if (type == 3 || type == 4)
      added.push_back({{"id", i},
                       {"content", tokens[i]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", type == 3}});
    vocab[tokens[i]] = i;
  }
  Json merge_list = Json::array();
  for (const std::string& m : merges) merge_list.push_back(m);
  const Json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  Json root = {{"version", "1.0"},
               {"truncation", nullptr},
               {"padding", nullptr},
               {"added_tokens", added},
               {"normalizer", nullptr},
               {"pre_tokenizer", pre_tokenizer},
               {"post_processor", byte_level},
               {"decoder", byte_level},
               {"model",
                {{"type", "BPE"},
                 {"dropout", nullptr},
                 {"unk_token", nullptr},
                 {"continuing_subword_prefix", ""},
                 {"end_of_word_suffix", ""},
                 {"fuse_unk", false},
                 {"byte_fallback", false},
                 {"ignore_merges", ignore_merges},
                 {"vocab", vocab},
                 {"merges", merge_list}}}};
  if (file.get_bool("tokenizer.ggml.add_bos_token", false)) {
    const int64_t bos = file.get_int("tokenizer.ggml.bos_token_id", -1);
    check(bos >= 0 && bos < int64_t(tokens.size()),
          file.path() + ": tokenizer.ggml.add_bos_token is set but there is no valid bos_token_id");
    const std::string b = tokens[size_t(bos)];
    root["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single", Json::array({{{"SpecialToken", {{"id", b}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"pair", Json::array({{{"SpecialToken", {{"id", b}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                              {{"SpecialToken", {{"id", b}, {"type_id", 1}}}},
                              {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
        {"special_tokens", {{b, {{"id", b}, {"ids", Json::array({bos})}, {"tokens", Json::array({b})}}}}}};
  }
  try {
    return root.dump(1) + "\n";
  } catch (const nlohmann::json::exception& e) {  // a token that is not valid UTF-8
    throw Error(file.path() + ": tokenizer.ggml.tokens cannot be written as tokenizer.json: " + e.what());
  }
}

}  // namespace canvas
