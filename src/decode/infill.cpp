// Hole parsing, canvas plans for text and JSON, and the fill loops over masked and uniform-state models.
#include "decode/infill.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/timer.h"
#include "decode/uniform_state.h"

namespace canvas {

namespace {

constexpr const char* kHoleOpen = "<|hole:";

std::shared_ptr<const TokenAutomaton> automaton(const RegexPtr& regex, const TextCodec& codec) {
  return std::make_shared<const TokenAutomaton>(std::make_shared<const ByteDfa>(ByteDfa::compile(regex)),
                                                codec.vocabulary);
}

// Any text: every byte, any number of times.
const RegexPtr& any_text() {
  static const RegexPtr r = re_repeat(re_set(~ByteSet()), 0, -1);
  return r;
}

// Text written before a hole that ends with a space ("and <|hole:5|>") loses that space in the plan: the
// model continues "and" with a word that carries its own leading space, as in its training text, where
// after a lone space token it writes a second one. Returns whether a space was taken off.
bool strip_seam_space(std::string& text) {
  if (text.empty() || text.back() != ' ') return false;
  text.pop_back();
  return true;
}

void check_codec(const TextCodec& codec) {
  check(codec.encode != nullptr && codec.vocabulary != nullptr, "infill: the codec has no tokenizer");
}

}  // namespace

bool has_hole_marker(const std::string& text) {
  return text.find(kHoleOpen) != std::string::npos;
}

std::vector<TextPiece> parse_holes(const std::string& text) {
  std::vector<TextPiece> pieces;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t open = text.find(kHoleOpen, at);
    const std::string fixed = text.substr(at, open == std::string::npos ? std::string::npos : open - at);
    if (!fixed.empty()) pieces.push_back({fixed, 0});
    if (open == std::string::npos) break;
    const size_t digits = open + std::string(kHoleOpen).size();
    const size_t close = text.find("|>", digits);
    const std::string marker = text.substr(open, close == std::string::npos ? 16 : close + 2 - open);
    check(close != std::string::npos, "hole marker '" + marker + "' is not closed (write <|hole:N|>)");
    const std::string number = text.substr(digits, close - digits);
    const bool numeric =
        !number.empty() && number.size() <= 4 &&
        std::all_of(number.begin(), number.end(), [](char c) { return c >= '0' && c <= '9'; });
    const int64_t n = numeric ? std::stoll(number) : 0;
    check(numeric && n >= 1 && n <= 4096,
          "hole marker '" + marker + "': N must be a number of tokens from 1 to 4096 (write <|hole:N|>)");
    pieces.push_back({"", n});
    at = close + 2;
  }
  return pieces;
}

FillPlan plan_text_infill(const std::vector<TextPiece>& pieces, const std::vector<int32_t>& prefix_tokens,
                          const TextCodec& codec, int32_t mask_id) {
  check_codec(codec);
  FillPlan plan;
  plan.mask_id = mask_id;
  plan.prompt = prefix_tokens;
  const auto first_hole =
      std::find_if(pieces.begin(), pieces.end(), [](const TextPiece& p) { return p.is_hole(); });
  check(first_hole != pieces.end(), "infill: the text has no hole (write <|hole:N|> or give --suffix)");
  std::string lead;
  for (auto it = pieces.begin(); it != first_hole; ++it) lead += it->text;
  bool space_before = strip_seam_space(lead);  // of the next hole
  if (!lead.empty()) {
    const std::vector<int32_t> ids = codec.encode(lead);
    plan.prompt.insert(plan.prompt.end(), ids.begin(), ids.end());
  }
  std::shared_ptr<const TokenAutomaton> any;
  for (auto it = first_hole; it != pieces.end(); ++it) {
    if (it->is_hole()) {
      if (!any) any = automaton(any_text(), codec);
      plan.holes.push_back({int64_t(plan.canvas.size()), it->hole_tokens, any});
      plan.canvas.insert(plan.canvas.end(), size_t(it->hole_tokens), mask_id);
      plan.space_before.push_back(space_before);
      space_before = false;
    } else {
      std::string text = it->text;
      space_before = std::next(it) != pieces.end() && std::next(it)->is_hole() && strip_seam_space(text);
      const std::vector<int32_t> ids = codec.encode(text);
      plan.canvas.insert(plan.canvas.end(), ids.begin(), ids.end());
    }
  }
  return plan;
}

