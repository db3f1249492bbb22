// The tokenizer picker and the common interface over Tokenizer, HfTokenizer and SpmTokenizer.
#include "io/text_tokenizer.h"

#include "core/error.h"
#include "io/bpe_json.h"
#include "io/gguf.h"
#include "io/hf_tokenizer.h"
#include "io/spm_tokenizer.h"
#include "io/tokenizer.h"

namespace canvas {

struct TextTokenizer::Impl {
  virtual ~Impl() = default;
  virtual std::vector<int32_t> encode(const std::string& text, bool add_bos, bool parse_special) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids, bool render_special) const = 0;
  virtual std::string piece(int32_t id) const = 0;
  virtual int64_t size() const = 0;
  virtual int32_t bos() const = 0;
  virtual bool wants_bos() const = 0;
};

namespace {

template <class T>
struct Wrapped final : TextTokenizer::Impl {
  explicit Wrapped(T t) : t(std::move(t)) {}
  std::vector<int32_t> encode(const std::string& text, bool add_bos, bool parse_special) const override {
    return t.encode(text, add_bos, parse_special);
  }
  std::string decode(const std::vector<int32_t>& ids, bool render_special) const override {
    return t.decode(ids, render_special);
  }
  std::string piece(int32_t id) const override {
    if (id < 0 || id >= t.vocab_size()) return "<" + std::to_string(id) + ">";
    return t.token_piece(id);
  }
  int64_t size() const override { return t.vocab_size(); }
  int32_t bos() const override { return t.bos_id(); }
  bool wants_bos() const override {
    if constexpr (requires { t.add_bos(); }) {
      return t.add_bos();
    } else {
      return t.bos_id() >= 0;
    }
  }
  T t;
};

template <class T>
std::shared_ptr<const TextTokenizer::Impl> wrap(T t) {
  return std::make_shared<const Wrapped<T>>(std::move(t));
}

}  // namespace

TextTokenizer TextTokenizer::from_gguf(const GgufFile& file) {
  const std::string kind = file.get_string("tokenizer.ggml.model", "");
  check(!kind.empty(), file.path() + " holds no tokenizer (no tokenizer.ggml.model; e.g. converted from a checkpoint "
                                     "without a usable tokenizer.json): give --tokenizer PATH/tokenizer.json");
  TextTokenizer t;
  if (kind == "gpt2") {
    t.impl_ = wrap(Tokenizer::from_gguf(file));
  } else if (SpmTokenizer::describes(file)) {
    t.impl_ = wrap(SpmTokenizer::from_gguf(file));
  } else if (kind == "gemma4" || kind == "llama") {
    t.impl_ = wrap(HfTokenizer::from_gguf(file));
  } else {
    t.impl_ = wrap(Tokenizer::from_gguf(file));
  }
  t.origin_ = file.path();
  return t;
}

TextTokenizer TextTokenizer::from_json(const std::string& path, const SpecialTokenIds& special) {
  TextTokenizer t;
  if (is_byte_level_tokenizer_json(path)) {
    t.impl_ = wrap(bpe_tokenizer_from_json(path, special.bos, special.eos, special.pad, special.mask));
  } else {
    t.impl_ = wrap(HfTokenizer::from_json(path));
  }
  t.origin_ = path;
  return t;
}

TextTokenizer TextTokenizer::open(const std::string& path, const SpecialTokenIds& special) {
  const std::string json = tokenizer_json_path(path);
  if (!json.empty()) return from_json(json, special);
  return from_gguf(*GgufFile::open(path));
}

std::vector<int32_t> TextTokenizer::encode(const std::string& text, bool add_bos, bool parse_special) const {
  return impl_->encode(text, add_bos, parse_special);
}
std::string TextTokenizer::decode(const std::vector<int32_t>& ids) const { return impl_->decode(ids, false); }
std::string TextTokenizer::decode_with_special(const std::vector<int32_t>& ids) const {
  return impl_->decode(ids, true);
}
std::string TextTokenizer::token_piece(int32_t id) const { return impl_->piece(id); }
int64_t TextTokenizer::vocab_size() const { return impl_->size(); }
int32_t TextTokenizer::bos_id() const { return impl_->bos(); }
bool TextTokenizer::wants_bos() const { return impl_->wants_bos(); }

}  // namespace canvas
