// A training run: configuration (a small key = value file under configs/), the loop, validation,
// atomic checkpoints and bit-exact resume.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "train/optimizer.h"
#include "train/train_model.h"

namespace canvas::train {

struct RunConfig {
  std::string task = "sudoku";       // sudoku | text
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
  // Data.
  int64_t seq_len = 128;             // text
  std::string text_corpus = "bible";
  double val_fraction = 0.02;
  int sudoku_min_clues = 22, sudoku_max_clues = 50;
  std::string sudoku_format;         // infill | sequence (default: infill for masked, sequence for ar)
  std::string sudoku_states = "random";  // random | singles | decoder: see make_sudoku_source
  float sudoku_hidden_weight = 1;        // decoder states: loss weight of hidden-single cells
  std::vector<std::string> held_out;  // Sudoku files whose puzzles training must never see
  int64_t eval_examples = 256;
  // Optimisation.
  OptimizerConfig optimizer;
  int64_t steps = 1000, batch_size = 32, accumulation = 1;
  float mask_eps = 1e-3f;            // masked and uniform: t ~ U(mask_eps, 1]
  int64_t block_length = 32;         // uniform: the canvas the decoder denoises
  float ar_weight = 1.f;             // uniform: weight of the encoder's next-token loss
  bool self_conditioning = false;    // uniform: DiffusionGemma's two-pass self-conditioning
  uint64_t seed = 1;
  int64_t eval_every = 100, checkpoint_every = 100;
  int threads = 0;
  std::string source_text;           // the config file's text, stored in checkpoints
};

// Parses "key = value" lines ('#' starts a comment); unknown keys and bad values are errors naming the
// line.
RunConfig parse_run_config(const std::string& text, const std::string& origin);
RunConfig load_run_config(const std::string& path);

// The architecture a run trains: the config's own llama-shaped model, or that of init_from / model_config
// (see RunConfig), with the objective's attention mode; seq_len: the data's sequence length.
ModelConfig run_model_config(const RunConfig& config, int64_t seq_len);

// The weights a run starts from: a random initialisation of `model` (seeded by config.seed), then, with
// config.init_from, the donor's tensors by name, layer by layer as config.init_layers maps them.
TrainModel initial_model(const RunConfig& config, const ModelConfig& model);

struct StepReport {
  int64_t step = 0, total = 0;
  float loss = 0, grad_norm = 0, lr = 0;
  double tokens_per_second = 0, elapsed_s = 0, eta_s = 0;
  bool has_val = false;
  float val_loss = 0;
};

// Trains into out_dir (created if needed): out_dir/checkpoint.gguf (weights + AdamW moments + step,
// written atomically), out_dir/model.gguf (weights only, loadable by `canvas generate`),
// out_dir/train.csv (step, lr, loss, grad_norm, val_loss, tokens_per_second, elapsed_s) and
// out_dir/config.cfg. An existing checkpoint in out_dir is resumed from; the run then continues exactly
// as if it had not been interrupted. stop_after > 0 ends the run after that step (for tests).
void run_training(const RunConfig& config, const std::string& out_dir, const std::function<void(const StepReport&)>& on_step,
                  int64_t stop_after = 0);

}  // namespace canvas::train
