// canvas serve in-process: batched forward passes equal separate ones, concurrent generations through
// the step batcher equal decoding each alone, and the OpenAI request parser's 400s.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <atomic>
#include <thread>
#include <variant>

#include "core/error.h"
#include "decode/ar.h"
#include "decode/events.h"
#include "decode/masked.h"
#include "decode/text_model.h"
#include "decode/uniform_state.h"
#include "model/model.h"
#include "serve/engine.h"
#include "serve/openai.h"
#include "entropy_bound_test_util.h"
#include "test_util.h"

using namespace canvas;

namespace {

struct Pass {
  std::vector<int32_t> tokens, groups;
  int64_t pos0 = 0;
  std::vector<int32_t> rows;
};

// Three passes of different shapes (a causal prompt, a block-causal canvas, a later step that reuses
// the cache) run alone and as one batch: logits and cache contents must match bit for bit.
void check_batch_matches(const std::string& name) {
  const Model m = Model::load(test::fixture(name + ".gguf"));
  ThreadPool pool(2);
  std::vector<Pass> passes(3);
  passes[0].tokens = {73, 110, 258, 309, 103};
  passes[0].groups = {0, 1, 2, 3, 4};
  passes[0].rows = {4, 2};
  passes[1].tokens = {73, 110, 258, 318, 318, 318, 318, 318};
  passes[1].groups = {0, 0, 0, 1, 1, 1, 1, 1};
  passes[1].rows = {3, 4, 5, 6, 7};
  passes[2].tokens = {287, 318, 318};
  passes[2].groups = {1, 1, 1};
  passes[2].pos0 = 3;
  passes[2].rows = {0, 1, 2};
  auto make = [&](Pass& p, std::vector<float>& out) {
    ForwardRequest r;
    r.tokens = p.tokens.data();
    r.n = int64_t(p.tokens.size());
    r.pos0 = p.pos0;
    r.groups = p.groups.data();
    r.key_end = p.pos0 == 0 ? 0 : 8;
    r.logit_rows = p.rows;
    out.assign(p.rows.size() * size_t(m.config.vocab), 0.f);
    r.logits = out.data();
    return r;
  };
  // The third pass runs against a cache the second one filled first (its keys 0..8).
  std::vector<float> prep(5 * size_t(m.config.vocab));
  std::vector<std::unique_ptr<KvCache>> alone, batched;
  std::vector<std::vector<float>> logits_alone(3), logits_batched(3);
  for (int i = 0; i < 3; ++i) {
    alone.push_back(std::make_unique<KvCache>(m.config, 16));
    batched.push_back(std::make_unique<KvCache>(m.config, 16));
  }
  for (auto* caches : {&alone, &batched}) {
    std::vector<float> tmp;
    ForwardRequest fill = make(passes[1], tmp);
    forward(m, *(*caches)[2], fill, &pool);
  }
  std::vector<ForwardRequest> requests;
  std::vector<KvCache*> cache_ptrs;
  for (int i = 0; i < 3; ++i) {
    ForwardRequest r = make(passes[size_t(i)], logits_alone[size_t(i)]);
    forward(m, *alone[size_t(i)], r, &pool);
    requests.push_back(make(passes[size_t(i)], logits_batched[size_t(i)]));
    cache_ptrs.push_back(batched[size_t(i)].get());
  }
  forward_batch(m, cache_ptrs, requests, &pool);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(logits_alone[size_t(i)], logits_batched[size_t(i)]) << name << " pass " << i;
    for (int64_t l = 0; l < m.config.n_layers; ++l) {
      const int64_t floats = alone[size_t(i)]->head_stride(l) * m.config.attention_of(l).n_kv_heads;
      EXPECT_TRUE(std::equal(alone[size_t(i)]->keys(l), alone[size_t(i)]->keys(l) + floats, batched[size_t(i)]->keys(l)))
          << name << " pass " << i << " layer " << l;
    }
  }
}

}  // namespace

TEST(ForwardBatch, MatchesSeparatePassesLlada) { check_batch_matches("tiny-llada"); }
TEST(ForwardBatch, MatchesSeparatePassesDream) { check_batch_matches("tiny-dream"); }
TEST(ForwardBatch, MatchesSeparatePassesMoe) { check_batch_matches("tiny-llada-moe"); }

