// The training loop: batches from a data source, an objective, AdamW, validation, checkpoints.
#include "train/trainer.h"

#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"
#include "core/timer.h"
#include "io/gguf.h"
#include "model/model.h"
#include "train/data.h"
#include "train/model_text.h"
#include "train/objectives.h"
#include "train/train_model.h"

namespace canvas::train {
namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

// "a, b,c" -> {"a", "b", "c"}; empty items stay (callers decide whether they are errors).
std::vector<std::string> comma_list(const std::string& value) {
  std::vector<std::string> items;
  std::stringstream ss(value);
  std::string item;
  while (std::getline(ss, item, ',')) items.push_back(trim(item));
  return items;
}

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

ModelConfig model_config(const RunConfig& r, int64_t seq_len) {
  ModelConfig c;
  c.arch = r.objective == "ar" ? "llama" : "llada";
  c.name = "canvas " + r.task + " " + r.objective;
  c.vocab = kByteVocab;
  c.hidden = r.hidden;
  c.n_layers = r.layers;
  c.n_heads = r.heads;
  c.n_kv_heads = r.kv_heads;
  c.head_dim = r.hidden / r.heads;
  c.ffn = r.ffn;
  c.rms_eps = 1e-5f;
  c.rope.layout = RopeLayout::Normal;
  c.rope.head_dim = int(c.head_dim);
  c.rope.rot_dims = int(c.head_dim);
  c.rope.theta = r.rope_theta;
  c.causal = r.objective == "ar";
  c.shift_logits = c.causal;
  c.context_length = seq_len;
  c.n_positions = r.position_embedding ? seq_len : 0;
  c.mask_token = r.objective == "uniform" ? -1 : kByteMask;  // uniform-state diffusion has no mask token
  c.eos_token = kByteEos;
  c.uniform_state = r.objective == "uniform";
  c.self_conditioning = r.self_conditioning;
  return c;
}

// The fields that define the computation; a checkpoint made under other values cannot be resumed.
std::string identity(const RunConfig& r) {
  std::ostringstream s;
  s << r.task << '|' << r.objective << '|' << r.layers << '|' << r.hidden << '|' << r.heads << '|' << r.kv_heads << '|'
    << r.ffn << '|' << r.position_embedding << '|' << r.rope_theta << '|' << r.seq_len << '|' << r.batch_size << '|'
    << r.accumulation << '|' << r.seed << '|' << r.mask_eps << '|' << r.sudoku_min_clues << '|' << r.sudoku_max_clues
    << '|' << r.optimizer.lr << '|' << r.optimizer.min_lr << '|' << r.optimizer.warmup_steps << '|'
    << r.optimizer.weight_decay << '|' << r.optimizer.beta1 << '|' << r.optimizer.beta2 << '|' << r.optimizer.grad_clip
    << '|' << r.init_from << '|' << r.text_corpus << '|' << r.sudoku_format;
  for (const std::string& l : r.init_layers) s << "|layer:" << l;  // empty for older runs
  if (r.sudoku_states != "random") s << "|states:" << r.sudoku_states;
  if (r.sudoku_hidden_weight != 1.f) s << "|hidden_weight:" << r.sudoku_hidden_weight;
  if (r.objective == "uniform") s << '|' << r.block_length << '|' << r.ar_weight;  // older runs keep their identity
  if (r.self_conditioning) s << "|self_conditioning";
  if (!r.model_config.empty()) s << "|model_config:" << r.model_config;
  return s.str();
}

ObjectiveBatch make_batch(const RunConfig& r, const ModelConfig& mc, const std::vector<Example>& examples,
                          Rng& rng) {
  if (r.objective == "ar") return autoregressive_batch(examples);
  if (r.objective == "uniform") {
    UniformStateOptions o;
    o.block_length = r.block_length;
    o.vocab = mc.vocab;
    o.eps = r.mask_eps;
    o.ar_weight = r.ar_weight;
    o.decoder_view = mc.has_decoder;
    return uniform_state_batch(examples, o, rng);
  }
  return masked_diffusion_batch(examples, mc.mask_token, r.mask_eps, rng);
}

bool is_json_or_directory(const std::string& path) {
  struct stat st;
  return (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) ||
         (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0);
}

// The configuration of a model file without binding weights where that is possible (a config.json).
ModelConfig source_config(const std::string& path) {
  if (is_json_or_directory(path) && !file_exists(path + "/model.safetensors") &&
      !file_exists(path + "/model.safetensors.index.json")) {
    const std::string json = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0 ? path
                                                                                                 : path + "/config.json";
    return config_from_hf(json);
  }
  return Model::load(path).config;
}

// The keys of a run config that describe the architecture (ignored when a model file gives it).
bool names_architecture_key(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    line = trim(line.substr(0, line.find('#')));
    const std::string key = trim(line.substr(0, line.find('=')));
    for (const char* k : {"layers", "hidden", "heads", "kv_heads", "ffn", "position_embedding", "rope_theta"})
      if (key == k) return true;
  }
  return false;
}

