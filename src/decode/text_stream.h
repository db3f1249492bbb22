// Generated tokens to text as they become final: the text ends before the first stop id and the first stop
// string, and what might still turn into a stop string (an end that begins one) or is an unfinished UTF-8
// character is held back, with the rest of the token it cuts: pieces end on whole tokens where the text
// allows, never inside a character.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "io/text_tokenizer.h"

namespace canvas {

class TextStream {
 public:
  // sink receives each new piece of final text (may be empty: nothing is sent). Throws Error for an
  // empty stop string.
  // special_text: special tokens' text is written out (TextTokenizer::decode_with_special).
  TextStream(const TextTokenizer* tokenizer, std::vector<int32_t> stop_ids, std::vector<std::string> stop_strings,
             std::function<void(const std::string&)> sink = {}, bool special_text = false);
  // The finished prefix of the generated tokens (it only grows).
  void update(const std::vector<int32_t>& final_prefix);
  // All generated tokens: returns the whole text and sends what was not sent yet.
  std::string finish(const std::vector<int32_t>& tokens);
  bool stop_string_seen() const { return stop_string_seen_; }
  bool stop_id_seen() const { return stop_id_seen_; }
  const std::string& sent() const { return sent_; }

 private:
  // The text of the tokens before the first stop id, cut at the first stop string; `shown` (when given) gets
  // those tokens.
  std::string text_of(const std::vector<int32_t>& tokens, bool* cut, std::vector<int32_t>* shown = nullptr);
  void emit(const std::string& text, size_t end);
  std::string decode(const std::vector<int32_t>& ids) const;

  const TextTokenizer* tokenizer_;
  std::vector<int32_t> stop_ids_;
  std::vector<std::string> stop_strings_;
  std::function<void(const std::string&)> sink_;
  std::string sent_;
  bool stop_string_seen_ = false, stop_id_seen_ = false;
  bool special_text_ = false;
};

}  // namespace canvas
