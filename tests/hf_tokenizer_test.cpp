// Tests for the SentencePiece-style BPE tokenizer (tokenizer.json and GGUF "gemma4"): hand-worked merges on
// the fixture vocabulary, byte fallback, whitespace, added tokens, decode, byte-exact round trips, the GGUF
// twin giving identical ids, split behaviours, validation errors and speed on long inputs.
#include "io/hf_tokenizer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "io/gguf.h"
#include "io/json.h"
#include "io/utf8.h"
#include "test_util.h"

namespace canvas {
namespace {

// The fixture (tests/fixtures/make_hf_fixtures.py): ids 0-7 added tokens <pad> <eos> <bos> <unk> <mask>
// <|turn> <turn|> <br> (all special except <br>), ids 8-263 the byte tokens <0x00>..<0xFF>, then single
// characters "▁", "\n", a-z, H I T W . , ! ? ' ü, then the 25 merge results in rank order:
//   0 ▁+t  1 h+e  2 ▁t+he  3 i+n  4 in+g  5 e+r  6 ▁+▁  7 \n+\n  8 l+l  9 o+r  10 ▁+w  11 ▁w+or  12 l+d
//   13 ▁wor+ld  14 y+z  15 x+y  16 a+a  17 ▁+H  18 ▁▁+▁▁  19 ü+b  20 üb+er  21 ▁+c  22 a+t  23 ▁c+at
//   24 H+i
// Digits, most capitals, 'é', emoji, '<', '>', '\t' are not tokens: they fall back to bytes.
const std::string SP = "\u2581";

std::string hf_fixture(const std::string& name) {
  return test::fixture("hf/" + name);
}

const HfTokenizer& fixture_tokenizer() {
  static const HfTokenizer t = HfTokenizer::from_json(hf_fixture("tokenizer.json"));
  return t;
}

// Token strings -> ids, each looked up in the vocabulary (the strings are what the test expects).
std::vector<int32_t> ids(const HfTokenizer& t, std::initializer_list<std::string> pieces) {
  std::vector<int32_t> out;
  for (const std::string& p : pieces) {
    const int32_t id = t.token_id(p);
    EXPECT_GE(id, 0) << "test bug: '" << p << "' is not a token";
    out.push_back(id);
  }
  return out;
}
int32_t byte_id(uint8_t b) {
  return 8 + b;
}

std::string show(const HfTokenizer& t, const std::vector<int32_t>& v) {
  std::string s;
  for (int32_t id : v) s += "[" + (id >= 0 && id < t.vocab_size() ? t.token_text(id) : "?") + "]";
  return s;
}

void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown; expected one mentioning '" << *parts.begin() << "'";
  } catch (const Error& e) {
    for (const std::string& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "message: " << e.what() << "\nmissing: " << part;
  }
}

// Random valid UTF-8 without U+2581: mostly characters the vocabulary knows, plus spaces, newlines,
// Latin-1, CJK, emoji and code points from every plane.
std::string random_text(Rng& rng, size_t max_chars) {
  static const std::vector<std::string> common = {" ",  " ",    " ", "\n", "\t", "the", "cat",
                                                  "er", "über", "x", "y",  "z",  "a",   "H",
                                                  "é",  "😀",    "7", "<",  ">",  "\r"};
  std::string s;
  const size_t n = rng.below(max_chars + 1);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t kind = rng.below(4);
    if (kind == 0) {
      s += common[rng.below(common.size())];
    } else if (kind == 1) {
      s += char(0x20 + rng.below(0x5F));  // printable ASCII
    } else {
      uint32_t cp;
      do {
        cp = kind == 2 ? uint32_t(0x80 + rng.below(0x3000)) : uint32_t(rng.below(0x110000));
      } while ((cp >= 0xD800 && cp <= 0xDFFF) || cp == 0x2581 || cp == 0);
      s += utf8(cp);
    }
  }
  return s;
}