// The logits the loss is taken of, on `tape`. With self-conditioning (diffusiongemma.md section 4):
// pass 1 without gradient and without self-conditioning; then per example, with probability 1/2 drawn
// from rng, pass 2's block rows get pass 1's logits (soft-capped, as the model's logits always are),
// else zeros. Encoder rows always get zeros: at inference only the canvas is self-conditioned. Only
// pass 2 is recorded for backward.
Var objective_logits(const RunConfig& r, TrainModel& model, const ObjectiveBatch& ob, Rng& rng, Tape& tape) {
  if (!r.self_conditioning) return model.forward(tape, ob.input);
  const TokenBatch& b = ob.input;
  std::vector<float> first;
  {
    Tape pass1(tape.pool());
    pass1.set_grad_enabled(false);
    const Var z = model.forward(pass1, b);
    first.assign(pass1.value(z), pass1.value(z) + pass1.size(z));
  }
  SelfConditioningInput input;
  input.logits = first.data();
  input.rows.assign(size_t(b.rows()), 0);
  for (int64_t s = 0; s < b.n_sequences; ++s) {
    if (rng.uniform() >= 0.5) continue;
    // uniform_state_batch ends every sequence with its block, whose rows share one visibility group.
    const size_t begin = size_t(s * b.length), end = size_t((s + 1) * b.length);
    for (size_t row = begin; row < end; ++row) input.rows[row] = b.groups[row] == b.groups[end - 1];
  }
  return model.forward(tape, b, &input);
}

// Mean loss over the validation set (per scored token, weighted like training), with fixed corruption.
float validation_loss(const RunConfig& r, TrainModel& model, const DataSource& source, ThreadPool* pool) {
  Rng rng(r.seed + 0x5eed);
  const auto& val = source.validation();
  double total = 0, norm = 0;
  for (size_t at = 0; at < val.size(); at += size_t(r.batch_size)) {
    std::vector<Example> batch(val.begin() + int64_t(at), val.begin() + int64_t(std::min(val.size(), at + size_t(r.batch_size))));
    const ObjectiveBatch ob = make_batch(r, model.config(), batch, rng);
    Tape tape(pool);
    tape.set_grad_enabled(false);
    const Var logits = objective_logits(r, model, ob, rng, tape);
    const Var loss = cross_entropy(tape, logits, ob.targets, ob.weights, ob.normaliser);
    total += double(tape.value(loss)[0]) * ob.normaliser;
    norm += ob.normaliser;
  }
  model.zero_grad();
  return float(total / std::max(norm, 1.0));
}

void save_checkpoint(const RunConfig& r, const TrainModel& model, AdamW& opt, const std::vector<Parameter*>& params,
                     int64_t step, const std::string& out_dir,
                     const std::vector<std::pair<std::string, GgufValue>>& tokenizer) {
  std::vector<std::pair<std::string, GgufValue>> extra = tokenizer;
  extra.emplace_back("training.step", GgufValue::u64(uint64_t(step)));
  extra.emplace_back("training.config", GgufValue::string(r.source_text));
  extra.emplace_back("training.identity", GgufValue::string(identity(r)));
  if (r.task == "sudoku") extra.emplace_back("canvas.sudoku.format", GgufValue::string(r.sudoku_format));
  if (r.objective == "uniform") extra.emplace_back("diffusion.canvas_length", GgufValue::u32(uint32_t(r.block_length)));
  model.save_gguf(out_dir + "/model.gguf", extra);

  GgufWriter w;
  model.add_metadata(w);
  for (auto& [k, v] : extra) w.set(k, v);
  model.add_tensors(w);
  for (size_t i = 0; i < params.size(); ++i) {
    const Parameter* p = params[i];
    w.add_tensor("adamw.m." + p->name, DType::F32, p->shape, opt.first_moment(i).data(), uint64_t(p->size()) * 4);
    w.add_tensor("adamw.v." + p->name, DType::F32, p->shape, opt.second_moment(i).data(), uint64_t(p->size()) * 4);
  }
  w.write(out_dir + "/checkpoint.gguf");  // atomic: temporary file + rename
}