TEST(ForwardBatch, RejectsDecoderPassesOnModelsWithoutADecoder) {
  const Model m = Model::load(test::fixture("tiny-llada.gguf"));
  KvCache a(m.config, 8), b(m.config, 8);
  const std::vector<int32_t> tokens = {73, 110}, groups = {0, 0};
  ForwardRequest r1, r2;
  r1.tokens = r2.tokens = tokens.data();
  r1.n = r2.n = 2;
  r1.groups = r2.groups = groups.data();
  r2.decoder = true;
  KvCache* caches[] = {&a, &b};
  const ForwardRequest requests[] = {r1, r2};
  EXPECT_THROW(forward_batch(m, caches, requests, nullptr), Error);
}

// An encoder request and decoder requests after it on the same cache, in one pass (draft-and-verify's
// overlapped cycle): each decoder request sees the K/V the encoder request writes in that pass, and the
// logits and cache are bit for bit those of running the requests one after the other.
TEST(ForwardBatch, EncoderAndDecoderOnOneCacheMatchSeparatePasses) {
  const Model m = Model::load(test::fixture("tiny-diffusion-gemma"));
  const int64_t V = m.config.vocab;
  ThreadPool pool(2);
  const std::vector<int32_t> prompt = {5, 17, 3, 9, 11, 2}, more = {7, 8, 4};
  const std::vector<int32_t> canvas_a = {1, 2, 3, 4}, canvas_b = {9, 8, 7};
  auto requests_of = [&](const std::vector<int32_t>& tokens, int64_t pos0, std::vector<int32_t>& groups,
                         std::vector<float>& enc, std::vector<float>& da, std::vector<float>& db) {
    groups.resize(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) groups[i] = int32_t(pos0 + int64_t(i));
    enc.assign(tokens.size() * size_t(V), 0.f);
    da.assign(canvas_a.size() * size_t(V), 0.f);
    db.assign(canvas_b.size() * size_t(V), 0.f);
    std::vector<ForwardRequest> r(3);
    r[0].tokens = tokens.data(), r[0].n = int64_t(tokens.size()), r[0].pos0 = pos0, r[0].groups = groups.data();
    r[0].logits = enc.data();
    for (size_t i = 0; i < tokens.size(); ++i) r[0].logit_rows.push_back(int32_t(i));
    // One canvas after the first new token, one after all of them.
    r[1].tokens = canvas_a.data(), r[1].n = int64_t(canvas_a.size()), r[1].pos0 = pos0 + 1, r[1].decoder = true;
    r[1].logits = da.data();
    for (size_t i = 0; i < canvas_a.size(); ++i) r[1].logit_rows.push_back(int32_t(i));
    r[2].tokens = canvas_b.data(), r[2].n = int64_t(canvas_b.size()), r[2].pos0 = pos0 + int64_t(tokens.size());
    r[2].decoder = true, r[2].logits = db.data();
    for (size_t i = 0; i < canvas_b.size(); ++i) r[2].logit_rows.push_back(int32_t(i));
    return r;
  };
  KvCache one(m.config, 32), apart(m.config, 32);
  std::vector<int32_t> g1, g2;
  std::vector<float> e1, a1, b1, e2, a2, b2;
  // The prompt, then [more ; two canvases] in one pass or in three.
  for (KvCache* c : {&one, &apart}) {
    std::vector<int32_t> g;
    std::vector<float> x, y, z;
    forward_on(m, *c, requests_of(prompt, 0, g, x, y, z), &pool);
  }
  const std::vector<ForwardRequest> batched = requests_of(more, int64_t(prompt.size()), g1, e1, a1, b1);
  forward_on(m, one, batched, &pool);
  const std::vector<ForwardRequest> separate = requests_of(more, int64_t(prompt.size()), g2, e2, a2, b2);
  for (const ForwardRequest& r : separate) forward(m, apart, r, &pool);
  EXPECT_EQ(e1, e2);
  EXPECT_EQ(a1, a2);
  EXPECT_EQ(b1, b2);
  // The decoders did see the new rows: a canvas after the prompt alone differs.
  std::vector<float> before(canvas_b.size() * size_t(V));
  ForwardRequest r = separate[2];
  r.pos0 = int64_t(prompt.size());
  r.logits = before.data();
  forward(m, apart, r, &pool);
  EXPECT_NE(before, b2);
  for (int64_t l = 0; l < m.config.n_layers; ++l) {
    const int64_t floats = one.head_stride(l) * m.config.attention_of(l).n_kv_heads;
    EXPECT_TRUE(std::equal(one.keys(l), one.keys(l) + floats, apart.keys(l))) << "layer " << l;
    EXPECT_TRUE(std::equal(one.values(l), one.values(l) + floats, apart.values(l))) << "layer " << l;
  }
}