TEST(HfTokenizerTest, LoadsTheFixture) {
  const HfTokenizer& t = fixture_tokenizer();
  EXPECT_EQ(t.vocab_size(), 327);
  EXPECT_EQ(t.merge_count(), 25u);
  EXPECT_EQ(t.pad_id(), 0);
  EXPECT_EQ(t.eos_id(), 1);
  EXPECT_EQ(t.bos_id(), 2);
  EXPECT_EQ(t.unknown_id(), 3);
  EXPECT_TRUE(t.add_bos());  // TemplateProcessing starts with <bos>
  EXPECT_EQ(t.token_id("<0x00>"), 8);
  EXPECT_EQ(t.token_id("<0xFF>"), 263);
  EXPECT_EQ(t.token_id(SP), 264);
  EXPECT_EQ(t.token_id("\n"), 265);
  EXPECT_EQ(t.token_id(SP + "t"), 302);  // first merge result
  EXPECT_EQ(t.token_id("Hi"), 326);      // last
  EXPECT_EQ(t.token_id("nope"), -1);
  EXPECT_EQ(t.kind(1), HfVocab::Kind::Special);
  EXPECT_EQ(t.kind(3), HfVocab::Kind::Unknown);
  EXPECT_EQ(t.kind(7), HfVocab::Kind::Added);
  EXPECT_EQ(t.kind(8 + 0x41), HfVocab::Kind::Byte);
  EXPECT_EQ(t.kind(264), HfVocab::Kind::Normal);
  EXPECT_TRUE(t.is_special(5));
  EXPECT_FALSE(t.is_special(7));
}

TEST(HfTokenizerTest, HandWorkedMerges) {
  const HfTokenizer& t = fixture_tokenizer();
  struct Case {
    std::string text;
    std::vector<int32_t> want;
  };
  const std::vector<Case> cases = {
      // " the" -> "▁the": ▁+t (rank 0), h+e (1), ▁t+he (2).
      {" the", ids(t, {SP + "the"})},
      // No dummy prefix: "the" at the start has no ▁, so only h+e fires.
      {"the", ids(t, {"t", "he"})},
      // "the cat" -> t he ▁ c a t: h+e (1), ▁+c (21), a+t (22), ▁c+at (23).
      {"the cat", ids(t, {"t", "he", SP + "cat"})},
      // Rank order, not left to right: y+z (14) beats x+y (15), so "xyz" is x yz, not xy z.
      {"xyz", ids(t, {"x", "yz"})},
      {"xy", ids(t, {"xy"})},
      // x y z x y: yz first (14); x+yz is no merge; the second x+y (15) still fires.
      {"xyzxy", ids(t, {"x", "yz", "xy"})},
      // Equal ranks: leftmost first.
      {"aaa", ids(t, {"aa", "a"})},
      {"aaaa", ids(t, {"aa", "aa"})},
      // e+r (5) before ü+b (19), then üb+er (20).
      {"über", ids(t, {"über"})},
      // ▁+w (10), o+r (9) first (lower rank), l+d (12), ▁w+or (11) ... -> ▁world.
      {"hello world", ids(t, {"he", "ll", "o", SP + "world"})},
      {"Hi", ids(t, {"Hi"})},
      // ▁+H (17) beats H+i (24).
      {" Hi", ids(t, {SP + "H", "i"})},
      {"", {}},
  };
  for (const Case& c : cases) {
    const std::vector<int32_t> got = t.encode(c.text);
    EXPECT_EQ(got, c.want) << "'" << c.text << "' gave " << show(t, got) << ", want " << show(t, c.want);
  }
}

TEST(HfTokenizerTest, WhitespaceRunsAndEdges) {
  const HfTokenizer& t = fixture_tokenizer();
  EXPECT_EQ(t.encode(" "), ids(t, {SP}));
  EXPECT_EQ(t.encode("  "), ids(t, {SP + SP}));
  EXPECT_EQ(t.encode("   "), ids(t, {SP + SP, SP}));         // ▁+▁ leftmost, then nothing
  EXPECT_EQ(t.encode("    "), ids(t, {SP + SP + SP + SP}));  // ▁▁+▁▁ (18)
  EXPECT_EQ(t.encode("     "), ids(t, {SP + SP + SP + SP, SP}));
  EXPECT_EQ(t.encode(" cat "), ids(t, {SP + "cat", SP}));  // leading and trailing spaces kept
  EXPECT_EQ(t.encode("cat  "), ids(t, {"c", "at", SP + SP}));
  EXPECT_EQ(t.encode("  the"), ids(t, {SP, SP + "the"}));  // ▁+t (0) before ▁+▁ (6)
  EXPECT_EQ(t.encode("\n"), ids(t, {"\n"}));
  EXPECT_EQ(t.encode("\n\n\n"), ids(t, {"\n\n", "\n"}));
  EXPECT_EQ(t.encode("\n\n\n\n"), ids(t, {"\n\n", "\n\n"}));
  EXPECT_EQ(t.encode("a\n\nb"), ids(t, {"a", "\n\n", "b"}));
  EXPECT_EQ(t.encode("\t"), (std::vector<int32_t>{byte_id('\t')}));  // not a token: byte fallback
  EXPECT_EQ(t.encode("\r\n"), (std::vector<int32_t>{byte_id('\r'), t.token_id("\n")}));
}

