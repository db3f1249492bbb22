// Tokenizer choice, sampler defaults and chat formats of a model.
#include "decode/text_model.h"

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "io/gguf.h"
#include "io/json.h"

namespace canvas {
namespace fs = std::filesystem;

namespace {

bool is_gemma(const ModelConfig& c) { return c.arch == "diffusion-gemma" || c.arch == "gemma4"; }

// Sampler defaults read from a file are checked where they are read, naming the file and key: a bad value
// must not surface later as a complaint about a flag nobody gave.
void check_file_sampler_params(const EntropyBoundParams& p, const std::string& file, const char* steps_key,
                               const char* length_key) {
  check(p.max_denoising_steps > 0 && p.max_denoising_steps <= 1000000,
        file + ": " + steps_key + " is " + std::to_string(p.max_denoising_steps) + "; it must be in 1..1000000");
  check(p.canvas_length > 0 && p.canvas_length <= (int64_t(1) << 24),
        file + ": " + length_key + " is " + std::to_string(p.canvas_length) + "; it must be positive");
  check(std::isfinite(p.t_min) && std::isfinite(p.t_max) && p.t_min > 0 && p.t_max >= p.t_min,
        file + ": the temperatures need 0 < t_min <= t_max");
  check(std::isfinite(p.entropy_bound) && p.entropy_bound >= 0, file + ": entropy_bound must be finite and >= 0");
  check(std::isfinite(p.neighbor_penalty) && p.neighbor_penalty > 0,
        file + ": diffusion.eb_neighbor_penalty must be finite and > 0");
}

// The sampler settings a GGUF (diffusion.* keys) or a generation_config.json holds; absent keys keep p's.
template <class Document>
void read_sampler_keys(const Document& d, bool gguf, EntropyBoundParams& p) {
  auto key = [gguf](const char* in_gguf, const char* in_json) { return std::string(gguf ? in_gguf : in_json); };
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
    check_file_sampler_params(p, f.path(), "diffusion.eb_max_steps", "diffusion.canvas_length");
    d.source = f.path();
    return d;
  }
  const std::string path = (fs::path(checkpoint_directory(model, model_path)) / "generation_config.json").string();
  if (!fs::exists(path)) return d;
  const JsonDocument g = JsonDocument::load(path);
  read_sampler_keys(g, false, p);
  check_file_sampler_params(p, path, "max_denoising_steps", "canvas_length");
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
  ChatFormat format = builtin_format(name == "auto" ? "gemma4" : name);
  format.origin = name == "auto" ? "built-in (the model has no tokenizer.chat_template)" : "--template";
  format.bos = c.bos_token >= 0 ? tokenizer.token_piece(c.bos_token) : "";
  format.eos = c.eos_token >= 0 ? tokenizer.token_piece(c.eos_token) : "";
  std::string jinja;
  if (model.file) {
    jinja = model.file->get_string("tokenizer.chat_template", "");
  } else {
    const fs::path config = fs::path(checkpoint_directory(model, model_path)) / "tokenizer_config.json";
    if (fs::exists(config)) jinja = JsonDocument::load(config.string()).get_string("chat_template", "");
  }
  format.model_has_template = !jinja.empty();
  if (name == "auto" && !jinja.empty()) {
    try {
      ChatTemplateInputs probe;
      probe.messages = {{"user", "hello"}};
      probe.bos_token = format.bos;
      probe.eos_token = format.eos;
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

std::string ChatFormat::render(const std::vector<ChatMessage>& messages) const {
  if (!jinja.empty()) {
    ChatTemplateInputs in;
    in.messages = messages;
    in.bos_token = bos;
    in.eos_token = eos;
    return render_chat_template(jinja, in);
  }
  std::string out;
  std::string pending_system;  // Gemma (2/3) has no system role: it prefixes the first user turn
  const bool gemma = name == "gemma4" || name == "gemma";
  for (const ChatMessage& m : messages) {
    const std::string role = m.role == "assistant" ? (gemma ? "model" : "assistant") : m.role;
    if (name == "gemma4") {
      out += "<|turn>" + role + "\n" + m.content + "<turn|>\n";
    } else if (name == "gemma") {
      if (role == "system") {
        pending_system = m.content + "\n\n";
        continue;
      }
      out += "<start_of_turn>" + role + "\n" + pending_system + m.content + "<end_of_turn>\n";
      pending_system.clear();
    } else if (name == "chatml") {
      out += "<|im_start|>" + role + "\n" + m.content + "<|im_end|>\n";
    } else {  // llama3
      out += "<|start_header_id|>" + role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
    }
  }
  if (name == "gemma4") return "<bos>" + out + "<|turn>model\n";
  if (name == "gemma") return "<bos>" + out + "<start_of_turn>model\n";
  if (name == "chatml") return out + "<|im_start|>assistant\n";
  return out + "<|start_header_id|>assistant<|end_header_id|>\n\n";
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
