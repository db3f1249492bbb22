// Byte-level BPE tokenizer (llama.cpp's "gpt2" GGUF vocabularies): special-token split, hand-written
// pre-tokenizer rules, rank-ordered BPE merges over token ids, byte-exact decode.
#include "io/tokenizer.h"
#include "io/literal_split.h"

#include <algorithm>

#include "core/error.h"
#include "io/gguf.h"
#include "io/utf8.h"

namespace canvas {
namespace {

// ---------------------------------------------------------------------------------------------------
// GPT-2's byte <-> alphabet mapping: printable bytes (33-126, 161-172, 174-255) stand for themselves
// as code points; the other 68 bytes take code points 256, 257, ... in byte order.

bool byte_is_printable(int b) {
  return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
}

struct ByteAlphabet {
  std::array<uint32_t, 256> code_point{};  // byte -> code point
  std::array<std::string, 256> text;       // byte -> its UTF-8 text in the alphabet
  std::array<int16_t, 324> byte_of{};      // code point (< 324) -> byte, -1 if not in the alphabet
  ByteAlphabet() {
    byte_of.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      code_point[b] = byte_is_printable(b) ? uint32_t(b) : next++;
      append_utf8(text[b], code_point[b]);
      byte_of[code_point[b]] = int16_t(b);
    }
  }
};

const ByteAlphabet& alphabet() {
  static const ByteAlphabet table;
  return table;
}

// ---------------------------------------------------------------------------------------------------
// Character classes for the pre-tokenizer regexes: \p{L}, \p{N}, \s, and everything else.
//
// APPROXIMATION (deliberate, to stay compact): ASCII is exact. A non-ASCII code point is a letter
// unless the table below says otherwise. The table lists Unicode's White_Space characters exactly,
// the decimal digit blocks of the common scripts plus superscripts/subscripts, vulgar fractions,
// Roman numerals and circled/parenthesised numbers as numbers, and as "other" (punctuation, symbols,
// combining marks, format and private-use characters): Latin-1 punctuation, spacing modifiers,
// combining diacritics, Greek/Armenian/Hebrew/Arabic punctuation and points, Indic vowel signs (one
// block layout applied to all of U+0900-U+0DFF), Thai/Lao/Tibetan/Myanmar/Khmer marks, general
// punctuation, currency, letterlike symbols, arrows, maths, box drawing, dingbats, CJK punctuation and
// symbols, kana voicing marks, enclosed CJK, private use, variation selectors, half/full-width forms,
// emoji and the other supplementary symbol blocks. Unassigned code points and the marks of scripts
// not listed count as letters. Mis-classification only changes where words split (so a rare word may
// get a different but still valid tokenization); it never changes decode(encode(s)) == s. Checked
// against Python's unicodedata (Unicode 14): the class agrees for 98.9% of assigned BMP code points and
// 98.8% of assigned supplementary ones; the misses are mostly historic scripts' marks and numerals.
enum CharClass : uint8_t { kLetter, kNumber, kSpace, kOther };

struct ClassRange {
  uint32_t lo, hi;
  CharClass cls;
};

// clang-format off
constexpr CharClass O = kOther, N = kNumber, S = kSpace;
constexpr ClassRange kClassRanges[] = {
    {0x0080, 0x0084, O}, {0x0085, 0x0085, S}, {0x0086, 0x009F, O}, {0x00A0, 0x00A0, S},
    {0x00A1, 0x00A9, O}, {0x00AB, 0x00B1, O}, {0x00B2, 0x00B3, N}, {0x00B4, 0x00B4, O},
    {0x00B6, 0x00B8, O}, {0x00B9, 0x00B9, N}, {0x00BB, 0x00BB, O}, {0x00BC, 0x00BE, N},
    {0x00BF, 0x00BF, O}, {0x00D7, 0x00D7, O}, {0x00F7, 0x00F7, O}, {0x02C2, 0x02C5, O},
    {0x02D2, 0x02DF, O}, {0x02E5, 0x02EB, O}, {0x02ED, 0x02ED, O}, {0x02EF, 0x036F, O},
    {0x0375, 0x0375, O}, {0x037E, 0x037E, O}, {0x0384, 0x0385, O}, {0x0387, 0x0387, O},
    {0x03F6, 0x03F6, O}, {0x0482, 0x0489, O}, {0x055A, 0x055F, O}, {0x0589, 0x058A, O},
    {0x058D, 0x058F, O}, {0x0591, 0x05C7, O}, {0x05F3, 0x05F4, O}, {0x0600, 0x061F, O},
    {0x064B, 0x065F, O}, {0x0660, 0x0669, N}, {0x066A, 0x066D, O}, {0x0670, 0x0670, O},
    {0x06D4, 0x06D4, O}, {0x06D6, 0x06ED, O}, {0x06F0, 0x06F9, N}, {0x06FD, 0x06FE, O},
    {0x0700, 0x070F, O}, {0x0711, 0x0711, O}, {0x0730, 0x074A, O}, {0x07A6, 0x07B0, O},
    {0x07C0, 0x07C9, N}, {0x07EB, 0x07F3, O}, {0x07F6, 0x07F9, O},
    // U+0900-U+0DFF (Indic) is handled by indic_class() below.
    {0x0E31, 0x0E31, O}, {0x0E34, 0x0E3A, O}, {0x0E3F, 0x0E3F, O}, {0x0E47, 0x0E4F, O},
    {0x0E50, 0x0E59, N}, {0x0E5A, 0x0E5B, O}, {0x0EB1, 0x0EB1, O}, {0x0EB4, 0x0EBC, O},
    {0x0EC8, 0x0ECE, O}, {0x0ED0, 0x0ED9, N}, {0x0F01, 0x0F1F, O}, {0x0F20, 0x0F33, N},
    {0x0F34, 0x0F3F, O}, {0x0F71, 0x0F87, O}, {0x0F8D, 0x0FDA, O}, {0x102B, 0x103E, O},
    {0x1040, 0x1049, N}, {0x104A, 0x104F, O}, {0x1056, 0x1059, O}, {0x105E, 0x1060, O},
    {0x1062, 0x1064, O}, {0x1067, 0x106D, O}, {0x1071, 0x1074, O}, {0x1082, 0x108D, O},
    {0x108F, 0x108F, O}, {0x1090, 0x1099, N}, {0x109A, 0x109F, O}, {0x10FB, 0x10FB, O},
    {0x135D, 0x1368, O}, {0x1369, 0x137C, N}, {0x1390, 0x1399, O}, {0x1400, 0x1400, O},
    {0x166D, 0x166E, O}, {0x1680, 0x1680, S}, {0x169B, 0x169C, O}, {0x16EB, 0x16ED, O},
    {0x16EE, 0x16F0, N}, {0x17B4, 0x17D6, O}, {0x17D8, 0x17DB, O}, {0x17DD, 0x17DD, O},
    {0x17E0, 0x17E9, N}, {0x17F0, 0x17F9, N}, {0x1800, 0x180F, O}, {0x1810, 0x1819, N},
    {0x1946, 0x194F, N}, {0x19D0, 0x19DA, N}, {0x1A80, 0x1A89, N}, {0x1A90, 0x1A99, N},
    {0x1AB0, 0x1AFF, O}, {0x1B50, 0x1B59, N}, {0x1BB0, 0x1BB9, N}, {0x1C40, 0x1C49, N},
    {0x1C50, 0x1C59, N}, {0x1DC0, 0x1DFF, O}, {0x1FBD, 0x1FBD, O}, {0x1FBF, 0x1FC1, O},
    {0x1FCD, 0x1FCF, O}, {0x1FDD, 0x1FDF, O}, {0x1FED, 0x1FEF, O}, {0x1FFD, 0x1FFE, O},
    {0x2000, 0x200A, S}, {0x200B, 0x2027, O}, {0x2028, 0x2029, S}, {0x202A, 0x202E, O},
    {0x202F, 0x202F, S}, {0x2030, 0x205E, O}, {0x205F, 0x205F, S}, {0x2060, 0x206F, O},
    {0x2070, 0x2070, N}, {0x2074, 0x2079, N}, {0x207A, 0x207E, O}, {0x2080, 0x2089, N},
    {0x208A, 0x208E, O}, {0x20A0, 0x20FF, O}, {0x2100, 0x2101, O}, {0x2103, 0x2106, O},
    {0x2108, 0x2109, O}, {0x2114, 0x2114, O}, {0x2116, 0x2118, O}, {0x211E, 0x2123, O},
    {0x2125, 0x2125, O}, {0x2127, 0x2127, O}, {0x2129, 0x2129, O}, {0x212E, 0x212E, O},
    {0x213A, 0x213B, O}, {0x2140, 0x2144, O}, {0x214A, 0x214D, O}, {0x214F, 0x214F, O},
    {0x2150, 0x2182, N}, {0x2185, 0x2189, N}, {0x218A, 0x245F, O}, {0x2460, 0x249B, N},
    {0x249C, 0x24E9, O}, {0x24EA, 0x24FF, N}, {0x2500, 0x2775, O}, {0x2776, 0x2793, N},
    {0x2794, 0x2BFF, O}, {0x2CE5, 0x2CEA, O}, {0x2CEF, 0x2CF1, O}, {0x2CF9, 0x2CFC, O},
    {0x2CFD, 0x2CFD, N}, {0x2CFE, 0x2CFF, O}, {0x2D70, 0x2D70, O}, {0x2D7F, 0x2D7F, O},
    {0x2DE0, 0x2E7F, O}, {0x2E80, 0x2FFF, O}, {0x3000, 0x3000, S}, {0x3001, 0x3004, O},
    {0x3007, 0x3007, N}, {0x3008, 0x3020, O}, {0x3021, 0x3029, N}, {0x302A, 0x3030, O},
    {0x3036, 0x3037, O}, {0x3038, 0x303A, N}, {0x303D, 0x303F, O}, {0x3099, 0x309C, O},
    {0x30A0, 0x30A0, O}, {0x30FB, 0x30FB, O}, {0x3190, 0x3191, O}, {0x3192, 0x3195, N},
    {0x3196, 0x319F, O}, {0x31C0, 0x31E3, O}, {0x3200, 0x321E, O}, {0x3220, 0x3229, N},
    {0x322A, 0x3247, O}, {0x3248, 0x324F, N}, {0x3250, 0x3250, O}, {0x3251, 0x325F, N},
    {0x3260, 0x327F, O}, {0x3280, 0x3289, N}, {0x328A, 0x32B0, O}, {0x32B1, 0x32BF, N},
    {0x32C0, 0x33FF, O}, {0x4DC0, 0x4DFF, O}, {0xA490, 0xA4C6, O}, {0xA4FE, 0xA4FF, O},
    {0xA60D, 0xA60F, O}, {0xA620, 0xA629, N}, {0xA66F, 0xA67E, O}, {0xA69E, 0xA69F, O},
    {0xA6E6, 0xA6EF, N}, {0xA6F0, 0xA6F7, O}, {0xA700, 0xA716, O}, {0xA720, 0xA721, O},
    {0xA789, 0xA78A, O}, {0xA802, 0xA802, O}, {0xA806, 0xA806, O}, {0xA80B, 0xA80B, O},
    {0xA823, 0xA82C, O}, {0xA830, 0xA835, N}, {0xA836, 0xA839, O}, {0xA8D0, 0xA8D9, N},
    {0xA900, 0xA909, N}, {0xA9D0, 0xA9D9, N}, {0xA9F0, 0xA9F9, N}, {0xAA50, 0xAA59, N},
    {0xABE3, 0xABEF, O}, {0xABF0, 0xABF9, N}, {0xD800, 0xF8FF, O}, {0xFB1E, 0xFB1E, O},
    {0xFB29, 0xFB29, O}, {0xFBB2, 0xFBC2, O}, {0xFD3E, 0xFD3F, O}, {0xFDFC, 0xFDFF, O},
    {0xFE00, 0xFE6F, O}, {0xFEFF, 0xFEFF, O}, {0xFF01, 0xFF0F, O}, {0xFF10, 0xFF19, N},
    {0xFF1A, 0xFF20, O}, {0xFF3B, 0xFF40, O}, {0xFF5B, 0xFF65, O}, {0xFFE0, 0xFFFF, O},
    {0x10100, 0x10106, O}, {0x10107, 0x10133, N}, {0x10137, 0x1013F, O}, {0x104A0, 0x104A9, N},
    {0x11066, 0x1106F, N}, {0x1D000, 0x1D24F, O}, {0x1D300, 0x1D35F, O}, {0x1D360, 0x1D378, N},
    {0x1D7CE, 0x1D7FF, N}, {0x1F000, 0x1F0FF, O}, {0x1F100, 0x1F10C, N}, {0x1F10D, 0x1FBEF, O},
    {0x1FBF0, 0x1FBF9, N}, {0xE0000, 0xE0FFF, O}, {0xF0000, 0x10FFFF, O},
};
// clang-format on

constexpr bool ranges_sorted() {
  for (size_t i = 0; i < std::size(kClassRanges); ++i) {
    if (kClassRanges[i].lo > kClassRanges[i].hi) return false;
    if (i > 0 && kClassRanges[i - 1].hi >= kClassRanges[i].lo) return false;
  }
  return true;
}
static_assert(ranges_sorted(), "kClassRanges must be sorted and disjoint");

// The Brahmic blocks U+0900-U+0DFF share one layout (128 code points per script): signs at 0x00-0x03,
// nukta 0x3C, vowel signs and virama 0x3E-0x4F, stress/length marks 0x51-0x57, vowel signs 0x62-0x63,
// dandas 0x64-0x65, digits 0x66-0x6F. Applied to every block as an approximation.
CharClass indic_class(uint32_t cp) {
  const uint32_t off = cp & 0x7F;
  if (off >= 0x66 && off <= 0x6F) return kNumber;
  if (off <= 0x03 || off == 0x3C || (off >= 0x3E && off <= 0x4F) || (off >= 0x51 && off <= 0x57) ||
      (off >= 0x62 && off <= 0x65) || cp == 0x0970)
    return kOther;
  return kLetter;
}

CharClass classify(uint32_t cp) {
  if (cp < 0x80) {
    if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return kLetter;
    if (cp >= '0' && cp <= '9') return kNumber;
    if (cp == ' ' || (cp >= 9 && cp <= 13)) return kSpace;
    return kOther;
  }
  if (cp == kInvalidCodePoint) return kOther;
  if (cp >= 0x0900 && cp <= 0x0DFF) return indic_class(cp);
  const auto* end = std::end(kClassRanges);
  const auto* it = std::upper_bound(std::begin(kClassRanges), end, cp,
                                    [](uint32_t c, const ClassRange& r) { return c < r.lo; });
  if (it == std::begin(kClassRanges)) return kLetter;
  --it;
  return cp <= it->hi ? it->cls : kLetter;
}

struct Char {
  uint32_t cp;
  uint32_t offset;  // byte offset in the span
  CharClass cls;
};

std::vector<Char> decode_chars(std::string_view s) {
  std::vector<Char> chars;
  chars.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    const size_t len = decode_utf8(s, i, cp);
    chars.push_back({cp, uint32_t(i), classify(cp)});
    i += len;
  }
  return chars;
}