TEST(HfTokenizerTest, ByteFallback) {
  const HfTokenizer& t = fixture_tokenizer();
  // é = C3 A9 is not a token; ü = C3 BC is.
  EXPECT_EQ(t.encode("é"), (std::vector<int32_t>{byte_id(0xC3), byte_id(0xA9)}));
  EXPECT_EQ(t.encode("ü"), ids(t, {"ü"}));
  EXPECT_EQ(t.encode("café"), (std::vector<int32_t>{t.token_id("c"), t.token_id("a"), t.token_id("f"),
                                                    byte_id(0xC3), byte_id(0xA9)}));
  // 😀 = F0 9F 98 80.
  EXPECT_EQ(t.encode("😀"),
            (std::vector<int32_t>{byte_id(0xF0), byte_id(0x9F), byte_id(0x98), byte_id(0x80)}));
  EXPECT_EQ(t.encode(" 😀 the"), (std::vector<int32_t>{t.token_id(SP), byte_id(0xF0), byte_id(0x9F),
                                                      byte_id(0x98), byte_id(0x80), t.token_id(SP + "the")}));
  // ASCII outside the vocabulary too; a byte-fallback character breaks merges around it.
  EXPECT_EQ(t.encode("a7t"), (std::vector<int32_t>{t.token_id("a"), byte_id('7'), t.token_id("t")}));
  EXPECT_EQ(t.encode("Q"), (std::vector<int32_t>{byte_id('Q')}));
  // Invalid UTF-8 bytes become their byte tokens one by one.
  EXPECT_EQ(t.encode(std::string("a\xC3(\xFF", 4)),
            (std::vector<int32_t>{t.token_id("a"), byte_id(0xC3), byte_id('('), byte_id(0xFF)}));
}

TEST(HfTokenizerTest, AddedTokensInText) {
  const HfTokenizer& t = fixture_tokenizer();
  EXPECT_EQ(t.encode("<bos>hi<eos>"), (std::vector<int32_t>{2, t.token_id("h"), t.token_id("i"), 1}));
  // The prompt format: <bos><|turn>user\n{text}<turn|>\n<|turn>model\n
  EXPECT_EQ(t.encode("<|turn>user\n the cat<turn|>\n"),
            (std::vector<int32_t>{5, t.token_id("u"), t.token_id("s"), t.token_id("er"), t.token_id("\n"),
                                  t.token_id(SP + "the"), t.token_id(SP + "cat"), 6, t.token_id("\n")}));
  EXPECT_EQ(t.encode("<eos><eos>"), (std::vector<int32_t>{1, 1}));
  EXPECT_EQ(t.encode("<mask>"), (std::vector<int32_t>{4}));  // matched in the normalized text
  EXPECT_EQ(t.encode("a<br>b"), (std::vector<int32_t>{t.token_id("a"), 7, t.token_id("b")}));
  EXPECT_EQ(t.encode("<unk>"), (std::vector<int32_t>{3}));
  // Text around an added token is encoded on its own: "t" and "he" cannot merge across <br>.
  EXPECT_EQ(t.encode(" t<br>he"), (std::vector<int32_t>{t.token_id(SP + "t"), 7, t.token_id("he")}));
  // A near miss is plain text: '<' and '>' fall back to bytes.
  EXPECT_EQ(t.encode("<bos"),
            (std::vector<int32_t>{byte_id('<'), t.token_id("b"), t.token_id("o"), t.token_id("s")}));
  // parse_special = false: all literal.
  EXPECT_EQ(
      t.encode("<eos>", false, false),
      (std::vector<int32_t>{byte_id('<'), t.token_id("e"), t.token_id("o"), t.token_id("s"), byte_id('>')}));
  // add_bos prepends <bos>.
  EXPECT_EQ(t.encode(" the", true), (std::vector<int32_t>{2, t.token_id(SP + "the")}));
}

