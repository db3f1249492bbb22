// The one generation path seen from every front end: `canvas generate --json`, the first turn of `canvas chat`
// and canvas serve's /v1/completions and /v1/chat/completions give the same text and tokens for the same
// options and seed, on each shipped text model and on the LLaDA and Dream fixtures, in each mode they run.
#include <gtest/gtest.h>

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
