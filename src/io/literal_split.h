// Splitting text at literal occurrences of special tokens, shared by both tokenizers.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace canvas {

// Leftmost match first; at one position the first candidate of by_first_byte[byte] that matches wins
// (buckets are ordered longest text first). on_text receives the non-empty spans between matches,
// on_token the id of each match, in text order.
template <class OnText, class OnToken>
void split_at_literals(std::string_view text, const std::array<std::vector<int32_t>, 256>& by_first_byte,
                       const std::vector<std::string>& tokens, OnText on_text, OnToken on_token) {
  size_t begin = 0, pos = 0;
  while (pos < text.size()) {
    int32_t found = -1;
    for (int32_t id : by_first_byte[uint8_t(text[pos])]) {
      const std::string& s = tokens[size_t(id)];
      if (text.compare(pos, s.size(), s) == 0) {
        found = id;
        break;
      }
    }
    if (found < 0) {
      ++pos;
      continue;
    }
    if (pos > begin) on_text(text.substr(begin, pos - begin));
    on_token(found);
    pos += tokens[size_t(found)].size();
    begin = pos;
  }
  if (begin < text.size()) on_text(text.substr(begin));
}

}  // namespace canvas
