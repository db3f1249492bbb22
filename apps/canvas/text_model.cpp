// Tokenizer choice, sampler defaults, chat template and live view shared by generate and chat.
#include "text_model.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "io/bpe_json.h"
#include "io/gguf.h"
#include "io/hf_tokenizer.h"
#include "io/json.h"
#include "io/tokenizer.h"

namespace canvas::cli {
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

}  // namespace

std::unique_ptr<ThreadPool> make_pool(const Args& args) { return std::make_unique<ThreadPool>(thread_count(args)); }

uint64_t resolve_seed(const Args& args) {
  const int64_t seed = args.get_int("seed", -1);
  check(seed >= -1, "--seed must be >= 0, or -1 for a random seed");
  if (seed >= 0) return uint64_t(seed);
  std::random_device device;
  // Kept below 2^53 so that JSON readers that hold numbers as doubles read it back exactly.
  return ((uint64_t(device()) << 32) | device()) & ((uint64_t(1) << 53) - 1);
}

SamplingParams sampling_params(const Args& args, uint64_t seed) {
  SamplingParams sampling;
  sampling.temperature = float(args.get_float("temp", 0.0));
  sampling.top_k = args.get_int("top-k", 0);
  sampling.top_p = float(args.get_float("top-p", 1.0));
  sampling.min_p = float(args.get_float("min-p", 0.0));
  sampling.repeat_penalty = float(args.get_float("repeat-penalty", 1.0));
  sampling.seed = seed;
  check(sampling.temperature >= 0, "--temp must be >= 0");
  check(sampling.top_k >= 0, "--top-k must be >= 0");
  check(sampling.top_p > 0 && sampling.top_p <= 1, "--top-p must be in (0, 1]");
  check(sampling.min_p >= 0 && sampling.min_p <= 1, "--min-p must be in [0, 1]");
  check(sampling.repeat_penalty > 0, "--repeat-penalty must be > 0");
  return sampling;
}

namespace {

std::string read_stream(std::istream& in) {
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (!text.empty() && text.back() == '\n') text.pop_back();
  if (!text.empty() && text.back() == '\r') text.pop_back();
  return text;
}

}  // namespace

std::string read_prompt(const Args& args, const std::string& help_command) {
  check(!(args.has("prompt") && args.has("file")), "give one of -p TEXT and -f FILE, not both");
  if (args.has("file")) {
    const std::string path = args.get("file", "");
    std::ifstream in(path, std::ios::binary);
    check(bool(in), "cannot open prompt file " + path);
    return read_stream(in);
  }
  if (args.has("prompt") && args.get("prompt", "") != "-") return args.get("prompt", "");
  const bool asked = args.has("prompt");  // -p -
  check(asked || !isatty(STDIN_FILENO),
        "no prompt given (-p TEXT, -f FILE, or text piped into stdin); see " + help_command + " --help");
  std::string text = read_stream(std::cin);
  check(!text.empty() || asked, "no prompt given (-p TEXT, -f FILE, or text piped into stdin; stdin was empty); see " +
                                    help_command + " --help");
  return text;
}

TextStream::TextStream(const TextTokenizer* tokenizer, std::vector<int32_t> stop_ids,
                       std::vector<std::string> stop_strings, bool print)
    : tokenizer_(tokenizer), stop_ids_(std::move(stop_ids)), stop_strings_(std::move(stop_strings)), print_(print) {
  for (const std::string& s : stop_strings_) check(!s.empty(), "--stop needs a non-empty string");
}

std::string TextStream::text_of(const std::vector<int32_t>& tokens, bool* cut) {
  std::vector<int32_t> shown;
  *cut = false;
  for (int32_t id : tokens) {
    if (std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end()) {
      *cut = true;
      break;
    }
    shown.push_back(id);
  }
  std::string text = tokenizer_->decode(shown);
  size_t first = std::string::npos;
  for (const std::string& s : stop_strings_) first = std::min(first, text.find(s));
  if (first != std::string::npos) {
    text.resize(first);
    *cut = true;
    stop_string_seen_ = true;
  }
  return text;
}

void TextStream::emit(const std::string& text, size_t end) {
  // Later tokens can only append to the text; if decoding ever rewrote the written part, write nothing
  // more rather than something inconsistent (finish() then returns the full text for the caller).
  if (end <= written_.size() || text.compare(0, written_.size(), written_) != 0) return;
  const std::string chunk = text.substr(written_.size(), end - written_.size());
  written_ += chunk;
  if (print_) {
    std::fwrite(chunk.data(), 1, chunk.size(), stdout);
    std::fflush(stdout);
  }
}

