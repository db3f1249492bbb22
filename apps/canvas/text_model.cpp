// Tokenizer choice, sampler defaults, chat template and live view shared by generate and chat.
#include "text_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
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
}

}  // namespace

std::unique_ptr<ThreadPool> make_pool(const Args& args) {
  const int64_t threads = args.get_int("threads", 0);
  check(threads >= 0 && threads <= 1024, "--threads must be between 0 and 1024");
  return std::make_unique<ThreadPool>(int(threads));
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
  if (!explicit_path.empty()) {
    if (fs::path(explicit_path).extension() == ".gguf") {
      from_gguf(*GgufFile::open(explicit_path));
    } else {
      t.sentencepiece_ = std::make_shared<const HfTokenizer>(HfTokenizer::from_json(explicit_path));
      t.origin_ = explicit_path;
    }
  } else if (model.file) {
    from_gguf(*model.file);
  } else {
    const std::string json = (fs::path(checkpoint_directory(model, model_path)) / "tokenizer.json").string();
    check(fs::exists(json), "the checkpoint has no tokenizer: " + json + " does not exist (give --tokenizer FILE: a "
                                                                       "tokenizer.json or a GGUF with a tokenizer)");
    t.sentencepiece_ = std::make_shared<const HfTokenizer>(HfTokenizer::from_json(json));
    t.origin_ = json;
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

EntropyBoundParams uniform_state_params(const Args& args, const SamplerDefaults& defaults, int64_t n) {
  EntropyBoundParams p = defaults.params;
  p.max_new_tokens = n;
  p.canvas_length = std::min<int64_t>(args.get_int("block-length", p.canvas_length), n);
  p.max_denoising_steps = args.get_int("steps", p.max_denoising_steps);
  p.entropy_bound = float(args.get_float("entropy-bound", p.entropy_bound));
  p.t_min = float(args.get_float("t-min", p.t_min));
  p.t_max = float(args.get_float("t-max", p.t_max));
  p.stability_threshold = args.get_int("stability", p.stability_threshold);
  p.confidence_threshold = float(args.get_float("confidence-threshold", p.confidence_threshold));
  p.seed = uint64_t(args.get_int("seed", 0));
  p.stream_head = args.has("stream-head");
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

void CanvasView::draw(const StepEvent& e) {
  std::string text;
  for (int32_t id : *e.canvas) {
    if (id == mask_) {
      text += "\x1b[2m\xE2\x96\x91\x1b[0m";
    } else if (tokenizer_) {
      text += sanitize_utf8(tokenizer_->token_piece(id));
    } else {
      text += "<" + std::to_string(id) + ">";
    }
  }
  std::fprintf(stderr, "\x1b[s\x1b[J[block %lld step %lld, %lld passes]\n%s\x1b[u", (long long)e.block,
               (long long)e.step, (long long)e.passes, text.c_str());
  std::fflush(stderr);
}

void CanvasView::finish() {
  std::fprintf(stderr, "\x1b[J");
  std::fflush(stderr);
}

}  // namespace canvas::cli
