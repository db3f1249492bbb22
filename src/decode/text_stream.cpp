// Stop ids, stop strings and UTF-8 hold-back for streamed generated text.
#include "decode/text_stream.h"

#include <algorithm>

#include "core/error.h"
#include "io/utf8.h"

namespace canvas {

TextStream::TextStream(const TextTokenizer* tokenizer, std::vector<int32_t> stop_ids,
                       std::vector<std::string> stop_strings, std::function<void(const std::string&)> sink)
    : tokenizer_(tokenizer), stop_ids_(std::move(stop_ids)), stop_strings_(std::move(stop_strings)),
      sink_(std::move(sink)) {
  for (const std::string& s : stop_strings_) check(!s.empty(), "a stop string must not be empty");
}

std::string TextStream::text_of(const std::vector<int32_t>& tokens, bool* cut) {
  std::vector<int32_t> shown;
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
  std::string text = tokenizer_->decode(shown);
  size_t first = std::string::npos;
  for (const std::string& s : stop_strings_) first = std::min(first, text.find(s));
  if (first != std::string::npos) {
    text.resize(first);
    *cut = true;
    stop_string_seen_ = true;
  }
  return text;
}

void TextStream::emit(const std::string& text, size_t end) {
  // Later tokens can only append to the text; if decoding ever rewrote the sent part, send nothing more
  // rather than something inconsistent (finish() still returns the whole text).
  if (end <= sent_.size() || text.compare(0, sent_.size(), sent_) != 0) return;
  const std::string chunk = text.substr(sent_.size(), end - sent_.size());
  sent_ += chunk;
  if (sink_) sink_(chunk);
}

void TextStream::update(const std::vector<int32_t>& final_prefix) {
  bool cut = false;
  const std::string text = text_of(final_prefix, &cut);
  size_t end = text.size();
  if (!cut) {
    size_t hold = 0;
    for (const std::string& s : stop_strings_) hold = std::max(hold, s.size() - 1);
    end = text.size() > hold ? text.size() - hold : 0;
    end = complete_utf8_prefix(std::string_view(text).substr(0, end));
  }
  emit(text, end);
}

std::string TextStream::finish(const std::vector<int32_t>& tokens) {
  bool cut = false;
  const std::string text = text_of(tokens, &cut);
  emit(text, text.size());
  return text;
}

}  // namespace canvas