FillPlan plan_json(const JsonTemplate& schema, const std::vector<int32_t>& prompt, const TextCodec& codec,
                   int32_t mask_id, int64_t max_tokens, int64_t hole_cap) {
  check_codec(codec);
  // Per segment: fixed tokens, or a hole with its padded language and size bounds.
  struct Part {
    std::vector<int32_t> fixed;
    std::shared_ptr<const TokenAutomaton> language;
    int64_t min = 0, size = 0;
  };
  std::vector<Part> parts;
  int64_t fixed_total = 0;
  const RegexPtr spaces = re_repeat(re_byte(' '), 0, -1);
  for (const JsonSegment& seg : schema.segments) {
    Part part;
    if (!seg.is_hole()) {
      part.fixed = codec.encode(seg.fixed);
      fixed_total += int64_t(part.fixed.size());
    } else {
      part.language = automaton(re_concat({re_automaton(seg.language), spaces}), codec);
      const int32_t min_tokens = part.language->min_tokens_to_accept()[size_t(part.language->dfa().start())];
      check(min_tokens >= 0, "json schema: a value hole cannot be written with this vocabulary");
      part.min = std::max<int64_t>(min_tokens, 1);
      const int64_t longest =
          seg.max_bytes < 0 ? hole_cap : std::min(seg.max_bytes, std::max(hole_cap, part.min));
      part.size = std::max(part.min, longest);
    }
    parts.push_back(std::move(part));
  }
  int64_t need = fixed_total, want = fixed_total;
  for (const Part& p : parts) need += p.min, want += p.size;
  check(need <= max_tokens, "the schema needs at least " + std::to_string(need) + " tokens (" +
                                std::to_string(fixed_total) + " of fixed text); -n is " +
                                std::to_string(max_tokens));
  // Shrink the largest holes one token at a time until the canvas fits.
  while (want > max_tokens) {
    Part* largest = nullptr;
    for (Part& p : parts)
      if (p.language && p.size > p.min && (!largest || p.size > largest->size)) largest = &p;
    --largest->size;
    --want;
  }
  FillPlan plan;
  plan.mask_id = mask_id;
  plan.prompt = prompt;
  plan.json = true;
  for (const Part& p : parts) {
    if (!p.language) {
      plan.canvas.insert(plan.canvas.end(), p.fixed.begin(), p.fixed.end());
      continue;
    }
    plan.holes.push_back({int64_t(plan.canvas.size()), p.size, p.language});
    plan.canvas.insert(plan.canvas.end(), size_t(p.size), mask_id);
  }
  check(!plan.canvas.empty(), "json schema: the document is empty");
  return plan;
}

std::string codec_text(const TextCodec& codec, const std::vector<int32_t>& ids) {
  std::string text;
  for (int32_t id : ids)
    if (id >= 0 && id < codec.vocabulary->size()) text += codec.vocabulary->piece(id);
  return text;
}