namespace {

// Blocks until the engine has finished `job`; its last event.
serve::event::Finished finished_of(const serve::Job& job) {
  return std::get<serve::event::Finished>(job.events.wait_finished().back());
}

struct EngineCase {
  std::vector<int32_t> prompt;
  serve::GenerationSettings settings;
};

std::vector<int32_t> decode_alone(const Model& m, const EngineCase& c, ThreadPool* pool) {
  const serve::GenerationSettings& s = c.settings;
  if (s.mode == serve::DecodeMode::Ar) {
    ArParams p;
    p.max_new_tokens = s.max_new_tokens;
    p.sampling = s.sampling;
    // No stop ids: the model's EOS ends it, as in the engine below (which has no stop ids either).
    return generate_ar(m, c.prompt, p, pool).tokens;
  }
  MaskedDiffusionParams p;
  p.gen_length = s.max_new_tokens;
  const int64_t block = s.diffusion.block_length;
  p.block_length = std::min<int64_t>(block > 0 ? block : 32, s.max_new_tokens);
  p.steps = s.diffusion.steps > 0 ? s.diffusion.steps : s.max_new_tokens;
  p.threshold = s.masked.threshold;
  p.cache = s.masked.cache;
  p.sampling = s.sampling;
  return generate_masked(m, c.prompt, p, pool).tokens;
}

}  // namespace

// Requests of different kinds decoded concurrently, their steps batched, give exactly the tokens each
// gives decoded alone (temperature 0 and a seeded temperature > 0 alike).
TEST(ServeEngine, BatchedGenerationsEqualDecodingAlone) {
  const Model m = Model::load(test::fixture("tiny-llada.gguf"));
  ThreadPool pool(2);
  std::vector<EngineCase> cases(6);
  const std::vector<std::vector<int32_t>> prompts = {{73, 110, 258}, {309, 103, 110, 287, 281}, {73}};
  for (size_t i = 0; i < cases.size(); ++i) {
    EngineCase& c = cases[i];
    c.prompt = prompts[i % prompts.size()];
    c.settings.max_new_tokens = 8;
    c.settings.diffusion.block_length = 4;
    c.settings.mode = i % 3 == 2 ? serve::DecodeMode::Ar : serve::DecodeMode::Diffusion;
    c.settings.masked.cache = i == 0 ? CacheMode::None : i == 1 ? CacheMode::Dual : CacheMode::Prefix;
    if (i == 3) c.settings.masked.threshold = 0.3f;
    if (i == 4) {
      c.settings.sampling.temperature = 0.8f;
      c.settings.sampling.seed = 7;
    }
  }
  serve::EngineOptions options;
  options.parallel = int64_t(cases.size());
  options.queue = 0;
  serve::Engine engine(m, &pool, options);
  // The pool is held by a loop until every job is submitted: the engine's passes wait for it, so the
  // requests share passes however the threads are scheduled (a first job could otherwise finish its 8 tiny
  // passes before the second is submitted on a loaded machine).
  std::atomic<bool> submitted{false}, holding{false};
  std::thread holder([&] {
    pool.run([&](int, int) {
      holding = true;
      while (!submitted.load()) std::this_thread::yield();
    });
  });
  while (!holding.load()) std::this_thread::yield();
  std::vector<std::shared_ptr<serve::Job>> jobs;
  for (const EngineCase& c : cases) {
    auto job = std::make_shared<serve::Job>();
    job->prompt = c.prompt;
    job->settings = c.settings;
    EXPECT_TRUE(engine.submit(job));
    jobs.push_back(job);
  }
  submitted = true;
  holder.join();
  std::vector<serve::event::Finished> finished;
  for (auto& job : jobs) {
    finished.push_back(finished_of(*job));
    EXPECT_EQ(finished.back().error, "");
  }
  ThreadPool alone_pool(2);  // not the engine's pool, which its thread may still hold
  for (size_t i = 0; i < cases.size(); ++i)
    EXPECT_EQ(finished[i].canvas, decode_alone(m, cases[i], &alone_pool)) << "request " << i;
  EXPECT_GT(engine.batcher().largest_batch(), 1);  // the steps did share passes
  EXPECT_LT(engine.batcher().batches(), engine.batcher().passes());
}