TEST(HfTokenizerTest, Decode) {
  const HfTokenizer& t = fixture_tokenizer();
  const std::vector<int32_t> v = {2, 5, t.token_id("u"), t.token_id(SP + "the"), 7, 1};
  EXPECT_EQ(t.decode(v), "u the<br>");
  EXPECT_EQ(t.decode(v, true), "<bos><|turn>u the<br><eos>");
  EXPECT_EQ(t.decode({t.token_id(SP + SP), t.token_id("\n\n")}), "  \n\n");
  EXPECT_EQ(t.decode({byte_id(0xC3), byte_id(0xA9)}), "é");
  EXPECT_EQ(t.decode({byte_id(0xC3)}), std::string("\xC3", 1));  // not valid UTF-8: kept as the byte
  EXPECT_EQ(t.decode({byte_id(0xF0), byte_id(0x9F), t.token_id("a")}), std::string("\xF0\x9F"
                                                                                   "a"));
  EXPECT_EQ(t.token_piece(t.token_id(SP + "world")), " world");
  EXPECT_EQ(t.token_piece(byte_id('A')), "A");
  EXPECT_EQ(t.token_piece(1), "<eos>");
  EXPECT_EQ(t.token_text(t.token_id(SP + "world")), SP + "world");
  expect_error([&] { t.decode({327}); }, {"327", "out of range"});
  expect_error([&] { t.decode({-1}); }, {"-1", "out of range"});
  expect_error([&] { t.token_piece(1000); }, {"1000"});
}

TEST(HfTokenizerTest, RoundTripRandomUtf8) {
  const HfTokenizer& t = fixture_tokenizer();
  Rng rng(7);
  for (int i = 0; i < 400; ++i) {
    const std::string s = random_text(rng, 40);
    const std::vector<int32_t> v = t.encode(s);
    ASSERT_EQ(t.decode(v, true), s) << "ids " << show(t, v);
  }
  // With added tokens in the text: rendered back when render_special, dropped (only the specials) otherwise.
  const std::string s = "<bos> the<|turn>user\n\n  x<br>😀<eos>";
  EXPECT_EQ(t.decode(t.encode(s), true), s);
  EXPECT_EQ(t.decode(t.encode(s)), " theuser\n\n  x<br>😀");
}

TEST(HfTokenizerTest, RoundTripRandomBytes) {
  const HfTokenizer& t = fixture_tokenizer();
  Rng rng(11);
  for (int i = 0; i < 300; ++i) {
    std::string s;
    const size_t n = rng.below(30);
    for (size_t k = 0; k < n; ++k) s += char(rng.below(256));
    if (s.find(SP) != std::string::npos) continue;
    ASSERT_EQ(t.decode(t.encode(s), true), s);
  }
}

TEST(HfTokenizerTest, GgufTwinGivesIdenticalIds) {
  const HfTokenizer& json = fixture_tokenizer();
  const auto file = GgufFile::open(hf_fixture("tokenizer.gguf"));
  const HfTokenizer gguf = HfTokenizer::from_gguf(*file);
  ASSERT_EQ(gguf.vocab_size(), json.vocab_size());
  EXPECT_EQ(gguf.merge_count(), json.merge_count());
  EXPECT_EQ(gguf.bos_id(), 2);
  EXPECT_EQ(gguf.eos_id(), 1);
  EXPECT_EQ(gguf.pad_id(), 0);
  EXPECT_EQ(gguf.unknown_id(), 3);
  EXPECT_TRUE(gguf.add_bos());
  for (int32_t id = 0; id < json.vocab_size(); ++id) {
    EXPECT_EQ(gguf.kind(id), json.kind(id)) << id;
    EXPECT_EQ(gguf.token_piece(id), json.token_piece(id)) << id;
  }
  std::vector<std::string> texts = {
      " the cat", "xyzxy",        "aaa",    "   ",          "\n\n\n",
      "é😀",       "<bos>hi<eos>", "a<br>b", "<mask> <unk>", "<|turn>user\n über<turn|>\n",
      "<eos"};
  Rng rng(3);
  for (int i = 0; i < 200; ++i) texts.push_back(random_text(rng, 30));
  for (const std::string& s : texts) {
    EXPECT_EQ(gguf.encode(s), json.encode(s)) << s;
    EXPECT_EQ(gguf.encode(s, true, false), json.encode(s, true, false)) << s;
  }
}

