// Pass-by-pass timing of models with a decoder, and the report of its timings (decoder_passes.h).
#include "bench/decoder_passes.h"

#include "decode/events.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <tuple>

#include "bench/harness.h"
#include "core/appendf.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "bench/stats.h"
#include "model/kv_cache.h"

namespace canvas::bench {

DecoderPassTimes time_decoder_passes(const Model& model, const DecoderPassOptions& o) {
  const int64_t prompt_tokens = o.prompt_tokens, canvas = o.canvas, draft_length = o.draft_length;
  const int warmup = o.warmup, repeats = o.repeats;
  const uint64_t seed = o.seed;
  auto wants = [&](const char* mode) { return std::find(o.modes.begin(), o.modes.end(), mode) != o.modes.end(); };
  for (const std::string& m : o.modes)
    check(m == "ar" || m == "diffusion" || m == "self-cond" || m == "stream" || m == "verify" || m == "verify-overlap",
          "--modes: unknown mode '" + m +
              "' for a model with a decoder (ar, diffusion, self-cond, stream, verify, verify-overlap)");
  check(draft_length >= 1 && draft_length <= 1024, "--draft-length must be between 1 and 1024");
  const ModelConfig& c = model.config;
  check(prompt_tokens > 0 && canvas > 0 && repeats > 0 && warmup >= 0,
        "need -p > 0, --block-length > 0, --repeats > 0 and --warmup >= 0");
  check(!o.profile || (o.device && o.device->profile), "--profile needs a device that profiles (--device cuda)");
  ThreadPool pool(o.threads);
  Rng rng(seed);
  auto random_tokens = [&](int64_t n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t& id : t) id = int32_t(rng.below(uint64_t(c.vocab)));
    return t;
  };
  const int64_t ar_steps = warmup + repeats;
  const int64_t tail = std::max<int64_t>(ar_steps + 1, 2 * draft_length + 2);  // + 1: a profiled AR step
  KvCache cache(c, prompt_tokens + tail);
  std::vector<int32_t> groups(static_cast<size_t>(prompt_tokens + tail));
  for (size_t i = 0; i < groups.size(); ++i) groups[i] = int32_t(i);
  const std::vector<int32_t> prompt = random_tokens(prompt_tokens);
  ForwardRequest enc;
  enc.tokens = prompt.data();
  enc.n = prompt_tokens;
  enc.groups = groups.data();
  // The device's memory in use, sampled after every timed pass (outside its time).
  auto sample_memory = [&] {
    if (o.device) o.device->sample_memory();
  };
  double t0 = now_ms();
  forward(model, cache, enc, &pool);
  const double prompt_ms = now_ms() - t0;
  sample_memory();

