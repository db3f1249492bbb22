// The shipped DiffusionGemma-architecture text models (models/text-dg.gguf, the default of generate, and
// models/text-dg-chat.gguf, the default of chat): they load, decode with the entropy-bound sampler across
// several canvases and through the causal encoder, report tokens per forward, and score with their own
// tokenizer.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

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
  const json out = run_json("generate -p 'And God said' -n 100 -t 1 -s 3 --mode diffusion --json");
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

// generate's default mode, auto, on the shipped model: the first run drafts 8 tokens a cycle to measure how
// many this model keeps, later runs take the fastest of ar and verify measured here (--cost-model keeps
// what was measured); every run writes --mode ar's text, and --json and the stats line say what ran and why.
TEST(ShippedDgCli, AutoModeWritesArTextAndSaysWhatItPicked) {
  test::TempDir dir;
  const std::string costs = dir.path("costs.json");
  const json ar = run_json("generate -p 'And God said' -n 48 -t 1 --mode ar --json");
  const auto first = test::run_canvas("generate -p 'And God said' -n 48 -t 1 --json --cost-model " + costs);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("timing this model's passes for --mode auto"), std::string::npos) << first.output;
  const json j = test::json_of(first.output);
  EXPECT_EQ(j["mode"], "verify");
  EXPECT_EQ(j["draft_length"], 8);
  EXPECT_NE(j["mode_reason"].get<std::string>().find("measures how many drafts"), std::string::npos) << j.dump();
  EXPECT_EQ(j["modes"], json::array({"ar", "verify", "diffusion"}));
  EXPECT_EQ(j["tokens"], ar["tokens"]);
  ASSERT_TRUE(std::filesystem::exists(costs));
  const json stored = json::parse(test::read_text(costs));
  EXPECT_GE(stored["passes"].size(), 5u);
  EXPECT_TRUE(stored["verify_cycles_keeping"].contains("8")) << stored.dump();
  EXPECT_TRUE(stored["observed_ms_per_token"].contains("verify k=8")) << stored.dump();
  // Later runs: no second timing, AR once to be measured, then the fastest; the pick explained, AR's text.
  for (int run = 0; run < 3; ++run) {
    const auto r = test::run_canvas("generate -p 'And God said' -n 48 -t 1 --verbose --cost-model " + costs);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output.find("timing this model's passes"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(run == 0 ? "[ar (auto: ar runs once to be measured against verify on this machine)"
                                     : "is the fastest of ar and verify on this machine"),
              std::string::npos)
        << r.output;
    const auto text = run_json("generate -p 'And God said' -n 48 -t 1 --json --cost-model " + costs);
    EXPECT_EQ(text["tokens"], ar["tokens"]) << text["mode_reason"];
    EXPECT_TRUE(text["mode"] == "ar" || text["mode"] == "verify") << text.dump();
    // The default line names the pick in one format, whatever auto's reason this time.
    const auto plain = test::run_canvas("generate -p 'And God said' -n 48 -t 1 --cost-model " + costs);
    static const std::regex line(R"(\n\[(ar|verify k=\d+( overlapped)?) \(auto\): \d+ tokens, [0-9.]+ tokens/s\]\n$)");
    EXPECT_TRUE(std::regex_search(plain.output, line)) << plain.output;
    EXPECT_EQ(plain.output.find("auto:"), std::string::npos) << plain.output;
  }
  // Verify and diffusion options say which mode they mean.
  const json overlap = run_json("generate -p 'And God said' -n 16 -t 1 --overlap --json --cost-model none");
  EXPECT_EQ(overlap["mode"], "verify");
  EXPECT_EQ(overlap["overlap"], true);
  EXPECT_EQ(overlap["tokens"], json(std::vector<int>(ar["tokens"].begin(), ar["tokens"].begin() + 16)));
  const json steps = run_json("generate -p 'And God said' -n 16 -t 1 --steps 8 --json --cost-model none");
  EXPECT_EQ(steps["mode"], "diffusion");
  EXPECT_NE(steps["mode_reason"].get<std::string>().find("--steps"), std::string::npos) << steps.dump();
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
