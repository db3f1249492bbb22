// UTF-8 helpers shared by the tokenizers and the text front ends: encode one code point, decode one character
// strictly, make bytes safe to print, find where the last whole character ends.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace canvas {

// Marks a byte that does not start a valid UTF-8 character (see decode_utf8).
constexpr uint32_t kInvalidCodePoint = 0xFFFFFFFF;

// Appends the UTF-8 encoding of cp (at most U+10FFFF) to out.
void append_utf8(std::string& out, uint32_t cp);
inline std::string utf8(uint32_t cp) {
  std::string s;
  append_utf8(s, cp);
  return s;
}

// Decodes the character at s[i] (i < s.size()). Returns its length (1-4) and sets cp. A sequence that is
// invalid, overlong, a surrogate, beyond U+10FFFF or truncated gives length 1 and cp = kInvalidCodePoint
// (that byte is then a character of its own).
size_t decode_utf8(std::string_view s, size_t i, uint32_t& cp);
inline size_t utf8_length(std::string_view s, size_t i) {
  uint32_t cp;
  return decode_utf8(s, i, cp);
}

// Bytes that are not valid UTF-8 become U+FFFD (for terminals and JSON).
std::string sanitize_utf8(std::string_view s);

// Control characters written visibly for a one-line view: \n, \t, \r, and \xNN for the others (and DEL).
std::string escape_controls(std::string_view s);

// The length of the longest prefix of `text` that does not end inside an unfinished multi-byte character
// (a byte-level model's text streamed token by token can stop mid-character).
size_t complete_utf8_prefix(std::string_view text);

}  // namespace canvas