TEST(ServeEngine, QueueIsBoundedAndCancelFreesTheSlot) {
  const Model m = Model::load(test::fixture("tiny-llada.gguf"));
  ThreadPool pool(1);
  serve::EngineOptions options;
  options.parallel = 1;
  options.queue = 1;
  serve::Engine engine(m, &pool, options);
  auto make = [&] {
    auto job = std::make_shared<serve::Job>();
    job->prompt = {73, 110};
    job->settings.mode = serve::DecodeMode::Ar;
    job->settings.max_new_tokens = m.config.context_length - 2;  // long enough to still run when cancelled
    return job;
  };
  auto running = make(), waiting = make(), refused = make();
  // The running job is held at its first event until both are cancelled: however slowly this thread is
  // scheduled, it cannot finish (and free its slot) before the queue is seen full.
  std::atomic<bool> hold{true}, started{false};
  running->listener = [&](const serve::JobEvent& e) {
    started = true;
    while (hold && !std::holds_alternative<serve::event::Finished>(e))
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  ASSERT_TRUE(engine.submit(running));
  while (!started.load()) std::this_thread::yield();
  ASSERT_TRUE(engine.submit(waiting));
  EXPECT_FALSE(engine.submit(refused));  // one running, one waiting: full
  running->cancel = true;
  waiting->cancel = true;
  hold = false;
  EXPECT_TRUE(finished_of(*waiting).cancelled_by_client);
  const serve::event::Finished finished = finished_of(*running);
  EXPECT_TRUE(finished.cancelled_by_client);
  EXPECT_LT(int64_t(finished.canvas.size()), m.config.context_length - 2);
  EXPECT_EQ(finished.finish_reason, "cancelled");
}

// A request's events as the engine appends them, in each mode of a text model: Started first (with the mode),
// Finished last, steps counted from 1 with only the latest keeping its canvas, the text deltas adding up to
// the final text and carrying, in order, one log-probability per token of it.
TEST(ServeEngine, EventsOfARequestInOrder) {
  ThreadPool pool(2);
  const std::string path = test::source_path("models/text-dg.gguf");
  const TextModel m = TextModel::from(Model::load(path), path);
  serve::EngineOptions options;
  options.tokenizer = &m.tokenizer;
  options.chat = &m.chat;
  options.defaults = m.defaults;
  serve::Engine engine(m.model, &pool, options);
  for (const DecodeMode mode : {DecodeMode::Ar, DecodeMode::Diffusion, DecodeMode::Verify}) {
    SCOPED_TRACE(decode_mode_name(mode));
    auto job = std::make_shared<serve::Job>();
    job->settings.text = "And God said";
    job->settings.mode = mode;
    job->settings.max_new_tokens = 24;
    job->settings.logprobs = 2;
    job->prompt = engine.generator().prompt_of(job->settings);
    ASSERT_TRUE(engine.submit(job));
    const std::vector<serve::JobEvent> events = job->events.wait_finished();
    ASSERT_GE(events.size(), 3u);
    ASSERT_TRUE(std::holds_alternative<serve::event::Started>(events.front()));
    EXPECT_EQ(std::get<serve::event::Started>(events.front()).mode, mode);
    ASSERT_TRUE(std::holds_alternative<serve::event::Finished>(events.back()));
    const auto& finished = std::get<serve::event::Finished>(events.back());
    ASSERT_EQ(finished.error, "");
    std::string text;
    std::vector<TokenLogprob> logprobs;
    int64_t steps = 0, tokens = 0, canvases = 0;
    for (size_t i = 1; i + 1 < events.size(); ++i) {
      ASSERT_FALSE(std::holds_alternative<serve::event::Started>(events[i])) << i;
      ASSERT_FALSE(std::holds_alternative<serve::event::Finished>(events[i])) << i;
      if (const auto* delta = std::get_if<serve::event::TextDelta>(&events[i])) {
        text += delta->text;
        EXPECT_GE(delta->tokens, tokens) << i;
        tokens = delta->tokens;
        logprobs.insert(logprobs.end(), delta->logprobs.begin(), delta->logprobs.end());
      } else if (const auto* step = std::get_if<serve::event::CanvasStep>(&events[i])) {
        EXPECT_EQ(step->step, ++steps);
        canvases += !step->canvas.empty();
      }
    }
    EXPECT_GT(steps, 0);
    EXPECT_EQ(canvases, 1);
    EXPECT_FALSE(finished.text.empty());
    EXPECT_EQ(text, finished.text);
    EXPECT_EQ(tokens, int64_t(finished.tokens.size()));
    ASSERT_EQ(logprobs.size(), finished.tokens.size());
    ASSERT_EQ(finished.logprobs.size(), finished.tokens.size());
    for (size_t i = 0; i < logprobs.size(); ++i) {
      EXPECT_EQ(logprobs[i].token, finished.tokens[i]) << i;
      EXPECT_EQ(logprobs[i].logprob, finished.logprobs[i].logprob) << i;
    }
  }
}

// How a generation ended and what it wrote, in OpenAI's words: an end token or a stop string is "stop", max_tokens
// or the context "length"; a suffix request's completion is what fills the gap, not the document.
TEST(ServeApi, FinishReasonsAndSuffixTextInOpenAisWords) {
  EXPECT_EQ(serve::openai_finish_reason("eos"), "stop");
  EXPECT_EQ(serve::openai_finish_reason("stop"), "stop");
  EXPECT_EQ(serve::openai_finish_reason("length"), "length");
  EXPECT_EQ(serve::openai_finish_reason("context"), "length");
  EXPECT_EQ(serve::openai_finish_reason("cancelled"), "cancelled");
  GenerationRequest r;
  GenerationOutput out;
  out.text = "Let there be light: and there was light.";
  out.fills = {" be light"};
  EXPECT_EQ(serve::completion_text(r, out), out.text);
  r.suffix = ": and there was light.";
  EXPECT_EQ(serve::completion_text(r, out), " be light");
}

TEST(ServeApi, BadRequestsAreFieldErrors) {
  auto status_of = [](const std::string& body, bool chat = false) {
    try {
      serve::parse_api_request(body, chat);
    } catch (const serve::ApiError& e) {
      return e.status;
    }
    return 200;
  };
  EXPECT_EQ(status_of(R"({"prompt": "hi"})"), 200);
  EXPECT_EQ(status_of(R"({"prompt": "hi")"), 400);                        // malformed
  EXPECT_EQ(status_of(R"(["prompt"])"), 400);                             // not an object
  EXPECT_EQ(status_of(R"({"prompt": 3})"), 400);                          // wrong type
  EXPECT_EQ(status_of(R"({"prompt": "hi", "max_tokens": "8"})"), 400);    // wrong type
  EXPECT_EQ(status_of(R"({"prompt": "hi", "max_tokens": 0})"), 400);      // <= 0
  EXPECT_EQ(status_of(R"({"prompt": "hi", "max_tokens": -3})"), 400);
  EXPECT_EQ(status_of(R"({"prompt": "hi", "max_tokens": 1e12})"), 400);   // huge
  EXPECT_EQ(status_of(R"({"prompt": "hi", "bogus": 1})"), 200);           // unknown field: ignored
  EXPECT_EQ(status_of(R"({"prompt": "hi", "n": 2})"), 400);
  EXPECT_EQ(status_of(R"({"prompt": "hi", "top_p": 0})"), 400);
  EXPECT_EQ(status_of(R"({"prompt": "hi", "cache": "all"})"), 400);
  EXPECT_EQ(status_of(R"({"prompt": "hi", "repeat_penalty": 0})"), 400);
  EXPECT_EQ(status_of(R"({"prompt": "hi", "repeat_penalty": 11})"), 400);
  EXPECT_EQ(serve::parse_api_request(R"({"prompt": "hi", "repeat_penalty": 1.15})", false).settings.sampling.repeat_penalty,
            1.15f);
  // OpenAI's penalties and logit_bias set the request's sampling (not ignored), in every endpoint.
  for (const serve::Endpoint endpoint :
       {serve::Endpoint::Completions, serve::Endpoint::ChatCompletions, serve::Endpoint::Responses}) {
    const std::string input = endpoint == serve::Endpoint::Completions       ? R"("prompt": "hi")"
                              : endpoint == serve::Endpoint::ChatCompletions ? R"("messages": [{"role": "user", "content": "hi"}])"
                                                                             : R"("input": "hi")";
    const serve::ApiRequest shaped = serve::parse_api_request(
        "{" + input + R"(, "presence_penalty": 0.5, "frequency_penalty": -1, "logit_bias": {"7": -100, "12": 2.5}})",
        endpoint);
    EXPECT_EQ(shaped.settings.sampling.presence_penalty, 0.5f);
    EXPECT_EQ(shaped.settings.sampling.frequency_penalty, -1.f);
    EXPECT_EQ(shaped.settings.sampling.logit_bias, (std::vector<std::pair<int32_t, float>>{{12, 2.5f}, {7, -100.f}}));
    EXPECT_TRUE(shaped.ignored.empty());
  }
  EXPECT_EQ(status_of(R"({"prompt": "hi", "frequency_penalty": -2.5})"), 400);
  EXPECT_EQ(status_of(R"({"prompt": "hi", "logit_bias": {"3": 101}})"), 400);
  EXPECT_EQ(status_of(R"({"prompt": "hi", "logit_bias": {"99999999999": 1}})"), 400);
  EXPECT_EQ(status_of(R"({"prompt": "hi", "stream_options": {"include_usage": true}})"), 400);
  EXPECT_EQ(status_of(R"({"max_tokens": 4})"), 400);                      // no prompt
  EXPECT_EQ(status_of(R"({"messages": []})", true), 400);
  EXPECT_EQ(status_of(R"({"messages": [{"role": "robot", "content": "x"}]})", true), 400);
  EXPECT_EQ(status_of(R"({"messages": [{"role": "user", "content": "x"}], "stop": ["a", ""]})", true), 400);
  EXPECT_EQ(status_of(R"({"messages": [{"role": "user", "content": "x"}], "stream": true,
                          "stream_options": {"include_usage": true}, "max_tokens": 8, "temperature": 0.5,
                          "seed": 3, "stop": "\n", "steps": 8, "block_length": 8, "threshold": 0.9,
                          "cache": "dual", "mode": "diffusion", "canvas_draft": true})", true), 200);
  try {
    serve::parse_api_request(R"({"prompt": "hi", "max_tokens": "8"})", false);
  } catch (const serve::ApiError& e) {
    EXPECT_EQ(e.param, "max_tokens");
    EXPECT_NE(std::string(e.what()).find("integer"), std::string::npos);
  }
}

// DiffusionGemma (uniform-state: encoder passes and decoder passes, batched separately) and its AR mode,
// three requests at once through the engine: each gives the tokens of decoding it alone.
TEST(ServeEngine, UniformStateBatchedEqualsDecodingAlone) {
  const Model m = Model::load(test::fixture("tiny-diffusion-gemma"));
  ThreadPool pool(2);
  serve::EngineOptions options;
  options.parallel = 3;
  options.queue = 0;
  options.defaults.params = test::small_entropy_bound_params();
  serve::Engine engine(m, &pool, options);
  const std::vector<std::vector<int32_t>> prompts = {{2, 105, 17, 250, 33, 4, 198, 61, 77, 120, 9, 286},
                                                     {2, 105, 17, 250},
                                                     {2, 33, 4, 198, 61}};
  std::vector<std::shared_ptr<serve::Job>> jobs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto job = std::make_shared<serve::Job>();
    job->prompt = prompts[i];
    job->settings.mode = i == 2 ? serve::DecodeMode::Ar : serve::DecodeMode::Diffusion;
    job->settings.max_new_tokens = i == 2 ? 8 : 40;
    job->settings.sampling.seed = 5 + i;
    ASSERT_TRUE(engine.submit(job));
    jobs.push_back(job);
  }
  // Every job first: the engine's thread runs passes on `pool` while any job is left, and a pool serves one
  // caller at a time (decoding the references on it meanwhile could hang both).
  std::vector<serve::event::Finished> finished;
  for (auto& job : jobs) finished.push_back(finished_of(*job));
  ThreadPool alone_pool(2);
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_EQ(finished[i].error, "");
    if (i == 2) {
      ArParams p;
      p.max_new_tokens = 8;
      p.sampling.seed = 7;
      EXPECT_EQ(finished[i].canvas, generate_ar(m, prompts[i], p, &alone_pool).tokens);
    } else {
      EntropyBoundParams p = test::small_entropy_bound_params();
      p.seed = 5 + i;
      EXPECT_EQ(finished[i].canvas, generate_uniform_state(m, prompts[i], p, &alone_pool).tokens) << "request " << i;
    }
  }
  EXPECT_GT(engine.batcher().largest_batch(), 1);
}

