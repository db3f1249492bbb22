// The one generation path seen from every front end: `canvas generate --json`, the first turn of `canvas chat`
// and canvas serve's /v1/completions and /v1/chat/completions give the same text and tokens for the same
// options and seed, on each shipped text model and on the LLaDA and Dream fixtures, in each mode they run.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "serve_process.h"
#include "test_util.h"

using nlohmann::json;

namespace {

struct IdentityCase {
  std::string model;  // relative to the source tree
  std::vector<std::string> modes;
};

json generate_json(const IdentityCase& c, const std::string& mode, const std::string& options, bool chat) {
  const canvas::test::CommandResult r = canvas::test::run_canvas(
      "generate -m " + canvas::test::source_path(c.model) + " --mode " + mode + " " + options +
          (chat ? " --chat" : "") + " --json -p 'In the beginning'",
      false);
  EXPECT_EQ(r.exit_code, 0) << c.model << " " << mode;
  return r.exit_code == 0 ? json::parse(r.output) : json::object();
}

}  // namespace

TEST(GenerationIdentityCli, GenerateChatAndServeGiveTheSameTokens) {
  const std::vector<IdentityCase> cases = {
      {"models/text-dg.gguf", {"diffusion", "ar", "verify"}},
      {"models/text-dg-chat.gguf", {"diffusion", "ar", "verify"}},
      {"models/text-masked.gguf", {"diffusion", "ar"}},
      {"models/text-ar.gguf", {"ar"}},
      {"tests/fixtures/tiny-llada.gguf", {"diffusion", "ar"}},
      {"tests/fixtures/tiny-dream.gguf", {"diffusion", "ar"}},
  };
  const std::string prompt_file = canvas::test::temp_path("identity-prompt.txt");
  std::ofstream(prompt_file) << "In the beginning\n";
  for (const IdentityCase& c : cases) {
    canvas::test::ServerProcess server("--parallel 2", c.model);
    ASSERT_NE(server.port(), 0) << server.log();
    for (const std::string& mode : c.modes) {
      SCOPED_TRACE(c.model + " --mode " + mode);
      // 20 tokens: not a whole number of masked blocks (padded, then cut), sampled at a temperature.
      const std::string options = "-n 20 -s 11 --temp 0.7 --top-k 40";
      const json plain = generate_json(c, mode, options, false);
      const json chat = generate_json(c, mode, options, true);
      ASSERT_TRUE(plain.contains("tokens") && chat.contains("tokens"));
      EXPECT_EQ(plain["mode"], mode);

      const canvas::test::CommandResult turn = canvas::test::run_canvas(
          "chat -m " + canvas::test::source_path(c.model) + " --mode " + mode + " " + options + " --no-stream < " +
              prompt_file,
          false);
      ASSERT_EQ(turn.exit_code, 0);
      EXPECT_EQ(turn.output, chat["text"].get<std::string>() + "\n");

      json body = {{"max_tokens", 20}, {"seed", 11}, {"mode", mode}, {"temperature", 0.7}, {"top_k", 40}};
      body["prompt"] = "In the beginning";
      auto res = server.client().Post("/v1/completions", body.dump(), "application/json");
      ASSERT_TRUE(res && res->status == 200) << (res ? res->body : "no response");
      const json completion = json::parse(res->body);
      EXPECT_EQ(completion["choices"][0]["text"], plain["text"]);
      EXPECT_EQ(completion["canvas"]["tokens"], plain["tokens"]);
      EXPECT_EQ(completion["canvas"]["finish"], plain["finish_reason"]);
      EXPECT_EQ(completion["canvas"]["mode"], mode);

      body.erase("prompt");
      body["messages"] = json::array({{{"role", "user"}, {"content", "In the beginning"}}});
      res = server.client().Post("/v1/chat/completions", body.dump(), "application/json");
      ASSERT_TRUE(res && res->status == 200) << (res ? res->body : "no response");
      const json reply = json::parse(res->body);
      EXPECT_EQ(reply["choices"][0]["message"]["content"], chat["text"]);
      EXPECT_EQ(reply["canvas"]["tokens"], chat["tokens"]);
    }
  }
  std::filesystem::remove(prompt_file);
}