// Splits s into words by the rules of `rules`; calls emit(begin_byte, end_byte) for each word.
template <typename Emit>
void split_words(std::string_view s, PreTokenizer rules, Emit&& emit) {
  const std::vector<Char> chars = decode_chars(s);
  const size_t n = chars.size();
  auto cls = [&](size_t k) { return k < n ? int(chars[k].cls) : -1; };
  auto cp = [&](size_t k) { return k < n ? chars[k].cp : kInvalidCodePoint; };
  auto is_newline = [&](size_t k) { return cp(k) == '\r' || cp(k) == '\n'; };
  auto run = [&](size_t k, CharClass c) {
    while (k < n && chars[k].cls == c) ++k;
    return k;
  };
  const bool gpt2 = rules == PreTokenizer::Gpt2;
  const bool fold = !gpt2;  // llama3/qwen2 match contractions case-insensitively

  size_t i = 0;
  while (i < n) {
    size_t j = i;
    // 's 't 're 've 'm 'll 'd
    if (cp(i) == '\'' && i + 1 < n) {
      auto lower = [&](size_t k) {
        uint32_t c = cp(k);
        return (fold && c >= 'A' && c <= 'Z') ? c + 32 : c;
      };
      const uint32_t c1 = lower(i + 1), c2 = i + 2 < n ? lower(i + 2) : 0;
      if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
        j = i + 2;
      else if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
        j = i + 3;
    }
    if (j == i) {
      if (gpt2) {
        // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`
        const size_t k = (cp(i) == ' ' && i + 1 < n && cls(i + 1) != kSpace) ? i + 1 : i;
        if (cls(k) != kSpace) j = run(k, chars[k].cls);
      } else {
        // `[^\r\n\p{L}\p{N}]?\p{L}+`
        if (cls(i) == kLetter) {
          j = run(i, kLetter);
        } else if (cls(i) != kNumber && !is_newline(i) && cls(i + 1) == kLetter) {
          j = run(i + 1, kLetter);
        } else if (cls(i) == kNumber) {  // `\p{N}{1,3}` or `\p{N}`
          const size_t limit = rules == PreTokenizer::Llama3 ? 3 : 1;
          while (j < n && j - i < limit && chars[j].cls == kNumber) ++j;
        } else {
          // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
          const size_t k = (cp(i) == ' ' && cls(i + 1) == kOther) ? i + 1 : i;
          if (cls(k) == kOther) {
            j = run(k, kOther);
            while (is_newline(j)) ++j;
          }
        }
      }
    }
    if (j == i) {
      // Whitespace run [i, e).
      const size_t e = run(i, kSpace);
      size_t last_newline = n;
      if (!gpt2)
        for (size_t k = e; k > i; --k)
          if (is_newline(k - 1)) {
            last_newline = k - 1;
            break;
          }
      if (last_newline != n)
        j = last_newline + 1;  // `\s*[\r\n]+`
      else if (e == n || e - i == 1)
        j = e;  // `\s+(?!\S)` at the end, or `\s+` for a single space before a non-space
      else
        j = e - 1;  // `\s+(?!\S)`: leave the last space to the next word
    }
    const size_t begin = chars[i].offset, end = j < n ? chars[j].offset : s.size();
    emit(begin, end);
    i = j;
  }
}

