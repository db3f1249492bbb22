// Generated tokens to text as they become final: the text ends before the first stop id and the first stop
// string, and what might still turn into a stop string (an end that begins one) or is an unfinished UTF-8
// character is held back, with the rest of the token it cuts: pieces end on whole tokens where the text
// allows, never inside a character.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "io/text_tokenizer.h"

namespace canvas {

class TextStream {
 public:
  // sink receives each new piece of final text (never empty), with the number of the generated tokens,
  // from the first, whose text the text sent so far holds whole (the tokens a client may be told of with
  // it: their log-probabilities). Throws Error for an empty stop string.
  // special_text: special tokens' text is written out (TextTokenizer::decode_with_special).
  using Sink = std::function<void(const std::string& piece, int64_t tokens)>;
  TextStream(const TextTokenizer* tokenizer, std::vector<int32_t> stop_ids, std::vector<std::string> stop_strings,
             Sink sink = {}, bool special_text = false);
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
  // The most of `shown`'s first tokens, fewer than all, whose text ends at or before `end` as `text` has it,
  // and where their text ends ({0, 0} when none).
  std::pair<int64_t, size_t> tokens_within(const std::vector<int32_t>& shown, const std::string& text,
                                           size_t end) const;
  // The tokens whose text the whole of `text` holds: all of `shown` unless a stop string cut it.
  int64_t tokens_of_whole_text(const std::vector<int32_t>& shown, const std::string& text) const;
  // Sends text[sent, end), which holds the text of the first `tokens` generated tokens whole.
  void emit(const std::string& text, size_t end, int64_t tokens);
  std::string decode(const std::vector<int32_t>& ids) const;

  const TextTokenizer* tokenizer_;
  std::vector<int32_t> stop_ids_;
  std::vector<std::string> stop_strings_;
  Sink sink_;
  std::string sent_;
  bool stop_string_seen_ = false, stop_id_seen_ = false;
  bool special_text_ = false;
};

}  // namespace canvas
