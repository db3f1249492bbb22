// Tokenizer choice, sampler defaults and chat formats of a model.
#include "decode/text_model.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "io/gguf.h"
#include "io/json.h"

namespace canvas {
namespace fs = std::filesystem;

namespace {

bool is_gemma(const ModelConfig& c) { return c.arch == "diffusion-gemma" || c.arch == "gemma4"; }

// The sampler keys' names in a GGUF (diffusion.*) or a generation_config.json.
std::string sampler_key(bool gguf, const char* in_gguf, const char* in_json) { return gguf ? in_gguf : in_json; }

// Sampler defaults read from a file are checked where they are read, naming the file and key: a bad value
// must not surface later as a complaint about a flag nobody gave.
void check_file_sampler_params(const EntropyBoundParams& p, const std::string& file, bool gguf) {
  auto key = [&](const char* in_gguf, const char* in_json) { return file + ": " + sampler_key(gguf, in_gguf, in_json); };
  const std::string steps = key("diffusion.eb_max_steps", "max_denoising_steps");
  check(p.max_denoising_steps > 0 && p.max_denoising_steps <= 1000000,
        steps + " is " + std::to_string(p.max_denoising_steps) + "; it must be in 1..1000000");
  const std::string length = key("diffusion.canvas_length", "canvas_length");
  constexpr int64_t kMaxCanvasLength = int64_t(1) << 24;
  check(p.canvas_length > 0, length + " is " + std::to_string(p.canvas_length) + "; it must be positive");
  check(p.canvas_length <= kMaxCanvasLength, length + " is " + std::to_string(p.canvas_length) +
                                                 ", more than the limit of " + std::to_string(kMaxCanvasLength));
  const std::string t_min = key("diffusion.eb_t_min", "t_min"), t_max = key("diffusion.eb_t_max", "t_max");
  check(std::isfinite(p.t_min) && p.t_min > 0, t_min + " is " + std::to_string(p.t_min) + "; it must be finite and > 0");
  check(std::isfinite(p.t_max) && p.t_max >= p.t_min,
        t_max + " is " + std::to_string(p.t_max) + "; it must be finite and at least t_min (" + std::to_string(p.t_min) + ")");
  check(std::isfinite(p.entropy_bound) && p.entropy_bound >= 0,
        key("diffusion.eb_entropy_bound", "entropy_bound") + " must be finite and >= 0");
  check(std::isfinite(p.neighbor_penalty) && p.neighbor_penalty > 0,
        file + ": diffusion.eb_neighbor_penalty must be finite and > 0");
}

// The sampler settings a GGUF (diffusion.* keys) or a generation_config.json holds; absent keys keep p's.
template <class Document>
void read_sampler_keys(const Document& d, bool gguf, EntropyBoundParams& p) {
  auto key = [gguf](const char* in_gguf, const char* in_json) { return sampler_key(gguf, in_gguf, in_json); };
  p.canvas_length = d.get_int(key("diffusion.canvas_length", "canvas_length"), p.canvas_length);
  p.max_denoising_steps = d.get_int(key("diffusion.eb_max_steps", "max_denoising_steps"), p.max_denoising_steps);
  p.t_min = float(d.get_float(key("diffusion.eb_t_min", "t_min"), p.t_min));
  p.t_max = float(d.get_float(key("diffusion.eb_t_max", "t_max"), p.t_max));
  p.entropy_bound = float(d.get_float(key("diffusion.eb_entropy_bound", "entropy_bound"), p.entropy_bound));
  p.stability_threshold = d.get_int(key("diffusion.eb_stability_threshold", "stability_threshold"), p.stability_threshold);
  p.confidence_threshold =
      float(d.get_float(key("diffusion.eb_confidence_threshold", "confidence_threshold"), p.confidence_threshold));
  if (gguf) p.neighbor_penalty = float(d.get_float("diffusion.eb_neighbor_penalty", p.neighbor_penalty));
}

// The end-of-turn text a template writes, from the markers of the known families ("" when none).
std::string turn_end_of(const std::string& tmpl) {
  for (const char* marker : {"<turn|>", "<end_of_turn>", "<|im_end|>", "<|eot_id|>"})
    if (tmpl.find(marker) != std::string::npos) return marker;
  return "";
}

// What a template's `| trim` leaves of a text.
std::string trim_like_jinja(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  return a == std::string::npos ? "" : s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1);
}

ChatFormat builtin_format(const std::string& name) {
  ChatFormat f;
  f.name = name;
  if (name == "gemma4") f.turn_end = "<turn|>";
  else if (name == "gemma") f.turn_end = "<end_of_turn>";
  else if (name == "chatml") f.turn_end = "<|im_end|>";
  else if (name == "llama3") f.turn_end = "<|eot_id|>";
  else throw Error("unknown chat format '" + name + "' (auto, gemma4, gemma, chatml, llama3)");
  return f;
}

}  // namespace