struct PreName {
  const char* name;
  PreTokenizer rules;
  bool ignore_merges;
};
// Names llama.cpp writes into tokenizer.ggml.pre, mapped to the rule set their regex matches.
// "llada-moe" is llama.cpp's BAILINGMOE regex (one digit per word; its `\s*[\r\n]` ends where Qwen2's
// `\s*[\r\n]+` does, at the run's last newline), so the Qwen2 rules. "gpt2", "llada" and "dream" are not
// llama.cpp names (canvas's older spelling and guesses), kept so such files still load; "llada" is
// assumed to use the cl100k-style (Llama-3) rules.
constexpr PreName kPreNames[] = {
    {"default", PreTokenizer::Gpt2, false},     {"gpt2", PreTokenizer::Gpt2, false},
    {"gpt-2", PreTokenizer::Gpt2, false},       {"olmo", PreTokenizer::Gpt2, false},
    {"llama3", PreTokenizer::Llama3, true},     {"llama-bpe", PreTokenizer::Llama3, true},
    {"llama-v3", PreTokenizer::Llama3, true},   {"dbrx", PreTokenizer::Llama3, false},
    {"smaug-bpe", PreTokenizer::Llama3, false}, {"llada", PreTokenizer::Llama3, false},
    {"llada-moe", PreTokenizer::Qwen2, false},  {"bailingmoe", PreTokenizer::Qwen2, false},
    {"bailingmoe2", PreTokenizer::Qwen2, false}, {"qwen2", PreTokenizer::Qwen2, false},
    {"dream", PreTokenizer::Qwen2, false},      {"deepseek-r1-qwen", PreTokenizer::Qwen2, false},
};