// write_gguf: tokenizer.json -> GGUF -> from_gguf gives the tokenizer from_json gives, with the keys the
// fixture's tokenizer.gguf holds.
TEST(HfTokenizerTest, WriteGgufReadsBackAsTheSameTokenizer) {
  const HfTokenizer& json = fixture_tokenizer();
  const HfVocab vocab = HfTokenizer::vocab_from_json(hf_fixture("tokenizer.json"));
  EXPECT_EQ(HfTokenizer::gguf_problem(vocab), "");
  GgufWriter w;
  HfTokenizer::write_gguf(vocab, w);
  const std::string path = test::temp_path("written_tokenizer.gguf");
  w.write(path);
  const auto file = GgufFile::open(path);
  const auto twin = GgufFile::open(hf_fixture("tokenizer.gguf"));
  EXPECT_EQ(file->get_string("tokenizer.ggml.model", ""), "gemma4");
  for (const char* key : {"tokenizer.ggml.tokens", "tokenizer.ggml.merges"})
    EXPECT_EQ(file->get_string_array(key), twin->get_string_array(key)) << key;
  EXPECT_EQ(file->get_int_array("tokenizer.ggml.token_type"), twin->get_int_array("tokenizer.ggml.token_type"));
  EXPECT_EQ(file->get_float_array("tokenizer.ggml.scores").size(), size_t(json.vocab_size()));
  const HfTokenizer back = HfTokenizer::from_gguf(*file);
  ASSERT_EQ(back.vocab_size(), json.vocab_size());
  EXPECT_EQ(back.merge_count(), json.merge_count());
  EXPECT_EQ(back.bos_id(), json.bos_id());
  EXPECT_EQ(back.eos_id(), json.eos_id());
  EXPECT_EQ(back.pad_id(), json.pad_id());
  EXPECT_EQ(back.unknown_id(), json.unknown_id());
  EXPECT_EQ(back.add_bos(), json.add_bos());
  for (int32_t id = 0; id < json.vocab_size(); ++id) {
    EXPECT_EQ(back.kind(id), json.kind(id)) << id;
    EXPECT_EQ(back.token_text(id), json.token_text(id)) << id;
  }
  std::vector<std::string> texts = {" the cat", "über 😀é", "\n\n\n x", "   ", "<mask> <unk>a<br>b",
                                    "<|turn>user\n über<turn|>\n", "<eos"};
  Rng rng(11);
  for (int i = 0; i < 100; ++i) texts.push_back(random_text(rng, 30));
  for (const std::string& s : texts) {
    EXPECT_EQ(back.encode(s), json.encode(s)) << s;
    EXPECT_EQ(back.encode(s, true, false), json.encode(s, true, false)) << s;
  }
  std::remove(path.c_str());
}

// One rule picks a vocabulary file's kind: a tokenizer.json (named, in a directory, or beside a config.json)
// or else a GGUF, whose mask id comes back when asked for; a folder without tokenizer.json is an error.
TEST(HfTokenizerTest, VocabFromFilePicksJsonOrGguf) {
  const HfTokenizer& json = fixture_tokenizer();
  test::TempDir dir;
  const std::string gguf = dir.path("vocab.gguf");
  {
    GgufWriter w;
    HfTokenizer::write_gguf(HfTokenizer::vocab_from_json(hf_fixture("tokenizer.json")), w);
    w.set("tokenizer.ggml.mask_token_id", GgufValue::u32(4));
    w.write(gguf);
  }
  int32_t mask = -7;
  EXPECT_EQ(HfTokenizer::vocab_from_file(gguf, &mask).tokens.size(), size_t(json.vocab_size()));
  EXPECT_EQ(mask, 4);
  EXPECT_EQ(HfTokenizer::vocab_from_file(hf_fixture("tokenizer.json"), &mask).tokens.size(), size_t(json.vocab_size()));
  EXPECT_EQ(mask, -1);  // a tokenizer.json names no mask
  std::filesystem::copy_file(hf_fixture("tokenizer.json"), dir.path("tokenizer.json"));
  std::ofstream(dir.path("config.json")) << "{}";
  for (const std::string& path : {dir.path(""), dir.path("config.json"), gguf}) {
    const HfTokenizer t = HfTokenizer::from_file(path);
    EXPECT_EQ(t.vocab_size(), json.vocab_size()) << path;
    EXPECT_EQ(t.encode(" the cat über"), json.encode(" the cat über")) << path;
  }
  EXPECT_EQ(tokenizer_json_path(gguf), "");
  std::filesystem::remove(dir.path("tokenizer.json"));
  expect_error([&] { HfTokenizer::from_file(dir.path("")); }, {"holds no tokenizer.json"});
  expect_error([&] { HfTokenizer::from_file(dir.path("config.json")); }, {"no tokenizer.json beside it"});
}