  const std::vector<int32_t> tokens = random_tokens(canvas);
  // The [canvas x vocab] buffers only when a materialising mode runs, so that a stream-only run's peak
  // RSS shows what the streamed path needs.
  const bool materialised = wants("diffusion") || wants("self-cond");
  std::vector<float> logits(materialised ? size_t(canvas) * size_t(c.vocab) : 0), self_cond(logits.size());
  for (float& v : self_cond) v = float(rng.uniform() * 4.0);
  // A decoder pass over the canvas after the prompt, every row's head wanted; the modes add their inputs
  // and outputs. timed() runs one and returns its milliseconds.
  auto canvas_request = [&] {
    ForwardRequest dec;
    dec.tokens = tokens.data();
    dec.n = canvas;
    dec.pos0 = prompt_tokens;
    dec.decoder = true;
    for (int64_t i = 0; i < canvas; ++i) dec.logit_rows.push_back(int32_t(i));
    return dec;
  };
  auto timed = [&](const ForwardRequest& dec) {
    const double start = now_ms();
    forward(model, cache, dec, &pool);
    const double ms = now_ms() - start;
    sample_memory();
    return ms;
  };
  auto decoder_pass = [&](const float* prev) {
    ForwardRequest dec = canvas_request();
    dec.self_cond = prev;
    dec.logits = logits.data();
    return timed(dec);
  };
  // Streamed passes: each reads the previous one's soft embedding (the first a random one; the cost does
  // not depend on the values) and writes the next, at the sampler's first temperature.
  std::vector<HeadRowStats> head_stats(wants("stream") ? size_t(canvas) : 0);
  std::vector<float> soft_in(wants("stream") ? size_t(canvas * c.hidden) : 0), soft_out(soft_in.size());
  for (float& v : soft_in) v = float(rng.uniform() * 0.02 - 0.01);
  std::vector<uint64_t> row_ids(head_stats.size());
  auto stream_pass = [&](int64_t r) {
    ForwardRequest dec = canvas_request();
    dec.self_cond_soft = soft_in.data();
    for (int64_t i = 0; i < canvas; ++i) row_ids[size_t(i)] = uint64_t(r * canvas + i);
    dec.head_stats = head_stats.data();
    dec.head.temperature = 0.8f;
    dec.head.seed = seed;
    dec.head.row_ids = row_ids.data();
    dec.soft_embedding_out = soft_out.data();
    const double ms = timed(dec);
    soft_in.swap(soft_out);
    return ms;
  };
  // Draft-and-verify cycles: a decoder pass over [last token ; k drafts] and a causal pass over the same
  // k + 1 rows after the prompt (the verify pass writes rows the AR steps below overwrite).
  const std::vector<int32_t> draft = random_tokens(draft_length + 1);
  std::vector<float> cycle_logits(wants("verify") ? size_t(draft_length + 1) * size_t(c.vocab) : 0);
  auto verify_cycle = [&] {
    ForwardRequest dec;
    dec.tokens = draft.data();
    dec.n = draft_length + 1;
    dec.pos0 = prompt_tokens;
    dec.decoder = true;
    for (int64_t i = 0; i <= draft_length; ++i) dec.logit_rows.push_back(int32_t(i));
    dec.logits = cycle_logits.data();
    ForwardRequest check_pass = dec;
    check_pass.decoder = false;
    check_pass.groups = &groups[size_t(prompt_tokens)];
    const double start = now_ms();
    forward(model, cache, dec, &pool);
    forward(model, cache, check_pass, &pool);
    const double ms = now_ms() - start;
    sample_memory();
    return ms;
  };
  // The overlapped cycle: one pass over the same k + 1 causal rows and, for every kept count j = 0..k, a
  // decoder canvas of k + 1 rows after the j-th of them (k logit rows each), as --overlap runs it.
  std::vector<std::vector<int32_t>> candidates;
  std::vector<std::vector<float>> candidate_logits;
  for (int64_t j = 0; wants("verify-overlap") && j <= draft_length; ++j) {
    candidates.push_back(random_tokens(draft_length + 1));
    candidate_logits.emplace_back(size_t(draft_length) * size_t(c.vocab));
  }
  std::vector<float> overlap_logits(wants("verify-overlap") ? size_t(draft_length + 1) * size_t(c.vocab) : 0);
  auto overlapped_cycle = [&] {
    std::vector<ForwardRequest> requests(1);
    ForwardRequest& check_pass = requests[0];
    check_pass.tokens = draft.data();
    check_pass.n = draft_length + 1;
    check_pass.pos0 = prompt_tokens;
    check_pass.groups = &groups[size_t(prompt_tokens)];
    for (int64_t i = 0; i <= draft_length; ++i) check_pass.logit_rows.push_back(int32_t(i));
    check_pass.logits = overlap_logits.data();
    for (int64_t j = 0; j <= draft_length; ++j) {
      ForwardRequest dec;
      dec.tokens = candidates[size_t(j)].data();
      dec.n = draft_length + 1;
      dec.pos0 = prompt_tokens + j + 1;
      dec.decoder = true;
      for (int64_t i = 1; i <= draft_length; ++i) dec.logit_rows.push_back(int32_t(i));
      dec.logits = candidate_logits[size_t(j)].data();
      requests.push_back(dec);
    }
    const double start = now_ms();
    forward_on(model, cache, requests, &pool);
    const double ms = now_ms() - start;
    sample_memory();
    return ms;
  };
  std::vector<double> plain, conditioned, streamed, ar, cycles, overlapped;
  for (int r = 0; r < warmup + repeats; ++r) {
    const double v = wants("verify") ? verify_cycle() : 0;
    if (r >= warmup && wants("verify")) cycles.push_back(v);
    const double o = wants("verify-overlap") ? overlapped_cycle() : 0;
    if (r >= warmup && wants("verify-overlap")) overlapped.push_back(o);
    const double a = wants("diffusion") ? decoder_pass(nullptr) : 0;
    const double b = wants("self-cond") ? decoder_pass(self_cond.data()) : 0;
    const double d = wants("stream") ? stream_pass(r) : 0;
    if (r >= warmup && wants("diffusion")) plain.push_back(a);
    if (r >= warmup && wants("self-cond")) conditioned.push_back(b);
    if (r >= warmup && wants("stream")) streamed.push_back(d);
  }
  // AR steps through the encoder: step r appends one token at prompt + r and reads its logits; timed()
  // returns its milliseconds.
  std::vector<float> row(size_t(c.vocab));
  auto ar_step = [&](int64_t r) {
    const int32_t token = int32_t(rng.below(uint64_t(c.vocab)));
    ForwardRequest step;
    step.tokens = &token;
    step.n = 1;
    step.pos0 = prompt_tokens + r;
    step.groups = &groups[size_t(prompt_tokens + r)];
    step.logit_rows = {0};
    step.logits = row.data();
    return timed(step);
  };
  for (int64_t r = 0; r < (wants("ar") ? ar_steps : 0); ++r) {
    const double ms = ar_step(r);
    if (r >= warmup) ar.push_back(ms);
  }
  DecoderPassTimes times;
  // One more pass of each timed kind with the device's per-op timing on.
  auto profiled = [&](const char* kind, const std::function<void()>& pass) {
    if (!o.profile || !wants(kind)) return;
    DeviceProfile pp;
    pp.what = kind;
    const double start = now_ms();
    pp.ops = o.device->profile(pass);
    pp.wall_ms = now_ms() - start;
    times.profiles.push_back(std::move(pp));
  };
  profiled("diffusion", [&] { decoder_pass(nullptr); });
  profiled("self-cond", [&] { decoder_pass(self_cond.data()); });
  profiled("stream", [&] { stream_pass(warmup + repeats); });
  profiled("ar", [&] { ar_step(ar_steps); });
  times.prompt_ms = prompt_ms;
  times.diffusion = std::move(plain);
  times.self_cond = std::move(conditioned);
  times.stream = std::move(streamed);
  times.ar = std::move(ar);
  times.verify = std::move(cycles);
  times.verify_overlap = std::move(overlapped);
  times.threads = pool.size();
  return times;
}