std::string id_key_error(const char* key, int64_t id, size_t n) {
  return std::string(key) + " = " + std::to_string(id) + " is out of range for a vocabulary of " +
         std::to_string(n) + " tokens";
}

// Alphabet text -> the bytes it stands for. Code points outside the alphabet (and invalid UTF-8) are
// kept as they are, so a vocabulary entry that is not byte-level still decodes to something sensible.
std::string alphabet_to_bytes(const std::string& text) {
  const ByteAlphabet& a = alphabet();
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    uint32_t cp;
    const size_t len = decode_utf8(text, i, cp);
    if (cp != kInvalidCodePoint && cp < a.byte_of.size() && a.byte_of[cp] >= 0)
      out += char(a.byte_of[cp]);
    else
      out.append(text, i, len);
    i += len;
  }
  return out;
}

}  // namespace

const std::array<std::string, 256>& gpt2_byte_to_unicode() { return alphabet().text; }

bool parse_byte_token(std::string_view text, uint8_t& byte) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return false;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(text[3]), lo = hex(text[4]);
  if (hi < 0 || lo < 0) return false;
  byte = uint8_t(hi * 16 + lo);
  return true;
}

// ---------------------------------------------------------------------------------------------------

Tokenizer Tokenizer::from_gguf(const GgufFile& file) {
  const std::string model = file.require_string("tokenizer.ggml.model");
  const std::string pre = file.get_string("tokenizer.ggml.pre", "default");
  std::vector<std::string> tokens = file.get_string_array("tokenizer.ggml.tokens");
  std::vector<int32_t> types;
  for (int64_t t : file.get_int_array("tokenizer.ggml.token_type")) {
    check(t >= INT32_MIN && t <= INT32_MAX, "gguf " + file.path() + ": tokenizer.ggml.token_type value " +
                                                std::to_string(t) + " is out of range");
    types.push_back(int32_t(t));
  }
  std::vector<std::string> merges = file.get_string_array("tokenizer.ggml.merges");
  auto id = [&](const char* key) -> int32_t {
    const int64_t v = file.get_int(key, -1);
    check(v >= -1 && v < int64_t(tokens.size()),
          "gguf " + file.path() + ": " + id_key_error(key, v, tokens.size()));
    return int32_t(v);
  };
  const int32_t bos = id("tokenizer.ggml.bos_token_id"), eos = id("tokenizer.ggml.eos_token_id");
  const int32_t pad = id("tokenizer.ggml.padding_token_id"), mask = id("tokenizer.ggml.mask_token_id");
  const bool add_bos = file.get_bool("tokenizer.ggml.add_bos_token", false);
  try {
    return from_vocab(model, pre, std::move(tokens), std::move(types), std::move(merges), bos, eos, pad, mask,
                      add_bos);
  } catch (const Error& e) {
    throw Error("gguf " + file.path() + ": " + e.what());
  }
}

