// Tests for the byte-level BPE tokenizer: hand-worked merges, pre-tokenizer splits, special tokens,
// byte-exact round trips on random UTF-8 and random bytes, speed on long inputs, validation, GGUF.
#include "io/tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "io/gguf.h"

namespace canvas {
namespace {

// GPT-2's byte alphabet, written out independently of the implementation: printable bytes keep their
// value, the other 68 take 256, 257, ... in byte order. Token ids follow GPT-2's vocab.json: the 188
// printable bytes first (ids 0-187, in byte order), then the other 68 (ids 188-255).
std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xF0 | (cp >> 18));
    s += char(0x80 | ((cp >> 12) & 0x3F));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

std::vector<std::string> gpt2_byte_tokens() {
  std::vector<std::string> printable, others;
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool p = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    if (p)
      printable.push_back(utf8(uint32_t(b)));
    else
      others.push_back(utf8(next++));
  }
  printable.insert(printable.end(), others.begin(), others.end());
  return printable;
}

// Merges of the test vocabulary, in rank order. Results are appended to the vocabulary in this order.
const std::vector<std::string> kMerges = {
    "Ġ t",     // 0
    "h e",     // 1
    "Ġt he",   // 2  -> "Ġthe"
    "i n",     // 3
    "Ġ a",     // 4
    "n d",     // 5
    "Ġa nd",   // 6  -> "Ġand"
    "b c",     // 7  ranks lower than "a b": "abc" -> a + bc, not ab + c
    "a b",     // 8
    "Ġ Ġ",     // 9
    "ĠĠ ĠĠ",   // 10
    "1 2",     // 11
    "' s",     // 12
    "l l",     // 13
    "Ċ Ċ",     // 14
    "e r",     // 15 (loses to "h e" in "her")
    "h er",    // 16
    "x y",     // 17 result "xy" is not in the vocabulary: ignored
    "w o",     // 18
    "r l",     // 19
    "wo rl",   // 20
    "worl d",  // 21 -> "world"
};

struct Vocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
};

Vocab test_vocab() {
  Vocab v;
  v.tokens = gpt2_byte_tokens();
  for (const std::string& m : kMerges) {
    const size_t sp = m.find(' ');
    const std::string joined = m.substr(0, sp) + m.substr(sp + 1);
    if (joined == "xy") continue;
    v.tokens.push_back(joined);
  }
  v.types.assign(v.tokens.size(), 1);
  v.tokens.push_back("<|endoftext|>");
  v.types.push_back(3);
  v.tokens.push_back("<|mdm_mask|>");
  v.types.push_back(3);
  v.tokens.push_back("<|end");  // user-defined, a prefix of <|endoftext|>
  v.types.push_back(4);
  v.tokens.push_back("<tool>");
  v.types.push_back(4);
  v.tokens.push_back("<unused0>");
  v.types.push_back(5);
  return v;
}

class TokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override { vocab_ = test_vocab(); }

  Tokenizer make(const std::string& pre = "gpt2", bool add_bos = true) const {
    return Tokenizer::from_vocab("gpt2", pre, vocab_.tokens, vocab_.types, kMerges, id("<|endoftext|>"),
                                 id("<|endoftext|>"), -1, id("<|mdm_mask|>"), add_bos);
  }
  // Id of a token given in the alphabet (as stored).
  int32_t id(const std::string& token) const {
    for (size_t i = 0; i < vocab_.tokens.size(); ++i)
      if (vocab_.tokens[i] == token) return int32_t(i);
    ADD_FAILURE() << "no token " << token;
    return -1;
  }
  std::vector<int32_t> ids(const std::vector<std::string>& tokens) const {
    std::vector<int32_t> out;
    for (const auto& t : tokens) out.push_back(id(t));
    return out;
  }

  Vocab vocab_;
};

TEST_F(TokenizerTest, ByteTokensFollowGpt2Order) {
  const Tokenizer t = make();
  EXPECT_EQ(t.vocab_size(), int32_t(vocab_.tokens.size()));
  EXPECT_EQ(t.token_piece(0), "!");
  EXPECT_EQ(t.token_piece(64), "a");
  EXPECT_EQ(t.token_piece(188), std::string(1, '\0'));
  EXPECT_EQ(t.token_piece(220), " ");   // "Ġ" is 220 in GPT-2
  EXPECT_EQ(t.token_piece(198), "\n");  // "Ċ"
  EXPECT_EQ(t.token_piece(255), "\xAD");
  EXPECT_EQ(t.encode(" "), std::vector<int32_t>{220});
  EXPECT_EQ(t.encode("a"), std::vector<int32_t>{64});
  EXPECT_EQ(t.token_piece(id("Ġthe")), " the");
  EXPECT_THROW(t.token_piece(-1), Error);
  EXPECT_THROW(t.token_piece(t.vocab_size()), Error);
}