// What the GGUF form cannot hold is named, and write_gguf refuses it before writing.
TEST(HfTokenizerTest, GgufProblemNamesWhatGgufCannotHold) {
  const HfVocab fixture = HfTokenizer::vocab_from_json(hf_fixture("tokenizer.json"));
  auto problem = [&](const std::function<void(HfVocab&)>& edit) {
    HfVocab v = fixture;
    edit(v);
    return HfTokenizer::gguf_problem(v);
  };
  EXPECT_NE(problem([](HfVocab& v) { v.replacements.clear(); }).find("normalizer"), std::string::npos);
  EXPECT_NE(problem([](HfVocab& v) { v.splits.push_back({"e", "Isolated"}); }).find("'e'"), std::string::npos);
  EXPECT_NE(problem([](HfVocab& v) { v.ignore_merges = true; }).find("ignore_merges"), std::string::npos);
  EXPECT_NE(problem([](HfVocab& v) { v.byte_fallback = false; }).find("byte_fallback"), std::string::npos);
  // <mask> is special but matched in normalized text: the same as raw matching, as it holds no space.
  EXPECT_EQ(problem([](HfVocab& v) { v.normalized[4] = true; }), "");
  EXPECT_NE(problem([](HfVocab& v) { v.tokens[4] = "<" + SP + "mask>"; }).find("added token 4"), std::string::npos);
  EXPECT_NE(problem([](HfVocab& v) {
              for (const char* t : {"a b", "b c", "a bc"}) v.tokens.push_back(t);  // "a b c": "a" + "b c" first
              v.kinds.resize(v.tokens.size(), HfVocab::Kind::Normal);
              v.normalized.resize(v.tokens.size(), false);
              v.merges.push_back({"a b", "c"});
            }).find("merge 25"),
            std::string::npos);
  HfVocab bad = fixture;
  bad.ignore_merges = true;
  GgufWriter w;
  expect_error([&] { HfTokenizer::write_gguf(bad, w); }, {"gemma4", "ignore_merges"});
}

// The fixture's JSON, edited by `edit`, loaded again.
HfTokenizer edited(const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json doc = load_json_file(hf_fixture("tokenizer.json"));
  edit(doc);
  return HfTokenizer::from_json_text(doc.dump(), "edited tokenizer.json");
}

TEST(HfTokenizerTest, MergesAsStringsEqualMergesAsPairs) {
  const HfTokenizer& pairs = fixture_tokenizer();
  const HfTokenizer strings = edited([](nlohmann::json& doc) {
    nlohmann::json merges = nlohmann::json::array();
    for (const auto& m : doc["model"]["merges"])
      merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    doc["model"]["merges"] = merges;
  });
  Rng rng(5);
  for (int i = 0; i < 100; ++i) {
    const std::string s = random_text(rng, 30);
    EXPECT_EQ(strings.encode(s), pairs.encode(s)) << s;
  }
}

TEST(HfTokenizerTest, SplitBehaviors) {
  // "x  the" normalizes to "x▁▁the"; splitting on "▁" decides what may merge.
  struct Case {
    const char* behavior;
    std::vector<std::string> want;
  };
  const std::vector<Case> cases = {
      {nullptr, {"x", SP, SP + "the"}},                  // one word: ▁+t (0) before ▁+▁ (6)
      {"Isolated", {"x", SP, SP, "t", "he"}},            // x | ▁ | ▁ | the
      {"MergedWithPrevious", {"x", SP, SP, "t", "he"}},  // x▁ | ▁ | the
      {"MergedWithNext", {"x", SP, SP + "the"}},         // x | ▁ | ▁the
      {"Contiguous", {"x", SP + SP, "t", "he"}},         // x | ▁▁ | the
      {"Removed", {"x", "t", "he"}},                     // x | the
  };
  for (const Case& c : cases) {
    const HfTokenizer t = edited([&](nlohmann::json& doc) {
      if (c.behavior)
        doc["pre_tokenizer"] = {{"type", "Sequence"},
                                {"pretokenizers",
                                 {{{"type", "Split"},
                                   {"pattern", {{"String", SP}}},
                                   {"behavior", c.behavior},
                                   {"invert", false}}}}};
    });
    std::vector<int32_t> want;
    for (const std::string& p : c.want) want.push_back(t.token_id(p));
    EXPECT_EQ(t.encode("x  the"), want)
        << (c.behavior ? c.behavior : "none") << ": " << show(t, t.encode("x  the"));
  }
}

