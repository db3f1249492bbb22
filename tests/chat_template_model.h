// A test model whose GGUF carries a chat template of the test's choosing.
#pragma once
#include <string>
#include <vector>

#include "io/gguf.h"
#include "test_util.h"

namespace canvas::test {

// A copy of tiny-dream.gguf (in `dir`, as `name`) whose tokenizer.chat_template is `jinja`.
inline std::string with_chat_template(const TempDir& dir, const std::string& name, const std::string& jinja) {
  const std::string path = dir.path(name);
  auto file = GgufFile::open(fixture("tiny-dream.gguf"));
  GgufWriter writer;
  for (const auto& [key, value] : file->metadata()) writer.set(key, value);
  writer.set("tokenizer.chat_template", GgufValue::string(jinja));
  for (const TensorView& t : file->tensors())
    writer.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims), t.data,
                      uint64_t(t.bytes()));
  writer.write(path);
  return path;
}

}  // namespace canvas::test