std::string checkpoint_directory(const Model& model, const std::string& model_path) {
  if (model.file) return "";
  const fs::path p(model_path);
  return fs::is_directory(p) ? p.string() : p.parent_path().string();
}

TextTokenizer tokenizer_for_model(const Model& model, const std::string& model_path, const std::string& explicit_path) {
  const ModelConfig& c = model.config;
  const SpecialTokenIds special{c.bos_token, c.eos_token, c.pad_token, c.mask_token};
  TextTokenizer t;
  if (!explicit_path.empty()) {
    t = TextTokenizer::open(explicit_path, special);
  } else if (model.file) {
    t = TextTokenizer::from_gguf(*model.file);
  } else {
    const std::string json = (fs::path(checkpoint_directory(model, model_path)) / "tokenizer.json").string();
    check(fs::exists(json), "the checkpoint has no tokenizer: " + json +
                                " does not exist (give --tokenizer FILE: a tokenizer.json or a GGUF with a tokenizer)");
    t = TextTokenizer::from_json(json, special);
  }
  check(t.vocab_size() <= c.vocab, t.origin() + ": the tokenizer has " + std::to_string(t.vocab_size()) +
                                       " tokens, more than the model's vocabulary of " + std::to_string(c.vocab));
  return t;
}

SamplerDefaults sampler_defaults(const Model& model, const std::string& model_path) {
  const ModelConfig& c = model.config;
  SamplerDefaults d;
  EntropyBoundParams& p = d.params;
  p.canvas_length = c.has_decoder ? 256 : 32;
  p.eos_ids = is_gemma(c) ? std::vector<int32_t>{1, 106, 50} : std::vector<int32_t>{c.eos_token};
  if (!is_gemma(c) && c.eos_token < 0) p.eos_ids.clear();
  p.pad_id = c.pad_token >= 0 ? c.pad_token : c.eos_token;
  if (model.file) {
    const GgufFile& f = *model.file;
    read_sampler_keys(f, true, p);
    check_file_sampler_params(p, f.path(), true);
    if (c.release_form) d.max_new_tokens = 256;  // generate()'s max_new_tokens
    d.source = f.path();
    return d;
  }
  const fs::path dir = checkpoint_directory(model, model_path);
  // DiffusionGemma's canvas length is a model setting (config.json's canvas_length, 256 when absent), as
  // the reference reads it; generation_config.json may still name one (canvas's older converted files).
  if (c.has_decoder && fs::exists(dir / "config.json")) {
    const JsonDocument config = JsonDocument::load((dir / "config.json").string());
    p.canvas_length = config.get_int("canvas_length", p.canvas_length);
    check(p.canvas_length > 0 && p.canvas_length <= (int64_t(1) << 24),
          config.origin() + ": canvas_length is " + std::to_string(p.canvas_length) + "; it must be in 1..16777216");
  }
  const std::string path = (dir / "generation_config.json").string();
  if (c.release_form) d.max_new_tokens = 256;  // generate()'s own default
  if (!fs::exists(path)) return d;
  const JsonDocument g = JsonDocument::load(path);
  read_sampler_keys(g, false, p);
  // transformers writes the sampler's own settings nested (sampler_config: {entropy_bound, _cls_name}).
  p.entropy_bound = float(g.get_float("sampler_config.entropy_bound", p.entropy_bound));
  check_file_sampler_params(p, path, false);
  const std::vector<int64_t> eos = g.get_int_or_int_array("eos_token_id");
  if (!eos.empty()) {
    p.eos_ids.clear();
    for (int64_t id : eos) {
      check(id >= 0 && id < c.vocab, path + ": eos_token_id " + std::to_string(id) + " is outside the vocabulary");
      p.eos_ids.push_back(int32_t(id));
    }
  }
  const int64_t pad = g.get_int("pad_token_id", p.pad_id);
  check(pad >= 0 && pad < c.vocab, path + ": pad_token_id " + std::to_string(pad) + " is outside the vocabulary");
  p.pad_id = int32_t(pad);
  d.max_new_tokens = g.get_int("max_new_tokens", d.max_new_tokens);
  d.source = path;
  return d;
}

