// The training loop: batches from a data source, an objective, AdamW, validation, checkpoints.
#include "train/trainer.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <type_traits>

#include "core/appendf.h"
#include "core/error.h"
#include "core/output_file.h"
#include "core/timer.h"
#include "io/gguf.h"
#include "io/input_file.h"
#include "model/model.h"
#include "train/data.h"
#include "train/model_text.h"
#include "train/objectives.h"
#include "train/task.h"
#include "train/train_model.h"

namespace canvas::train {
namespace {

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

constexpr int64_t kMaxSteps = 1000000000;
// f32 weights, gradients and two AdamW moments: 16 bytes a parameter, 32 GiB at this bound.
constexpr int64_t kMaxParameters = int64_t(1) << 31;
// Tokens in one micro-batch (batch_size x sequence length); its logits alone take 1 KiB a token.
constexpr int64_t kMaxBatchTokens = int64_t(1) << 22;
// 3: the architecture keys are left out of runs whose architecture comes from a file (init_from /
// model_config), and the draft keys are in. Files with an older header are checked against the config
// text they stored.
constexpr const char* kIdentityHeader = "canvas run identity 3\n";
// The keys of a run config that describe the architecture (ignored when a model file gives it).
constexpr const char* kArchitectureKeys[] = {"layers", "hidden", "heads", "kv_heads", "ffn", "position_embedding",
                                             "rope_theta"};
bool is_architecture_key(const std::string& key) {
  for (const char* k : kArchitectureKeys)
    if (key == k) return true;
  return false;
}

// A generic config key: how it is read (with its range) and printed, and whether it changes what the
// run computes (then it is part of the resume identity).
struct RunKey {
  const char* name;
  bool defines_run;
  std::function<void(RunConfig&, const std::string& value, const std::string& where)> set;
  std::function<std::string(const RunConfig&)> get;
};

// `field` maps a RunConfig to the member the key sets.
template <typename Field>
RunKey int_key(const char* name, Field field, int64_t lo, int64_t hi, bool defines_run = true) {
  return {name, defines_run,
          [=](RunConfig& r, const std::string& v, const std::string& where) {
            auto& x = field(r);
            x = std::remove_reference_t<decltype(x)>(config_int(v, where, name, lo, hi));
          },
          [=](const RunConfig& r) { return std::to_string(field(const_cast<RunConfig&>(r))); }};
}
template <typename Field>
RunKey number_key(const char* name, Field field, double lo, double hi, bool lo_open = false, bool hi_open = false) {
  return {name, true,
          [=](RunConfig& r, const std::string& v, const std::string& where) {
            field(r) = float(config_number(v, where, name, lo, hi, lo_open, hi_open));
          },
          [=](const RunConfig& r) { return format_setting(field(const_cast<RunConfig&>(r))); }};
}
template <typename Field>
RunKey text_key(const char* name, Field field) {
  return {name, true, [=](RunConfig& r, const std::string& v, const std::string&) { field(r) = v; },
          [=](const RunConfig& r) { return field(const_cast<RunConfig&>(r)); }};
}

// Every generic key. Upper bounds are far above what this trainer can run, and keep sizes and their
// products inside int64.
const std::vector<RunKey>& run_keys() {
  constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();
  static const std::vector<RunKey> keys = {
      text_key("objective", [](RunConfig& r) -> auto& { return r.objective; }),
      int_key("layers", [](RunConfig& r) -> auto& { return r.layers; }, 1, 1024),
      int_key("hidden", [](RunConfig& r) -> auto& { return r.hidden; }, 1, 65536),
      int_key("heads", [](RunConfig& r) -> auto& { return r.heads; }, 1, 1024),
      int_key("kv_heads", [](RunConfig& r) -> auto& { return r.kv_heads; }, 1, 1024),
      int_key("ffn", [](RunConfig& r) -> auto& { return r.ffn; }, 1, 1 << 20),
      {"position_embedding", true,
       [](RunConfig& r, const std::string& v, const std::string& where) {
         r.position_embedding = config_bool(v, where, "position_embedding");
       },
       [](const RunConfig& r) { return std::string(r.position_embedding ? "true" : "false"); }},
      number_key("rope_theta", [](RunConfig& r) -> auto& { return r.rope_theta; }, 0, 1e12, true),
      number_key("init_std", [](RunConfig& r) -> auto& { return r.init_std; }, 0, 1, true),
      text_key("init_from", [](RunConfig& r) -> auto& { return r.init_from; }),
      text_key("model_config", [](RunConfig& r) -> auto& { return r.model_config; }),
      {"init_layers", true,
       [](RunConfig& r, const std::string& v, const std::string&) { r.init_layers = config_list(v); },
       [](const RunConfig& r) {
         std::string s;
         for (const std::string& l : r.init_layers) s += (s.empty() ? "" : ",") + l;
         return s;
       }},
      int_key("eval_examples", [](RunConfig& r) -> auto& { return r.eval_examples; }, 1, 1 << 20),
      number_key("lr", [](RunConfig& r) -> auto& { return r.optimizer.lr; }, 0, 1),
      number_key("min_lr", [](RunConfig& r) -> auto& { return r.optimizer.min_lr; }, 0, 1),
      int_key("warmup", [](RunConfig& r) -> auto& { return r.optimizer.warmup_steps; }, 0, kMaxSteps),
      number_key("weight_decay", [](RunConfig& r) -> auto& { return r.optimizer.weight_decay; }, 0, 1),
      number_key("beta1", [](RunConfig& r) -> auto& { return r.optimizer.beta1; }, 0, 1, false, true),
      number_key("beta2", [](RunConfig& r) -> auto& { return r.optimizer.beta2; }, 0, 1, false, true),
      number_key("adam_eps", [](RunConfig& r) -> auto& { return r.optimizer.eps; }, 0, 1, true),
      number_key("grad_clip", [](RunConfig& r) -> auto& { return r.optimizer.grad_clip; }, 0, 1e6),
      int_key("steps", [](RunConfig& r) -> auto& { return r.steps; }, 1, kMaxSteps),
      int_key("batch_size", [](RunConfig& r) -> auto& { return r.batch_size; }, 1, 1 << 16),
      int_key("accumulation", [](RunConfig& r) -> auto& { return r.accumulation; }, 1, 1 << 16),
      number_key("mask_eps", [](RunConfig& r) -> auto& { return r.mask_eps; }, 0, 1, true, true),
      int_key("block_length", [](RunConfig& r) -> auto& { return r.block_length; }, 1, 1 << 20),
      number_key("ar_weight", [](RunConfig& r) -> auto& { return r.ar_weight; }, 0, 1000),
      int_key("draft_length", [](RunConfig& r) -> auto& { return r.draft_length; }, 0, 1024),
      number_key("draft_share", [](RunConfig& r) -> auto& { return r.draft_share; }, 0, 1),
      number_key("draft_noisy_first", [](RunConfig& r) -> auto& { return r.draft_noisy_first; }, 0, 1),
      {"self_conditioning", true,
       [](RunConfig& r, const std::string& v, const std::string& where) {
         r.self_conditioning = config_bool(v, where, "self_conditioning");
       },
       [](const RunConfig& r) { return std::string(r.self_conditioning ? "true" : "false"); }},
      int_key("seed", [](RunConfig& r) -> auto& { return r.seed; }, 0, kMaxInt64),
      int_key("eval_every", [](RunConfig& r) -> auto& { return r.eval_every; }, 1, kMaxInt64, false),
      int_key("checkpoint_every", [](RunConfig& r) -> auto& { return r.checkpoint_every; }, 1, kMaxInt64, false),
      int_key("threads", [](RunConfig& r) -> auto& { return r.threads; }, 0, 4096, false),  // 0: every core
  };
  return keys;
}

const RunKey* find_run_key(const std::string& name) {
  for (const RunKey& k : run_keys())
    if (name == k.name) return &k;
  return nullptr;
}

ModelConfig model_config(const RunConfig& r, const DataSource& source) {
  const int64_t seq_len = source.sequence_length();
  ModelConfig c;
  c.arch = r.objective == "ar" ? "llama" : "llada";
  c.name = "canvas " + r.task + " " + r.objective;
  c.vocab = source.vocab_size();
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
  c.mask_token = r.objective == "uniform" ? -1 : source.mask_token();  // uniform-state diffusion has no mask token
  check(r.objective == "uniform" || c.mask_token >= 0, "the tokenizer has no mask token, which objective = " + r.objective + " needs");
  c.eos_token = source.eos_token();
  c.uniform_state = r.objective == "uniform";
  c.self_conditioning = r.self_conditioning;
  return c;
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
    o.draft_length = r.draft_length;
    o.draft_share = r.draft_share;
    o.draft_noisy_first = r.draft_noisy_first;
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

// Whether a config's text sets an architecture key.
bool names_architecture_key(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    line = config_trim(line.substr(0, line.find('#')));
    const std::string key = config_trim(line.substr(0, line.find('=')));
    if (is_architecture_key(key)) return true;
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

struct Validation {
  float loss = 0;
  std::vector<TaskMetric> metrics;
};

// One training step's micro-batches (accumulation of them, batch_size examples each, drawn with the step's
// seeds): their gradients accumulated into the parameters, the optimizer not stepped. The one loop of both
// run_training and time_training_steps.
struct StepGradients {
  float loss_sum = 0;           // the micro-batches' losses, summed
  int64_t tokens = 0;           // rows of input
  double attention_pairs = 0;   // sequences x length^2
};
StepGradients accumulate_step(const RunConfig& r, TrainModel& model, const DataSource& source, int64_t step,
                              ThreadPool* pool) {
  StepGradients out;
  for (int64_t micro = 0; micro < r.accumulation; ++micro) {
    Rng rng(r.seed * 0x9E3779B97F4A7C15ull + uint64_t(step) * 1000 + uint64_t(micro));
    std::vector<Example> examples;
    for (int64_t i = 0; i < r.batch_size; ++i) examples.push_back(source.sample(rng));
    const ObjectiveBatch ob = make_batch(r, model.config(), examples, rng);
    Tape tape(pool);
    const Var logits = objective_logits(r, model, ob, rng, tape);
    const Var loss = cross_entropy(tape, logits, ob.targets, ob.weights, ob.normaliser);
    out.loss_sum += tape.value(loss)[0];
    tape.backward(loss);
    out.tokens += ob.input.rows();
    out.attention_pairs += double(ob.input.n_sequences) * double(ob.input.length) * double(ob.input.length);
  }
  return out;
}

// Mean loss over the validation set (per scored token, weighted like training), with fixed corruption,
// and the task's metrics of the most likely token at every scored position.
Validation validate(const RunConfig& r, TrainModel& model, const DataSource& source, ThreadPool* pool) {
  Rng rng(r.seed + 0x5eed);
  const auto& val = source.validation();
  double total = 0, norm = 0;
  std::vector<ScoredSequence> scored;
  for (size_t at = 0; at < val.size(); at += size_t(r.batch_size)) {
    std::vector<Example> batch(val.begin() + int64_t(at), val.begin() + int64_t(std::min(val.size(), at + size_t(r.batch_size))));
    const ObjectiveBatch ob = make_batch(r, model.config(), batch, rng);
    Tape tape(pool);
    tape.set_grad_enabled(false);
    const Var logits = objective_logits(r, model, ob, rng, tape);
    const Var loss = cross_entropy(tape, logits, ob.targets, ob.weights, ob.normaliser);
    total += double(tape.value(loss)[0]) * ob.normaliser;
    norm += ob.normaliser;
    const int64_t vocab = tape.size(logits) / ob.input.rows();
    for (int64_t s = 0; s < ob.input.n_sequences; ++s) {
      ScoredSequence seq;
      for (int64_t row = s * ob.input.length; row < (s + 1) * ob.input.length; ++row) {
        if (!(ob.weights[size_t(row)] > 0)) continue;
        const float* z = tape.value(logits) + row * vocab;
        seq.targets.push_back(ob.targets[size_t(row)]);
        seq.predicted.push_back(int32_t(std::max_element(z, z + vocab) - z));
      }
      scored.push_back(std::move(seq));
    }
  }
  model.zero_grad();
  return {float(total / std::max(norm, 1.0)), r.task_module->validation_metrics(scored)};
}

void save_checkpoint(const RunConfig& r, const DataSource& source, const TrainModel& model, AdamW& opt, const std::vector<Parameter*>& params,
                     int64_t step, const std::string& out_dir) {
  std::vector<std::pair<std::string, GgufValue>> extra = source.tokenizer_metadata(r.objective != "uniform");
  extra.emplace_back("training.step", GgufValue::u64(uint64_t(step)));
  extra.emplace_back("training.config", GgufValue::string(r.source_text));
  extra.emplace_back("training.identity", GgufValue::string(run_identity(r)));
  for (auto& entry : r.task_module->model_metadata()) extra.push_back(std::move(entry));
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

// "key: <whose> has A, this run B; ..." for every key the two identities disagree on.
std::string identity_difference(const std::string& stored, const std::string& current,
                                const std::string& whose = "the checkpoint's run") {
  auto settings = [](const std::string& id) {
    std::map<std::string, std::string> m;
    std::istringstream in(id);
    std::string line;
    while (std::getline(in, line)) {
      const size_t eq = line.find(" = ");
      if (eq != std::string::npos) m[line.substr(0, eq)] = line.substr(eq + 3);
    }
    return m;
  };
  const auto a = settings(stored), b = settings(current);
  std::set<std::string> keys;
  for (const auto& [k, v] : a) keys.insert(k);
  for (const auto& [k, v] : b) keys.insert(k);
  std::string out;
  for (const std::string& k : keys) {
    const auto x = a.find(k), y = b.find(k);
    const std::string was = x == a.end() ? "(not set)" : "'" + x->second + "'";
    const std::string now = y == b.end() ? "(not set)" : "'" + y->second + "'";
    if (was != now) out += (out.empty() ? "" : "; ") + k + ": " + whose + " has " + was + ", this run " + now;
  }
  return out.empty() ? "settings differ" : out;
}

// The identity of the run that wrote a checkpoint or model.gguf. Files written before the identity listed
// every setting hold a shorter one; theirs is rebuilt from the config text they stored, and `notice` says
// what could not be checked (a --steps given to that run was not recorded).
std::string stored_identity(const GgufFile& file, const std::string& path, std::string& notice) {
  std::string stored = file.get_string("training.identity", "");
  if (stored.rfind(kIdentityHeader, 0) == 0) return stored;
  try {
    stored = run_identity(parse_run_config(file.get_string("training.config", ""), path + " (its stored config)"));
  } catch (const Error& e) {
    throw Error(path + " was made by an older canvas and its settings cannot be checked (" + e.what() +
                "); train into a new --out directory (init_from = its model.gguf keeps the weights)");
  }
  notice = path + " predates checkpoints that record every setting; checked against the config it stored "
                  "(a --steps given to the run that wrote it was not recorded)";
  return stored;
}

// True when `path` (a checkpoint or model.gguf in --out) was written by the run `id`; else `why` says
// how it differs, or that it records no run of canvas train (a model from elsewhere, an unreadable file).
bool written_by_run(const std::string& path, const std::string& id, std::string& why) {
  try {
    const auto file = GgufFile::open(path);
    if (!file->find("training.identity") && !file->find("training.config")) {
      why = "it records no canvas train run";
      return false;
    }
    std::string notice;
    const std::string stored = stored_identity(*file, path, notice);
    if (stored == id) return true;
    why = identity_difference(stored, id, "its run");
  } catch (const Error& e) {
    why = e.what();
  }
  return false;
}

int64_t load_checkpoint(const RunConfig& r, std::vector<Parameter*>& params, AdamW& opt, const std::string& path,
                        std::string& notice) {
  auto file = GgufFile::open(path);
  const std::string stored = stored_identity(*file, path, notice);
  const std::string id = run_identity(r);
  check(stored == id, path + " was made with a different configuration: " + identity_difference(stored, id) +
                          "; train into a new --out directory, delete the checkpoint, or replace the run with "
                          "--force");
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
  if (!file_exists(path)) return;
  const std::string text = read_regular_file_bounded(path, kMaxCorpusBytes, "training log", "kMaxCorpusBytes");
  std::string kept;
  size_t begin = 0;
  bool header = true;
  for (size_t end = text.find('\n'); end != std::string::npos; begin = end + 1, end = text.find('\n', begin)) {
    const std::string line = text.substr(begin, end - begin);
    if (header || std::strtoll(line.c_str(), nullptr, 10) <= step) kept += line + "\n";
    header = false;
  }
  write_file(path, kept);  // replaced atomically: a kill here never loses the log
}

}  // namespace

RunConfig parse_run_config(const std::string& text, const std::string& origin) {
  struct Line {
    std::string key, value, where;
  };
  std::vector<Line> lines;
  std::map<std::string, int> first_line;  // key -> the line that set it
  std::istringstream in(text);
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line = line.substr(0, hash);
    line = config_trim(line);
    if (line.empty()) continue;
    const size_t eq = line.find('=');
    const std::string where = origin + ":" + std::to_string(line_no);
    check(eq != std::string::npos, where + ": expected 'key = value'");
    const std::string key = config_trim(line.substr(0, eq));
    // A repeated key would silently take its last value: say where both are instead.
    const auto [it, fresh] = first_line.emplace(key, line_no);
    check(fresh, where + ": key '" + key + "' is set twice, on lines " + std::to_string(it->second) + " and " +
                     std::to_string(line_no) + " (keep one)");
    lines.push_back({key, config_trim(line.substr(eq + 1)), where});
  }
  check(!lines.empty(), origin + ": no settings (an empty config would silently train the defaults)");

  RunConfig r;
  r.source_text = text;
  std::set<std::string> seen;
  for (const Line& l : lines) {  // the task first: it decides which other keys exist
    seen.insert(l.key);
    if (l.key == "task") r.task = l.value;
  }
  std::shared_ptr<Task> task = make_task(r.task, origin);
  for (const Line& l : lines) {
    if (l.key == "task") continue;
    const RunKey* k = find_run_key(l.key);
    if (k) k->set(r, l.value, l.where);
    else if (!task->set(l.key, l.value, l.where))
      throw Error(l.where + ": unknown key '" + l.key + "' (for task = " + r.task + ")");
  }
  // Without its own min_lr, a run whose lr is below the default floor decays to its lr (lr = 0 stays 0).
  if (!seen.count("min_lr")) r.optimizer.min_lr = std::min(r.optimizer.min_lr, r.optimizer.lr);
  check(r.objective == "masked" || r.objective == "uniform" || r.objective == "ar",
        origin + ": objective must be masked, uniform or ar");
  check(!r.self_conditioning || r.objective == "uniform", origin + ": self_conditioning needs objective = uniform");
  check(r.hidden % r.heads == 0 && r.heads % r.kv_heads == 0, origin + ": hidden must divide into heads, heads into kv_heads");
  check((r.hidden / r.heads) % 2 == 0, origin + ": the head dimension must be even (RoPE)");
  // Each key is in range, but together they could still ask for more memory than any machine has.
  const int64_t kv_dim = r.hidden / r.heads * r.kv_heads;
  const int64_t parameters = r.layers * (2 * r.hidden * r.hidden + 2 * r.hidden * kv_dim + 3 * r.hidden * r.ffn);
  check(parameters <= kMaxParameters, origin + ": layers, hidden and ffn make about " + std::to_string(parameters) +
                                          " parameters; the trainer takes at most " + std::to_string(kMaxParameters));
  check(r.optimizer.min_lr <= r.optimizer.lr, origin + ": min_lr (" + format_setting(r.optimizer.min_lr) +
                                                  ") is above lr (" + format_setting(r.optimizer.lr) + ")");
  if (r.optimizer.warmup_steps > r.steps) {  // the learning rate would never reach lr
    const int64_t shortened = r.steps / 10;    // the default schedule's share (100 of 1000 steps)
    r.notices.push_back(origin + ": the warm-up of " + std::to_string(r.optimizer.warmup_steps) +
                        " steps is longer than the " + std::to_string(r.steps) + "-step run; shortened to " +
                        std::to_string(shortened) + " steps");
    r.optimizer.warmup_steps = shortened;
  }
  if (!r.init_layers.empty()) {
    check(!r.init_from.empty(), origin + ": init_layers needs init_from");
    check(int64_t(r.init_layers.size()) == r.layers,
          origin + ": init_layers names " + std::to_string(r.init_layers.size()) + " layers, the model has " +
              std::to_string(r.layers));
    for (const std::string& l : r.init_layers)
      check(l == "new" || (!l.empty() && l.size() < 6 && l.find_first_not_of("0123456789") == std::string::npos),
            origin + ": init_layers entries are donor layer numbers or 'new', got '" + l + "'");
  }
  task->finish(r.objective, origin);
  r.task_module = std::move(task);
  r.optimizer.total_steps = r.steps;
  return r;
}

RunConfig load_run_config(const std::string& path) {
  const std::string text = read_regular_file_bounded(path, kMaxJsonBytes, "config", "kMaxJsonBytes");
  check(!text.empty(), "config " + path + " is empty");
  return parse_run_config(text, path);
}

std::string set_total_steps(RunConfig& r, int64_t steps) {
  check(steps > 0 && steps <= kMaxSteps, "the number of steps must be in [1, " + std::to_string(kMaxSteps) + "], got " +
                                             std::to_string(steps));
  std::string notice;
  const int64_t warmup = r.optimizer.warmup_steps;
  if (warmup > steps) {
    const int64_t scaled = std::min(steps, int64_t(std::llround(double(warmup) * double(steps) / double(r.steps))));
    notice = "the warm-up of " + std::to_string(warmup) + " steps is longer than the " + std::to_string(steps) +
             "-step run; shortened to " + std::to_string(scaled) + " steps (the config's share of " +
             std::to_string(warmup) + "/" + std::to_string(r.steps) + ")";
    r.optimizer.warmup_steps = scaled;
  }
  r.steps = steps;
  r.optimizer.total_steps = steps;
  return notice;
}

std::string run_identity(const RunConfig& r) {
  check(r.task_module != nullptr, "run_identity: the config has no task (use parse_run_config)");
  std::string id = kIdentityHeader;
  id += "task = " + r.task + "\n";
  // A model file's architecture wins over the keys (run_model_config): they would misdescribe the run.
  const bool from_file = !r.init_from.empty() || !r.model_config.empty();
  for (const RunKey& k : run_keys())
    if (k.defines_run && !(from_file && is_architecture_key(k.name))) id += std::string(k.name) + " = " + k.get(r) + "\n";
  for (const auto& [key, value] : r.task_module->settings()) id += key + " = " + value + "\n";
  return id;
}

ModelConfig run_model_config(const RunConfig& r, const DataSource& source) {
  const int64_t seq_len = source.sequence_length();
  const std::string& path = !r.init_from.empty() ? r.init_from : r.model_config;
  if (path.empty()) return model_config(r, source);
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
  if (r.init_from.empty()) {
    // Fresh weights: the vocabulary is the data's (the file's own tokenizer, unless the task brings
    // one, e.g. text with `tokenizer = FILE`).
    c.vocab = source.vocab_size();
    c.eos_token = source.eos_token();
    if (c.layer_style != LayerStyle::Gemma4) c.mask_token = c.uniform_state ? -1 : source.mask_token();
    check(r.objective != "masked" || c.mask_token >= 0,
          "the tokenizer has no mask token, which objective = " + r.objective + " needs");
  } else {
    // The donor's embeddings fix the vocabulary; the data must be in it. Released checkpoints pad their
    // embedding past the tokenizer (Qwen2.5 / Dream: 151,665 tokens in 152,064 rows): more rows than the
    // data's tokens is normal, and those rows are kept as they are (PaddingRows).
    check(source.vocab_size() <= c.vocab,
          where + ": its embedding has " + std::to_string(c.vocab) + " rows, fewer than the task data's " +
              std::to_string(source.vocab_size()) + " tokens (" + r.task +
              " data is tokenized with the source's tokenizer only for task = text without a tokenizer key)");
  }
  c.context_length = std::max(c.context_length, seq_len);
  if (c.n_positions > 0) c.context_length = c.n_positions;
  return c;
}

namespace {
// The run's data, from its task module. A model file (init_from / model_config) with another vocabulary
// than canvas's bytes brings its tokenizer, which the text task tokenizes with unless it names its own.
std::unique_ptr<DataSource> make_run_source(const RunConfig& r) {
  TaskContext context;
  context.objective = r.objective;
  context.seed = r.seed;
  context.eval_examples = r.eval_examples;
  const std::string& model_file = !r.init_from.empty() ? r.init_from : r.model_config;
  if (!model_file.empty()) {
    const ModelConfig file_config = source_config(model_file);
    if (file_config.vocab != kByteVocab) {
      context.model_tokenizer = model_file;
      context.model_vocab = int32_t(file_config.vocab);
      context.model_mask_token = int32_t(file_config.mask_token);
      context.model_eos_token = int32_t(file_config.eos_token);
    }
  }
  return r.task_module->make_source(context);
}
}  // namespace

namespace {
// The embedding and head rows past the data's vocabulary (a donor's padding) restored after every
// optimizer step, so that fine-tuning leaves them exactly as the source had them: no token of the data
// reaches them as input, and the softmax's push on them as outputs (and weight decay) would otherwise
// drift rows the source's tokenizer never produces.
class PaddingRows {
 public:
  PaddingRows(const std::vector<Parameter*>& params, int64_t data_vocab) {
    for (Parameter* p : params) {
      if ((p->name != "token_embd.weight" && p->name != "output.weight") || p->shape.size() != 2) continue;
      const int64_t rows = p->shape[1], cols = p->shape[0];
      if (data_vocab >= rows) continue;
      const size_t from = size_t(data_vocab * cols);
      saved_.push_back({p, std::vector<float>(p->value.begin() + std::ptrdiff_t(from), p->value.end()), from});
    }
  }
  void restore() const {
    for (const Saved& s : saved_) std::copy(s.values.begin(), s.values.end(), s.param->value.begin() + std::ptrdiff_t(s.from));
  }

 private:
  struct Saved {
    Parameter* param;
    std::vector<float> values;
    size_t from;
  };
  std::vector<Saved> saved_;
};
}  // namespace

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

namespace {

bool all_finite(const std::vector<Parameter*>& params) {
  for (const Parameter* p : params)
    for (float v : p->value)
      if (!std::isfinite(v)) return false;
  return true;
}

}  // namespace

void run_training(const RunConfig& r, const std::string& out_dir, const std::function<void(const StepReport&)>& on_step,
                  int64_t stop_after, const std::function<void(const std::string&)>& on_notice, bool force) {
  check(r.task_module != nullptr, "run_training: the config has no task (use parse_run_config)");
  ::mkdir(out_dir.c_str(), 0755);
  check(file_exists(out_dir), "cannot create output directory " + out_dir);
  const std::string ckpt = out_dir + "/checkpoint.gguf", model_file = out_dir + "/model.gguf";
  // The same run resumes from its checkpoint. Another run's files (its checkpoint, or a model.gguf without
  // one: a finished run whose checkpoint was deleted, a model copied there) are replaced only with force.
  bool resume = file_exists(ckpt);
  std::string why;
  if (resume && force && !written_by_run(ckpt, run_identity(r), why)) {
    resume = false;
    if (on_notice) on_notice("--force: replacing the run in " + out_dir + " (" + why + ")");
  } else if (!resume && file_exists(model_file) && !written_by_run(model_file, run_identity(r), why)) {
    check(force, model_file + " belongs to another run (" + why + "); train into a new --out directory, or give "
                 "--force to replace it");
    if (on_notice) on_notice("--force: replacing " + model_file + " (" + why + ")");
  }
  ThreadPool pool(r.threads);

  const std::unique_ptr<DataSource> source = make_run_source(r);
  check(r.objective != "uniform" || r.block_length < source->sequence_length(),
        "block_length " + std::to_string(r.block_length) + " must be shorter than the task's sequences (" +
            std::to_string(source->sequence_length()) + " tokens)");
  check(r.batch_size * source->sequence_length() <= kMaxBatchTokens,
        "batch_size " + std::to_string(r.batch_size) + " x " + std::to_string(source->sequence_length()) +
            " tokens is more than the " + std::to_string(kMaxBatchTokens) +
            " tokens a micro-batch may hold; use accumulation for larger batches");
  const ModelConfig mc = run_model_config(r, *source);
  TrainModel model = initial_model(r, mc);
  std::vector<Parameter*> params = model.parameters();
  AdamW opt(r.optimizer, params);
  const PaddingRows padding(params, source->vocab_size());

  const std::vector<std::string> metric_names = r.task_module->metric_names();
  // The replaced run's files go before this run writes any (after the model is built: init_from may be
  // the very model.gguf being replaced), so that a run stopped early never leaves them mixed with its own.
  if (!resume && force) {
    std::remove(ckpt.c_str());
    std::remove(model_file.c_str());
  }
  const std::string csv = out_dir + "/train.csv";
  int64_t step = 0;
  if (resume) {
    std::string legacy_notice;
    step = load_checkpoint(r, params, opt, ckpt, legacy_notice);
    truncate_log(csv, step);
    if (on_notice && !legacy_notice.empty()) on_notice(legacy_notice);
    if (on_notice)
      on_notice("resumed from step " + std::to_string(step) + " of " + std::to_string(r.steps) + " (" + ckpt + ")");
  } else {
    std::string header = "step,lr,loss,grad_norm,val_loss,tokens_per_second,elapsed_s";
    for (const std::string& name : metric_names) header += "," + name;
    write_file(csv, header + "\n");
  }
  write_file(out_dir + "/config.cfg", r.source_text);

  // A diverged step stops the run before it writes anything: the checkpoint on disk stays the last good one.
  auto stop_if_diverged = [&](bool finite, int64_t at, const std::string& what) {
    check(finite, "step " + std::to_string(at) + ": " + what + " is not finite (the run diverged; try a lower lr); " +
                      (file_exists(ckpt) ? ckpt + " keeps the last good checkpoint" : "no checkpoint was written"));
  };
  const double t_start = now_ms();
  const int64_t start_step = step;
  while (step < r.steps && (stop_after <= 0 || step < stop_after)) {
    const double t0 = now_ms();
    const StepGradients g = accumulate_step(r, model, *source, step, &pool);
    const float loss_sum = g.loss_sum;
    const int64_t tokens = g.tokens;
    stop_if_diverged(std::isfinite(loss_sum), step + 1, "the loss");
    StepReport rep;
    rep.grad_norm = opt.step(1.f / float(r.accumulation), &pool);
    padding.restore();
    stop_if_diverged(std::isfinite(rep.grad_norm), step + 1, "the gradient norm");
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
      Validation v = validate(r, model, *source, &pool);
      rep.val_loss = v.loss;
      rep.val_metrics = std::move(v.metrics);
    }
    // Also where --stop-after stops, so the run resumes from there rather than from the last multiple.
    const bool save = step % r.checkpoint_every == 0 || step == r.steps || step == stop_after;
    if (save) stop_if_diverged(all_finite(params), step, "a weight");
    {
      std::ofstream log(csv, std::ios::app);
      char line[256];
      std::snprintf(line, sizeof line, "%lld,%.8g,%.8g,%.8g,%s,%.1f,%.2f", (long long)step, rep.lr, rep.loss,
                    rep.grad_norm, rep.has_val ? std::to_string(rep.val_loss).c_str() : "", rep.tokens_per_second,
                    rep.elapsed_s);
      log << line;
      for (size_t i = 0; i < metric_names.size(); ++i) {
        if (rep.has_val && i < rep.val_metrics.size()) std::snprintf(line, sizeof line, ",%.6f", rep.val_metrics[i].value);
        else std::snprintf(line, sizeof line, ",");
        log << line;
      }
      log << "\n";
    }
    if (save) save_checkpoint(r, *source, model, opt, params, step, out_dir);
    if (on_step) on_step(rep);
  }
}

}  // namespace canvas::train

namespace canvas::train {

TrainingTiming time_training_steps(const RunConfig& r, int64_t steps, ThreadPool& pool,
                                   const std::function<void(int64_t)>& before_step) {
  check(steps > 0, "time_training_steps: steps must be positive");
  const std::unique_ptr<DataSource> source = make_run_source(r);
  TrainingTiming out;
  out.model = run_model_config(r, *source);
  TrainModel model = initial_model(r, out.model);
  std::vector<Parameter*> params = model.parameters();
  for (const Parameter* p : params) {
    out.parameters += p->size();
    // Lookup tables are not products, except the token table when it is also the (tied) output head.
    const bool lookup = p->name == "token_embd.weight" || p->name == "position_embd.weight";
    if (p->shape.size() == 2 && p->shape[1] > 1 && (!lookup || (out.model.tied_output && p->name == "token_embd.weight")))
      out.matmul_weights_per_token += p->size();
  }
  AdamW opt(r.optimizer, params);
  const PaddingRows padding(params, source->vocab_size());
  for (int64_t step = 0; step < steps; ++step) {
    if (before_step) before_step(step);
    const std::clock_t cpu0 = std::clock();
    const double t0 = now_ms();
    const StepGradients g = accumulate_step(r, model, *source, step, &pool);
    opt.step(1.f / float(r.accumulation), &pool);
    padding.restore();
    out.step_ms.push_back(now_ms() - t0);
    out.step_cpu_ms.push_back(double(std::clock() - cpu0) * 1000.0 / CLOCKS_PER_SEC);
    out.step_tokens.push_back(g.tokens);
    out.step_attention_pairs.push_back(g.attention_pairs);
    out.step_loss.push_back(g.loss_sum / float(r.accumulation));
  }
  return out;
}

std::string step_progress_line(const StepReport& r, float last_val) {
  const auto hms = [](double seconds) {
    char buf[32];
    const long t = long(seconds);
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
    return std::string(buf);
  };
  const int width = 24;
  const int filled = r.total > 0 ? int(double(width) * double(r.step) / double(r.total)) : 0;
  char val[32] = "-";
  if (last_val >= 0) std::snprintf(val, sizeof val, "%.4f", double(last_val));
  std::string line;
  appendf(line, "[%s%s] %lld/%lld loss %.4f val %s lr %.2e |g| %.2f %.0f tok/s elapsed %s ETA %s   ",
          std::string(size_t(filled), '#').c_str(), std::string(size_t(width - filled), '.').c_str(),
          (long long)r.step, (long long)r.total, double(r.loss), val, double(r.lr), double(r.grad_norm),
          r.tokens_per_second, hms(r.elapsed_s).c_str(), hms(r.eta_s).c_str());
  if (r.has_val) {
    for (const TaskMetric& m : r.val_metrics) appendf(line, "%s %.4f ", m.name.c_str(), m.value);
    line += "\n";
  }
  return line;
}

}  // namespace canvas::train
