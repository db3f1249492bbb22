// Filling holes in text with a diffusion model: text infilling (prefix / suffix, or several
// <|hole:N|> holes at once) and schema-constrained JSON (fixed scaffold as given tokens, value holes
// decoded in any order under per-hole token masks), plus the left-to-right (AR) twin of the latter.
// The CLI (canvas generate --suffix / --json-schema) and the server (suffix, response_format) call these.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "decode/ar.h"
#include "text/constraint.h"
#include "decode/entropy_bound.h"
#include "decode/events.h"
#include "text/json_schema.h"
#include "decode/masked.h"
#include "model/model.h"

namespace canvas {

// How the decode layer sees a tokenizer: text -> ids (no BOS; special tokens written literally may be
// matched) and the bytes of every id ("" for special tokens, which never appear inside a hole).
struct TextCodec {
  std::function<std::vector<int32_t>(const std::string&)> encode;
  std::shared_ptr<const TokenVocabulary> vocabulary;
};

// A text with holes: fixed text, or a hole of `hole_tokens` tokens.
struct TextPiece {
  std::string text;
  int64_t hole_tokens = 0;
  bool is_hole() const { return hole_tokens > 0; }
};

// Splits `text` at hole markers written <|hole:N|> (N tokens, 1 <= N <= 4096). Throws Error naming the
// marker when one is malformed (e.g. "<|hole:x|>", "<|hole:0|>", an unclosed "<|hole:").
std::vector<TextPiece> parse_holes(const std::string& text);
bool has_hole_marker(const std::string& text);

// A canvas to fill: `prompt` goes before it (decoded once, cached), `canvas` holds the fixed tokens and
// mask_id at every hole position, `holes` the language of each hole.
struct FillPlan {
  std::vector<int32_t> prompt;
  std::vector<int32_t> canvas;
  std::vector<CanvasHole> holes;
  int32_t mask_id = -1;
  bool json = false;  // a JSON template: the spaces padding each hole's value are left out of the text
  // Text infilling: per hole, whether the text before it ended with a space that the plan took off
  // (the printed text puts it back when the fill does not begin with a space).
  std::vector<bool> space_before;
};

// Text infilling: the prompt is `prefix_tokens` (e.g. BOS) followed by the pieces' leading fixed text;
// everything from the first hole on is the canvas. Holes accept any text (every token with a piece).
// Throws Error when there is no hole.
FillPlan plan_text_infill(const std::vector<TextPiece>& pieces, const std::vector<int32_t>& prefix_tokens,
                          const TextCodec& codec, int32_t mask_id);

// Schema-constrained JSON: the canvas after `prompt` is the template's fixed text as given tokens and
// each hole as a run of positions whose text is a value of the hole's language followed by spaces. The
// canvas has at most max_tokens positions: a hole gets room for its longest value (capped at
// `hole_cap` tokens when unbounded) and holes shrink toward their shortest values when that does not
// fit. Throws Error when even the shortest values do not fit ("needs at least K tokens").
FillPlan plan_json(const JsonTemplate& schema, const std::vector<int32_t>& prompt, const TextCodec& codec,
                   int32_t mask_id, int64_t max_tokens, int64_t hole_cap = 32);

struct FillParams {
  // Masked diffusion: steps (default: one token per step when <= 0), order, schedule, threshold, cache,
  // freeze, sampling. gen_length, block_length (the whole canvas: one block), initial_canvas and
  // constraint are set by fill().
  MaskedDiffusionParams masked;
  // Uniform-state diffusion: steps, entropy bound, temperatures, stability, seed. canvas_length and
  // max_new_tokens are set to the canvas; stream_head is refused.
  EntropyBoundParams uniform;
};

struct FillResult : GenerationResult {
  std::vector<int32_t> canvas;     // the filled canvas (tokens: the same)
  std::vector<std::string> fills;  // the bytes of each hole, in order, cleaned at the seams (FillPlan)
  std::string text;                // the canvas's text: fixed text and the cleaned fills
};

// Fills the plan's holes with a masked-diffusion model (one block over the canvas, committed tokens
// checked against the holes' constraint) or a uniform-state model (fixed positions pinned, each hole
// position's logits restricted to tokens some completion allows, then the final canvas made valid hole
// by hole, left to right, keeping the model's tokens where they fit and otherwise its best allowed
// token). Autoregressive models are refused with Error (they were not trained to fill in the middle).
FillResult fill(const Model& model, const FillPlan& plan, const FillParams& params, const TextCodec& codec,
                ThreadPool* pool, const DecodeCallbacks& callbacks = {});

// Left-to-right constrained generation of a template's document (AR models, or any model in AR mode).
// The result's text is the document (the stop token, if any, not included).
struct ConstrainedArResult : GenerationResult {
  std::string text;
};
ConstrainedArResult generate_constrained_ar(const Model& model, const std::vector<int32_t>& prompt,
                                            const JsonTemplate& schema, const TextCodec& codec,
                                            ArParams params, ThreadPool* pool,
                                            const DecodeCallbacks& callbacks = {});

// The text of ids under the codec's vocabulary (pieces concatenated; special tokens give nothing).
std::string codec_text(const TextCodec& codec, const std::vector<int32_t>& ids);

}  // namespace canvas