DecoderPassReport decoder_pass_report(const DecoderPassTimes& t, const DecoderPassRun& run) {
  const std::vector<double>&plain = t.diffusion, &conditioned = t.self_cond, &streamed = t.stream, &ar = t.ar,
                    &cycles = t.verify, &overlapped = t.verify_overlap;
  const int64_t canvas = run.canvas, draft_length = run.draft_length;
  DecoderPassReport r;
  std::string& text = r.text;
  nlohmann::ordered_json& report = r.json;
  // With a device whose floors were measured, each pass kind's floor there: the sum over its passes of
  // pass_floor_ms of their bytes and FLOPs.
  const DeviceFloors* device = run.device ? &*run.device : nullptr;
  const DType weight_type = run.footprint.weight_type;
  const bool floors = device && device->floors_measured(weight_type);
  appendf(text, "model: %s, %lld layers, %d threads\n", run.source.c_str(), (long long)run.layers, t.threads);
  if (device) text += device_floors_text(*device);
  appendf(text, "%-44s %10s %10s %10s", "pass", "median ms", "min ms", "max ms");
  text += floors ? " floor ms  of floor\n" : "\n";
  report["model"] = run.source;
  report["layers"] = run.layers;
  report["threads"] = t.threads;
  report["prompt_tokens"] = run.prompt_tokens;
  report["canvas"] = canvas;
  report["draft_length"] = draft_length;
  report["repeats"] = run.repeats;
  if (device) report["device"] = device_floors_json(*device);
  report["passes"] = nlohmann::ordered_json::object();
  std::map<std::string, double> fraction;  // of each pass kind's floor (median), with floors
  auto line = [&](const std::string& key, const std::string& what, const std::vector<double>& ms) {
    if (ms.empty()) return;
    const double lo = *std::min_element(ms.begin(), ms.end()), hi = *std::max_element(ms.begin(), ms.end());
    appendf(text, "%-44s %10.1f %10.1f %10.1f", what.c_str(), median(ms), lo, hi);
    nlohmann::ordered_json& pass = report["passes"][key];
    pass = {{"what", what}, {"median_ms", median(ms)}, {"min_ms", lo}, {"max_ms", hi}};
    if (floors) {
      double bytes = 0, flops = 0, floor_ms = 0;
      for (const PassRows& rows : decoder_pass_rows(key, run.prompt_tokens, canvas, draft_length)) {
        const double b = run.footprint.pass_bytes(rows), f = run.footprint.pass_flops(rows);
        bytes += b;
        flops += f;
        floor_ms += device->floor_ms(b, f, weight_type);
      }
      fraction[key] = fraction_of_floor(floor_ms, median(ms));
      appendf(text, " %8.2f %8.0f%%", floor_ms, 100 * fraction[key]);
      pass["bytes"] = bytes;
      pass["flops"] = flops;
      pass["floor_ms"] = floor_ms;
      pass["fraction_of_floor"] = fraction[key];
    }
    text += "\n";
  };
  line("prompt", "encoder, prompt of " + std::to_string(run.prompt_tokens) + " (once)", {t.prompt_ms});
  line("diffusion", "decoder, canvas " + std::to_string(canvas) + ", self-cond zeros", plain);
  line("self-cond", "decoder, canvas " + std::to_string(canvas) + ", self-cond logits", conditioned);
  line("stream", "decoder, canvas " + std::to_string(canvas) + ", stream head + soft emb", streamed);
  line("ar", "AR step (encoder, 1 token + logits)", ar);
  line("verify", "verify cycle (decoder + causal pass, " + std::to_string(draft_length + 1) + " rows each)", cycles);
  line("verify-overlap",
       "overlapped verify cycle (one pass, " + std::to_string((draft_length + 1) * (draft_length + 2)) + " rows)",
       overlapped);
  appendf(text, "peak RSS %.0f MiB; weights %.2f GiB\n", run.peak_rss_mib, double(run.weight_bytes) / 1073741824.0);
  if (!t.profiles.empty()) {
    text += "one more pass of each kind with per-op device timing:\n";
    nlohmann::ordered_json& profiles = report["device_profile"];
    profiles = nlohmann::ordered_json::array();
    for (const DeviceProfile& pp : t.profiles) {
      text += device_profile_text(pp);
      profiles.push_back(device_profile_json(pp));
    }
  }
  report["peak_rss_mib"] = run.peak_rss_mib;
  report["weight_bytes"] = run.weight_bytes;
  // What the passes imply for decoding: a canvas of `canvas` tokens denoised in S decoder passes gives
  // canvas / (S x pass) tokens/s (the prompt's one encoder pass left out), against one AR step per token.
  // The pass: the faster of the measured later-step kinds (self-conditioned, streamed), else zeros.
  const char* kind = "self-cond";
  const std::vector<double>* pass = &conditioned;
  if (!streamed.empty() && (conditioned.empty() || median(streamed) < median(conditioned))) {
    pass = &streamed;
    kind = "stream";
  }
  if (pass->empty()) {
    pass = &plain;
    kind = "diffusion";
  }
  // A speed made of passes of one kind is that kind's fraction of its floor (with floors): the line and the
  // JSON entry say so, with the tokens/s at the floor.
  auto close_with_floor = [&](const std::string& pass_key, double tps, nlohmann::ordered_json entry) {
    const auto it = fraction.find(pass_key);
    if (it != fraction.end() && it->second > 0) {
      appendf(text, "; floor %.1f tokens/s (%.0f%%)", tps / it->second, 100 * it->second);
      entry["floor_tokens_per_second"] = tps / it->second;
      entry["fraction_of_floor"] = it->second;
    }
    text += "\n";
    return entry;
  };
  if (!pass->empty() && !ar.empty()) {
    const double ar_tps = 1000.0 / median(ar), pass_ms = median(*pass);
    appendf(text, "AR: %.1f tokens/s (median step %.2f ms)", ar_tps, median(ar));
    const nlohmann::ordered_json ar_floor = close_with_floor("ar", ar_tps, {});
    if (ar_floor.contains("floor_tokens_per_second"))
      report["ar_floor_tokens_per_second"] = ar_floor["floor_tokens_per_second"];
    report["ar_tokens_per_second"] = ar_tps;
    report["diffusion_pass"] = kind;
    for (int steps : {8, 16, 32}) {
      const double tps = double(canvas) * 1000.0 / (double(steps) * pass_ms);
      appendf(text, "diffusion, canvas %lld in %d steps (%s passes): %.1f tokens/s, %.2fx AR", (long long)canvas,
              steps, kind, tps, tps / ar_tps);
      report["diffusion_projection"].push_back(
          close_with_floor(kind, tps, {{"steps", steps}, {"tokens_per_second", tps}, {"vs_ar", tps / ar_tps}}));
    }
  }
  // How many drafts a cycle keeps depends on the model's weights and the text (scripts/research/
  // verify_check.py measures it); the pass costs give the speed at a given number.
  for (const auto& [name, pass_key, key, times] :
       {std::tuple<const char*, const char*, const char*, const std::vector<double>*>{"verify", "verify",
                                                                                     "verify_projection", &cycles},
        {"verify --overlap", "verify-overlap", "verify_overlap_projection", &overlapped}}) {
    if (times->empty() || ar.empty()) continue;
    const double ar_tps = 1000.0 / median(ar);
    for (int64_t kept : {int64_t(1), int64_t(2), draft_length}) {
      const double tps = double(kept + 1) * 1000.0 / median(*times);
      appendf(text, "%s, draft %lld, if %lld drafts are kept per cycle: %.1f tokens/s, %.2fx AR", name,
              (long long)draft_length, (long long)kept, tps, tps / ar_tps);
      report[key].push_back(
          close_with_floor(pass_key, tps, {{"kept", kept}, {"tokens_per_second", tps}, {"vs_ar", tps / ar_tps}}));
    }
  }
  return r;
}