Tokenizer Tokenizer::from_vocab(std::string model, std::string pre, std::vector<std::string> tokens,
                                std::vector<int32_t> token_types, std::vector<std::string> merges,
                                int32_t bos, int32_t eos, int32_t pad, int32_t mask, bool add_bos) {
  check(model == "gpt2", "unsupported tokenizer model '" + model +
                             "' (tokenizer.ggml.model); only byte-level BPE ('gpt2') is supported");
  check(!tokens.empty(), "tokenizer.ggml.tokens is missing or empty");
  check(tokens.size() <= size_t(INT32_MAX), "tokenizer.ggml.tokens has too many entries");
  const size_t n = tokens.size();
  if (token_types.empty()) token_types.assign(n, kTokenNormal);
  check(token_types.size() == n, "tokenizer.ggml.token_type has " + std::to_string(token_types.size()) +
                                     " entries but tokenizer.ggml.tokens has " + std::to_string(n));
  for (size_t i = 0; i < n; ++i) {
    check(token_types[i] >= kTokenUndefined && token_types[i] <= kTokenByte,
          "tokenizer.ggml.token_type[" + std::to_string(i) + "] = " + std::to_string(token_types[i]) +
              " is not a known token type (0-6)");
    if (token_types[i] == kTokenUndefined) token_types[i] = kTokenNormal;
  }
  const std::pair<const char*, int32_t> ids[] = {{"tokenizer.ggml.bos_token_id", bos},
                                                 {"tokenizer.ggml.eos_token_id", eos},
                                                 {"tokenizer.ggml.padding_token_id", pad},
                                                 {"tokenizer.ggml.mask_token_id", mask}};
  for (const auto& [key, v] : ids) check(v >= -1 && int64_t(v) < int64_t(n), id_key_error(key, v, n));

  Tokenizer t;
  t.tokens_ = std::move(tokens);
  t.token_types_ = std::move(token_types);
  t.pre_ = std::move(pre);
  t.bos_id_ = bos;
  t.eos_id_ = eos;
  t.pad_id_ = pad;
  t.mask_id_ = mask;
  t.add_bos_ = add_bos;

  t.pre_fallback_ = true;  // unknown names use the GPT-2 rules (the original byte-level BPE split)
  for (const PreName& p : kPreNames)
    if (t.pre_ == p.name) {
      t.pre_rules_ = p.rules;
      t.ignore_merges_ = p.ignore_merges;
      t.pre_fallback_ = false;
    }

  t.token_to_id_.reserve(n);
  t.pieces_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& text = t.tokens_[i];
    const int32_t type = t.token_types_[i];
    t.token_to_id_.emplace(text, int32_t(i));  // keeps the lowest id of a repeated text
    uint8_t byte;
    if (type == kTokenControl || type == kTokenUserDefined) {
      t.pieces_[i] = text;
      if (!text.empty()) t.special_ids_.push_back(int32_t(i));
    } else if (type == kTokenByte && parse_byte_token(text, byte)) {
      t.pieces_[i] = std::string(1, char(byte));
    } else {
      t.pieces_[i] = alphabet_to_bytes(text);
    }
    if (type == kTokenUnknown && t.unknown_id_ < 0) t.unknown_id_ = int32_t(i);
  }
  std::stable_sort(t.special_ids_.begin(), t.special_ids_.end(),
                   [&](int32_t a, int32_t b) { return t.tokens_[a].size() > t.tokens_[b].size(); });
  for (int32_t id : t.special_ids_) t.special_by_first_byte_[uint8_t(t.tokens_[id][0])].push_back(id);

  const ByteAlphabet& a = alphabet();
  for (int b = 0; b < 256; ++b) {
    auto it = t.token_to_id_.find(a.text[b]);
    t.byte_token_[b] = it == t.token_to_id_.end() ? -1 : it->second;
  }

  t.merges_.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const std::string& m = merges[r];
    // Parts never contain a space (it is 'Ġ' in the alphabet), but a part may start with one in odd
    // vocabularies, so the separator is searched from the second character.
    const size_t sp = m.find(' ', 1);
    check(sp != std::string::npos && sp + 1 < m.size(),
          "tokenizer.ggml.merges[" + std::to_string(r) + "] = '" + m + "' is not of the form 'left right'");
    const auto left = t.token_to_id_.find(m.substr(0, sp));
    const auto right = t.token_to_id_.find(m.substr(sp + 1));
    const auto result = t.token_to_id_.find(m.substr(0, sp) + m.substr(sp + 1));
    if (left == t.token_to_id_.end() || right == t.token_to_id_.end() || result == t.token_to_id_.end())
      continue;  // cannot fire in a consistent vocabulary: ignored (see header)
    t.merges_.add(left->second, right->second, int32_t(r), result->second);
  }
  return t;
}