ChatFormat ChatFormat::for_model(const Model& model, const std::string& model_path, const TextTokenizer& tokenizer,
                                 const std::string& name) {
  const ModelConfig& c = model.config;
  // Without a template of its own a model gets its family's format: Gemma 3's turns, else Gemma 4's.
  ChatFormat format = builtin_format(name != "auto" ? name : c.arch == "gemma3" ? "gemma" : "gemma4");
  format.origin = name == "auto" ? "built-in (the model has no tokenizer.chat_template)" : "--template";
  format.bos = c.bos_token >= 0 ? tokenizer.token_piece(c.bos_token) : "";
  format.eos = c.eos_token >= 0 ? tokenizer.token_piece(c.eos_token) : "";
  std::string jinja;
  if (model.file) {
    jinja = model.file->get_string("tokenizer.chat_template", "");
  } else {
    // transformers saves the template as chat_template.jinja beside the weights (the release does);
    // older checkpoints keep it in tokenizer_config.json.
    const fs::path dir = checkpoint_directory(model, model_path);
    const fs::path file = dir / "chat_template.jinja", config = dir / "tokenizer_config.json";
    if (fs::exists(file)) {
      jinja = read_text_file(file.string());
    } else if (fs::exists(config)) {
      jinja = JsonDocument::load(config.string()).get_string("chat_template", "");
    }
  }
  format.model_has_template = !jinja.empty();
  format.template_source = model.file ? model_path + "'s tokenizer.chat_template"
                           : fs::exists(fs::path(checkpoint_directory(model, model_path)) / "chat_template.jinja")
                               ? (fs::path(checkpoint_directory(model, model_path)) / "chat_template.jinja").string()
                               : model_path + "'s chat_template";
  if (c.context_length > 0) {
    size_t longest = 1;
    for (int64_t id = 0; id < tokenizer.vocab_size(); ++id)
      longest = std::max(longest, tokenizer.token_piece(int32_t(id)).size());
    const size_t most = size_t(c.context_length) * longest;
    if (most < ChatTemplateInputs{}.max_output_bytes) {
      format.max_prompt_bytes = most;
      format.max_prompt_reason = "(the model's context of " + std::to_string(c.context_length) +
                                 " tokens, of at most " + std::to_string(longest) + " bytes each)";
    }
  }
  if (name == "auto" && !jinja.empty()) {
    try {
      ChatTemplateInputs probe = format.template_inputs({{"user", "hello"}});
      render_chat_template(jinja, probe);
      format.name = "the model's";
      format.turn_end = turn_end_of(jinja);
      format.jinja = jinja;
      format.origin = "tokenizer.chat_template";
    } catch (const Error& e) {
      format.origin = std::string("built-in; the model's tokenizer.chat_template was not usable: ") + e.what();
    }
  }
  // Gemma formats write <bos> themselves, as do model templates (through bos_token); the others take the
  // tokenizer's BOS.
  format.add_bos = format.jinja.empty() && format.name != "gemma4" && format.name != "gemma" && tokenizer.wants_bos();
  return format;
}

ChatTemplateInputs ChatFormat::template_inputs(const std::vector<ChatMessage>& messages,
                                               const ChatExtras& extras) const {
  ChatTemplateInputs in;
  in.messages = messages;
  in.tools = extras.tools;
  in.enable_thinking = extras.enable_thinking;
  in.bos_token = bos;
  in.eos_token = eos;
  if (max_prompt_bytes > 0) in.max_output_bytes = max_prompt_bytes;
  in.max_output_reason = max_prompt_reason;
  in.source = template_source;
  in.cancel = cancel;
  return in;
}

std::string ChatFormat::render(const std::vector<ChatMessage>& messages, const ChatExtras& extras) const {
  if (!jinja.empty()) return render_chat_template(jinja, template_inputs(messages, extras));
  std::string out;
  for (const ChatPiece& piece : render_pieces(messages)) out += piece.text;
  return out;
}

bool ChatFormat::has_thinking_switch() const { return jinja.find("enable_thinking") != std::string::npos; }