// The presence and frequency penalties and logit biases from generate's flags and serve's fields give the
// same tokens, in the modes that take them (AR and verify on the uniform-state model, sampled; AR on the AR
// model, greedy); uniform-state diffusion refuses them, naming itself.
TEST(GenerationIdentityCli, PenaltiesAndBiasAreTheSameFromGenerateAndServe) {
  struct Case {
    std::string model, mode, options;
    json fields;
  };
  // Ids from each model's own text: what the bias moves matters.
  auto tokens_of = [](const std::string& model) {
    const IdentityCase c{model, {}};
    return generate_json(c, "ar", "-n 8 -s 1 --temp 0", false)["tokens"];
  };
  const json dg = tokens_of("models/text-dg.gguf"), ar = tokens_of("models/text-ar.gguf");
  ASSERT_EQ(dg.size(), 8u);
  ASSERT_EQ(ar.size(), 8u);
  auto flags = [](const json& ids) {
    return " --presence-penalty 0.4 --frequency-penalty 0.3 -l " + std::to_string(ids[0].get<int>()) +
           "-inf --logit-bias " + std::to_string(ids[2].get<int>()) + "+1.5";
  };
  auto fields = [](const json& ids) {
    return json{{"presence_penalty", 0.4},
                {"frequency_penalty", 0.3},
                {"logit_bias", {{std::to_string(ids[0].get<int>()), -100}, {std::to_string(ids[2].get<int>()), 1.5}}}};
  };
  for (const std::string& model : {std::string("models/text-dg.gguf"), std::string("models/text-ar.gguf")}) {
    const json& ids = model == "models/text-ar.gguf" ? ar : dg;
    canvas::test::ServerProcess server("--parallel 1", model);
    ASSERT_NE(server.port(), 0) << server.log();
    const std::vector<std::string> modes =
        model == "models/text-ar.gguf" ? std::vector<std::string>{"ar"} : std::vector<std::string>{"ar", "verify"};
    for (const std::string& mode : modes) {
      SCOPED_TRACE(model + " --mode " + mode);
      const std::string sampled = model == "models/text-ar.gguf" ? " --temp 0" : " --temp 0.7 --top-k 40";
      const json cli = generate_json(IdentityCase{model, {}}, mode, "-n 24 -s 11" + sampled + flags(ids), false);
      ASSERT_TRUE(cli.contains("tokens"));
      EXPECT_EQ(std::count(cli["tokens"].begin(), cli["tokens"].end(), ids[0]), 0);
      json body = fields(ids);
      body.update({{"max_tokens", 24}, {"seed", 11}, {"mode", mode}, {"prompt", "In the beginning"}});
      if (model == "models/text-ar.gguf") body["temperature"] = 0;
      else body.update({{"temperature", 0.7}, {"top_k", 40}});
      auto res = server.client().Post("/v1/completions", body.dump(), "application/json");
      ASSERT_TRUE(res && res->status == 200) << (res ? res->body : "no response");
      const json completion = json::parse(res->body);
      EXPECT_EQ(completion["canvas"]["tokens"], cli["tokens"]);
      EXPECT_EQ(completion["choices"][0]["text"], cli["text"]);
    }
    if (model != "models/text-dg.gguf") continue;
    json body = fields(ids);
    body.update({{"max_tokens", 8}, {"mode", "diffusion"}, {"prompt", "In the beginning"}});
    auto res = server.client().Post("/v1/completions", body.dump(), "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400);
    EXPECT_NE(res->body.find("uniform-state diffusion"), std::string::npos) << res->body;
    const canvas::test::CommandResult refused = canvas::test::run_canvas(
        "generate -m " + canvas::test::source_path(model) + " --mode diffusion -n 8 -p hi --presence-penalty 0.5");
    EXPECT_NE(refused.exit_code, 0);
    EXPECT_NE(refused.output.find("uniform-state diffusion (--mode diffusion) has no such order"), std::string::npos)
        << refused.output;
  }
}