bool Tokenizer::is_control(int32_t id) const {
  return id >= 0 && id < vocab_size() && token_types_[id] == kTokenControl;
}

std::string Tokenizer::token_piece(int32_t id) const {
  check(id >= 0 && id < vocab_size(), "token id " + std::to_string(id) +
                                          " is out of range for a vocabulary of " +
                                          std::to_string(vocab_size()) + " tokens");
  return pieces_[id];
}

std::vector<std::string> Tokenizer::pre_tokenize(std::string_view text) const {
  std::vector<std::string> words;
  split_words(text, pre_rules_, [&](size_t b, size_t e) { words.emplace_back(text.substr(b, e - b)); });
  return words;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 2);
  if (add_bos && add_bos_ && bos_id_ >= 0) ids.push_back(bos_id_);
  if (!parse_special || special_ids_.empty()) {
    append_span_ids(text, ids);
    return ids;
  }
  // Leftmost match first; at one position the longest special token wins.
  split_at_literals(
      text, special_by_first_byte_, tokens_, [&](std::string_view span) { append_span_ids(span, ids); },
      [&](int32_t id) { ids.push_back(id); });
  return ids;
}

void Tokenizer::append_span_ids(std::string_view span, std::vector<int32_t>& out) const {
  if (span.empty()) return;
  split_words(span, pre_rules_, [&](size_t b, size_t e) { append_bpe_ids(span.substr(b, e - b), out); });
}