// The tiny DiffusionGemma fixture as canvas's own DiffusionGemma checkpoints are (trained here with an AR
// loss through the encoder): auto chooses among the modes that write AR's text. The fixture itself is in
// the release's form, whose auto is diffusion (ModelConfig::release_form).
Model load_as_own_checkpoint(const std::string& path) {
  Model m = Model::load(path);
  m.config.release_form = false;
  m.config.default_mode.clear();
  return m;
}

// One generation at a time, with the small entropy-bound settings of the tiny DiffusionGemma fixture.
serve::EngineOptions one_slot_small_sampler() {
  serve::EngineOptions options;
  options.parallel = 1;
  options.defaults.params = test::small_entropy_bound_params();
  return options;
}

TEST(ServeRouting, UniformStateCostCountsWholeCanvasesAndLearnsPassesPerCanvas) {
  serve::CostModel cost;
  cost.fixed_ms = 1;
  cost.per_row_ms = 0.01;
  // 300 tokens need two 256-token canvases; 10 passes each over 2 requests x 256 rows.
  EXPECT_DOUBLE_EQ(cost.uniform_ms(300, 256, 10, 2), 2 * 10 * (1 + 0.01 * 512));
  EXPECT_DOUBLE_EQ(cost.uniform_ms(256, 256, 3, 1), 3 * (1 + 0.01 * 256));

  const Model m = load_as_own_checkpoint(test::fixture("tiny-diffusion-gemma"));
  ThreadPool pool(2);
  const serve::EngineOptions options = one_slot_small_sampler();
  serve::Engine engine(m, &pool, options);
  EXPECT_EQ(engine.cost_model().uniform_passes_per_canvas, 0);  // nothing measured yet
  auto job = std::make_shared<serve::Job>();
  job->prompt = {2, 105, 17, 250};
  job->settings.mode = serve::DecodeMode::Diffusion;
  job->settings.max_new_tokens = 2 * options.defaults.params.canvas_length;
  ASSERT_TRUE(engine.submit(job));
  const serve::event::Finished finished = finished_of(*job);
  ASSERT_EQ(finished.error, "");
  ASSERT_GT(finished.passes, 0);
  EXPECT_DOUBLE_EQ(engine.cost_model().uniform_passes_per_canvas, double(finished.passes) / 2);
  // auto chooses among the modes that write AR's text (diffusion runs when asked for): draft-and-verify
  // first, while its acceptance is measured.
  serve::GenerationSettings s;
  s.mode = serve::DecodeMode::Auto;
  s.max_new_tokens = options.defaults.params.canvas_length;
  EXPECT_EQ(engine.choose(s).mode, serve::DecodeMode::Verify);
  engine.shutdown(false);
}