TEST_F(TokenizerTest, MergesApplyByRankNotLeftToRight) {
  const Tokenizer t = make();
  EXPECT_EQ(t.encode(" the"), ids({"Ġthe"}));
  EXPECT_EQ(t.encode("the"), ids({"t", "he"}));
  // "b c" (rank 7) beats "a b" (rank 8) although "a b" comes first in the text.
  EXPECT_EQ(t.encode("abc"), ids({"a", "bc"}));
  EXPECT_EQ(t.encode("ab"), ids({"ab"}));
  // "h e" (1) beats "e r" (15), and there is no "he r", so "h er" never gets a chance.
  EXPECT_EQ(t.encode("her"), ids({"he", "r"}));
  // Ġ a (4) first, then n d (5), then Ġa nd (6).
  EXPECT_EQ(t.encode(" and"), ids({"Ġand"}));
  EXPECT_EQ(t.encode(" world"), ids({"Ġ", "world"}));
  EXPECT_EQ(t.encode("hello world"), ids({"he", "ll", "o", "Ġ", "world"}));
  // Five spaces at the end of the text stay one word: Ġ Ġ pairs merge leftmost first, then ĠĠ ĠĠ.
  EXPECT_EQ(t.encode("     "), ids({"ĠĠĠĠ", "Ġ"}));
  EXPECT_EQ(t.encode("x     the"), ids({"x", "ĠĠĠĠ", "Ġthe"}));
  EXPECT_EQ(t.encode("12 123"), ids({"12", "Ġ", "12", "3"}));
  EXPECT_EQ(t.encode("he's"), ids({"he", "'s"}));
  EXPECT_EQ(t.encode("\n\n"), ids({"ĊĊ"}));
}

TEST_F(TokenizerTest, MergeWhoseResultIsNotInTheVocabularyIsIgnored) {
  const Tokenizer t = make();
  EXPECT_EQ(t.encode("xy"), ids({"x", "y"}));
}

TEST_F(TokenizerTest, Gpt2PreTokenizerSplits) {
  const Tokenizer t = make("gpt2");
  using W = std::vector<std::string>;
  EXPECT_EQ(t.pre_tokenize("a   b"), (W{"a", "  ", " b"}));
  EXPECT_EQ(t.pre_tokenize("I'm he's"), (W{"I", "'m", " he", "'s"}));
  EXPECT_EQ(t.pre_tokenize("don't"), (W{"don", "'t"}));
  EXPECT_EQ(t.pre_tokenize("DON'T"), (W{"DON", "'", "T"}));  // case-sensitive contractions
  EXPECT_EQ(t.pre_tokenize("it's 'quoted'"), (W{"it", "'s", " '", "quoted", "'"}));
  EXPECT_EQ(t.pre_tokenize("abc123 4567"), (W{"abc", "123", " 4567"}));
  EXPECT_EQ(t.pre_tokenize("hello!!! world??"), (W{"hello", "!!!", " world", "??"}));
  EXPECT_EQ(t.pre_tokenize("a\n\nb"), (W{"a", "\n", "\n", "b"}));
  EXPECT_EQ(t.pre_tokenize("hi  "), (W{"hi", "  "}));
  EXPECT_EQ(t.pre_tokenize("  \n  \n  x"), (W{"  \n  \n ", " x"}));
  EXPECT_EQ(t.pre_tokenize("x\t\ty"), (W{"x", "\t", "\t", "y"}));
  EXPECT_EQ(t.pre_tokenize("$x"), (W{"$", "x"}));
  EXPECT_EQ(t.pre_tokenize(""), W{});
  // Non-ASCII classes.
  EXPECT_EQ(t.pre_tokenize("héllo wörld"), (W{"héllo", " wörld"}));
  EXPECT_EQ(t.pre_tokenize("数字123"), (W{"数字", "123"}));
  EXPECT_EQ(t.pre_tokenize("a\u00A0b"), (W{"a", "\u00A0", "b"}));  // no-break space is \s
  EXPECT_EQ(t.pre_tokenize("wait\u2026"), (W{"wait", "\u2026"}));  // ellipsis is punctuation
  EXPECT_EQ(t.pre_tokenize("hi \U0001F600\U0001F600"), (W{"hi", " \U0001F600\U0001F600"}));
  EXPECT_EQ(t.pre_tokenize("\u0663\u0664\u0665"), (W{"\u0663\u0664\u0665"}));  // Arabic-Indic digits
  EXPECT_EQ(t.pre_tokenize("x\u00B2"), (W{"x", "\u00B2"}));                    // superscript two is \p{N}
  // Invalid UTF-8 bytes are single "other" characters.
  EXPECT_EQ(t.pre_tokenize("ab\xFF\xFEz"), (W{"ab", "\xFF\xFE", "z"}));
  EXPECT_EQ(t.pre_tokenize("a \xC3"), (W{"a", " \xC3"}));  // truncated sequence
}