void Tokenizer::append_bpe_ids(std::string_view word, std::vector<int32_t>& out) const {
  const size_t n = word.size();
  auto emit_byte = [&](uint8_t b) {
    const int32_t id = byte_token_[b] >= 0 ? byte_token_[b] : unknown_id_;
    if (id < 0) {
      static const char* hex = "0123456789ABCDEF";
      throw Error(std::string("cannot encode byte 0x") + hex[b >> 4] + hex[b & 15] +
                  ": the vocabulary has no token for it and no unknown token");
    }
    out.push_back(id);
  };
  if (n == 1) {
    emit_byte(uint8_t(word[0]));
    return;
  }
  if (ignore_merges_) {  // Llama-3 style: a word that is a token is taken whole
    std::string text;
    for (char c : word) text += alphabet().text[uint8_t(c)];
    const auto it = token_to_id_.find(text);
    if (it != token_to_id_.end() && token_types_[it->second] == kTokenNormal) {
      out.push_back(it->second);
      return;
    }
  }

  // One symbol per byte (-1 for a byte without a token: it never merges).
  std::vector<int32_t> sym(n);
  for (size_t i = 0; i < n; ++i) sym[i] = byte_token_[uint8_t(word[i])];
  for (int32_t i : merges_.apply(sym)) {
    if (sym[size_t(i)] >= 0)
      out.push_back(sym[size_t(i)]);
    else
      emit_byte(uint8_t(word[size_t(i)]));  // a byte without a token (never merged)
  }
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool render_special) const {
  std::string out;
  for (int32_t id : ids) {
    check(id >= 0 && id < vocab_size(), "cannot decode token id " + std::to_string(id) +
                                            ": out of range for a vocabulary of " +
                                            std::to_string(vocab_size()) + " tokens");
    if (token_types_[id] == kTokenControl && !render_special) continue;
    out += pieces_[id];
  }
  return out;
}

}  // namespace canvas
