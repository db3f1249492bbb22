// The stats lines and JSON objects of generation results (generation_report.h).
#include "decode/generation_report.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/cpu.h"
#include "decode/cost_model.h"
#include "io/utf8.h"

namespace canvas {

namespace {
std::string dump_line(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}
}  // namespace

std::string generation_summary_line(const GenerationOutput& out) {
  const VerifyStats& v = out.verify;  // (zeros unless verify ran)
  std::string setting = ar_text_setting(out.mode, v.draft_length, v.overlap, v.datastore, v.draft_tree);
  if (setting.empty()) setting = decode_mode_name(out.mode);
  // One format whatever auto's reason (it changes from run to run while auto measures): the reason is --verbose's.
  // Uniform-state diffusion names its sampler and how its canvases went (the release's defaults show).
  std::string canvases;
  if (out.mode == DecodeMode::Diffusion && !out.steps_per_canvas.empty()) {
    setting += ", entropy-bound sampler";
    int64_t steps = 0;
    for (int64_t s : out.steps_per_canvas) steps += s;
    const size_t n = out.steps_per_canvas.size();
    canvases = " in " + std::to_string(n) + (n == 1 ? " canvas, " : " canvases, ") + std::to_string(steps) +
               (steps == 1 ? " step" : " steps");
  }
  if (out.mode_reason.rfind("auto", 0) == 0) setting += " (auto)";
  char speed[64] = "";
  if (out.decode_tokens > 0) std::snprintf(speed, sizeof speed, ", %.1f tokens/s", out.tokens_per_second());
  return "[" + setting + ": " + std::to_string(out.tokens.size()) + " tokens" + canvases + speed + "]";
}

std::string generation_stats_line(const GenerationOutput& out, int threads) {
  char buf[1024];
  std::string canvases;
  if (!out.steps_per_canvas.empty()) {
    canvases = ", " + std::to_string(out.encoder_passes) + " encoder passes, steps per canvas ";
    for (size_t i = 0; i < out.steps_per_canvas.size(); ++i)
      canvases += (i ? "," : "") + std::to_string(out.steps_per_canvas[i]);
  }
  if (out.mode == DecodeMode::Verify && out.encoder_passes > 0) {
    const VerifyStats& v = out.verify;
    char rows[32];
    std::snprintf(rows, sizeof rows, "%.1f", double(out.rows_computed) / double(std::max<size_t>(1, out.tokens.size())));
    canvases = ", " + std::to_string(out.encoder_passes) + " verify passes, " + std::to_string(v.accepted) +
               "/" + std::to_string(v.drafted) + " drafted tokens kept (k=" + std::to_string(v.draft_length) +
               (v.overlap ? ", overlapped" : "") + "), " +
               (v.draft_lookup > 0 ? std::to_string(v.lookup_cycles) + " cycles drafted by lookup, " : "") +
               (v.datastore ? std::to_string(v.datastore_cycles) + " by the datastore, " : "") +
               (v.draft_tree > 0 ? std::to_string(v.tree_cycles) + " trees, " : "") + rows +
               " rows per token";
  }
  const std::string cached =
      out.cached_prompt_tokens > 0 ? " (" + std::to_string(out.cached_prompt_tokens) + " cached)" : "";
  // The mode, and why when auto chose it.
  const std::string mode = std::string(decode_mode_name(out.mode)) +
                           (out.mode_reason.empty() || out.mode_reason == "asked for" ? "" : " (" + out.mode_reason + ")");
  std::snprintf(buf, sizeof buf,
                "[%s, %lld new tokens, finish %s, %lld passes, tokens_per_forward %.2f%s, prompt %lld tokens%s %.1f ms, "
                "decode %.1f ms, %.2f tokens/s, seed %llu, %s, %d threads]",
                mode.c_str(), (long long)out.tokens.size(), out.finish_reason.c_str(),
                (long long)out.passes, out.tokens_per_forward(), canvases.c_str(), (long long)out.prompt.size(),
                cached.c_str(), out.prompt_ms, out.decode_ms, out.tokens_per_second(), (unsigned long long)out.seed,
                simd_level_name(simd_level()), threads);
  return buf;
}

std::string generation_json(const GenerationOutput& out) {
  nlohmann::ordered_json j;
  j["text"] = sanitize_utf8(out.text);
  j["tokens"] = out.tokens;
  j["mode"] = decode_mode_name(out.mode);
  j["mode_reason"] = out.mode_reason;
  j["modes"] = nlohmann::ordered_json::array();
  for (const DecodeMode m : out.modes) j["modes"].push_back(decode_mode_name(m));
  j["finish_reason"] = out.finish_reason;
  j["prompt_tokens"] = out.prompt.size();
  j["new_tokens"] = out.tokens.size();
  j["pad_tokens"] = out.pad_tokens;
  j["passes"] = out.passes;
  j["encoder_passes"] = out.encoder_passes;
  j["tokens_per_pass"] = out.tokens_per_forward();
  j["tokens_per_forward"] = out.tokens_per_forward();
  j["prompt_ms"] = out.prompt_ms;
  j["decode_ms"] = out.decode_ms;
  j["tokens_per_second"] = out.tokens_per_second();
  j["rows_computed"] = out.rows_computed;
  j["seed"] = out.seed;
  if (!out.steps_per_canvas.empty()) j["steps_per_canvas"] = out.steps_per_canvas;
  if (out.mode == DecodeMode::Verify) {
    const VerifyStats& v = out.verify;
    j["drafted"] = v.drafted;
    j["accepted"] = v.accepted;
    j["draft_length"] = v.draft_length;
    j["overlap"] = v.overlap;
    j["draft_lookup"] = v.draft_lookup;
    j["lookup_cycles"] = v.lookup_cycles;  // of encoder_passes cycles; the others drafted by the decoder
    j["lookup_drafted"] = v.lookup_drafted;
    j["lookup_accepted"] = v.lookup_accepted;
    j["datastore_cycles"] = v.datastore_cycles;  // cycles drafted by the datastore (--draft-datastore)
    j["datastore_drafted"] = v.datastore_drafted;
    j["datastore_accepted"] = v.datastore_accepted;
    j["draft_tree"] = v.draft_tree;
    j["tree_cycles"] = v.tree_cycles;                  // cycles that verified a tree of drafts (--draft-tree)
    j["decoder_tree_cycles"] = v.decoder_tree_cycles;  // ... of them, the decoder's (after a draft pass)
    j["tree_drafted"] = v.tree_drafted;
    j["tree_accepted"] = v.tree_accepted;
  }
  return dump_line(j);
}

std::string infill_stats_line(const GenerationOutput& out, int threads) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "[%lld tokens filled, %lld passes, prompt %lld tokens %.1f ms, decode %.1f ms, %.2f tokens/s, seed %llu, "
                "%s, %d threads]",
                (long long)out.filled_tokens, (long long)out.passes, (long long)out.prompt.size(), out.prompt_ms,
                out.decode_ms, out.tokens_per_second(), (unsigned long long)out.seed, simd_level_name(simd_level()),
                threads);
  return buf;
}

std::string infill_json(const GenerationOutput& out, bool schema_mode) {
  nlohmann::ordered_json j;
  j["text"] = sanitize_utf8(out.text);
  if (!schema_mode) {
    j["fills"] = nlohmann::json::array();
    for (const std::string& f : out.fills) j["fills"].push_back(sanitize_utf8(f));
  }
  j["tokens"] = out.tokens;
  j["mode"] = decode_mode_name(out.mode);
  j["mode_reason"] = out.mode_reason;
  j["finish_reason"] = out.finish_reason;
  j["filled_tokens"] = out.filled_tokens;
  j["prompt_tokens"] = out.prompt.size();
  j["passes"] = out.passes;
  j["prompt_ms"] = out.prompt_ms;
  j["decode_ms"] = out.decode_ms;
  j["rows_computed"] = out.rows_computed;
  j["seed"] = out.seed;
  return dump_line(j);
}

}  // namespace canvas
