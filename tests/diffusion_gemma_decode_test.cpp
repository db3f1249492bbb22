// DiffusionGemma end to end on the tiny fixture (tests/fixtures/tiny-diffusion-gemma): entropy-bound
// decoding through the KV cache equals recomputation, self-conditioning reaches the decoder, AR decoding
// through the causal encoder equals greedy recomputation, and the generate / chat CLI.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bench/synthetic.h"
#include "decode/ar.h"
#include "decode/uniform_state.h"
#include "io/gguf.h"
#include "io/hf_tokenizer.h"
#include "io/json.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "entropy_bound_test_util.h"
#include "test_util.h"

namespace canvas {
namespace {

std::string model_dir() { return test::fixture("tiny-diffusion-gemma"); }

const std::vector<int32_t> kPrompt = {2, 105, 17, 250, 33, 4, 198, 61, 77, 120, 9, 286};  // longer than the window

// A cache of `capacity` positions holding `tokens` encoded causally; the last row's logits into
// *last_logits when given.
KvCache encoded(const Model& m, const std::vector<int32_t>& tokens, int64_t capacity,
                std::vector<float>* last_logits = nullptr) {
  const int64_t n = int64_t(tokens.size());
  KvCache cache(m.config, capacity);
  std::vector<int32_t> groups(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) groups[size_t(i)] = int32_t(i);
  ForwardRequest enc;
  enc.tokens = tokens.data();
  enc.n = n;
  enc.groups = groups.data();
  if (last_logits) {
    last_logits->assign(size_t(m.config.vocab), 0.f);
    enc.logit_rows = {int32_t(n - 1)};
    enc.logits = last_logits->data();
  }
  forward(m, cache, enc, nullptr);
  return cache;
}

// Causal encoder logits of the last row of `tokens`, computed from scratch.
std::vector<float> encoder_last_row(const Model& m, const std::vector<int32_t>& tokens) {
  std::vector<float> logits;
  encoded(m, tokens, int64_t(tokens.size()), &logits);
  return logits;
}

// The twin of generate_uniform_state: every decoder pass re-encodes [prompt ; committed] into a fresh
// cache, then runs the decoder over the canvas with the self-conditioning logits the loop hands over.
EntropyBoundResult generate_by_recomputation(const Model& m, const std::vector<int32_t>& prompt,
                                             const EntropyBoundParams& p) {
  std::vector<int32_t> committed = prompt;
  DiffusionModelHooks hooks;
  hooks.vocab = m.config.vocab;
  hooks.decode = [&](const std::vector<int32_t>& canvas, const std::vector<float>* self_cond,
                     std::vector<float>& logits) {
    const int64_t n = int64_t(committed.size()), C = int64_t(canvas.size());
    KvCache cache = encoded(m, committed, n);
    ForwardRequest dec;
    dec.tokens = canvas.data();
    dec.n = C;
    dec.pos0 = n;
    dec.decoder = true;
    dec.self_cond = self_cond ? self_cond->data() : nullptr;
    for (int32_t i = 0; i < C; ++i) dec.logit_rows.push_back(i);
    dec.logits = logits.data();
    forward(m, cache, dec, nullptr);
  };
  hooks.encode = [&](const std::vector<int32_t>& tokens) { committed.insert(committed.end(), tokens.begin(), tokens.end()); };
  return generate_entropy_bound(hooks, p);
}

TEST(DiffusionGemmaDecode, ConfigIsUniformState) {
  const Model model = Model::load(model_dir());
  EXPECT_TRUE(model.config.uniform_state);
  EXPECT_TRUE(model.config.has_decoder);
}

TEST(DiffusionGemmaDecode, CachedDecodingEqualsRecomputation) {
  const Model model = Model::load(model_dir());
  const EntropyBoundParams p = test::small_entropy_bound_params();
  ThreadPool pool(2);
  const EntropyBoundResult cached = generate_uniform_state(model, kPrompt, p, &pool);
  const EntropyBoundResult recomputed = generate_by_recomputation(model, kPrompt, p);
  EXPECT_EQ(cached.tokens, recomputed.tokens);
  EXPECT_EQ(cached.passes, recomputed.passes);
  EXPECT_EQ(int64_t(cached.tokens.size()), 40);
  EXPECT_EQ(cached.steps_per_canvas.size(), 3u);
  EXPECT_EQ(cached.encoder_passes, 2);
  ThreadPool one(1);
  EXPECT_EQ(generate_uniform_state(model, kPrompt, p, &one).tokens, cached.tokens);  // any thread count
}

// Kept canvas K/V (ForwardRequest::canvas_kv, what --freeze decodes with): a full pass through them
// equals the plain pass bit for bit; a pass over some rows of the unchanged canvas gives exactly the
// full pass's rows; a row left out keeps the K/V its last pass computed, so changing its token does not
// reach the rows computed (while a full pass would see it).
TEST(DiffusionGemmaFreeze, KeptCanvasKvGiveTheFullPassRows) {
  const Model model = Model::load(model_dir());
  const ModelConfig& c = model.config;
  const int64_t P = int64_t(kPrompt.size()), C = 8, V = c.vocab;
  KvCache cache = encoded(model, kPrompt, P + C);
  std::vector<int32_t> canvas = {7, 299, 41, 41, 5, 150, 99, 2};
  std::vector<float> self_cond(size_t(C * V));
  for (size_t i = 0; i < self_cond.size(); ++i) self_cond[i] = float((i * 2654435761u) % 1000) / 100.f - 5.f;
  KvCache kept(c, C);
  const auto decode = [&](const std::vector<int32_t>& rows, KvCache* store) {
    std::vector<int32_t> tokens;
    std::vector<float> sc;
    for (int32_t r = 0; r < (rows.empty() ? int32_t(C) : int32_t(rows.size())); ++r) {
      const int32_t row = rows.empty() ? r : rows[size_t(r)];
      tokens.push_back(canvas[size_t(row)]);
      sc.insert(sc.end(), self_cond.begin() + row * V, self_cond.begin() + (row + 1) * V);
    }
    ForwardRequest dec;
    dec.tokens = tokens.data();
    dec.n = int64_t(tokens.size());
    dec.pos0 = P;
    dec.decoder = true;
    dec.self_cond = sc.data();
    dec.canvas_kv = store;
    dec.canvas_rows = rows.empty() ? nullptr : rows.data();
    for (int32_t i = 0; i < dec.n; ++i) dec.logit_rows.push_back(i);
    std::vector<float> out(size_t(dec.n * V));
    dec.logits = out.data();
    forward(model, cache, dec, nullptr);
    return out;
  };
  const auto rows_of = [&](const std::vector<float>& full, const std::vector<int32_t>& rows) {
    std::vector<float> out;
    for (int32_t r : rows) out.insert(out.end(), full.begin() + r * V, full.begin() + (r + 1) * V);
    return out;
  };
  const std::vector<float> plain = decode({}, nullptr);
  EXPECT_EQ(decode({}, &kept), plain);
  const std::vector<int32_t> some = {1, 4, 6};
  const std::vector<float> part = decode(some, &kept);
  EXPECT_EQ(part, rows_of(plain, some));
  canvas[2] = 200;  // row 2 is not recomputed: its kept K/V still hold token 41
  EXPECT_EQ(decode(some, &kept), part);
  EXPECT_NE(rows_of(decode({}, nullptr), some), part);
}

// Through the session: --freeze with a refresh every step is the plain decoder, token for token.
TEST(DiffusionGemmaFreeze, RefreshEveryStepEqualsPlainDecoding) {
  const Model model = Model::load(model_dir());
  EntropyBoundParams p = test::small_entropy_bound_params();
  const EntropyBoundResult plain = generate_uniform_state(model, kPrompt, p, nullptr);
  p.freeze = true;
  p.freeze_refresh = 1;
  const EntropyBoundResult refreshed = generate_uniform_state(model, kPrompt, p, nullptr);
  EXPECT_EQ(refreshed.tokens, plain.tokens);
  EXPECT_EQ(refreshed.passes, plain.passes);
  p.freeze_refresh = 0;
  const EntropyBoundResult frozen = generate_uniform_state(model, kPrompt, p, nullptr);
  EXPECT_EQ(frozen.tokens.size(), plain.tokens.size());
  EXPECT_LT(frozen.rows_computed, plain.rows_computed);  // something was frozen
}

// Records the decoder logits of every step; optionally hides the self-conditioning input.
struct RecordedRun {
  std::vector<std::vector<float>> logits;
  std::vector<bool> had_self_cond;
  EntropyBoundResult result;
};
RecordedRun run_recorded(const Model& model, const EntropyBoundParams& p, bool hide_self_cond) {
  RecordedRun run;
  UniformStateSession session(model, uniform_state_capacity(int64_t(kPrompt.size()), p), nullptr);
  session.encode(kPrompt);
  DiffusionModelHooks hooks = session.hooks();
  const auto decode = hooks.decode;
  hooks.decode = [&](const std::vector<int32_t>& canvas, const std::vector<float>* self_cond,
                     std::vector<float>& logits) {
    run.had_self_cond.push_back(self_cond != nullptr);
    decode(canvas, hide_self_cond ? nullptr : self_cond, logits);
    run.logits.push_back(logits);
  };
  run.result = generate_entropy_bound(hooks, p);
  return run;
}

TEST(DiffusionGemmaDecode, SelfConditioningReachesTheDecoder) {
  const Model model = Model::load(model_dir());
  EntropyBoundParams p = test::small_entropy_bound_params();
  p.max_new_tokens = 16;
  p.confidence_threshold = 0;  // no early stop: every step runs
  const RecordedRun normal = run_recorded(model, p, false);
  const RecordedRun zeros = run_recorded(model, p, true);
  ASSERT_EQ(normal.logits.size(), 6u);
  ASSERT_EQ(zeros.logits.size(), 6u);
  EXPECT_EQ(normal.had_self_cond, (std::vector<bool>{false, true, true, true, true, true}));
  EXPECT_EQ(normal.logits[0], zeros.logits[0]);  // step 1: zeros in both runs, same canvas
  // Step 2 sees the same canvas (same seed, same step-1 logits), so only self-conditioning differs.
  EXPECT_GT(test::relative_error(normal.logits[1], zeros.logits[1]), 1e-3);
}

TEST(DiffusionGemmaDecode, ArThroughTheEncoderEqualsGreedyRecomputation) {
  const Model model = Model::load(model_dir());
  ArParams p;
  p.max_new_tokens = 6;
  p.stop_at_eos = false;
  ThreadPool pool(2);
  const GenerationResult r = generate_ar(model, kPrompt, p, &pool);
  ASSERT_EQ(r.tokens.size(), 6u);
  EXPECT_EQ(r.passes, 6);
  std::vector<int32_t> tokens = kPrompt;
  for (int32_t got : r.tokens) {
    const std::vector<float> row = encoder_last_row(model, tokens);
    const int32_t want = int32_t(std::max_element(row.begin(), row.end()) - row.begin());
    EXPECT_EQ(got, want);
    tokens.push_back(want);
  }
}

TEST(DiffusionGemmaDecode, ArStopsAtAnyStopId) {
  const Model model = Model::load(model_dir());
  ArParams p;
  p.max_new_tokens = 6;
  const GenerationResult all = [&] {
    ArParams q = p;
    q.stop_at_eos = false;
    return generate_ar(model, kPrompt, q, nullptr);
  }();
  p.stop_ids = {all.tokens[2]};
  const GenerationResult stopped = generate_ar(model, kPrompt, p, nullptr);
  const size_t first = size_t(std::find(all.tokens.begin(), all.tokens.end(), all.tokens[2]) - all.tokens.begin());
  EXPECT_EQ(stopped.tokens, std::vector<int32_t>(all.tokens.begin(), all.tokens.begin() + first + 1));
}

using test::json_number;
using test::json_tokens;

TEST(DiffusionGemmaCli, GenerateFromTheCheckpointDirectory) {
  auto r = test::run_canvas("generate -s 0 -m " + model_dir() + " -p 'the sea' -n 20 --block-length 10 --steps 4 -t 2 "
                            "--json", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(json_number(r.output, "prompt_tokens"), "6") << r.output;  // <bos> ▁the ▁s e a... see tokenizer.json
  EXPECT_FALSE(json_number(r.output, "tokens_per_forward").empty()) << r.output;
  EXPECT_FALSE(json_number(r.output, "encoder_passes").empty()) << r.output;
  // The full stats line names tokens_per_forward; generation_config.json's EOS ids end the text.
  r = test::run_canvas("generate -s 0 -m " + model_dir() + " -p 'the sea' -n 20 --block-length 10 --steps 4 -t 2 -v");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tokens_per_forward"), std::string::npos) << r.output;
  // Same seed, same tokens; the chat template changes the prompt.
  const auto a = test::run_canvas("generate -s 0 -m " + model_dir() + " -p hi -n 8 --steps 3 --json", false);
  const auto b = test::run_canvas("generate -s 0 -m " + model_dir() + " -p hi -n 8 --steps 3 --json -t 1", false);
  const auto chat = test::run_canvas("generate -s 0 -m " + model_dir() + " -p hi -n 8 --steps 3 --json --chat", false);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  ASSERT_EQ(chat.exit_code, 0) << chat.output;
  EXPECT_EQ(json_tokens(a.output), json_tokens(b.output)) << a.output << b.output;
  EXPECT_NE(json_tokens(a.output), json_tokens(chat.output));
  // <bos> <|turn> u s er <0x0A> h i <turn|> <0x0A> <|turn> m o d e l <0x0A>: 17 tokens.
  EXPECT_EQ(json_number(chat.output, "prompt_tokens"), "17") << chat.output;
}

TEST(DiffusionGemmaCli, ArModeDecodesThroughTheEncoder) {
  const auto r = test::run_canvas("generate -s 0 -m " + model_dir() + " -p 'the sea' -n 5 --mode ar --json", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(json_number(r.output, "prompt_tokens"), "6") << r.output;
  EXPECT_FALSE(json_number(r.output, "passes").empty());
  EXPECT_EQ(json_number(r.output, "encoder_passes"), "0") << "AR runs have no canvases to encode";
  EXPECT_EQ(test::json_of(r.output)["mode"], "ar");
}

TEST(DiffusionGemmaCli, ConvertCopiesTheTokenizer) {
  test::TempDir tmp;
  const std::string gguf = tmp.path("tiny.gguf");
  auto r = test::run_canvas("convert --in " + model_dir() + " --out " + gguf + " --type f32");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tokenizer 300 tokens, 15 merges"), std::string::npos) << r.output;
  // The GGUF alone generates what the safetensors directory generates, prompt included.
  r = test::run_canvas("generate -s 0 -m " + gguf + " -p hi -n 8 --steps 3 --block-length 8 --json", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto st = test::run_canvas("generate -s 0 -m " + model_dir() + " -p hi -n 8 --steps 3 --block-length 8 --json", false);
  ASSERT_EQ(st.exit_code, 0) << st.output;
  EXPECT_FALSE(json_tokens(st.output).empty()) << st.output;
  EXPECT_EQ(json_tokens(r.output), json_tokens(st.output));
  EXPECT_EQ(json_number(r.output, "prompt_tokens"), json_number(st.output, "prompt_tokens"));
  const auto chat = test::run_canvas("generate -s 0 -m " + gguf + " -p hi -n 8 --steps 3 --json --chat", false);
  ASSERT_EQ(chat.exit_code, 0) << chat.output;
  EXPECT_EQ(json_number(chat.output, "prompt_tokens"), "17") << chat.output;  // as from the directory
  const std::string input = tmp.path("lines.txt");
  std::ofstream(input) << "hi\n";
  const auto chat_gguf = test::run_canvas("chat -m " + gguf + " -n 8 --steps 3 --seed 4 --verbose < " + input);
  ASSERT_EQ(chat_gguf.exit_code, 0) << chat_gguf.output;
  EXPECT_NE(chat_gguf.output.find("prompt 17 "), std::string::npos) << chat_gguf.output;
  const auto reply_gguf = test::run_canvas("chat -m " + gguf + " -n 8 --steps 3 --seed 4 < " + input, false);
  const auto reply_dir = test::run_canvas("chat -m " + model_dir() + " -n 8 --steps 3 --seed 4 < " + input, false);
  EXPECT_EQ(reply_gguf.output, reply_dir.output);  // stdout: the replies
  // --tokenizer still overrides the GGUF's own.
  r = test::run_canvas("generate -s 0 -m " + gguf + " --tokenizer " + model_dir() + "/tokenizer.json -p hi -n 8 --steps 3 "
                       "--block-length 8 --json", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(json_tokens(r.output), json_tokens(st.output));

  // The tokenizer read back from the GGUF is the one from tokenizer.json.
  const HfTokenizer json = HfTokenizer::from_json(model_dir() + "/tokenizer.json");
  const HfTokenizer back = HfTokenizer::from_gguf(*GgufFile::open(gguf));
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
  for (const std::string s : {"the sea", "hi there, world!", "über café 😀 \xE2\x96\x81", "a\n\n\nb\n\n", "   \t x  ",
                              "<|turn>user\nhi<turn|>\n", "<bos>the<eos> <unk>", "<|turn"}) {
    EXPECT_EQ(back.encode(s), json.encode(s)) << s;
    EXPECT_EQ(back.encode(s, true, false), json.encode(s, true, false)) << s;
    EXPECT_EQ(back.decode(back.encode(s), true), json.decode(json.encode(s), true)) << s;
  }
  EXPECT_EQ(back.encode("<|turn>"), std::vector<int32_t>{105});
}

// A checkpoint without tokenizer.json, or with one GGUF cannot hold, gives a GGUF without a tokenizer, which
// names --tokenizer; given it, the GGUF generates what the directory generates.
TEST(DiffusionGemmaCli, GgufWithoutTokenizerNeedsTokenizerFlag) {
  test::TempDir tmp;
  const std::filesystem::path dir = tmp.path("checkpoint");
  std::filesystem::create_directories(dir);
  for (const char* name : {"config.json", "generation_config.json", "model.safetensors"})
    std::filesystem::copy_file(model_dir() + "/" + name, dir / name);
  const std::string gguf = tmp.path("tiny.gguf");
  auto r = test::run_canvas("convert --in " + dir.string() + " --out " + gguf + " --type f32");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("no tokenizer.json, no tokenizer"), std::string::npos) << r.output;
  r = test::run_canvas("generate -s 0 -m " + gguf + " -p hi -n 4 --steps 2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("holds no tokenizer"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--tokenizer"), std::string::npos) << r.output;
  r = test::run_canvas("generate -s 0 -m " + gguf + " --tokenizer " + model_dir() + "/tokenizer.json -p hi -n 8 --steps 3 "
                       "--block-length 8 --json", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto st = test::run_canvas("generate -s 0 -m " + model_dir() + " -p hi -n 8 --steps 3 --block-length 8 --json", false);
  ASSERT_EQ(st.exit_code, 0) << st.output;
  EXPECT_EQ(json_tokens(r.output), json_tokens(st.output));

  // ignore_merges has no GGUF form: a warning, and the GGUF holds no tokenizer.
  std::string text = read_text_file(model_dir() + "/tokenizer.json");
  const size_t at = text.find("\"ignore_merges\": false");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 22, "\"ignore_merges\": true");
  std::ofstream((dir / "tokenizer.json").string()) << text;
  r = test::run_canvas("convert --in " + dir.string() + " --out " + gguf + " --type f32");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("not copied: ignore_merges is on; run the GGUF with --tokenizer"), std::string::npos)
      << r.output;
  EXPECT_EQ(GgufFile::open(gguf)->get_string("tokenizer.ggml.model", ""), "");
  // A malformed tokenizer.json stops the conversion, naming the file.
  std::ofstream((dir / "tokenizer.json").string()) << "{\"model\": ";
  r = test::run_canvas("convert --in " + dir.string() + " --out " + tmp.path("bad.gguf"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("tokenizer.json"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(tmp.path("bad.gguf")));

  // A tokenizer larger than the model's vocabulary is refused by name.
  r = test::run_canvas("generate -s 0 -m " + model_dir() + " --tokenizer " + test::fixture("hf/tokenizer.gguf") + " -p hi");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("327 tokens, more than the model's vocabulary of 300"), std::string::npos) << r.output;
}

TEST(DiffusionGemmaCli, ChatKeepsTheConversation) {
  test::TempDir tmp;
  const std::string input = tmp.path("lines.txt");
  std::ofstream(input) << "hi\n\nthe sea\n/reset\nhi\n";
  const auto r = test::run_canvas("chat -m " + model_dir() + " -n 8 --steps 3 -t 2 --verbose < " + input);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Three replies; the second turn's prompt holds the first turn; after /reset the first prompt repeats.
  std::vector<std::string> prompt_sizes;
  for (size_t at = r.output.find("prompt "); at != std::string::npos; at = r.output.find("prompt ", at + 1))
    prompt_sizes.push_back(r.output.substr(at + 7, r.output.find(' ', at + 7) - at - 7));
  ASSERT_EQ(prompt_sizes.size(), 3u) << r.output;
  EXPECT_EQ(prompt_sizes[0], "17") << r.output;  // as in GenerateFromTheCheckpointDirectory
  // First turn (17) + reply (0..8) + <turn|> <0x0A> (2) + <|turn> u s er <0x0A> t he ▁s e a <turn|> <0x0A>
  // <|turn> m o d e l <0x0A> (19, no <bos>).
  EXPECT_GE(std::stoi(prompt_sizes[1]), 17 + 2 + 19) << r.output;
  EXPECT_LE(std::stoi(prompt_sizes[1]), 17 + 8 + 2 + 19) << r.output;
  EXPECT_EQ(prompt_sizes[2], "17") << r.output;
  EXPECT_NE(r.output.find("tokens_per_forward"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[conversation reset]"), std::string::npos) << r.output;
  const auto ar = test::run_canvas("chat -m " + model_dir() + " -n 4 --mode ar < " + input);
  ASSERT_EQ(ar.exit_code, 0) << ar.output;
  // --visual draws only on a terminal (CliVisual tests the drawing); redirected, it says so.
  const auto visual = test::run_canvas("chat -m " + model_dir() + " -n 8 --steps 2 --visual < " + input);
  ASSERT_EQ(visual.exit_code, 0) << visual.output;
  EXPECT_NE(visual.output.find("--visual ignored: stderr is not a terminal"), std::string::npos) << visual.output;
}

// The synthetic 26B-A4B shape has the released parameter counts: 25.2B in all, 3.8B active per token.
TEST(DiffusionGemmaSynthetic, FullShapeHasTheReleasedParameterCount) {
  const bench::SyntheticShape& shape = bench::find_synthetic_shape("diffusion-gemma:26b-a4b");
  bench::SyntheticOptions f32;
  f32.type = DType::F32;  // every tensor f32: bytes / 4 = parameters
  const double parameters = double(bench::synthetic_model_bytes(shape, f32)) / 4;
  EXPECT_GT(parameters, 25.2e9);
  EXPECT_LT(parameters, 25.3e9);
  const ModelConfig& c = shape.config;
  const double expert_parameters = double(c.n_layers * c.n_experts * 3 * c.expert_ffn * c.hidden);
  const double active = parameters - expert_parameters * double(c.n_experts - c.n_experts_used) / double(c.n_experts);
  EXPECT_GT(active, 3.8e9);
  EXPECT_LT(active, 3.9e9);
  bench::SyntheticOptions one_period;  // --layers 6: [sliding x5, full] once
  one_period.layers = 6;
  EXPECT_LT(bench::synthetic_model_bytes(shape, one_period), bench::synthetic_model_bytes(shape, {}) / 3);
}

// The tiny synthetic DiffusionGemma binds every weight: it decodes with the entropy-bound sampler, and
// `canvas bench` times its passes.
TEST(DiffusionGemmaSynthetic, TinyShapeDecodesAndBenches) {
  ThreadPool pool(2);
  auto tiny = bench::build_synthetic_model(bench::find_synthetic_shape("diffusion-gemma:tiny"), {}, &pool);
  EntropyBoundParams p = test::small_entropy_bound_params();
  const EntropyBoundResult r = generate_uniform_state(tiny->model, kPrompt, p, &pool);
  EXPECT_EQ(int64_t(r.tokens.size()), p.max_new_tokens);
  const auto bench = test::run_canvas("bench --synthetic diffusion-gemma:tiny --layers 3 -p 10 --block-length 16 "
                                      "--warmup 0 --repeats 2 -t 2 --no-roofs");
  ASSERT_EQ(bench.exit_code, 0) << bench.output;
  for (const char* line : {"decoder, canvas 16, self-cond zeros", "decoder, canvas 16, self-cond logits",
                           "AR step (encoder, 1 token + logits)", "peak RSS"})
    EXPECT_NE(bench.output.find(line), std::string::npos) << line << "\n" << bench.output;
}

}  // namespace
}  // namespace canvas