int64_t load_checkpoint(const RunConfig& r, std::vector<Parameter*>& params, AdamW& opt, const std::string& path) {
  auto file = GgufFile::open(path);
  const std::string id = file->get_string("training.identity", "");
  check(id == identity(r), path + " was made with a different configuration (model, data or optimiser settings); "
                                  "train into a new --out directory or delete the checkpoint");
  const int64_t step = file->require_int("training.step");
  auto copy_in = [&](const std::string& name, std::vector<float>& dst) {
    const TensorView& t = file->require_tensor(name);
    check(t.type == DType::F32 && t.elements() == int64_t(dst.size()), path + ": tensor '" + name + "' has the wrong size");
    std::memcpy(dst.data(), t.data, dst.size() * 4);
  };
  for (size_t i = 0; i < params.size(); ++i) {
    copy_in(params[i]->name, params[i]->value);
    copy_in("adamw.m." + params[i]->name, opt.first_moment(i));
    copy_in("adamw.v." + params[i]->name, opt.second_moment(i));
  }
  opt.set_steps_done(step);
  return step;
}

// Keeps the CSV header and the complete rows up to `step`, so a resumed run continues the same log
// (a row cut short by a kill is dropped).
void truncate_log(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  std::stringstream ss;
  ss << in.rdbuf();
  in.close();
  const std::string text = ss.str();
  std::string kept;
  size_t begin = 0;
  bool header = true;
  for (size_t end = text.find('\n'); end != std::string::npos; begin = end + 1, end = text.find('\n', begin)) {
    const std::string line = text.substr(begin, end - begin);
    if (header || std::strtoll(line.c_str(), nullptr, 10) <= step) kept += line + "\n";
    header = false;
  }
  const std::string tmp = path + ".tmp";  // replaced atomically: a kill here never loses the log
  std::ofstream(tmp, std::ios::trunc) << kept;
  check(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot replace " + path);
}

}  // namespace