void TextStream::update(const std::vector<int32_t>& final_prefix) {
  bool cut = false;
  const std::string text = text_of(final_prefix, &cut);
  size_t end = text.size();
  if (!cut) {
    // Hold back what could be the start of a stop string, and an unfinished UTF-8 sequence.
    size_t hold = 0;
    for (const std::string& s : stop_strings_) hold = std::max(hold, s.size() - 1);
    end = text.size() > hold ? text.size() - hold : 0;
    size_t back = 0;
    while (back < 4 && back < end && (static_cast<unsigned char>(text[end - 1 - back]) & 0xC0) == 0x80) ++back;
    if (back < end) {
      const unsigned char lead = static_cast<unsigned char>(text[end - 1 - back]);
      const size_t need = lead < 0x80 ? 1 : (lead >> 5) == 6 ? 2 : (lead >> 4) == 14 ? 3 : (lead >> 3) == 30 ? 4 : 1;
      if (need > back + 1) end -= back + 1;
    }
  }
  emit(text, end);
}

std::string TextStream::finish(const std::vector<int32_t>& tokens) {
  bool cut = false;
  const std::string text = text_of(tokens, &cut);
  emit(text, text.size());
  return text;
}

std::string checkpoint_directory(const Model& model, const std::string& model_path) {
  if (model.file) return "";
  const fs::path p(model_path);
  return fs::is_directory(p) ? p.string() : p.parent_path().string();
}

TextTokenizer TextTokenizer::for_model(const Model& model, const std::string& model_path,
                                       const std::string& explicit_path) {
  TextTokenizer t;
  auto from_gguf = [&](const GgufFile& file) {
    const std::string kind = file.get_string("tokenizer.ggml.model", "");
    check(!kind.empty(), file.path() + " holds no tokenizer (no tokenizer.ggml.model; e.g. converted from a checkpoint "
                                       "without a usable tokenizer.json): give --tokenizer PATH/tokenizer.json");
    if (kind == "gemma4" || kind == "llama") {
      t.sentencepiece_ = std::make_shared<const HfTokenizer>(HfTokenizer::from_gguf(file));
    } else {
      t.bpe_ = std::make_shared<const Tokenizer>(Tokenizer::from_gguf(file));
    }
    t.origin_ = file.path();
  };
  // Byte-level BPE (LLaDA, Dream, LLaDA-MoE) or Gemma's SentencePiece-style BPE; the special ids of a
  // byte-level file come from the model's config.
  auto from_json = [&](const std::string& path) {
    if (is_byte_level_tokenizer_json(path)) {
      const ModelConfig& c = model.config;
      t.bpe_ = std::make_shared<const Tokenizer>(
          bpe_tokenizer_from_json(path, c.bos_token, c.eos_token, c.pad_token, c.mask_token));
    } else {
      t.sentencepiece_ = std::make_shared<const HfTokenizer>(HfTokenizer::from_json(path));
    }
    t.origin_ = path;
  };
  if (!explicit_path.empty()) {
    if (fs::path(explicit_path).extension() == ".gguf") {
      from_gguf(*GgufFile::open(explicit_path));
    } else {
      from_json(explicit_path);
    }
  } else if (model.file) {
    from_gguf(*model.file);
  } else {
    const std::string json = (fs::path(checkpoint_directory(model, model_path)) / "tokenizer.json").string();
    check(fs::exists(json), "the checkpoint has no tokenizer: " + json + " does not exist (give --tokenizer FILE: a "
                                                                       "tokenizer.json or a GGUF with a tokenizer)");
    from_json(json);
  }
  const int64_t size = t.bpe_ ? t.bpe_->vocab_size() : t.sentencepiece_->vocab_size();
  check(size <= model.config.vocab, t.origin_ + ": the tokenizer has " + std::to_string(size) +
                                        " tokens, more than the model's vocabulary of " +
                                        std::to_string(model.config.vocab));
  return t;
}

std::vector<int32_t> TextTokenizer::encode(const std::string& text, bool add_bos) const {
  return bpe_ ? bpe_->encode(text, add_bos, true) : sentencepiece_->encode(text, add_bos, true);
}

std::string TextTokenizer::decode(const std::vector<int32_t>& ids) const {
  return bpe_ ? bpe_->decode(ids) : sentencepiece_->decode(ids);
}

std::string TextTokenizer::token_piece(int32_t id) const {
  if (bpe_) return bpe_->token_piece(id);
  if (id < 0 || id >= sentencepiece_->vocab_size()) return "<" + std::to_string(id) + ">";
  return sentencepiece_->token_piece(id);
}

bool TextTokenizer::wants_bos() const { return bpe_ ? bpe_->add_bos() : sentencepiece_->add_bos(); }

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
    p.canvas_length = f.get_int("diffusion.canvas_length", p.canvas_length);
    p.max_denoising_steps = f.get_int("diffusion.eb_max_steps", p.max_denoising_steps);
    p.t_min = float(f.get_float("diffusion.eb_t_min", p.t_min));
    p.t_max = float(f.get_float("diffusion.eb_t_max", p.t_max));
    p.entropy_bound = float(f.get_float("diffusion.eb_entropy_bound", p.entropy_bound));
    p.stability_threshold = f.get_int("diffusion.eb_stability_threshold", p.stability_threshold);
    p.confidence_threshold = float(f.get_float("diffusion.eb_confidence_threshold", p.confidence_threshold));
    p.neighbor_penalty = float(f.get_float("diffusion.eb_neighbor_penalty", p.neighbor_penalty));
    check_file_sampler_params(p, f.path(), "diffusion.eb_max_steps", "diffusion.canvas_length");
    d.source = f.path();
    return d;
  }
  const std::string path = (fs::path(checkpoint_directory(model, model_path)) / "generation_config.json").string();
  if (!fs::exists(path)) return d;
  const JsonDocument g = JsonDocument::load(path);
  p.canvas_length = g.get_int("canvas_length", p.canvas_length);
  p.max_denoising_steps = g.get_int("max_denoising_steps", p.max_denoising_steps);
  p.entropy_bound = float(g.get_float("entropy_bound", p.entropy_bound));
  p.t_min = float(g.get_float("t_min", p.t_min));
  p.t_max = float(g.get_float("t_max", p.t_max));
  p.stability_threshold = g.get_int("stability_threshold", p.stability_threshold);
  p.confidence_threshold = float(g.get_float("confidence_threshold", p.confidence_threshold));
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

