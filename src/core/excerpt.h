// quoted_excerpt: a piece of bad input, cut short and escaped, for an error message.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace canvas {

// `text` in single quotes for an error message: at most its first max_chars bytes, those outside printable
// ASCII as \xNN, then "..." and the whole length when it was cut, so that a megabyte of bad input never
// becomes a megabyte (or several lines) of message.
inline std::string quoted_excerpt(std::string_view text, size_t max_chars = 60) {
  static const char* kHex = "0123456789abcdef";
  std::string out = "'";
  for (size_t i = 0; i < text.size() && i < max_chars; ++i) {
    const unsigned char ch = static_cast<unsigned char>(text[i]);
    if (ch >= 0x20 && ch < 0x7f) {
      out += char(ch);
    } else {
      out += "\\x";
      out += kHex[ch >> 4];
      out += kHex[ch & 15];
    }
  }
  out += "'";
  if (text.size() > max_chars) out += "... (" + std::to_string(text.size()) + " characters)";
  return out;
}

}  // namespace canvas
