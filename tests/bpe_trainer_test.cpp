// BPE vocabulary training: Gemma's layout, round trips, byte fallback, the tokenizer.json twin, determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "io/bpe_trainer.h"
#include "io/gguf.h"
#include "io/hf_tokenizer.h"
#include "io/utf8.h"
#include "test_util.h"

namespace canvas {
namespace {

// A few KJV verses (public domain), one per line, as the corpus gives them.
const char* kSample =
    "In the beginning God created the heaven and the earth.\n"
    "And the earth was without form, and void; and darkness was upon the face of the deep. And the Spirit of "
    "God moved upon the face of the waters.\n"
    "And God said, Let there be light: and there was light.\n"
    "And God saw the light, that it was good: and God divided the light from the darkness.\n"
    "And God called the light Day, and the darkness he called Night. And the evening and the morning were the "
    "first day.\n"
    "And God said, Let there be a firmament in the midst of the waters, and let it divide the waters from the "
    "waters.\n"
    "And God made the firmament, and divided the waters which were under the firmament from the waters which "
    "were above the firmament: and it was so.\n"
    "And God called the firmament Heaven. And the evening and the morning were the second day.\n"
    "And God said, Let the waters under the heaven be gathered together unto one place, and let the dry land "
    "appear: and it was so.\n"
    "And God called the dry land Earth; and the gathering together of the waters called he Seas: and God saw "
    "that it was good.\n"
    "In 1611, 54 scholars worked on it (or so 1 said).\n";

HfVocab train_sample(int32_t vocab_size, const std::string& text = kSample) {
  BpeTrainer t;
  t.add_text(text);
  BpeTrainOptions o;
  o.vocab_size = vocab_size;
  o.character_coverage = 1.0;
  return t.train(o);
}

// Random valid UTF-8 from all planes (no surrogates, no U+2581 which decodes as a space).
std::string random_utf8(Rng& rng, size_t chars) {
  std::string s;
  for (size_t i = 0; i < chars; ++i) {
    uint32_t cp;
    switch (rng.below(4)) {
      case 0: cp = uint32_t(rng.below(0x80)); break;
      case 1: cp = uint32_t(0x80 + rng.below(0x800 - 0x80)); break;
      case 2: cp = uint32_t(0x800 + rng.below(0x10000 - 0x800)); break;
      default: cp = uint32_t(0x10000 + rng.below(0x110000 - 0x10000)); break;
    }
    if ((cp >= 0xD800 && cp <= 0xDFFF) || cp == 0x2581) cp = ' ';
    append_utf8(s, cp);
  }
  return s;
}

TEST(BpeTrainer, VocabularyHasGemmasLayout) {
  const HfVocab v = train_sample(400);
  ASSERT_EQ(v.tokens.size(), 400u);
  for (const SpecialToken& s : kGemmaSpecialTokens) {
    EXPECT_EQ(v.tokens[size_t(s.id)], s.text);
    EXPECT_EQ(v.kinds[size_t(s.id)], std::string(s.text) == "<unk>" ? HfVocab::Kind::Unknown : HfVocab::Kind::Special);
  }
  EXPECT_EQ(v.tokens[5], "<0x00>");
  EXPECT_EQ(v.tokens[49], "<0x2C>");
  EXPECT_EQ(v.tokens[51], "<0x2D>");  // 50 is <|tool_response>
  EXPECT_EQ(v.tokens[kTrainedFixedTokens - 1], "<0xFF>");
  int bytes = 0;
  for (HfVocab::Kind k : v.kinds) bytes += k == HfVocab::Kind::Byte;
  EXPECT_EQ(bytes, 256);
  // The most frequent character of the sample is the space marker: the first alphabet token.
  EXPECT_EQ(v.tokens[kTrainedFixedTokens], "\xE2\x96\x81");
  EXPECT_EQ(v.pad_id, 0);
  EXPECT_EQ(v.eos_id, 1);
  EXPECT_EQ(v.bos_id, 2);
  EXPECT_EQ(v.unknown_id, 3);
  EXPECT_TRUE(v.add_bos);
  EXPECT_EQ(HfTokenizer::gguf_problem(v), "");
}

TEST(BpeTrainer, FirstMergesAreTheMostFrequentPairs) {
  // Words: "ab" once, "▁ab" twice, "▁cd" once. Pairs: a+b 3, ▁+a 2, ▁+c 1, c+d 1 (below min_frequency 2).
  const HfVocab v = train_sample(1000, "ab ab ab cd");
  ASSERT_EQ(v.merges.size(), 2u);  // then nothing is seen twice: training stops short of 1000
  EXPECT_EQ(v.merges[0], std::make_pair(std::string("a"), std::string("b")));
  EXPECT_EQ(v.merges[1], std::make_pair(std::string("\xE2\x96\x81"), std::string("ab")));
  EXPECT_EQ(v.tokens.back(), "\xE2\x96\x81" "ab");
}

TEST(BpeTrainer, TokensNeverSpanWordsOrDigits) {
  const HfVocab v = train_sample(600);
  const std::string marker = "\xE2\x96\x81";
  for (size_t id = kTrainedFixedTokens; id < v.tokens.size(); ++id) {
    std::string t = v.tokens[id];
    while (t.rfind(marker, 0) == 0) t = t.substr(marker.size());
    if (t.empty()) continue;  // only spaces
    const bool has_digit = t.find_first_of("0123456789") != std::string::npos;
    if (has_digit) {
      EXPECT_EQ(v.tokens[id].size(), 1u) << "digits are single tokens: '" << v.tokens[id] << "'";
      continue;
    }
    EXPECT_EQ(t.find(marker), std::string::npos) << "a space inside '" << v.tokens[id] << "'";
    const bool letters = std::all_of(t.begin(), t.end(), [](char c) { return std::isalpha(uint8_t(c)); });
    const bool punct = std::all_of(t.begin(), t.end(), [](char c) { return std::ispunct(uint8_t(c)); });
    const bool newlines = std::all_of(t.begin(), t.end(), [](char c) { return c == '\n'; });
    EXPECT_TRUE(letters || punct || newlines) << "token '" << v.tokens[id] << "' mixes classes";
  }
}

TEST(BpeTrainer, RoundTripsRandomTextAndTheCorpus) {
  const HfTokenizer t = HfTokenizer::from_vocab(train_sample(500));
  EXPECT_EQ(t.decode(t.encode(kSample, false, false)), kSample);
  // Subword tokens do compress the text they were learned on.
  EXPECT_LT(t.encode(kSample, false, false).size() * 2, std::string(kSample).size());
  Rng rng(7);
  for (int i = 0; i < 200; ++i) {
    const std::string s = random_utf8(rng, 1 + rng.below(40));
    EXPECT_EQ(t.decode(t.encode(s, false, false)), s) << i;
    // Raw bytes, mostly invalid UTF-8: byte tokens carry them.
    std::string bytes;
    for (uint64_t k = rng.below(30); k > 0; --k) bytes += char(rng.below(256));
    if (bytes.find("\xE2\x96\x81") == std::string::npos) {
      EXPECT_EQ(t.decode(t.encode(bytes, false, false)), bytes) << i;
    }
  }
  // Special tokens written in the text are matched when asked for, and render back.
  const std::vector<int32_t> turn = t.encode("<|turn>user\nHi<turn|>", false, true);
  EXPECT_EQ(turn.front(), 105);
  EXPECT_EQ(t.decode(turn, true), "<|turn>user\nHi<turn|>");
}

TEST(BpeTrainer, UnseenCharactersFallBackToBytes) {
  const HfTokenizer t = HfTokenizer::from_vocab(train_sample(500));
  const std::string euro = "\xE2\x82\xAC";  // not in the sample
  const std::vector<int32_t> ids = t.encode(euro, false, false);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(t.token_text(ids[0]), "<0xE2>");
  EXPECT_EQ(t.token_text(ids[1]), "<0x82>");
  EXPECT_EQ(t.token_text(ids[2]), "<0xAC>");
  EXPECT_EQ(t.decode(ids), euro);
  // Characters below the coverage are bytes too: with 0.5 only the commonest characters stay.
  BpeTrainer trainer;
  trainer.add_text(kSample);
  BpeTrainOptions o;
  o.vocab_size = 400;
  o.character_coverage = 0.5;
  const HfTokenizer narrow = HfTokenizer::from_vocab(trainer.train(o));
  EXPECT_EQ(narrow.token_text(narrow.encode("q", false, false).at(0)), "<0x71>");
  EXPECT_EQ(narrow.decode(narrow.encode(kSample, false, false)), kSample);
}

TEST(BpeTrainer, GgufAndTokenizerJsonGiveTheSameTokenizer) {
  const HfVocab v = train_sample(500);
  const std::string gguf = test::temp_path("bpe-trained.gguf");
  write_vocab_gguf(v, gguf);
  const auto file = GgufFile::open(gguf);
  EXPECT_EQ(file->tensors().size(), 0u);
  EXPECT_EQ(file->get_string("tokenizer.ggml.model", ""), "gemma4");
  EXPECT_EQ(file->get_int("tokenizer.ggml.mask_token_id", -1), kTrainedMaskId);
  const HfTokenizer from_gguf = HfTokenizer::from_gguf(*file);
  const HfTokenizer from_json = HfTokenizer::from_json_text(tokenizer_json_text(v), "trained tokenizer.json");
  // The export of the GGUF's vocabulary is the same file as the export of the trained one.
  EXPECT_EQ(tokenizer_json_text(HfTokenizer::vocab_from_gguf(*file)), tokenizer_json_text(v));
  ASSERT_EQ(from_gguf.vocab_size(), from_json.vocab_size());
  for (int32_t id = 0; id < from_gguf.vocab_size(); ++id) {
    EXPECT_EQ(from_gguf.token_text(id), from_json.token_text(id)) << id;
    EXPECT_EQ(from_gguf.kind(id), from_json.kind(id)) << id;
  }
  EXPECT_EQ(from_json.bos_id(), 2);
  EXPECT_TRUE(from_json.add_bos());
  Rng rng(3);
  std::vector<std::string> texts = {kSample, "<bos><|turn>user\nAnd God said<turn|>\n<|turn>model\n",
                                    "  two  spaces\tand a tab, \xE2\x82\xAC 3.14159\r\n"};
  for (int i = 0; i < 50; ++i) texts.push_back(random_utf8(rng, 30));
  for (const std::string& s : texts) {
    EXPECT_EQ(from_gguf.encode(s, true, true), from_json.encode(s, true, true)) << s;
    EXPECT_EQ(from_gguf.encode(s, false, false), from_json.encode(s, false, false)) << s;
  }
  std::remove(gguf.c_str());
}

TEST(BpeTrainer, TrainingIsDeterministic) {
  const HfVocab a = train_sample(600);
  const HfVocab b = train_sample(600);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.merges, b.merges);
  // Lines added one by one, in reverse order, count the same words: the same vocabulary.
  std::vector<std::string> lines;
  std::string text = kSample;
  for (size_t at = 0; at < text.size();) {
    const size_t end = text.find('\n', at) + 1;
    lines.push_back(text.substr(at, end - at));
    at = end;
  }
  BpeTrainer reversed;
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) reversed.add_text(*it);
  BpeTrainOptions o;
  o.vocab_size = 600;
  o.character_coverage = 1.0;
  const HfVocab c = reversed.train(o);
  EXPECT_EQ(a.tokens, c.tokens);
  EXPECT_EQ(a.merges, c.merges);
  EXPECT_EQ(tokenizer_json_text(a), tokenizer_json_text(c));
}

TEST(BpeTrainer, TooSmallAVocabularyIsAnError) {
  BpeTrainer t;
  t.add_text(kSample);
  BpeTrainOptions o;
  o.vocab_size = 100;
  try {
    t.train(o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot hold"), std::string::npos) << e.what();
  }
  o.vocab_size = 500;
  o.character_coverage = 0;
  EXPECT_THROW(t.train(o), Error);
}

}  // namespace
}  // namespace canvas