TEST_F(TokenizerTest, Llama3AndQwen2PreTokenizerSplits) {
  using W = std::vector<std::string>;
  for (const char* pre : {"llama-bpe", "llama3", "qwen2", "llada-moe"}) {
    SCOPED_TRACE(pre);
    const Tokenizer t = make(pre);
    EXPECT_FALSE(t.pre_is_fallback());
    EXPECT_EQ(t.pre_tokenize("a   b"), (W{"a", "  ", " b"}));
    EXPECT_EQ(t.pre_tokenize("DON'T"), (W{"DON", "'T"}));  // case-insensitive contractions
    EXPECT_EQ(t.pre_tokenize("a\n\nb"), (W{"a", "\n\n", "b"}));
    EXPECT_EQ(t.pre_tokenize("  \n  \n  x"), (W{"  \n  \n", " ", " x"}));
    EXPECT_EQ(t.pre_tokenize("hello, world!\n\n  foo"), (W{"hello", ",", " world", "!\n\n", " ", " foo"}));
    EXPECT_EQ(t.pre_tokenize(" !!!\n\nx"), (W{" !!!\n\n", "x"}));
    EXPECT_EQ(t.pre_tokenize("$x"), (W{"$x"}));
    EXPECT_EQ(t.pre_tokenize("a\u00A0b"), (W{"a", "\u00A0b"}));
    EXPECT_EQ(t.pre_tokenize("x\t\ty"), (W{"x", "\t", "\ty"}));
    EXPECT_EQ(t.pre_tokenize(" \r\n\r\n z"), (W{" \r\n\r\n", " z"}));
  }
  EXPECT_EQ(make("llama-bpe").pre_tokenize("12345 6"), (W{"123", "45", " ", "6"}));
  EXPECT_EQ(make("qwen2").pre_tokenize("12345 6"), (W{"1", "2", "3", "4", "5", " ", "6"}));
  EXPECT_EQ(make("qwen2").pre_tokenize("\u6570\u5B57123"), (W{"\u6570\u5B57", "1", "2", "3"}));
  // llama.cpp reads "llada-moe" (what its converter writes for LLaDA-MoE) with the BAILINGMOE regex:
  // `\p{N}`, one digit per word, as Qwen2.
  EXPECT_EQ(make("llada-moe").pre_tokenize("12345 6"), (W{"1", "2", "3", "4", "5", " ", "6"}));
}

TEST_F(TokenizerTest, UnknownPreTokenizerFallsBackToGpt2Rules) {
  const Tokenizer t = make("some-future-model");
  EXPECT_TRUE(t.pre_is_fallback());
  EXPECT_EQ(t.pre_tokenizer(), PreTokenizer::Gpt2);
  EXPECT_EQ(t.pre_name(), "some-future-model");
  EXPECT_EQ(t.pre_tokenize("DON'T"), (std::vector<std::string>{"DON", "'", "T"}));
}

