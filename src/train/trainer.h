// A training run: configuration (a small key = value file under configs/), the loop, validation,
// atomic checkpoints and bit-exact resume.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "train/optimizer.h"
#include "train/task.h"
#include "train/train_model.h"

namespace canvas::train {

struct RunConfig {
  // What the run learns: a registered task (train/task.h), with its own keys, data and metrics. The default,
  // sudoku, is canvas's demo task, which the program registers (sudoku/sudoku_task.h).
  std::string task = "sudoku";
  std::shared_ptr<const Task> task_module;  // set by parse_run_config
  std::string objective = "masked";  // masked | uniform | ar
  // Model (a llada-shaped bidirectional transformer for masked, the same shape causal for ar).
  int64_t layers = 4, hidden = 128, heads = 4, kv_heads = 4, ffn = 512;
  bool position_embedding = true;
  float rope_theta = 10000.f;
  float init_std = 0.02f;
  // Start from this model's weights: any model canvas loads (a GGUF, or a Hugging Face directory such
  // as DiffusionGemma's). Its architecture wins over the keys above (they are ignored with a notice),
  // except that a llama / llada source follows the objective (AR <-> diffusion adaptation); text is
  // tokenized with its tokenizer.
  std::string init_from;
  // Train from scratch with the architecture of this file (a Hugging Face config.json or its directory,
  // or a GGUF), its weights unused; text is tokenized with its tokenizer. Ignored with init_from.
  std::string model_config;
  // With init_from, where each layer comes from (depth growth): a donor layer index, or "new" for a
  // fresh layer whose residual output projections start at zero, so it begins as the identity.
  // Empty: layer i from donor layer i.
  std::vector<std::string> init_layers;
  int64_t eval_examples = 256;       // validation set size
  // Optimisation.
  OptimizerConfig optimizer;
  int64_t steps = 1000, batch_size = 32, accumulation = 1;
  float mask_eps = 1e-3f;            // masked and uniform: t ~ U(mask_eps, 1]
  int64_t block_length = 32;         // uniform: the canvas the decoder denoises
  float ar_weight = 1.f;             // uniform: weight of the encoder's next-token loss
  bool self_conditioning = false;    // uniform: DiffusionGemma's two-pass self-conditioning
  // uniform: the share of examples laid out as draft-and-verify's draft (objectives.h), and its length.
  int64_t draft_length = 0;          // 0: no draft examples
  float draft_share = 0.5f;
  float draft_noisy_first = 0.f;     // share of draft examples whose first token is noise too (verify --overlap)
  uint64_t seed = 1;
  int64_t eval_every = 100, checkpoint_every = 100;
  int threads = 0;
  std::string source_text;           // the config file's text, stored in checkpoints
  std::vector<std::string> notices;  // what parsing changed for the run to make sense (shown to the user)
};

// Parses "key = value" lines ('#' starts a comment). `task` picks the task (whatever line it is on);
// keys the generic part does not know go to the task. Unknown keys, a key set twice (naming both
// lines), values out of range (every key has one) and a config without any key are errors naming the
// file and line. A warm-up longer than
// the run is shortened to a tenth of it, with a notice in `notices`.
RunConfig parse_run_config(const std::string& text, const std::string& origin);
// The same from a file, which must be a regular, non-empty file.
RunConfig load_run_config(const std::string& path);

// Sets the run's total steps (e.g. from --steps), which the cosine schedule follows. A warm-up that
// would no longer fit is shortened in proportion (warm-up / steps stays what the config says);
// returns a notice saying so, else "".
std::string set_total_steps(RunConfig& config, int64_t steps);

// Every setting that changes what the run computes (model, data, task, optimiser, schedule, seed),
// one "key = value" per line; threads, eval_every and checkpoint_every are left out, as they change
// neither the weights nor the data. A checkpoint resumes only under the same identity.
std::string run_identity(const RunConfig& config);

// The architecture a run trains: the config's own llama-shaped model, or that of init_from / model_config
// (see RunConfig), with the objective's attention mode, for the task's data `source` (its sequence length;
// its vocabulary, except with init_from, whose vocabulary the data must be in).
ModelConfig run_model_config(const RunConfig& config, const DataSource& source);

// The weights a run starts from: a random initialisation of `model` (seeded by config.seed), then, with
// config.init_from, the donor's tensors by name, layer by layer as config.init_layers maps them.
TrainModel initial_model(const RunConfig& config, const ModelConfig& model);

struct StepReport {
  int64_t step = 0, total = 0;
  float loss = 0, grad_norm = 0, lr = 0;
  double tokens_per_second = 0, elapsed_s = 0, eta_s = 0;
  bool has_val = false;
  float val_loss = 0;
  std::vector<TaskMetric> val_metrics;  // the task's, with has_val
};

// `canvas train`'s progress line of a step: a bar, step/total, loss, the latest validation loss
// (`last_val`, "-" while negative), lr, gradient norm, tokens/s, elapsed and ETA as h:mm:ss; a step with
// validation adds its task metrics and ends the line ("\n"), others end in spaces for the next "\r".
std::string step_progress_line(const StepReport& r, float last_val);

// Trains into out_dir (created if needed): out_dir/checkpoint.gguf (weights + AdamW moments + step,
// written atomically), out_dir/model.gguf (weights only, loadable by `canvas generate`),
// out_dir/train.csv (step, lr, loss, grad_norm, val_loss, tokens_per_second, elapsed_s, then the
// task's validation metrics) and out_dir/config.cfg. An existing checkpoint in out_dir is resumed from (on_notice hears from which
// step); the run then continues exactly as if it had not been interrupted. Files of another run in
// out_dir (a checkpoint under other settings; a model.gguf, without a checkpoint, that this run did not
// write) are an Error before anything is written, unless `force`: then the run starts afresh and replaces
// them (on_notice says so). stop_after > 0 ends the run after that step (for tests). A step whose loss,
// gradient norm or weights are not finite stops the run with an error before anything is written, so
// the last checkpoint stays the last good one.
void run_training(const RunConfig& config, const std::string& out_dir, const std::function<void(const StepReport&)>& on_step,
                  int64_t stop_after = 0, const std::function<void(const std::string&)>& on_notice = nullptr,
                  bool force = false);

}  // namespace canvas::train

namespace canvas::train {

// Training steps timed in memory, for `canvas bench --train`: the data, model and AdamW that
// run_training builds from `config`, then `steps` full steps (batch, forward, backward, optimizer), each
// timed. Nothing is written to disk (no output directory, checkpoint or log) and no validation runs.
struct TrainingTiming {
  ModelConfig model;
  int64_t parameters = 0;               // every trainable value
  int64_t matmul_weights_per_token = 0;  // weights of the linear layers one token passes through (head included)
  std::vector<double> step_ms;          // wall time of each step
  std::vector<double> step_cpu_ms;      // CPU time of the process (all threads) during each step
  std::vector<int64_t> step_tokens;     // batch rows of each step (all micro-batches)
  std::vector<double> step_attention_pairs;  // sum over sequences of length^2 (query, key pairs per head)
  std::vector<float> step_loss;
};
// before_step(i), when given, runs before step i outside its timing (e.g. to sample a roof in between).
TrainingTiming time_training_steps(const RunConfig& config, int64_t steps, ThreadPool& pool,
                                   const std::function<void(int64_t)>& before_step = nullptr);

}  // namespace canvas::train
