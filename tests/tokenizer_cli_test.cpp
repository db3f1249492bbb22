// canvas tokenizer and the shipped KJV tokenizer: it reproduces from its command, round-trips the corpus,
// and its tokenizer.json export gives the same ids.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "core/rng.h"
#include "io/bpe_trainer.h"
#include "io/gguf.h"
#include "io/hf_tokenizer.h"
#include "io/utf8.h"
#include "test_util.h"
#include "train/corpus.h"

namespace canvas {
namespace {

const std::string kShipped = test::source_path("models/tokenizer-kjv.gguf");

TEST(ShippedTokenizer, HasGemmasLayoutAndRoundTripsTheCorpus) {
  const auto file = GgufFile::open(kShipped);
  EXPECT_EQ(file->tensors().size(), 0u);
  EXPECT_EQ(file->get_int("tokenizer.ggml.mask_token_id", -1), 4);
  const HfTokenizer t = HfTokenizer::from_gguf(*file);
  EXPECT_EQ(t.vocab_size(), 8192);
  for (const SpecialToken& s : kGemmaSpecialTokens) EXPECT_EQ(t.token_text(s.id), s.text);
  EXPECT_EQ(t.decode(t.encode("And God said", false, false)), "And God said");
  EXPECT_LE(t.encode("And God said, Let there be light", false, false).size(), 8u);

  const train::CorpusSplit split = train::split_corpus(train::load_corpus("kjv"), 0.02);
  ASSERT_EQ(split.held_out.size(), 24u);
  const HfTokenizer json = HfTokenizer::from_json_text(tokenizer_json_text(HfTokenizer::vocab_from_gguf(*file)),
                                                       "exported tokenizer.json");
  int64_t bytes = 0, tokens = 0;
  for (const train::CorpusDocument& d : split.held_out) {
    const std::vector<int32_t> ids = t.encode(d.text, false, false);
    EXPECT_EQ(t.decode(ids), d.text) << d.key;
    EXPECT_EQ(json.encode(d.text, true, true), t.encode(d.text, true, true)) << d.key;
    bytes += int64_t(d.text.size());
    tokens += int64_t(ids.size());
  }
  // The held-out chapters were never seen in training; 4.14 bytes per token when it was made.
  EXPECT_GT(double(bytes) / double(tokens), 4.0);
  for (size_t i = 0; i < split.train.size(); i += 10)
    EXPECT_EQ(t.decode(t.encode(split.train[i].text, false, false)), split.train[i].text) << split.train[i].key;
  Rng rng(1);
  for (int i = 0; i < 100; ++i) {
    std::string s;
    for (uint64_t k = 1 + rng.below(24); k > 0; --k) {
      uint32_t cp = uint32_t(rng.below(0x30000));
      if ((cp >= 0xD800 && cp <= 0xDFFF) || cp == 0x2581) cp = 'x';
      append_utf8(s, cp);
    }
    EXPECT_EQ(t.decode(t.encode(s, false, false)), s) << i;
  }
}

TEST(CliTokenizer, RetrainingReproducesTheShippedFile) {
  // The command models/README.md gives for it.
  const std::string out = test::temp_path("tokenizer-kjv-again.gguf");
  const auto r = test::run_canvas("tokenizer train --corpus kjv --vocab-size 8192 --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("held-out"), std::string::npos) << r.output;
  EXPECT_EQ(test::read_text(out), test::read_text(kShipped)) << "the shipped tokenizer is not what its command makes";
  std::remove(out.c_str());
}

TEST(CliTokenizer, ExportEncodeAndErrors) {
  const std::string json = test::temp_path("tokenizer-kjv.json");
  auto r = test::run_canvas("tokenizer export --tokenizer " + kShipped + " --out " + json);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const HfTokenizer from_json = HfTokenizer::from_json(json);
  EXPECT_EQ(from_json.vocab_size(), 8192);
  r = test::run_canvas("tokenizer encode --tokenizer " + json + " -p '<|turn>user'", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.substr(0, 11), "105\t<|turn>");
  const std::string again = test::run_canvas("tokenizer encode --tokenizer " + kShipped + " -p '<|turn>user'", false).output;
  EXPECT_EQ(again, r.output);
  r = test::run_canvas("tokenizer train --corpus kjv --vocab-size 100 --out " + test::temp_path("small.gguf"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("cannot hold"), std::string::npos) << r.output;
  r = test::run_canvas("tokenizer train --corpus no-such-part --vocab-size 4096 --out " + test::temp_path("x.gguf"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("no-such-part"), std::string::npos) << r.output;
  r = test::run_canvas("tokenizer frobnicate");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(test::run_canvas("tokenizer --help").exit_code, 0);
  std::remove(json.c_str());
}

}  // namespace
}  // namespace canvas