TEST_F(TokenizerTest, SpecialTokensInsideText) {
  const Tokenizer t = make();
  const int32_t eot = id("<|endoftext|>"), mask = id("<|mdm_mask|>"), end = id("<|end"), tool = id("<tool>");
  EXPECT_EQ(t.encode("the<|endoftext|> the"), (std::vector<int32_t>{id("t"), id("he"), eot, id("Ġthe")}));
  EXPECT_EQ(t.encode("<|mdm_mask|><|mdm_mask|>"), (std::vector<int32_t>{mask, mask}));
  // Longest match at a position: "<|endoftext|>" wins over its prefix "<|end".
  EXPECT_EQ(t.encode("<|endoftext|>"), std::vector<int32_t>{eot});
  EXPECT_EQ(t.encode("<|end|>"), (std::vector<int32_t>{end, id("|"), id(">")}));
  EXPECT_EQ(t.encode("a<tool>b"), (std::vector<int32_t>{id("a"), tool, id("b")}));
  // Without parse_special the text is ordinary bytes.
  const std::vector<int32_t> plain = t.encode("<|endoftext|>", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), eot), 0);
  EXPECT_EQ(t.decode(plain), "<|endoftext|>");
  // Decode: control tokens only when asked; user-defined tokens always.
  const std::vector<int32_t> with = t.encode("x<|endoftext|><tool>y");
  EXPECT_EQ(t.decode(with), "x<tool>y");
  EXPECT_EQ(t.decode(with, true), "x<|endoftext|><tool>y");
  EXPECT_TRUE(t.is_control(eot));
  EXPECT_FALSE(t.is_control(tool));
  EXPECT_FALSE(t.is_control(-1));
  EXPECT_EQ(t.token_piece(mask), "<|mdm_mask|>");
  EXPECT_EQ(t.mask_id(), mask);
  EXPECT_EQ(t.eos_id(), eot);
  EXPECT_EQ(t.pad_id(), -1);
  // BOS only when both the caller and the vocabulary ask for it.
  EXPECT_EQ(t.encode("a", true), (std::vector<int32_t>{eot, id("a")}));
  EXPECT_EQ(t.encode("a", false), (std::vector<int32_t>{id("a")}));
  EXPECT_EQ(make("gpt2", false).encode("a", true), (std::vector<int32_t>{id("a")}));
  EXPECT_THROW(t.decode({t.vocab_size()}), Error);
  EXPECT_THROW(t.decode({-3}), Error);
}

// Random code points from pools that exercise every UTF-8 length and every character class.
std::string random_utf8(Rng& rng, size_t max_chars) {
  static const uint32_t kPunct[] = {'\'', '!',  '?',  '.', ',', '-', '$', '<', '|', '>', ' ', ' ', ' ',
                                    '\n', '\r', '\t', 's', 't', 'l', 'e', 'd', 'S', 'T', '0', '7'};
  std::string s;
  const size_t n = rng.below(max_chars + 1);
  for (size_t i = 0; i < n; ++i) {
    uint32_t cp = 0;
    switch (rng.below(10)) {
      case 0:
        cp = uint32_t(0x20 + rng.below(0x5F));
        break;  // printable ASCII
      case 1:
        cp = kPunct[rng.below(std::size(kPunct))];
        break;  // contractions, spaces
      case 2:
        cp = uint32_t(rng.below(0x80));
        break;  // any ASCII incl. controls
      case 3:
        cp = uint32_t(0x80 + rng.below(0x800 - 0x80));
        break;  // 2-byte
      case 4:
        cp = uint32_t(0x300 + rng.below(0x70));
        break;  // combining marks
      case 5:
        cp = uint32_t(0x4E00 + rng.below(0x5200));
        break;   // CJK
      case 6: {  // any 3-byte
        do cp = uint32_t(0x800 + rng.below(0x10000 - 0x800));
        while (cp >= 0xD800 && cp <= 0xDFFF);
        break;
      }
      case 7:
        cp = uint32_t(0x1F300 + rng.below(0x300));
        break;  // emoji
      case 8:
        cp = uint32_t(0x10000 + rng.below(0x110000 - 0x10000));
        break;  // any 4-byte
      default: {
        static const uint32_t kSpaces[] = {0xA0, 0x85, 0x1680, 0x2003, 0x2028, 0x3000, 0x202F, 0x0660};
        cp = kSpaces[rng.below(std::size(kSpaces))];
      }
    }
    s += utf8(cp);
  }
  return s;
}

TEST_F(TokenizerTest, RoundTripRandomUtf8) {
  for (const char* pre : {"gpt2", "llama-bpe", "qwen2"}) {
    SCOPED_TRACE(pre);
    const Tokenizer t = make(pre);
    Rng rng(42);
    for (int i = 0; i < 400; ++i) {
      const std::string s = random_utf8(rng, 120);
      const std::vector<int32_t> ids = t.encode(s);
      ASSERT_EQ(t.decode(ids), s) << "case " << i;
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < t.vocab_size());
      // Joining the pre-tokenizer's words gives the text back too.
      std::string joined;
      for (const auto& w : t.pre_tokenize(s)) {
        ASSERT_FALSE(w.empty());
        joined += w;
      }
      ASSERT_EQ(joined, s);
    }
  }
}