EntropyBoundParams uniform_state_params(const Args& args, const SamplerDefaults& defaults, int64_t n, uint64_t seed) {
  EntropyBoundParams p = defaults.params;
  p.max_new_tokens = n;
  p.canvas_length = std::min<int64_t>(args.get_int("block-length", p.canvas_length), n);
  p.max_denoising_steps = args.get_int("steps", p.max_denoising_steps);
  p.entropy_bound = float(args.get_float("entropy-bound", p.entropy_bound));
  p.t_min = float(args.get_float("t-min", p.t_min));
  p.t_max = float(args.get_float("t-max", p.t_max));
  p.stability_threshold = args.get_int("stability", p.stability_threshold);
  p.confidence_threshold = float(args.get_float("confidence-threshold", p.confidence_threshold));
  p.seed = seed;
  p.stream_head = args.has("stream-head");
  // The streamed head has no logits to penalise: it drops the file's default, and only an explicit
  // --neighbor-penalty with it is an error.
  p.neighbor_penalty = float(args.get_float("neighbor-penalty", p.stream_head ? 1.0 : p.neighbor_penalty));
  check(p.neighbor_penalty > 0 && std::isfinite(p.neighbor_penalty), "--neighbor-penalty must be positive (1: off)");
  p.freeze = args.has("freeze") || args.has("freeze-refresh");
  p.freeze_refresh = args.get_int("freeze-refresh", 0);
  check(p.freeze_refresh >= 0, "--freeze-refresh must be >= 0");
  check(!p.freeze || !p.stream_head, "--freeze needs the materialised head: not with --stream-head");
  check(p.neighbor_penalty == 1.f || !p.stream_head, "--neighbor-penalty needs the materialised head: not with --stream-head");
  check(p.canvas_length > 0 && p.max_denoising_steps > 0, "--block-length and --steps must be positive");
  check(p.entropy_bound >= 0 && p.t_min > 0 && p.t_max >= p.t_min,
        "need --entropy-bound >= 0 and 0 < --t-min <= --t-max");
  check(p.stability_threshold >= 0 && p.confidence_threshold >= 0,
        "--stability and --confidence-threshold must be >= 0");
  return p;
}

std::string gemma_user_turn(const std::string& text, bool first) {
  return std::string(first ? "<bos>" : "") + "<|turn>user\n" + text + "<turn|>\n<|turn>model\n";
}

std::string gemma_turn_end() { return "<turn|>\n"; }

std::string sanitize_utf8(const std::string& s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = len > 0 && i + size_t(len) <= s.size();
    for (int k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + size_t(k)]) >> 6) == 2;
    if (ok) {
      out.append(s, i, size_t(len));
      i += size_t(len);
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

std::string escape_controls(const std::string& s) {
  std::string out;
  for (unsigned char ch : s) {
    switch (ch) {
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (ch < 0x20 || ch == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", ch);
          out += buf;
        } else {
          out += char(ch);
        }
    }
  }
  return out;
}

bool visual_enabled(const Args& args) {
  const int64_t delay = args.get_int("visual-delay", 0);
  check(delay >= 0 && delay <= 60000, "--visual-delay must be between 0 and 60000 ms");
  if (!args.has("visual")) return false;
  if (isatty(STDERR_FILENO)) return true;
  std::fputs("canvas: --visual ignored: stderr is not a terminal\n", stderr);
  return false;
}

void CanvasView::draw(const StepEvent& e) {
  std::string text;
  for (int32_t id : *e.canvas) {
    if (id == mask_) {
      text += "\x1b[2m\xE2\x96\x91\x1b[0m";
    } else if (tokenizer_) {
      text += escape_controls(sanitize_utf8(tokenizer_->token_piece(id)));
    } else {
      text += "<" + std::to_string(id) + ">";
    }
  }
  std::fprintf(stderr, "\x1b[s\x1b[J[block %lld step %lld, %lld passes]\n%s\x1b[u", (long long)e.block,
               (long long)e.step, (long long)e.passes, text.c_str());
  std::fflush(stderr);
  if (delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
}

void CanvasView::finish() {
  std::fprintf(stderr, "\x1b[J");
  std::fflush(stderr);
}

}  // namespace canvas::cli
