// The stats line and the JSON object of a GenerationOutput: one schema for every decoding mode, printed by
// canvas generate and chat (stats line on stderr, --json on stdout), and the shorter pair of infilling and
// schema runs (generate --suffix, <|hole:N|>, --json-schema).
#pragma once
#include <string>

#include "decode/generation.h"

namespace canvas {

// The short line after a reply: "[SETTING: N tokens, X tokens/s]", the setting as auto's cost model names it
// ("ar", "verify k=8", "verify k=4 overlapped") or the mode ("diffusion"), followed by " (auto)" when auto
// chose it, whatever its reason; no speed when nothing was decoded.
std::string generation_summary_line(const GenerationOutput& out);

// The full line (--verbose): "[MODE, N new tokens, finish R, P passes, tokens_per_forward X, ..., seed S, SIMD, T threads]": the
// mode's own counts (uniform-state encoder passes and steps per canvas, verify passes and drafts kept),
// the prompt (and its cached tokens), timings and speed; `threads` is the pool the run used.
std::string generation_stats_line(const GenerationOutput& out, int threads);

// The result as one JSON object (text, tokens, mode, finish_reason, counts, timings, seed; steps_per_canvas
// for uniform-state runs, drafted and accepted for verify), on one line; invalid UTF-8 replaced.
std::string generation_json(const GenerationOutput& out);

// Infilling and schema runs: "[N tokens filled, P passes, prompt ..., seed S, SIMD, T threads]".
std::string infill_stats_line(const GenerationOutput& out, int threads);

// Infilling and schema runs as one JSON object: text, fills (holes only, not in schema mode), tokens, mode,
// finish_reason, filled_tokens, counts, timings and seed, on one line.
std::string infill_json(const GenerationOutput& out, bool schema_mode);

}  // namespace canvas