namespace {

// The canvas's text with each hole's fill cleaned at its seams: a JSON hole loses the spaces that pad its
// value to the hole's length; a text hole gets back the space its plan took off before it (when the fill
// does not begin with one) and drops trailing spaces where the text after it begins with a space.
FillResult finish(FillResult r, const FillPlan& plan, const TextCodec& codec) {
  r.canvas = r.tokens;
  auto text_of = [&](int64_t from, int64_t to) {
    return codec_text(codec, std::vector<int32_t>(r.canvas.begin() + from, r.canvas.begin() + to));
  };
  std::vector<std::string> fixed;  // the text before each hole, and after the last
  int64_t at = 0;
  for (const CanvasHole& h : plan.holes) {
    fixed.push_back(text_of(at, h.start));
    r.fills.push_back(text_of(h.start, h.start + h.length));
    at = h.start + h.length;
  }
  fixed.push_back(text_of(at, int64_t(r.canvas.size())));
  for (size_t i = 0; i < r.fills.size(); ++i) {
    std::string& fill = r.fills[i];
    const bool space_after = !fixed[i + 1].empty() && fixed[i + 1][0] == ' ';
    if (plan.json || space_after)
      while (!fill.empty() && fill.back() == ' ') fill.pop_back();
    if (!plan.json && i < plan.space_before.size() && plan.space_before[i] && (fill.empty() || fill[0] != ' '))
      fill.insert(fill.begin(), ' ');
  }
  r.text.clear();
  for (size_t i = 0; i < fixed.size(); ++i) r.text += fixed[i] + (i < r.fills.size() ? r.fills[i] : "");
  return r;
}

FillResult fill_masked(const Model& model, const FillPlan& plan, const FillParams& params,
                       const TextCodec& codec, ThreadPool* pool, const DecodeCallbacks& callbacks) {
  const ModelConfig& c = model.config;
  check(plan.mask_id == c.mask_token, "infill: the plan's mask id " + std::to_string(plan.mask_id) +
                                          " is not the model's " + std::to_string(c.mask_token));
  const int64_t L = int64_t(plan.canvas.size());
  const int64_t masked = std::count(plan.canvas.begin(), plan.canvas.end(), plan.mask_id);
  CanvasConstraint constraint(plan.holes, L, plan.mask_id, int32_t(c.vocab));
  constraint.update(plan.canvas);
  check(constraint.feasible(), "infill: some hole cannot be filled with this vocabulary");
  MaskedDiffusionParams p = params.masked;
  p.gen_length = L;
  p.block_length = L;
  if (p.steps <= 0) p.steps = std::max<int64_t>(masked, 1);
  p.initial_canvas = plan.canvas;
  p.constraint = &constraint;
  p.beam_width = 0;
  FillResult r;
  static_cast<GenerationResult&>(r) = generate_masked(model, plan.prompt, p, pool, callbacks);
  return finish(std::move(r), plan, codec);
}

FillResult fill_uniform_state(const Model& model, const FillPlan& plan, const FillParams& params,
                              const TextCodec& codec, ThreadPool* pool, const DecodeCallbacks& callbacks) {
  const ModelConfig& c = model.config;
  check(!params.uniform.stream_head, "infill: --stream-head is not supported when filling holes");
  check(!plan.prompt.empty(),
        "infill: a uniform-state model needs a prompt before the first hole (e.g. <bos>)");
  const int64_t L = int64_t(plan.canvas.size()), V = c.vocab;
  const int64_t P = int64_t(plan.prompt.size());
  check(P + L <= c.context_length, "infill: prompt (" + std::to_string(P) + " tokens) + canvas (" +
                                       std::to_string(L) + ") exceed the model's context length " +
                                       std::to_string(c.context_length));
  CanvasConstraint constraint(plan.holes, L, plan.mask_id, int32_t(V));
  constraint.update(plan.canvas);  // every hole undecided: the allowed sets of a fresh canvas
  check(constraint.feasible(), "infill: some hole cannot be filled with this vocabulary");
  EntropyBoundParams p = params.uniform;
  p.canvas_length = L;
  p.max_new_tokens = L;
  UniformStateSession session(model, P + L, pool);
  FillResult r;
  const double t0 = now_ms();
  session.encode(plan.prompt);
  r.prompt_ms = now_ms() - t0;
  DiffusionModelHooks hooks = session.hooks();
  std::vector<float> last_logits;
  const auto inner = hooks.decode;
  hooks.decode = [&](const std::vector<int32_t>& canvas, const std::vector<float>* self_cond,
                     std::vector<float>& logits) {
    inner(canvas, self_cond, logits);
    for (int64_t i = 0; i < L; ++i) {
      float* row = &logits[size_t(i * V)];
      const int32_t given = plan.canvas[size_t(i)];
      if (given != plan.mask_id) {  // pinned: only the given token
        const float keep = row[given];
        std::fill(row, row + V, -1e30f);
        row[given] = std::max(keep, 0.f) + 100.f;
      } else if (constraint.constrained(i)) {
        constraint.mask_logits(i, row);
      }
    }
    last_logits = logits;
  };
  hooks.decode_stream = nullptr;
  const EntropyBoundResult gen = generate_entropy_bound(hooks, p, callbacks, pool);
  static_cast<GenerationResult&>(r) = gen;
  r.prompt_tokens = P;
  r.prompt_ms = r.prompt_ms;
  std::vector<int32_t> canvas(gen.tokens.begin(),
                              gen.tokens.begin() + std::min<int64_t>(L, int64_t(gen.tokens.size())));
  canvas.resize(size_t(L), plan.mask_id);
  for (int64_t i = 0; i < L; ++i)
    if (plan.canvas[size_t(i)] != plan.mask_id) canvas[size_t(i)] = plan.canvas[size_t(i)];
  r.tokens = constraint.repair(canvas, [&](int64_t pos, int32_t token) {
    return last_logits.empty() ? 0.0 : double(last_logits[size_t(pos * V + token)]);
  });
  return finish(std::move(r), plan, codec);
}

}  // namespace

FillResult fill(const Model& model, const FillPlan& plan, const FillParams& params, const TextCodec& codec,
                ThreadPool* pool, const DecodeCallbacks& callbacks) {
  check_codec(codec);
  const ModelConfig& c = model.config;
  check(c.is_diffusion(),
        "model '" + c.arch +
            "' is autoregressive: it cannot fill holes between fixed text (it was not trained to "
            "fill in the middle); use a masked or uniform-state diffusion model");
  check(int64_t(codec.vocabulary->size()) <= c.vocab, "infill: the tokenizer has more tokens than the model");
  if (c.uniform_state) return fill_uniform_state(model, plan, params, codec, pool, callbacks);
  check(c.mask_token >= 0, "infill: model '" + c.arch + "' has no mask token");
  return fill_masked(model, plan, params, codec, pool, callbacks);
}

ConstrainedArResult generate_constrained_ar(const Model& model, const std::vector<int32_t>& prompt,
                                            const JsonTemplate& schema, const TextCodec& codec,
                                            ArParams params, ThreadPool* pool,
                                            const DecodeCallbacks& callbacks) {
  check_codec(codec);
  const PrefixConstraint constraint(automaton(schema.document(), codec));
  params.constraint = &constraint;
  ConstrainedArResult r;
  static_cast<GenerationResult&>(r) = generate_ar(model, prompt, params, pool, callbacks);
  std::vector<int32_t> body;
  int32_t state = constraint.start();
  for (int32_t id : r.tokens) {
    const int32_t next = constraint.advance(state, id);
    if (next < 0) break;  // the stop token
    body.push_back(id);
    state = next;
  }
  r.text = codec_text(codec, body);
  return r;
}

}  // namespace canvas
