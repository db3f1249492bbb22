// Stop ids, stop strings and UTF-8 hold-back for streamed generated text.
#include "text/text_stream.h"

#include <algorithm>
#include <tuple>

#include "core/error.h"
#include "io/utf8.h"

namespace canvas {

TextStream::TextStream(const TextTokenizer* tokenizer, std::vector<int32_t> stop_ids,
                       std::vector<std::string> stop_strings, Sink sink, bool special_text)
    : tokenizer_(tokenizer), stop_ids_(std::move(stop_ids)), stop_strings_(std::move(stop_strings)),
      sink_(std::move(sink)), special_text_(special_text) {
  for (const std::string& s : stop_strings_) check(!s.empty(), "a stop string must not be empty");
}

std::string TextStream::decode(const std::vector<int32_t>& ids) const {
  return special_text_ ? tokenizer_->decode_with_special(ids) : tokenizer_->decode(ids);
}

std::string TextStream::text_of(const std::vector<int32_t>& tokens, bool* cut, std::vector<int32_t>* shown_out) {
  std::vector<int32_t> local;
  std::vector<int32_t>& shown = shown_out ? *shown_out : local;
  shown.clear();
  *cut = false;
  for (int32_t id : tokens) {
    if (std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end()) {
      *cut = true;
      stop_id_seen_ = true;
      break;
    }
    shown.push_back(id);
  }
  if (!tokenizer_) return "";
  std::string text = decode(shown);
  size_t first = std::string::npos;
  for (const std::string& s : stop_strings_) first = std::min(first, text.find(s));
  if (first != std::string::npos) {
    text.resize(first);
    *cut = true;
    stop_string_seen_ = true;
  }
  return text;
}

std::pair<int64_t, size_t> TextStream::tokens_within(const std::vector<int32_t>& shown, const std::string& text,
                                                     size_t end) const {
  for (size_t n = shown.size(); n-- > 0;) {
    const std::string before = decode(std::vector<int32_t>(shown.begin(), shown.begin() + n));
    if (before.size() <= end && text.compare(0, before.size(), before) == 0) return {int64_t(n), before.size()};
  }
  return {0, 0};
}

int64_t TextStream::tokens_of_whole_text(const std::vector<int32_t>& shown, const std::string& text) const {
  return stop_string_seen_ && tokenizer_ ? tokens_within(shown, text, text.size()).first : int64_t(shown.size());
}

void TextStream::emit(const std::string& text, size_t end, int64_t tokens) {
  // Later tokens can only append to the text; if decoding ever rewrote the sent part, send nothing more
  // rather than something inconsistent (finish() still returns the whole text).
  if (end <= sent_.size() || text.compare(0, sent_.size(), sent_) != 0) return;
  const std::string chunk = text.substr(sent_.size(), end - sent_.size());
  sent_ += chunk;
  if (sink_) sink_(chunk, tokens);
}

void TextStream::update(const std::vector<int32_t>& final_prefix) {
  bool cut = false;
  std::vector<int32_t> shown;
  const std::string text = text_of(final_prefix, &cut, &shown);
  size_t end = text.size();
  int64_t tokens = int64_t(shown.size());  // the tokens whose text ends within text[0, end)
  if (cut) {
    if (sink_) tokens = tokens_of_whole_text(shown, text);
  } else {
    // Held back: the longest end of the text that may begin a stop string, and an unfinished character;
    // then the rest of a token cut by either (a stream sends whole tokens where their text allows).
    size_t hold = 0;
    for (const std::string& s : stop_strings_)
      for (size_t n = std::min(s.size() - 1, text.size()); n > hold; --n)
        if (text.compare(text.size() - n, n, s, 0, n) == 0) {
          hold = n;
          break;
        }
    end = complete_utf8_prefix(std::string_view(text).substr(0, text.size() - hold));
    if (end < text.size() && tokenizer_) {
      size_t boundary = 0;  // where the last token that ends at or before `end` ends
      std::tie(tokens, boundary) = tokens_within(shown, text, end);
      end = complete_utf8_prefix(std::string_view(text).substr(0, boundary));
      if (end < boundary) tokens = tokens_within(shown, text, end).first;  // that token ends inside a character
    }
  }
  emit(text, end, tokens);
}

std::string TextStream::finish(const std::vector<int32_t>& tokens) {
  bool cut = false;
  std::vector<int32_t> shown;
  const std::string text = text_of(tokens, &cut, &shown);
  emit(text, text.size(), tokens_of_whole_text(shown, text));
  return text;
}

}  // namespace canvas
