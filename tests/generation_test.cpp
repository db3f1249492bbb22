// The Generator's request options, run directly (tests/generation_identity_test.cpp checks that generate,
// chat and serve give the same tokens through it).
#include "decode/generation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/cpu.h"
#include "core/error.h"
#include "decode/conversation.h"
#include "decode/generation_report.h"
#include "decode/random_seed.h"

#include "test_util.h"

namespace canvas {
namespace {

// ignore_eos decodes all N tokens. With the first token made the EOS id, a plain run stops at it (AR at once,
// masked diffusion after the block holding it) and keeps none of its tokens; an ignore_eos run gives every
// token of the run in which that id was not EOS, and finishes by length.
TEST(Generation, IgnoreEosDecodesAllTokens) {
  ThreadPool pool(2);
  for (DecodeMode mode : {DecodeMode::Ar, DecodeMode::Diffusion}) {
    Model model = Model::load(test::fixture("tiny-llada.gguf"));
    model.config.eos_token = model.config.pad_token = -1;
    GenerationRequest r;
    r.prompt = {5, 6, 7, 8};
    r.mode = mode;
    r.max_new_tokens = 8;
    r.diffusion.block_length = 4;
    const GenerationOutput plain = Generator(model, nullptr, SamplerDefaults{}).run(r, &pool);
    ASSERT_EQ(plain.tokens.size(), 8u) << decode_mode_name(mode);

    model.config.eos_token = plain.tokens[0];
    const GenerationOutput stopped = Generator(model, nullptr, SamplerDefaults{}).run(r, &pool);
    EXPECT_TRUE(stopped.tokens.empty()) << decode_mode_name(mode);
    EXPECT_EQ(stopped.finish_reason, "eos") << decode_mode_name(mode);
    EXPECT_LT(stopped.passes, plain.passes) << decode_mode_name(mode);

    r.ignore_eos = true;
    const GenerationOutput all = Generator(model, nullptr, SamplerDefaults{}).run(r, &pool);
    EXPECT_EQ(all.tokens, plain.tokens) << decode_mode_name(mode);
    EXPECT_EQ(all.passes, plain.passes) << decode_mode_name(mode);
    EXPECT_EQ(all.finish_reason, "length") << decode_mode_name(mode);
  }
}

// Uniform-state diffusion (EOS pads the rest of its canvas and ends the run) and draft-and-verify (an EOS
// ends the run) honour it too, the model's EOS ids made the first token again.
TEST(Generation, IgnoreEosDecodesAllTokensOfUniformStateAndVerify) {
  ThreadPool pool(2);
  const std::string path = test::source_path("models/text-dg.gguf");
  const TextModel m = TextModel::from(Model::load(path), path);
  for (DecodeMode mode : {DecodeMode::Diffusion, DecodeMode::Verify}) {
    GenerationRequest r;
    r.text = "And God said";
    r.mode = mode;
    r.max_new_tokens = 40;
    SamplerDefaults defaults = m.defaults;
    const GenerationOutput plain = Generator(m.model, &m.tokenizer, defaults, &m.chat).run(r, &pool);
    ASSERT_EQ(plain.tokens.size(), 40u) << decode_mode_name(mode);

    defaults.params.eos_ids = {plain.tokens[0]};
    const Generator eos_first(m.model, &m.tokenizer, defaults, &m.chat);
    const GenerationOutput stopped = eos_first.run(r, &pool);
    EXPECT_TRUE(stopped.tokens.empty()) << decode_mode_name(mode);
    EXPECT_EQ(stopped.finish_reason, "eos") << decode_mode_name(mode);

    r.ignore_eos = true;
    const GenerationOutput all = eos_first.run(r, &pool);
    EXPECT_EQ(all.tokens, plain.tokens) << decode_mode_name(mode);
    EXPECT_EQ(all.pad_tokens, 0) << decode_mode_name(mode);
    EXPECT_EQ(all.finish_reason, "length") << decode_mode_name(mode);
  }
}

// VerifyOptions left alone keep VerifyParams' own defaults, and each one given reaches its VerifyParams field.
TEST(Generation, VerifyOptionsReachVerifyParams) {
  const Model model = Model::load(test::fixture("tiny-llada.gguf"));
  SamplerDefaults defaults;
  defaults.params.t_min = 0.25f;
  const Generator generator(model, nullptr, defaults);
  GenerationRequest r;
  const VerifyParams d, kept = generator.verify_params(r, 12);
  EXPECT_EQ(kept.max_new_tokens, 12);
  EXPECT_EQ(kept.draft_length, d.draft_length);
  EXPECT_EQ(kept.draft_steps, d.draft_steps);
  EXPECT_EQ(kept.overlap, d.overlap);
  EXPECT_EQ(kept.draft_lookup, d.draft_lookup);
  EXPECT_EQ(kept.lookup_length, d.lookup_length);
  EXPECT_EQ(kept.datastore, nullptr);
  EXPECT_EQ(kept.datastore_draft.min_count, d.datastore_draft.min_count);
  EXPECT_EQ(kept.datastore_length, d.datastore_length);
  EXPECT_EQ(kept.draft_tree, d.draft_tree);
  EXPECT_EQ(kept.tree.depth, d.tree.depth);
  EXPECT_EQ(kept.draft_temperature, 0.25f);
  EXPECT_TRUE(kept.stop_at_eos);

  VerifyOptions& v = r.verify;
  v.draft_length = 7;
  v.draft_steps = 2;
  v.overlap = true;
  v.draft_lookup = 0;
  v.draft_lookup_length = 5;
  v.datastore = std::make_shared<const Datastore>(std::vector<int32_t>{1, 2, 3});
  v.datastore_min_count = 3;
  v.datastore_length = 6;
  v.draft_tree = 9;
  v.draft_tree_depth = 2;
  r.ignore_eos = true;
  const VerifyParams p = generator.verify_params(r, 12);
  EXPECT_EQ(p.draft_length, 7);
  EXPECT_EQ(p.draft_steps, 2);
  EXPECT_TRUE(p.overlap);
  EXPECT_EQ(p.draft_lookup, 0);
  EXPECT_EQ(p.lookup_length, 5);
  EXPECT_EQ(p.datastore, v.datastore.get());
  EXPECT_EQ(p.datastore_draft.min_count, 3);
  EXPECT_EQ(p.datastore_length, 6);
  EXPECT_EQ(p.draft_tree, 9);
  EXPECT_EQ(p.tree.depth, 2);
  EXPECT_FALSE(p.stop_at_eos);
}

// A request cancelled mid-way (chat's Ctrl-C) keeps only final text: nothing of a uniform-state canvas still
// being denoised, AR's tokens so far (a prefix of the whole run's); its passes and time are counted.
TEST(Generation, CancelledRunKeepsOnlyFinalTextAndCountsItsPasses) {
  ThreadPool pool(2);
  const std::string path = test::source_path("models/text-dg.gguf");
  const TextModel m = TextModel::from(Model::load(path), path);
  const Generator generator(m.model, &m.tokenizer, m.defaults, &m.chat);
  for (DecodeMode mode : {DecodeMode::Diffusion, DecodeMode::Ar, DecodeMode::Verify}) {
    GenerationRequest r;
    r.text = "And God said";
    r.mode = mode;
    r.max_new_tokens = 40;
    r.ignore_eos = true;
    r.sampling.seed = 3;
    const GenerationOutput whole = generator.run(r, &pool);
    ASSERT_EQ(whole.finish_reason, "length") << decode_mode_name(mode);
    // Cancelled is polled before each pass and after each step: a few passes in.
    const int allowed = mode == DecodeMode::Diffusion ? 4 : 12;
    int polls = 0;
    r.cancelled = [&] { return ++polls > allowed; };
    const GenerationOutput cut = generator.run(r, &pool);
    EXPECT_EQ(cut.finish_reason, "cancelled") << decode_mode_name(mode);
    EXPECT_GT(cut.passes, 0) << decode_mode_name(mode);
    EXPECT_GT(cut.decode_ms, 0.0) << decode_mode_name(mode);
    if (mode == DecodeMode::Diffusion) {
      // One canvas holds all 40 tokens: it was still being denoised, so nothing is final.
      EXPECT_TRUE(cut.tokens.empty()) << cut.text;
      EXPECT_EQ(cut.text, "");
    } else {
      ASSERT_FALSE(cut.tokens.empty()) << decode_mode_name(mode);
      ASSERT_LT(cut.tokens.size(), whole.tokens.size()) << decode_mode_name(mode);
      EXPECT_TRUE(std::equal(cut.tokens.begin(), cut.tokens.end(), whole.tokens.begin())) << decode_mode_name(mode);
    }
  }
}

// A reply of bytes that are not UTF-8 is saved (as U+FFFD) and loads back.
TEST(Conversation, SaveWritesInvalidUtf8AsReplacementCharacters) {
  const std::string path = test::temp_path("conversation-bytes.json");
  save_conversation({{"user", "Hi"}, {"assistant", std::string("sorrow\xaf") + "oin"}}, path);
  const std::vector<ChatMessage> loaded = load_conversation(path);
  ASSERT_EQ(loaded.size(), 2u);
  EXPECT_EQ(loaded[1].content, "sorrow\xef\xbf\xbdoin");
  std::remove(path.c_str());
}

// The stats line and JSON of a result (generate, chat, infill print them): fixed text and fields, the
// mode's own counts only where they apply.
TEST(GenerationReport, StatsLineAndJsonOfEachMode) {
  GenerationOutput out;
  out.mode = DecodeMode::Verify;
  out.prompt = {1, 2, 3};
  out.tokens = {4, 5, 6, 7};
  out.text = "abc\xff";  // invalid UTF-8 is replaced in the JSON
  out.finish_reason = "length";
  out.passes = 2;
  out.encoder_passes = 2;
  out.verify.drafted = 6;
  out.verify.accepted = 3;
  out.verify.draft_length = 3;
  out.verify.overlap = true;
  out.mode_reason = "auto: verify k=3 overlapped is the fastest";
  out.modes = {DecodeMode::Ar, DecodeMode::Verify, DecodeMode::Diffusion};
  out.rows_computed = 10;
  out.prompt_ms = 1.25;
  out.decode_ms = 100;
  out.decode_tokens = 4;
  out.cached_prompt_tokens = 2;
  out.seed = 42;
  const std::string simd = simd_level_name(simd_level());
  EXPECT_EQ(generation_stats_line(out, 3),
            "[verify (auto: verify k=3 overlapped is the fastest), 4 new tokens, finish length, 2 passes, "
            "tokens_per_forward 2.00, 2 verify passes, 3/6 drafted tokens kept (k=3, overlapped), 2.5 rows per token, prompt 3 tokens (2 cached) 1.2 ms, decode 100.0 ms, 40.00 tokens/s, "
            "seed 42, " + simd + ", 3 threads]");
  const nlohmann::json j = nlohmann::json::parse(generation_json(out));
  EXPECT_EQ(j["text"], "abc\xEF\xBF\xBD");
  EXPECT_EQ(j["mode"], "verify");
  EXPECT_EQ(j["new_tokens"], 4);
  EXPECT_EQ(j["tokens_per_forward"], 2.0);
  EXPECT_EQ(j["tokens_per_second"], 40.0);
  EXPECT_EQ(j["drafted"], 6);
  EXPECT_EQ(j["accepted"], 3);
  EXPECT_EQ(j["draft_length"], 3);
  EXPECT_EQ(j["overlap"], true);
  EXPECT_EQ(j["mode_reason"], "auto: verify k=3 overlapped is the fastest");
  EXPECT_EQ(j["modes"], nlohmann::json::array({"ar", "verify", "diffusion"}));
  EXPECT_FALSE(j.contains("steps_per_canvas"));

  out.mode = DecodeMode::Diffusion;
  out.mode_reason = "asked for";  // not repeated in the stats line
  out.steps_per_canvas = {5, 7};
  out.cached_prompt_tokens = 0;
  EXPECT_EQ(generation_stats_line(out, 1),
            "[diffusion, 4 new tokens, finish length, 2 passes, tokens_per_forward 2.00, 2 encoder passes, steps per "
            "canvas 5,7, prompt 3 tokens 1.2 ms, decode 100.0 ms, 40.00 tokens/s, seed 42, " + simd + ", 1 threads]");
  const nlohmann::json d = nlohmann::json::parse(generation_json(out));
  EXPECT_EQ(d["steps_per_canvas"], nlohmann::json::array({5, 7}));
  EXPECT_FALSE(d.contains("drafted"));

  out.filled_tokens = 9;
  out.fills = {"x", "y"};
  EXPECT_EQ(infill_stats_line(out, 2), "[9 tokens filled, 2 passes, prompt 3 tokens 1.2 ms, decode 100.0 ms, 40.00 "
                                       "tokens/s, seed 42, " + simd + ", 2 threads]");
  EXPECT_EQ(nlohmann::json::parse(infill_json(out, false))["fills"], nlohmann::json::array({"x", "y"}));
  EXPECT_FALSE(nlohmann::json::parse(infill_json(out, true)).contains("fills"));
}

// The short line printed by default: the setting, the tokens and the speed, one format whatever auto's
// reason (which changes from run to run while auto measures).
TEST(GenerationReport, SummaryLineNamesTheSettingInOneFormat) {
  GenerationOutput out;
  out.mode = DecodeMode::Ar;
  out.mode_reason = "asked for";
  out.tokens = std::vector<int32_t>(41, 5);
  out.decode_tokens = 40;
  out.decode_ms = 200;
  EXPECT_EQ(generation_summary_line(out), "[ar: 41 tokens, 200.0 tokens/s]");
  out.mode = DecodeMode::Verify;
  out.verify.draft_length = 8;
  for (const char* reason : {"auto: verify k=8 writes AR's text while it measures how many drafts this model keeps",
                             "auto: verify k=8 is the fastest of ar and verify on this machine"}) {
    out.mode_reason = reason;
    EXPECT_EQ(generation_summary_line(out), "[verify k=8 (auto): 41 tokens, 200.0 tokens/s]");
  }
  out.verify.overlap = true;
  out.verify.draft_length = 3;
  EXPECT_EQ(generation_summary_line(out), "[verify k=3 overlapped (auto): 41 tokens, 200.0 tokens/s]");
  out.mode = DecodeMode::Diffusion;
  out.mode_reason = "auto: a masked-diffusion model decodes by diffusion";
  out.tokens.clear();
  out.decode_tokens = 0;  // e.g. interrupted before the first token: no speed to speak of
  EXPECT_EQ(generation_summary_line(out), "[diffusion (auto): 0 tokens]");
  // Uniform-state diffusion (DiffusionGemma's) names its sampler and its canvases.
  out.tokens = std::vector<int32_t>(20, 5);
  out.decode_tokens = 20;
  out.decode_ms = 100;
  out.steps_per_canvas = {12, 9};
  EXPECT_EQ(generation_summary_line(out),
            "[diffusion, entropy-bound sampler (auto): 20 tokens in 2 canvases, 21 steps, 200.0 tokens/s]");
}

// A chat conversation longer than the context loses its oldest exchanges, never the system prompt or the new
// turn; a new turn too long even alone is refused with the reason, the conversation left as it was.
TEST(Conversation, OldestExchangesAreDroppedUntilTheTurnFits) {
  const std::string path = test::source_path("models/text-masked.gguf");
  Model model = Model::load(path);
  model.config.context_length = 160;
  const TextModel m = TextModel::from(std::move(model), path);
  const Generator generator(m);
  std::string verse;
  for (int i = 0; i < 3; ++i) verse += "And God said, Let there be light: and there was light. ";
  std::vector<ChatMessage> conversation = {{"system", "Be brief."}};
  for (int i = 0; i < 4; ++i) {
    conversation.push_back({"user", verse});
    conversation.push_back({"assistant", verse});
  }
  conversation.push_back({"user", "And the evening"});
  GenerationRequest turn;
  turn.mode = DecodeMode::Diffusion;
  turn.max_new_tokens = 8;
  turn.diffusion.block_length = 8;
  const FittedConversation fitted = fit_conversation(generator, conversation, 1, turn);
  EXPECT_TRUE(fitted.error.empty()) << fitted.error;
  EXPECT_GT(fitted.dropped, 0);
  EXPECT_EQ(conversation.size(), 10u - size_t(fitted.dropped));
  EXPECT_EQ(conversation.front().role, "system");
  EXPECT_EQ(conversation.back().content, "And the evening");
  EXPECT_EQ(turn.messages.size(), conversation.size());
  EXPECT_FALSE(turn.prompt.empty());

  std::string long_turn;
  for (int i = 0; i < 10; ++i) long_turn += verse;
  std::vector<ChatMessage> alone = {{"system", "Be brief."}, {"user", long_turn}};
  const FittedConversation refused = fit_conversation(generator, alone, 1, turn);
  EXPECT_FALSE(refused.error.empty());
  EXPECT_EQ(refused.dropped, 0);
  EXPECT_EQ(alone.size(), 2u);
}

// chat's /save and /load: the conversation reads back as it was written; a message without its role or its
// string content is refused with the file's name.
TEST(Conversation, SavedConversationLoadsBack) {
  const std::string path = test::temp_path("conversation.json");
  const std::vector<ChatMessage> conversation = {{"system", "Be brief."}, {"user", "In the \"beginning\"\n"},
                                                 {"assistant", "God created"}};
  save_conversation(conversation, path);
  const std::vector<ChatMessage> loaded = load_conversation(path);
  ASSERT_EQ(loaded.size(), conversation.size());
  for (size_t i = 0; i < loaded.size(); ++i) {
    EXPECT_EQ(loaded[i].role, conversation[i].role);
    EXPECT_EQ(loaded[i].content, conversation[i].content);
  }
  {
    std::ofstream out(path);
    out << R"([{"role": "user", "content": 3}])";
  }
  try {
    load_conversation(path);
    ADD_FAILURE() << "a message with a number for content was loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path + ": message 0: 'content' must be a string"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

// chat's slash commands on the session: /system replaces or removes the system prompt (which /reset keeps),
// /save and /load round-trip, a failed /load keeps the conversation, /exit ends the chat, others give help.
TEST(Conversation, ChatSessionCommands) {
  ChatSession session("Be brief.");
  EXPECT_EQ(session.first_turn(), 1u);
  session.messages().push_back({"user", "hi"});
  session.messages().push_back({"assistant", "hello"});
  EXPECT_EQ(session.command("/reset").text, "[conversation reset]");
  ASSERT_EQ(session.messages().size(), 1u);
  EXPECT_EQ(session.messages()[0].content, "Be brief.");
  EXPECT_EQ(session.command("/system Be kind.").text, "[system prompt set]");
  ASSERT_EQ(session.messages().size(), 1u);
  EXPECT_EQ(session.messages()[0].content, "Be kind.");
  EXPECT_EQ(session.command("/system").text, "[system prompt removed]");
  EXPECT_TRUE(session.messages().empty());
  EXPECT_EQ(session.first_turn(), 0u);
  session.messages().push_back({"user", "hi"});
  const std::string path = test::temp_path("session.json");
  EXPECT_EQ(session.command("/save " + path).text, "[saved 1 messages to " + path + "]");
  session.command("/reset");
  EXPECT_EQ(session.command("/load " + path).text, "[loaded 1 messages from " + path + "]");
  ASSERT_EQ(session.messages().size(), 1u);
  EXPECT_EQ(session.messages()[0].content, "hi");
  EXPECT_EQ(session.command("/load /nonexistent/x.json").text.rfind("canvas chat: ", 0), 0u);
  EXPECT_EQ(session.messages().size(), 1u);
  EXPECT_TRUE(session.command("/quit").exit);
  EXPECT_TRUE(session.command("/exit").exit);
  EXPECT_FALSE(session.command("/help").exit);
  EXPECT_EQ(session.command("/help").text.rfind("commands: /help", 0), 0u);
  // An unknown command, or /save and /load without a file, says so before the commands.
  EXPECT_EQ(session.command("/what").text.rfind("unknown command /what\ncommands: /help", 0), 0u);
  EXPECT_EQ(session.command("/save").text.rfind("usage: /save FILE\ncommands: /help", 0), 0u);
  EXPECT_EQ(session.command("/load").text.rfind("usage: /load FILE\n", 0), 0u);
  std::remove(path.c_str());
}

// A request without a seed gets a fresh one below 2^53 (JSON readers holding numbers as doubles read it back).
TEST(Generation, RandomSeedsAreFreshAndExactInJson) {
  const uint64_t a = random_seed(), b = random_seed();
  EXPECT_LT(a, uint64_t(1) << 53);
  EXPECT_LT(b, uint64_t(1) << 53);
  EXPECT_NE(a, b);  // equal with probability 2^-53
  EXPECT_EQ(uint64_t(double(a)), a);
}

}  // namespace
}  // namespace canvas