TEST(HfTokenizerTest, NormalizerVariants) {
  // No normalizer: a space is just a character (not a token here, so a byte).
  const HfTokenizer raw = edited([](nlohmann::json& doc) { doc["normalizer"] = nullptr; });
  EXPECT_EQ(raw.encode(" t"), (std::vector<int32_t>{byte_id(' '), raw.token_id("t")}));
  // A Sequence of Replaces is applied in order; decode undoes them in reverse.
  const HfTokenizer seq = edited([](nlohmann::json& doc) {
    doc["normalizer"] = {{"type", "Sequence"},
                         {"normalizers",
                          {{{"type", "Replace"}, {"pattern", {{"String", "\t"}}}, {"content", " "}},
                           {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", SP}}}}};
  });
  EXPECT_EQ(seq.encode("\tthe"), seq.encode(" the"));
  EXPECT_EQ(seq.decode(seq.encode("\tthe")), "\tthe");  // ▁ -> ' ' -> '\t' (the replacements reversed)
}

TEST(HfTokenizerTest, UnknownTokenWithoutByteFallback) {
  const HfTokenizer fused = edited([](nlohmann::json& doc) { doc["model"]["byte_fallback"] = false; });
  EXPECT_EQ(fused.encode("aéé😀b"), (std::vector<int32_t>{fused.token_id("a"), 3, fused.token_id("b")}));
  const HfTokenizer separate = edited([](nlohmann::json& doc) {
    doc["model"]["byte_fallback"] = false;
    doc["model"]["fuse_unk"] = false;
  });
  EXPECT_EQ(separate.encode("aéé"), (std::vector<int32_t>{separate.token_id("a"), 3, 3}));
  const HfTokenizer none = edited([](nlohmann::json& doc) {
    doc["model"]["byte_fallback"] = false;
    doc["model"].erase("unk_token");
  });
  expect_error([&] { none.encode("é"); }, {"C3 A9", "not in the vocabulary"});
}

TEST(HfTokenizerTest, IgnoreMergesTakesWholeWords) {
  auto add_xyz = [](nlohmann::json& doc) { doc["model"]["vocab"]["xyz"] = 327; };
  const HfTokenizer plain = edited(add_xyz);
  EXPECT_EQ(plain.encode("xyz"), (std::vector<int32_t>{plain.token_id("x"), plain.token_id("yz")}));
  const HfTokenizer whole = edited([&](nlohmann::json& doc) {
    add_xyz(doc);
    doc["model"]["ignore_merges"] = true;
  });
  EXPECT_EQ(whole.encode("xyz"), (std::vector<int32_t>{327}));
  EXPECT_EQ(whole.encode("xyzx"),
            (std::vector<int32_t>{whole.token_id("x"), whole.token_id("yz"), whole.token_id("x")}));
}

TEST(HfTokenizerTest, ValidationErrorsNameTheKey) {
  const std::string origin = "edited tokenizer.json";
  expect_error([] { edited([](nlohmann::json& d) { d["model"]["type"] = "Unigram"; }); },
               {origin, "model.type", "Unigram"});
  expect_error([] { edited([](nlohmann::json& d) {
                      d["normalizer"] = {{"type", "NFKC"}};
                    }); },
               {origin, "unsupported normalizer type 'NFKC'"});
  expect_error([] { edited([](nlohmann::json& d) {
                      d["normalizer"]["pattern"] = {{"Regex", " +"}};
                    }); },
               {origin, "normalizer.pattern", "Regex"});
  expect_error([] { edited([](nlohmann::json& d) {
                      d["pre_tokenizer"] = {{"type", "ByteLevel"}};
                    }); },
               {origin, "unsupported pre_tokenizer type 'ByteLevel'"});
  expect_error([] { edited([](nlohmann::json& d) { d["pre_tokenizer"]["behavior"] = "Sideways"; }); },
               {origin, "behavior 'Sideways'"});
  expect_error([] { edited([](nlohmann::json& d) {
                      d["model"]["merges"].push_back({"q", "Z"});
                    }); },
               {origin, "merge 25", "'Z' is not in the vocabulary"});
  expect_error([] { edited([](nlohmann::json& d) { d["model"]["merges"].push_back("xy"); }); },
               {origin, "model.merges[25]", "'xy'"});
  expect_error([] { edited([](nlohmann::json& d) { d["model"]["vocab"]["zz"] = 400; }); },
               {origin, "id 400", "without gaps"});
  expect_error([] { edited([](nlohmann::json& d) { d["model"]["vocab"]["zz"] = 5; }); },
               {origin, "both have id 5"});
  expect_error([] { edited([](nlohmann::json& d) { d["model"]["vocab"]["zz"] = "5"; }); },
               {origin, "integer id"});
  expect_error([] { edited([](nlohmann::json& d) { d["added_tokens"][1]["lstrip"] = true; }); },
               {origin, "<eos>", "lstrip"});
  expect_error([] { edited([](nlohmann::json& d) { d["added_tokens"][1]["content"] = "<end>"; }); },
               {origin, "added_tokens.1", "'<end>'", "'<eos>'"});
  expect_error([] { edited([](nlohmann::json& d) { d["model"]["unk_token"] = "<nope>"; }); },
               {origin, "<nope>"});
  expect_error([] { edited([](nlohmann::json& d) { d["model"].erase("vocab"); }); },
               {origin, "missing key 'model.vocab'"});
  expect_error([] { HfTokenizer::from_json_text("{\"model\": ", "t.json"); }, {"t.json", "malformed JSON"});
  expect_error([] { HfTokenizer::from_json("/nonexistent/tokenizer.json"); },
               {"/nonexistent/tokenizer.json"});
}

TEST(HfTokenizerTest, GgufValidation) {
  HfVocab v;
  v.tokens = {"a", "b", "ab"};
  v.merges = {{"a", "b"}};
  const HfTokenizer ok = HfTokenizer::from_vocab(v);
  EXPECT_EQ(ok.encode("ab"), (std::vector<int32_t>{2}));
  HfVocab bad = v;
  bad.kinds = {HfVocab::Kind::Byte, HfVocab::Kind::Normal, HfVocab::Kind::Normal};
  expect_error([&] { HfTokenizer::from_vocab(bad); }, {"'a'", "<0xNN>"});
  bad = v;
  bad.merges = {{"a", "a"}};
  expect_error([&] { HfTokenizer::from_vocab(bad); }, {"merge 0", "'aa'"});

  auto write = [](const std::string& model, bool merges) {
    GgufWriter w;
    w.set("tokenizer.ggml.model", GgufValue::string(model));
    w.set("tokenizer.ggml.tokens", GgufValue::string_array({"a", "b", "ab"}));
    if (merges) w.set("tokenizer.ggml.merges", GgufValue::string_array({"a b"}));
    const std::string path = test::temp_path("tok.gguf");
    w.write(path);
    return path;
  };
  const std::string path = write("gemma4", true);
  const HfTokenizer t = HfTokenizer::from_gguf(*GgufFile::open(path));
  EXPECT_EQ(t.encode("ab"), (std::vector<int32_t>{2}));
  expect_error([&] { HfTokenizer::from_gguf(*GgufFile::open(write("gpt2", true))); },
               {"tokenizer.ggml.model", "gpt2"});
  expect_error([&] { HfTokenizer::from_gguf(*GgufFile::open(write("llama", false))); },
               {"tokenizer.ggml.merges"});
  std::remove(path.c_str());
}

TEST(HfTokenizerTest, LongInputsAreFast) {
  const HfTokenizer& t = fixture_tokenizer();
  std::string text;
  Rng rng(9);
  while (text.size() < 1000000) text += random_text(rng, 20) + " the cat über   world\n\n";
  const std::string as(200000, 'a');
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> v = t.encode(text);
  const std::vector<int32_t> a = t.encode(as);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(t.decode(v, true), text);
  EXPECT_EQ(a, std::vector<int32_t>(100000, t.token_id("aa")));
  EXPECT_LT(seconds, 5.0) << "1.2 MB took " << seconds << " s";
}

}  // namespace
}  // namespace canvas

namespace canvas {
namespace {

// A long word (a corpus without pre-tokenizer splits is one) is encoded in pieces cut where no token spans
// the cut: the ids are those of the whole text, whatever the piece size, on the shipped models' Gemma
// vocabulary and the fixture's; texts with runs of one letter, of spaces and newlines, multi-byte and
// unknown characters, and two of the docs.
TEST(HfTokenizerPieces, PiecesGiveTheIdsOfTheWholeText) {
  const auto shipped = GgufFile::open(test::source_path("models/text-dg.gguf"));
  const auto fixture = GgufFile::open(hf_fixture("tokenizer.gguf"));
  std::string prose =
      test::read_text(test::source_path("docs/serving.md")) + test::read_text(test::source_path("docs/diffusiongemma.md"));
  Rng rng(7);
  std::string mixed;
  const char* parts[] = {"a", "aaaa", " ", "   ", "\n", "\n\n", "é", "日本", "🙂", "the ", "x", "\t", "ab"};
  for (int i = 0; i < 20000; ++i) mixed += parts[rng.next() % std::size(parts)];
  for (const GgufFile* file : {shipped.get(), fixture.get()}) {
    HfTokenizer t = HfTokenizer::from_gguf(*file);
    for (const std::string* text : {&prose, &mixed}) {
      const std::vector<int32_t> whole = t.encode(*text);
      for (size_t piece : {size_t(1), size_t(7), size_t(100), size_t(4096)}) {
        HfTokenizer cut = t;
        cut.set_piece_bytes(piece);
        ASSERT_EQ(cut.encode(*text), whole) << "piece " << piece << " of a text of " << text->size() << " bytes";
      }
    }
  }
}

}  // namespace
}  // namespace canvas