// Draft-and-verify in auto's cost model: requests at light load run verify with kExploreDraftLength drafts
// until kMinAcceptanceCycles cycles are measured, then auto takes the fastest of AR and each verify setting
// by the estimate from the pass times and the measured acceptance (choose_ar_text_mode).
TEST(ServeRouting, VerifyIsExploredThenChosenByMeasuredAcceptance) {
  const Model m = load_as_own_checkpoint(test::fixture("tiny-diffusion-gemma"));
  ThreadPool pool(2);
  const serve::EngineOptions options = one_slot_small_sampler();
  serve::Engine engine(m, &pool, options);
  serve::GenerationSettings s;
  s.mode = serve::DecodeMode::Auto;
  s.max_new_tokens = 40;
  s.ignore_eos = true;
  auto run_one = [&] {  // one request, alone
    auto job = std::make_shared<serve::Job>();
    job->prompt = {2, 105, 17, 250};
    job->settings = s;
    EXPECT_TRUE(engine.submit(job));
    const std::vector<serve::JobEvent> events = job->events.wait_finished();
    EXPECT_EQ(std::get<serve::event::Finished>(events.back()).error, "");
    return std::get<serve::event::Started>(events.front());
  };
  for (int i = 0; i < 20 && engine.cost_model().acceptance.cycles(1) < kMinAcceptanceCycles; ++i) {
    const serve::ModeChoice choice = engine.choose(s);
    ASSERT_EQ(choice.mode, serve::DecodeMode::Verify) << i;
    EXPECT_EQ(choice.draft_length, kExploreDraftLength);
    const serve::event::Started started = run_one();
    EXPECT_EQ(started.mode, serve::DecodeMode::Verify);
    EXPECT_NE(started.reason.find("measures how many drafts"), std::string::npos) << started.reason;
  }
  ASSERT_GE(engine.cost_model().acceptance.cycles(1), kMinAcceptanceCycles);
  // Then AR once, alone, which measures its ms per token (as every request that runs alone does its own).
  const serve::ModeChoice ar = engine.choose(s);
  ASSERT_EQ(ar.mode, serve::DecodeMode::Ar) << ar.reason;
  EXPECT_EQ(run_one().mode, serve::DecodeMode::Ar);
  const serve::CostModel c = engine.cost_model();
  EXPECT_EQ(c.observed.count("ar"), 1u);
  EXPECT_EQ(c.observed.count("verify k=8"), 1u);
  EXPECT_GT(c.verify_observations, 0);
  const serve::ModeChoice expected = choose_ar_text_mode(c, 1, m.config.has_decoder);
  const serve::ModeChoice chosen = engine.choose(s);
  EXPECT_EQ(chosen.mode, expected.mode);
  EXPECT_EQ(chosen.draft_length, expected.draft_length);
  EXPECT_EQ(chosen.reason, expected.reason);
  s.mode = serve::DecodeMode::Ar;  // asked for
  EXPECT_EQ(engine.choose(s).reason, "asked for");
  engine.shutdown(false);
}

