// The shipped DiffusionGemma-architecture text models (models/text-dg.gguf, the default of generate, and
// models/text-dg-chat.gguf, the default of chat): they load, decode with the entropy-bound sampler across
// several canvases and through the causal encoder, report tokens per forward, and score with their own
// tokenizer.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "test_util.h"

namespace canvas {
namespace {

using nlohmann::json;

json run_json(const std::string& args) {
  const auto r = test::run_canvas(args, false);
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
  return json::parse(r.output);
}

// Words a King James text is made of; the decoded text must consist mostly of such words.
double kjv_word_fraction(const std::string& text) {
  static const std::string kWords =
      " and the of to that in he shall unto for i his a lord they be is him not them it with all thou thy was god "
      "which my me said but ye their have thee will from as are when this out were by upon man israel king son "
      "up there people came had house into on her one come children before your day land men made against us ";
  int total = 0, known = 0;
  std::string word;
  auto flush = [&] {
    if (word.empty()) return;
    ++total;
    if (kWords.find(" " + word + " ") != std::string::npos) ++known;
    word.clear();
  };
  for (char c : text) {
    if (std::isalpha(static_cast<unsigned char>(c))) {
      word += char(std::tolower(static_cast<unsigned char>(c)));
    } else {
      flush();
    }
  }
  flush();
  return total ? double(known) / total : 0.0;
}

TEST(ShippedDgCli, DefaultModelDenoisesSeveralCanvases) {
  // No -m: the shipped DiffusionGemma-architecture model; 100 tokens span two 64-token canvases.
  const json out = run_json("generate -p 'And God said' -n 100 -t 1 -s 3 --json");
  ASSERT_TRUE(out.contains("tokens_per_forward")) << out.dump();
  const int64_t passes = out["passes"], new_tokens = out["new_tokens"];
  EXPECT_GT(new_tokens, 0);
  EXPECT_LE(new_tokens, 100);
  EXPECT_NEAR(double(out["tokens_per_forward"]), double(new_tokens) / double(passes), 1e-3);
  const auto& canvases = out["steps_per_canvas"];
  ASSERT_GE(canvases.size(), 1u);
  EXPECT_EQ(int64_t(out["encoder_passes"]), int64_t(canvases.size()) - 1);  // each finished canvas is encoded
  int64_t steps = 0;
  for (const auto& s : canvases) steps += int64_t(s);
  EXPECT_EQ(steps, passes);
  if (new_tokens == 100) {
    EXPECT_EQ(canvases.size(), 2u);  // no EOS: both canvases were denoised
  }
  EXPECT_GT(kjv_word_fraction(out["text"]), 0.2) << out["text"];
}

TEST(ShippedDgCli, ArModeDecodesThroughTheEncoderInEnglish) {
  const json out = run_json("generate -p 'And God said' -n 40 -t 1 --mode ar --json");
  EXPECT_EQ(int64_t(out["passes"]), int64_t(out["tokens"].size()));  // one token per encoder pass
  EXPECT_GT(kjv_word_fraction(out["text"]), 0.4) << out["text"];
}

TEST(ShippedDgCli, ScoresWithItsOwnTokenizer) {
  const json s = run_json("score -m " + test::source_path("models/text-dg.gguf") +
                          " --context 'And the LORD spake' -p ' unto Moses, saying,' -t 1");
  EXPECT_EQ(int64_t(s["bytes"]), 20);
  EXPECT_GT(double(s["bits_per_byte"]), 0.0);
  EXPECT_LT(double(s["bits_per_byte"]), 2.0);  // a phrase the Bible repeats is cheap for a trained model
}

TEST(ShippedDgCli, ChatModelNamesTheBook) {
  // The instruction-tuned variant is chat's default; through the encoder (greedy) it answers a request
  // of the kind it was tuned on, and the turn ends.
  const auto r = test::run_canvas(
      "chat --mode ar -n 16 -t 1 -s 1 < " + test::source_path("tests/fixtures/chat-book-question.txt"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("text-dg-chat.gguf"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Psalms"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace canvas