RunConfig parse_run_config(const std::string& text, const std::string& origin) {
  RunConfig r;
  r.source_text = text;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line = line.substr(0, hash);
    line = trim(line);
    if (line.empty()) continue;
    const size_t eq = line.find('=');
    const std::string where = origin + ":" + std::to_string(line_no);
    check(eq != std::string::npos, where + ": expected 'key = value'");
    const std::string key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
    auto as_int = [&]() {
      char* end = nullptr;
      const long long v = std::strtoll(value.c_str(), &end, 10);
      check(!value.empty() && *end == 0, where + ": " + key + " needs an integer, got '" + value + "'");
      return int64_t(v);
    };
    auto as_float = [&]() {
      char* end = nullptr;
      const double v = std::strtod(value.c_str(), &end);
      check(!value.empty() && *end == 0, where + ": " + key + " needs a number, got '" + value + "'");
      return float(v);
    };
    auto as_bool = [&]() {
      check(value == "true" || value == "false", where + ": " + key + " needs true or false");
      return value == "true";
    };
    if (key == "task") r.task = value;
    else if (key == "objective") r.objective = value;
    else if (key == "layers") r.layers = as_int();
    else if (key == "hidden") r.hidden = as_int();
    else if (key == "heads") r.heads = as_int();
    else if (key == "kv_heads") r.kv_heads = as_int();
    else if (key == "ffn") r.ffn = as_int();
    else if (key == "position_embedding") r.position_embedding = as_bool();
    else if (key == "rope_theta") r.rope_theta = as_float();
    else if (key == "init_std") r.init_std = as_float();
    else if (key == "init_from") r.init_from = value;
    else if (key == "model_config") r.model_config = value;
    else if (key == "init_layers") r.init_layers = comma_list(value);
    else if (key == "seq_len") r.seq_len = as_int();
    else if (key == "text_corpus") r.text_corpus = value;
    else if (key == "val_fraction") r.val_fraction = as_float();
    else if (key == "sudoku_min_clues") r.sudoku_min_clues = int(as_int());
    else if (key == "sudoku_max_clues") r.sudoku_max_clues = int(as_int());
    else if (key == "sudoku_format") r.sudoku_format = value;
    else if (key == "sudoku_states") r.sudoku_states = value;
    else if (key == "sudoku_hidden_weight") r.sudoku_hidden_weight = float(as_float());
    else if (key == "held_out") {
      for (const std::string& item : comma_list(value))
        if (!item.empty()) r.held_out.push_back(item);
    } else if (key == "eval_examples") r.eval_examples = as_int();
    else if (key == "lr") r.optimizer.lr = as_float();
    else if (key == "min_lr") r.optimizer.min_lr = as_float();
    else if (key == "warmup") r.optimizer.warmup_steps = as_int();
    else if (key == "weight_decay") r.optimizer.weight_decay = as_float();
    else if (key == "beta1") r.optimizer.beta1 = as_float();
    else if (key == "beta2") r.optimizer.beta2 = as_float();
    else if (key == "grad_clip") r.optimizer.grad_clip = as_float();
    else if (key == "steps") r.steps = as_int();
    else if (key == "batch_size") r.batch_size = as_int();
    else if (key == "accumulation") r.accumulation = as_int();
    else if (key == "mask_eps") r.mask_eps = as_float();
    else if (key == "block_length") r.block_length = as_int();
    else if (key == "ar_weight") r.ar_weight = as_float();
    else if (key == "self_conditioning") r.self_conditioning = as_bool();
    else if (key == "seed") r.seed = uint64_t(as_int());
    else if (key == "eval_every") r.eval_every = as_int();
    else if (key == "checkpoint_every") r.checkpoint_every = as_int();
    else if (key == "threads") r.threads = int(as_int());
    else throw Error(where + ": unknown key '" + key + "'");
  }
  check(r.task == "sudoku" || r.task == "text", origin + ": task must be sudoku or text");
  check(r.objective == "masked" || r.objective == "uniform" || r.objective == "ar",
        origin + ": objective must be masked, uniform or ar");
  check(r.block_length > 0 && r.ar_weight >= 0, origin + ": block_length must be positive, ar_weight >= 0");
  check(!r.self_conditioning || r.objective == "uniform", origin + ": self_conditioning needs objective = uniform");
  check(r.layers > 0 && r.hidden > 0 && r.heads > 0 && r.kv_heads > 0 && r.ffn > 0, origin + ": model sizes must be positive");
  check(r.hidden % r.heads == 0 && r.heads % r.kv_heads == 0, origin + ": hidden must divide into heads, heads into kv_heads");
  check((r.hidden / r.heads) % 2 == 0, origin + ": the head dimension must be even (RoPE)");
  check(r.steps > 0 && r.batch_size > 0 && r.accumulation > 0, origin + ": steps, batch_size, accumulation must be positive");
  check(r.eval_every > 0 && r.checkpoint_every > 0, origin + ": eval_every and checkpoint_every must be positive");
  check(r.mask_eps > 0 && r.mask_eps < 1, origin + ": mask_eps must be in (0, 1)");
  if (r.sudoku_format.empty()) r.sudoku_format = r.objective == "ar" ? "sequence" : "infill";
  check(r.sudoku_format == "infill" || r.sudoku_format == "sequence", origin + ": sudoku_format must be infill or sequence");
  check(!(r.objective == "ar" && r.sudoku_format == "infill"), origin + ": an AR model needs sudoku_format = sequence");
  const std::string states_problem = sudoku_states_problem(r.sudoku_format, r.sudoku_states, r.sudoku_hidden_weight);
  check(states_problem.empty(), origin + ": " + states_problem);
  if (!r.init_layers.empty()) {
    check(!r.init_from.empty(), origin + ": init_layers needs init_from");
    check(int64_t(r.init_layers.size()) == r.layers,
          origin + ": init_layers names " + std::to_string(r.init_layers.size()) + " layers, the model has " +
              std::to_string(r.layers));
    for (const std::string& l : r.init_layers)
      check(l == "new" || (!l.empty() && l.find_first_not_of("0123456789") == std::string::npos),
            origin + ": init_layers entries are donor layer numbers or 'new', got '" + l + "'");
  }
  r.optimizer.total_steps = r.steps;
  return r;
}