// Issue 61 A: serve --cost-model on a file of runs alone (what generate --draft-datastore saves: no pass
// times) times the passes at start-up, keeps the runs' acceptance, and auto then chooses at every load.
TEST(ServeRouting, CostModelFileWithoutPassTimesIsTimedAtStartUp) {
  test::TempDir dir;
  const Model m = Model::load(test::fixture("tiny-diffusion-gemma"));
  ThreadPool pool(2);
  serve::EngineOptions options = one_slot_small_sampler();
  options.parallel = 2;
  options.cost_model_file = dir.path("costs.json");
  options.cost_model_key = "k";
  {
    std::ofstream(options.cost_model_file) << R"({"key": "k", "fixed_ms": 0, "per_row_ms": 0, "passes": [],
      "verify_cycles_keeping": {"8": [8, 0, 0, 0, 0, 0, 0, 0, 4]}, "observed_ms_per_token": {}})";
  }
  serve::Engine engine(m, &pool, options);
  EXPECT_FALSE(engine.cost_model_stored());
  const serve::CostModel cost = engine.cost_model();
  EXPECT_TRUE(cost.timed());
  EXPECT_EQ(cost.acceptance.cycles(1), 12);
  serve::GenerationSettings s;
  s.mode = serve::DecodeMode::Auto;
  s.max_new_tokens = 40;
  EXPECT_FALSE(engine.choose(s).reason.empty());
  for (int64_t load = 2; load <= 3; ++load)  // (at load 1, ar runs once to be measured first)
    EXPECT_GT(choose_ar_text_mode(cost, load, m.config.has_decoder).ms_per_token, 0) << load;
  const std::optional<serve::CostModel> saved = serve::CostModel::load(options.cost_model_file, "k");
  ASSERT_TRUE(saved);
  EXPECT_TRUE(saved->timed());
  engine.shutdown(false);
}

