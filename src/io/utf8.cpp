#include "io/utf8.h"

#include <cstdio>

namespace canvas {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

size_t decode_utf8(std::string_view s, size_t i, uint32_t& cp) {
  const auto b0 = uint8_t(s[i]);
  auto cont = [&](size_t k) { return i + k < s.size() && (uint8_t(s[i + k]) & 0xC0) == 0x80; };
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  if (b0 >= 0xC2 && b0 <= 0xDF && cont(1)) {
    cp = (uint32_t(b0 & 0x1F) << 6) | (uint8_t(s[i + 1]) & 0x3F);
    return 2;
  }
  if (b0 >= 0xE0 && b0 <= 0xEF && cont(1) && cont(2)) {
    const auto b1 = uint8_t(s[i + 1]);
    if ((b0 == 0xE0 && b1 < 0xA0) || (b0 == 0xED && b1 >= 0xA0)) {  // overlong / surrogate
      cp = kInvalidCodePoint;
      return 1;
    }
    cp = (uint32_t(b0 & 0x0F) << 12) | (uint32_t(b1 & 0x3F) << 6) | (uint8_t(s[i + 2]) & 0x3F);
    return 3;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4 && cont(1) && cont(2) && cont(3)) {
    const auto b1 = uint8_t(s[i + 1]);
    if ((b0 == 0xF0 && b1 < 0x90) || (b0 == 0xF4 && b1 >= 0x90)) {  // overlong / beyond U+10FFFF
      cp = kInvalidCodePoint;
      return 1;
    }
    cp = (uint32_t(b0 & 0x07) << 18) | (uint32_t(b1 & 0x3F) << 12) |
         (uint32_t(uint8_t(s[i + 2]) & 0x3F) << 6) | (uint8_t(s[i + 3]) & 0x3F);
    return 4;
  }
  cp = kInvalidCodePoint;
  return 1;
}

std::string escape_controls(std::string_view s) {
  std::string out;
  for (unsigned char ch : s) {
    switch (ch) {
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (ch < 0x20 || ch == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", ch);
          out += buf;
        } else {
          out += char(ch);
        }
    }
  }
  return out;
}

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    const size_t len = decode_utf8(s, i, cp);
    if (cp == kInvalidCodePoint) {
      out += "\xEF\xBF\xBD";
    } else {
      out.append(s, i, len);
    }
    i += len;
  }
  return out;
}

size_t complete_utf8_prefix(std::string_view text) {
  const size_t end = text.size();
  for (size_t i = end, back = 0; i > 0 && back < 4; --i, ++back) {
    const unsigned char c = static_cast<unsigned char>(text[i - 1]);
    if ((c & 0xC0) != 0x80) {  // the last character's first byte
      const size_t need = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
      return end - (i - 1) >= need ? end : i - 1;
    }
  }
  return end;
}

}  // namespace canvas