RunConfig load_run_config(const std::string& path) {
  std::ifstream in(path);
  check(bool(in), "cannot open config " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_run_config(ss.str(), path);
}

ModelConfig run_model_config(const RunConfig& r, int64_t seq_len) {
  const std::string& path = !r.init_from.empty() ? r.init_from : r.model_config;
  if (path.empty()) return model_config(r, seq_len);
  if (names_architecture_key(r.source_text))
    std::fprintf(stderr, "notice: the architecture comes from %s; the config's layers / hidden / heads / kv_heads / "
                         "ffn / position_embedding / rope_theta keys are ignored\n", path.c_str());
  ModelConfig c = source_config(path);
  const std::string where = (!r.init_from.empty() ? "init_from " : "model_config ") + path;
  if (c.layer_style == LayerStyle::Gemma4) {
    check(r.objective != "masked", where + ": '" + c.arch + "' has no mask token; use objective = uniform or ar");
    check(r.objective != "uniform" || c.has_decoder,
          where + ": '" + c.arch + "' is autoregressive (no decoder for uniform-state diffusion); use objective = ar");
    check(!r.self_conditioning || c.has_decoder,
          where + ": self_conditioning needs DiffusionGemma's decoder; '" + c.arch + "' has none");
    check(r.init_layers.empty(), where + ": init_layers (depth growth) is for llama-family models");
  } else {
    // The llama family: the objective sets the attention (AR <-> diffusion adaptation keeps the weights).
    c.causal = r.objective == "ar";
    if (c.arch == "llama" || c.arch == "llada") {
      c.arch = c.causal ? "llama" : "llada";
      c.shift_logits = c.causal;
    }
    if (c.causal) c.shift_logits = true;
    c.uniform_state = r.objective == "uniform";
    if (c.uniform_state) c.mask_token = -1;
    check(r.objective != "masked" || c.mask_token >= 0,
          where + ": the masked objective needs a mask token (tokenizer.ggml.mask_token_id)");
    c.self_conditioning = r.self_conditioning;
    if (!r.init_layers.empty()) c.n_layers = int64_t(r.init_layers.size());
    check(c.n_positions == 0 || seq_len <= c.n_positions,
          where + ": sequences of " + std::to_string(seq_len) + " tokens exceed its " +
              std::to_string(c.n_positions) + " learned positions");
  }
  c.context_length = std::max(c.context_length, seq_len);
  if (c.n_positions > 0) c.context_length = c.n_positions;
  return c;
}

TrainModel initial_model(const RunConfig& r, const ModelConfig& mc) {
  InitOptions init;
  init.seed = r.seed;
  init.std = r.init_std;
  TrainModel model(mc, init);
  if (!r.init_from.empty()) {  // e.g. AR -> diffusion: same shapes, other attention
    TrainModel donor = TrainModel::from_file(r.init_from);
    for (Parameter* p : model.parameters()) {
      std::string name = p->name;
      if (!r.init_layers.empty() && name.rfind("blk.", 0) == 0) {  // blk.<i>.<rest>
        const size_t dot = name.find('.', 4);
        const std::string& from = r.init_layers[size_t(std::stoll(name.substr(4, dot - 4)))];
        if (from == "new") {  // a fresh layer that starts as the identity
          if (is_residual_output(name)) std::fill(p->value.begin(), p->value.end(), 0.f);
          continue;
        }
        name = "blk." + from + name.substr(dot);
      }
      Parameter* q = donor.find(name);
      if (!q && name.rfind("self_cond.", 0) == 0) continue;  // a donor without it: the path starts at zero
      check(q && q->value.size() == p->value.size(), r.init_from + ": no tensor '" + name + "' of the right shape");
      p->value = q->value;
    }
  }
  return model;
}

void run_training(const RunConfig& r, const std::string& out_dir, const std::function<void(const StepReport&)>& on_step,
                  int64_t stop_after) {
  ::mkdir(out_dir.c_str(), 0755);
  check(file_exists(out_dir), "cannot create output directory " + out_dir);
  ThreadPool pool(r.threads);

  // A model file (init_from / model_config) with another vocabulary than canvas's bytes brings its tokenizer.
  const std::string& model_file = !r.init_from.empty() ? r.init_from : r.model_config;
  const bool byte_vocab = model_file.empty() || source_config(model_file).vocab == kByteVocab;
  std::vector<std::pair<std::string, GgufValue>> tokenizer = byte_tokenizer_metadata(r.objective != "uniform");
  std::unique_ptr<DataSource> source;
  if (r.task == "sudoku") {
    check(byte_vocab, model_file + ": the sudoku task needs canvas's byte vocabulary (" + std::to_string(kByteVocab) +
                          " tokens)");
    source = make_sudoku_source(r.sudoku_format, r.sudoku_min_clues, r.sudoku_max_clues, r.held_out, r.eval_examples,
                                r.seed + 77, r.sudoku_states, r.sudoku_hidden_weight);
  } else if (byte_vocab) {
    source = make_text_source(load_text_corpus(r.text_corpus), r.seq_len, r.val_fraction, r.eval_examples);
  } else {
    const ModelTokenizer t = load_model_tokenizer(model_file);
    tokenizer = t.gguf_metadata;
    source = make_token_text_source(t.encode(load_text_corpus(r.text_corpus)), r.seq_len, r.val_fraction,
                                    r.eval_examples);
  }
  const ModelConfig mc = run_model_config(r, source->sequence_length());
  TrainModel model = initial_model(r, mc);
  std::vector<Parameter*> params = model.parameters();
  AdamW opt(r.optimizer, params);

  const std::string ckpt = out_dir + "/checkpoint.gguf", csv = out_dir + "/train.csv";
  int64_t step = 0;
  if (file_exists(ckpt)) {
    step = load_checkpoint(r, params, opt, ckpt);
    truncate_log(csv, step);
  } else {
    const std::string tmp = csv + ".tmp";
    std::ofstream(tmp, std::ios::trunc) << "step,lr,loss,grad_norm,val_loss,tokens_per_second,elapsed_s\n";
    check(std::rename(tmp.c_str(), csv.c_str()) == 0, "cannot create " + csv);
  }
  std::ofstream(out_dir + "/config.cfg", std::ios::trunc) << r.source_text;

  const double t_start = now_ms();
  const int64_t start_step = step;
  while (step < r.steps && (stop_after <= 0 || step < stop_after)) {
    const double t0 = now_ms();
    float loss_sum = 0;
    int64_t tokens = 0;
    for (int64_t micro = 0; micro < r.accumulation; ++micro) {
      Rng rng(r.seed * 0x9E3779B97F4A7C15ull + uint64_t(step) * 1000 + uint64_t(micro));
      std::vector<Example> examples;
      for (int64_t i = 0; i < r.batch_size; ++i) examples.push_back(source->sample(rng));
      const ObjectiveBatch ob = make_batch(r, model.config(), examples, rng);
      Tape tape(&pool);
      const Var logits = objective_logits(r, model, ob, rng, tape);
      const Var loss = cross_entropy(tape, logits, ob.targets, ob.weights, ob.normaliser);
      loss_sum += tape.value(loss)[0];
      tape.backward(loss);
      tokens += ob.input.rows();
    }
    StepReport rep;
    rep.grad_norm = opt.step(1.f / float(r.accumulation));
    rep.lr = opt.last_lr();
    ++step;
    rep.step = step;
    rep.total = r.steps;
    rep.loss = loss_sum / float(r.accumulation);
    const double t1 = now_ms();
    rep.tokens_per_second = double(tokens) * 1000.0 / std::max(t1 - t0, 1e-3);
    rep.elapsed_s = (t1 - t_start) / 1000.0;
    rep.eta_s = rep.elapsed_s / double(step - start_step) * double(r.steps - step);
    if (step % r.eval_every == 0 || step == r.steps) {
      rep.has_val = true;
      rep.val_loss = validation_loss(r, model, *source, &pool);
    }
    {
      std::ofstream log(csv, std::ios::app);
      char line[256];
      std::snprintf(line, sizeof line, "%lld,%.8g,%.8g,%.8g,%s,%.1f,%.2f\n", (long long)step, rep.lr, rep.loss,
                    rep.grad_norm, rep.has_val ? std::to_string(rep.val_loss).c_str() : "", rep.tokens_per_second,
                    rep.elapsed_s);
      log << line;
    }
    if (step % r.checkpoint_every == 0 || step == r.steps) save_checkpoint(r, model, opt, params, step, out_dir, tokenizer);
    if (on_step) on_step(rep);
  }
}

}  // namespace canvas::train