std::vector<ChatPiece> ChatFormat::render_pieces(const std::vector<ChatMessage>& messages,
                                                 const ChatExtras& extras) const {
  std::vector<ChatPiece> out;
  auto text = [&](const std::string& s) {
    if (s.empty()) return;
    if (!out.empty() && out.back().message < 0) out.back().text += s;
    else out.push_back({s, -1});
  };
  auto content = [&](size_t i) { out.push_back({messages[i].content, int64_t(i)}); };
  if (!jinja.empty()) {
    // The template rendered over numbered marks in place of the contents, then cut at the marks. The
    // marks use control characters no template writes and no trim removes.
    const std::string open = "\x02" "canvas-message-", close = "\x03";
    ChatTemplateInputs in = template_inputs(messages, extras);
    for (size_t i = 0; i < messages.size(); ++i) in.messages[i].content = open + std::to_string(i) + close;
    const std::string rendered = render_chat_template(jinja, in);
    size_t at = 0;
    for (size_t mark = rendered.find(open); mark != std::string::npos; mark = rendered.find(open, at)) {
      const size_t end = rendered.find(close, mark);
      const std::string digits = rendered.substr(mark + open.size(), end - mark - open.size());
      if (end == std::string::npos || digits.empty() || digits.size() > 9 ||
          digits.find_first_not_of("0123456789") != std::string::npos || std::stoul(digits) >= messages.size())
        break;  // not a whole mark: the rest is template text
      text(rendered.substr(at, mark - at));
      content(std::stoul(digits));
      at = end + close.size();
    }
    text(rendered.substr(at));
    return out;
  }
  const bool gemma = name == "gemma4" || name == "gemma";
  if (gemma) text("<bos>");
  int64_t pending_system = -1;  // Gemma (2/3) has no system role: it prefixes the first user turn
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const std::string role = m.role == "assistant" ? (gemma ? "model" : "assistant") : m.role;
    if (name == "gemma4") {
      text("<|turn>" + role + "\n");
      content(i);
      text("<turn|>\n");
    } else if (name == "gemma") {
      if (role == "system") {
        pending_system = int64_t(i);
        continue;
      }
      text("<start_of_turn>" + role + "\n");
      if (pending_system >= 0) {
        content(size_t(pending_system));
        text("\n\n");
        pending_system = -1;
      }
      content(i);
      text("<end_of_turn>\n");
    } else if (name == "chatml") {
      text("<|im_start|>" + role + "\n");
      content(i);
      text("<|im_end|>\n");
    } else {  // llama3
      text("<|start_header_id|>" + role + "<|end_header_id|>\n\n");
      content(i);
      text("<|eot_id|>");
    }
  }
  if (name == "gemma4") text("<|turn>model\n");
  else if (name == "gemma") text("<start_of_turn>model\n");
  else if (name == "chatml") text("<|im_start|>assistant\n");
  else text("<|start_header_id|>assistant<|end_header_id|>\n\n");
  return out;
}

std::vector<int32_t> ChatFormat::encode(const TextTokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                                        bool parse_special, const ChatExtras& extras) const {
  // Only contents that special parsing would read differently need keeping apart; the others stay in the
  // template's text, so a conversation without such text encodes exactly as its rendering always has.
  std::vector<bool> guarded(messages.size(), false);
  bool any = false;
  for (size_t i = 0; i < messages.size() && !parse_special; ++i) {
    const std::string& c = messages[i].content;
    guarded[i] = tokenizer.encode(c, false, true) != tokenizer.encode(c, false, false);
    any = any || guarded[i];
  }
  if (!any) return tokenizer.encode(render(messages, extras), add_bos);
  std::vector<ChatPiece> pieces = render_pieces(messages, extras);
  if (!jinja.empty()) {
    // The pieces must put together the template's own text: with the contents as written, or trimmed (a
    // template's `| trim`); a template that changes message text otherwise cannot be cut safely.
    const std::string rendered = render(messages, extras);
    auto joined = [&](bool trimmed) {
      std::string out;
      for (const ChatPiece& p : pieces) out += p.message >= 0 && trimmed ? trim_like_jinja(p.text) : p.text;
      return out;
    };
    const bool as_written = joined(false) == rendered;
    check(as_written || joined(true) == rendered,
          "a message holds special-token text (such as a turn marker) and the model's chat template rewrites "
          "message text, so it cannot be kept apart from the template's markers; remove it, or send "
          "\"parse_special\": true to let it act as special tokens");
    if (!as_written)
      for (ChatPiece& p : pieces)
        if (p.message >= 0) p.text = trim_like_jinja(p.text);
  }
  // Runs of template text and unguarded contents are encoded with special tokens; guarded contents as text.
  std::vector<int32_t> ids;
  std::string run;
  bool first = true;
  auto flush = [&](const std::string& piece, bool special) {
    const std::vector<int32_t> part = tokenizer.encode(piece, first && add_bos, special);
    ids.insert(ids.end(), part.begin(), part.end());
    first = false;
  };
  for (const ChatPiece& p : pieces) {
    if (p.message >= 0 && guarded[size_t(p.message)]) {
      if (!run.empty() || first) flush(run, true);
      run.clear();
      flush(p.text, false);
    } else {
      run += p.text;
    }
  }
  if (!run.empty()) flush(run, true);
  return ids;
}

TextModel TextModel::from(Model model, const std::string& path, const std::string& explicit_tokenizer,
                          const std::string& chat_template) {
  TextModel m{path, std::move(model), TextTokenizer{}, SamplerDefaults{}, ChatFormat{}};
  m.tokenizer = tokenizer_for_model(m.model, path, explicit_tokenizer);
  m.defaults = sampler_defaults(m.model, path);
  m.chat = ChatFormat::for_model(m.model, path, m.tokenizer, chat_template);
  return m;
}

}  // namespace canvas
