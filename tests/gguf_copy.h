// Test models as copies of a GGUF with metadata keys of the test's choosing (a chat template, bad values).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "io/gguf.h"
#include "test_util.h"

namespace canvas::test {

// A copy of the GGUF `source` (in `dir`, as `name`) with `keys` set (added or replaced) and the keys starting
// with `drop_prefix` (when not empty) left out.
inline std::string gguf_with_keys(const TempDir& dir, const std::string& name, const std::string& source,
                                  const std::vector<std::pair<std::string, GgufValue>>& keys,
                                  const std::string& drop_prefix = "") {
  const std::string path = dir.path(name);
  auto file = GgufFile::open(source);
  GgufWriter writer;
  for (const auto& [key, value] : file->metadata())
    if (drop_prefix.empty() || key.rfind(drop_prefix, 0) != 0) writer.set(key, value);
  for (const auto& [key, value] : keys) writer.set(key, value);
  for (const TensorView& t : file->tensors())
    writer.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims), t.data,
                      uint64_t(t.bytes()));
  writer.write(path);
  return path;
}

// A copy of models/text-ar.gguf as a pretrained release would be (no training.* keys: canvas did not train
// it), with `keys` set.
inline std::string pretrained_ar_model(const TempDir& dir, const std::string& name,
                                       const std::vector<std::pair<std::string, GgufValue>>& keys = {}) {
  return gguf_with_keys(dir, name, source_path("models/text-ar.gguf"), keys, "training.");
}

// A copy of tiny-dream.gguf whose tokenizer.chat_template is `jinja`.
inline std::string with_chat_template(const TempDir& dir, const std::string& name, const std::string& jinja) {
  return gguf_with_keys(dir, name, fixture("tiny-dream.gguf"), {{"tokenizer.chat_template", GgufValue::string(jinja)}});
}

}  // namespace canvas::test
