// AdamW with linear warm-up + cosine decay, global-norm gradient clipping and decoupled weight decay.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "train/tape.h"

namespace canvas::train {

struct OptimizerConfig {
  float lr = 1e-3f;
  float min_lr = 1e-4f;        // end of the cosine
  int64_t warmup_steps = 100;
  int64_t total_steps = 1000;  // the cosine reaches min_lr here
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float weight_decay = 0.1f;   // applied to matrices only (not norms, biases or scales)
  float grad_clip = 1.0f;      // global L2 norm; 0 = off
};

// Learning rate at a (0-based) step: linear warm-up to lr, then cosine down to min_lr.
float learning_rate(const OptimizerConfig& config, int64_t step);

class AdamW {
 public:
  AdamW(const OptimizerConfig& config, std::vector<Parameter*> params);
  // Clips, updates every trainable parameter from its gradient (scaled by grad_scale first, e.g.
  // 1 / accumulation steps) and zeroes the gradients. Returns the gradient norm before clipping.
  // With a pool the element-wise update is split over its threads (each element's arithmetic is the
  // same, so the result does not depend on the thread count).
  float step(float grad_scale = 1.f, ThreadPool* pool = nullptr);
  int64_t steps_done() const { return step_; }
  float last_lr() const { return last_lr_; }

  // The moments of parameter i (in the order given to the constructor), for checkpoints.
  std::vector<float>& first_moment(size_t i) { return m_[i]; }
  std::vector<float>& second_moment(size_t i) { return v_[i]; }
  size_t size() const { return params_.size(); }
  void set_steps_done(int64_t step) { step_ = step; }

 private:
  OptimizerConfig config_;
  std::vector<Parameter*> params_;
  std::vector<std::vector<float>> m_, v_;
  int64_t step_ = 0;
  float last_lr_ = 0;
};

}  // namespace canvas::train