std::vector<PassRows> decoder_pass_rows(const std::string& kind, int64_t prompt_tokens, int64_t canvas,
                                        int64_t draft_length) {
  const double p = double(prompt_tokens), c = double(canvas), k1 = double(draft_length + 1);
  if (kind == "prompt") return {{p, 0}};
  if (kind == "ar") return {{1, 1}};
  if (kind == "diffusion") return {{c, c}};  // self-conditioning zeros: its MLP is skipped
  PassRows self_conditioned{c, c};
  self_conditioned.self_cond_rows = c;
  if (kind == "self-cond") {  // the previous logits reduced to a soft embedding first
    self_conditioned.self_cond_logit_rows = c;
    return {self_conditioned};
  }
  if (kind == "stream") {  // the soft embedding given; the head writes the next one
    self_conditioned.soft_embedding_rows = c;
    return {self_conditioned};
  }
  if (kind == "verify") return {{k1, k1}, {k1, k1}};  // a decoder pass, then the causal pass
  // One pass: the k + 1 causal rows (all with logits) and k + 1 decoder canvases of k + 1 rows (k logits each).
  check(kind == "verify-overlap", "decoder_pass_rows: unknown pass kind '" + kind + "'");
  return {{k1 + k1 * k1, k1 + k1 * (k1 - 1)}};
}

DecoderPassReport bench_decoder_passes(const Model& model, const DecoderPassOptions& options,
                                       const std::string& source, int64_t weight_bytes,
                                       const std::optional<DeviceFloors>& device) {
  DecoderPassRun run;
  run.device = device;
  DecoderPassOptions timed = options;
  if (run.device) timed.device = &*run.device;
  const DecoderPassTimes times = time_decoder_passes(model, timed);
  run.source = source;
  run.layers = model.config.n_layers;
  run.prompt_tokens = options.prompt_tokens;
  run.canvas = options.canvas;
  run.draft_length = options.draft_length;
  run.repeats = options.repeats;
  run.weight_bytes = weight_bytes;
  run.peak_rss_mib = double(peak_rss_bytes()) / 1048576.0;
  run.footprint = model_footprint(model);
  return decoder_pass_report(times, run);
}

}  // namespace canvas::bench