TEST_F(TokenizerTest, RoundTripWithSpecialTokensInText) {
  const Tokenizer t = make("llama-bpe");
  Rng rng(7);
  const char* specials[] = {"<|endoftext|>", "<|mdm_mask|>", "<|end", "<tool>"};
  for (int i = 0; i < 200; ++i) {
    std::string s;
    for (int k = 0; k < 4; ++k) s += random_utf8(rng, 20) + specials[rng.below(4)];
    ASSERT_EQ(t.decode(t.encode(s), true), s);
    ASSERT_EQ(t.decode(t.encode(s, false, false)), s);
  }
}

TEST_F(TokenizerTest, RoundTripRandomBytes) {
  for (const char* pre : {"gpt2", "llama-bpe", "qwen2"}) {
    SCOPED_TRACE(pre);
    const Tokenizer t = make(pre);
    Rng rng(1234);
    for (int i = 0; i < 400; ++i) {
      std::string s(rng.below(200), '\0');
      for (char& c : s) c = char(rng.below(256));
      ASSERT_EQ(t.decode(t.encode(s, false, false)), s) << "case " << i;
      ASSERT_EQ(t.decode(t.encode(s), true), s) << "case " << i;
    }
  }
}

TEST_F(TokenizerTest, LongInputsAreFast) {
  const Tokenizer t = make("gpt2");
  Rng rng(99);
  std::string text;
  while (text.size() < 100000) text += random_utf8(rng, 50) + " the and hello world 12 ";
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = t.encode(text);
  // One word of 10k spaces (at the end of the text, so the pre-tokenizer keeps it whole).
  const std::vector<int32_t> spaces = t.encode(std::string(10000, ' '));
  const std::vector<int32_t> letters = t.encode(std::string(100000, 'a'));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 1.0);
  EXPECT_EQ(t.decode(ids), text);
  EXPECT_EQ(spaces, std::vector<int32_t>(2500, id("ĠĠĠĠ")));
  EXPECT_EQ(letters.size(), 100000u);
}