// The cost-model file of each served model, and the key a stored line is checked against: another model
// file, core count or device is another key.
TEST(ServeRouting, CostModelFilesAndKeys) {
  EXPECT_EQ(serve::cost_model_file_for("dir/costs.json", "text-dg", 1), "dir/costs.json");
  EXPECT_EQ(serve::cost_model_file_for("dir/costs.json", "text-dg", 2), "dir/costs.text-dg.json");
  EXPECT_EQ(serve::cost_model_file_for("costs", "text-ar", 3), "costs.text-ar");
  const std::string model = test::fixture("tiny-llada.gguf");
  const std::string key = serve::cost_model_key(model, 4, "cpu");
  EXPECT_EQ(key, serve::cost_model_key(model, 4, "cpu"));
  EXPECT_NE(key, serve::cost_model_key(model, 8, "cpu"));
  EXPECT_NE(key, serve::cost_model_key(model, 4, "cuda"));
  EXPECT_NE(key, serve::cost_model_key(test::fixture("tiny-dream.gguf"), 4, "cpu"));
  EXPECT_NE(key.find("threads 4"), std::string::npos) << key;
}

namespace canvas {

// A request's draft_tree reaches verify: with --draft-datastore holding AR's own text, a verify request with
// trees writes AR's tokens in far fewer passes than one drafting with the tiny random decoder alone.
TEST(ServeEngine, VerifyRequestsTakeTheirTreeOfDrafts) {
  const Model m = Model::load(test::fixture("tiny-diffusion-gemma"));
  ThreadPool pool(1);
  const std::vector<int32_t> prompt{2, 105, 17, 250, 33};
  ArParams ar;
  ar.max_new_tokens = 24;
  ar.stop_ids = {-1};
  const std::vector<int32_t> text = generate_ar(m, prompt, ar, &pool).tokens;
  std::vector<int32_t> corpus = prompt;
  corpus.insert(corpus.end(), text.begin(), text.end());
  serve::EngineOptions options;
  options.parallel = 1;
  options.datastore = std::make_shared<const Datastore>(corpus);
  serve::Engine engine(m, &pool, options);
  auto run = [&](int64_t tree) {
    auto job = std::make_shared<serve::Job>();
    job->prompt = prompt;
    job->settings.mode = serve::DecodeMode::Verify;
    job->settings.max_new_tokens = 24;
    job->settings.ignore_eos = true;
    job->settings.verify.draft_lookup = 0;
    job->settings.verify.datastore_min_count = 1000;  // no datastore chains: the decoder drafts the chain cycles
    job->settings.verify.draft_tree = tree;
    EXPECT_TRUE(engine.submit(job));
    const serve::event::Finished finished = finished_of(*job);
    EXPECT_EQ(finished.error, "");
    return finished;
  };
  const serve::event::Finished chains = run(0), trees = run(12);
  EXPECT_EQ(trees.canvas, chains.canvas);
  EXPECT_EQ(std::vector<int32_t>(trees.canvas.begin(), trees.canvas.begin() + 24), text);
  EXPECT_LT(trees.passes * 2, chains.passes) << trees.passes << " against " << chains.passes;
  engine.shutdown(true);
}

}  // namespace canvas