TEST(TokenizerValidation, ErrorsNameTheKey) {
  const std::vector<std::string> bytes = gpt2_byte_tokens();
  auto message = [&](auto&& build) -> std::string {
    try {
      build();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(message([&] {
              Tokenizer::from_vocab("llama", "", bytes, {}, {}, -1, -1, -1, -1, false);
            }).find("unsupported tokenizer model 'llama' (tokenizer.ggml.model)"),
            std::string::npos);
  EXPECT_NE(message([&] {
              Tokenizer::from_vocab("gpt2", "", bytes, {1, 1}, {}, -1, -1, -1, -1, false);
            }).find("tokenizer.ggml.token_type"),
            std::string::npos);
  std::vector<int32_t> bad_types(bytes.size(), 1);
  bad_types[7] = 9;
  EXPECT_NE(message([&] {
              Tokenizer::from_vocab("gpt2", "", bytes, bad_types, {}, -1, -1, -1, -1, false);
            }).find("tokenizer.ggml.token_type[7]"),
            std::string::npos);
  EXPECT_NE(message([&] {
              Tokenizer::from_vocab("gpt2", "", bytes, {}, {}, 256, -1, -1, -1, false);
            }).find("tokenizer.ggml.bos_token_id"),
            std::string::npos);
  EXPECT_NE(message([&] {
              Tokenizer::from_vocab("gpt2", "", bytes, {}, {}, -1, -1, -1, -7, false);
            }).find("tokenizer.ggml.mask_token_id"),
            std::string::npos);
  EXPECT_NE(message([&] {
              Tokenizer::from_vocab("gpt2", "", bytes, {}, {"a b", "ab"}, -1, -1, -1, -1, false);
            }).find("tokenizer.ggml.merges[1]"),
            std::string::npos);
  EXPECT_NE(message([&] {
              Tokenizer::from_vocab("gpt2", "", {}, {}, {}, -1, -1, -1, -1, false);
            }).find("tokenizer.ggml.tokens"),
            std::string::npos);
}

TEST(TokenizerValidation, MissingByteTokens) {
  // A vocabulary without the token for byte 0x00 ("Ā", id 188): encoding that byte needs an
  // unknown token, or fails with a clear error; everything else still works.
  std::vector<std::string> tokens = gpt2_byte_tokens();
  tokens.erase(tokens.begin() + 188);
  const Tokenizer no_unk = Tokenizer::from_vocab("gpt2", "gpt2", tokens, {}, {}, -1, -1, -1, -1, false);
  EXPECT_EQ(no_unk.decode(no_unk.encode("ok")), "ok");
  try {
    no_unk.encode(std::string("a\0b", 3));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("0x00"), std::string::npos) << e.what();
  }
  tokens.push_back("<unk>");
  std::vector<int32_t> types(tokens.size(), 1);
  types.back() = 2;
  const Tokenizer with_unk = Tokenizer::from_vocab("gpt2", "gpt2", tokens, types, {}, -1, -1, -1, -1, false);
  EXPECT_EQ(with_unk.unknown_id(), int32_t(tokens.size()) - 1);
  const std::vector<int32_t> ids = with_unk.encode(std::string("a\0", 2));
  EXPECT_EQ(ids, (std::vector<int32_t>{64, with_unk.unknown_id()}));
}

TEST(TokenizerValidation, ByteTypeTokensInHexForm) {
  std::vector<std::string> tokens = gpt2_byte_tokens();
  tokens.push_back("<0x41>");
  std::vector<int32_t> types(tokens.size(), 1);
  types.back() = 6;
  const Tokenizer t = Tokenizer::from_vocab("gpt2", "gpt2", tokens, types, {}, -1, -1, -1, -1, false);
  EXPECT_EQ(t.token_piece(t.vocab_size() - 1), "A");
}

TEST_F(TokenizerTest, LoadsFromGguf) {
  namespace fs = std::filesystem;
  const fs::path path =
      fs::temp_directory_path() / ("canvas_tokenizer_test_" + std::to_string(::getpid()) + ".gguf");
  GgufWriter writer;
  writer.set("general.architecture", GgufValue::string("llada"));
  writer.set("tokenizer.ggml.model", GgufValue::string("gpt2"));
  writer.set("tokenizer.ggml.pre", GgufValue::string("llama-bpe"));
  writer.set("tokenizer.ggml.tokens", GgufValue::string_array(vocab_.tokens));
  writer.set(
      "tokenizer.ggml.token_type",
      GgufValue::int_array(GgufType::Int32, std::vector<int64_t>(vocab_.types.begin(), vocab_.types.end())));
  writer.set("tokenizer.ggml.merges", GgufValue::string_array(kMerges));
  writer.set("tokenizer.ggml.bos_token_id", GgufValue::u32(uint32_t(id("<|endoftext|>"))));
  writer.set("tokenizer.ggml.eos_token_id", GgufValue::u32(uint32_t(id("<|endoftext|>"))));
  writer.set("tokenizer.ggml.mask_token_id", GgufValue::u32(uint32_t(id("<|mdm_mask|>"))));
  writer.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(true));
  writer.write(path.string());

  const Tokenizer from_file = Tokenizer::from_gguf(*GgufFile::open(path.string()));
  const Tokenizer from_memory = make("llama-bpe", true);
  EXPECT_EQ(from_file.vocab_size(), from_memory.vocab_size());
  EXPECT_EQ(from_file.bos_id(), id("<|endoftext|>"));
  EXPECT_EQ(from_file.mask_id(), id("<|mdm_mask|>"));
  EXPECT_EQ(from_file.pad_id(), -1);
  EXPECT_TRUE(from_file.add_bos());
  EXPECT_EQ(from_file.pre_name(), "llama-bpe");
  Rng rng(5);
  for (int i = 0; i < 50; ++i) {
    const std::string s = random_utf8(rng, 60) + " the world<|mdm_mask|>abc her";
    EXPECT_EQ(from_file.encode(s, true), from_memory.encode(s, true));
  }

  // An unsupported model and a bad token_type array are reported with the key (and the file).
  writer.set("tokenizer.ggml.model", GgufValue::string("llama"));
  writer.write(path.string());
  try {
    Tokenizer::from_gguf(*GgufFile::open(path.string()));
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported tokenizer model 'llama' (tokenizer.ggml.model)"),
              std::string::npos)
        << e.what();
  }
  writer.set("tokenizer.ggml.model", GgufValue::string("gpt2"));
  writer.set("tokenizer.ggml.token_type", GgufValue::int_array(GgufType::Int32, {1, 1, 1}));
  writer.write(path.string());
  try {
    Tokenizer::from_gguf(*GgufFile::open(path.string()));
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.token_type"), std::string::npos) << e.what();
  }
  fs::remove(path);
}

}  // namespace
}  // namespace canvas
