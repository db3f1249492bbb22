// AdamW implementation and its state file.
#include "train/optimizer.h"

#include <cmath>

namespace canvas::train {

float learning_rate(const OptimizerConfig& c, int64_t step) {
  if (c.warmup_steps > 0 && step < c.warmup_steps) return c.lr * float(step + 1) / float(c.warmup_steps);
  const int64_t decay_steps = std::max<int64_t>(1, c.total_steps - c.warmup_steps);
  const double progress = std::min(1.0, double(step - c.warmup_steps) / double(decay_steps));
  return c.min_lr + float(0.5 * (1.0 + std::cos(M_PI * progress))) * (c.lr - c.min_lr);
}

AdamW::AdamW(const OptimizerConfig& config, std::vector<Parameter*> params)
    : config_(config), params_(std::move(params)) {
  for (Parameter* p : params_) {
    m_.emplace_back(size_t(p->size()), 0.f);
    v_.emplace_back(size_t(p->size()), 0.f);
  }
}

float AdamW::step(float grad_scale, ThreadPool* pool) {
  double norm_sq = 0;
  for (Parameter* p : params_) {
    if (!p->trainable || p->grad.empty()) continue;
    for (float& g : p->grad) {
      g *= grad_scale;
      norm_sq += double(g) * double(g);
    }
  }
  const float norm = float(std::sqrt(norm_sq));
  const float clip = (config_.grad_clip > 0 && norm > config_.grad_clip) ? config_.grad_clip / norm : 1.f;
  const float lr = learning_rate(config_, step_);
  last_lr_ = lr;
  ++step_;
  const double bias1 = 1.0 - std::pow(double(config_.beta1), double(step_));
  const double bias2 = 1.0 - std::pow(double(config_.beta2), double(step_));
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter* p = params_[i];
    if (!p->trainable || p->grad.empty()) continue;
    const bool decay = p->shape.size() >= 2;
    float* m = m_[i].data();
    float* v = v_[i].data();
    float* w = p->value.data();
    const float* g = p->grad.data();
    const float b1 = config_.beta1, b2 = config_.beta2;
    const float step_size = float(lr / bias1);
    const float inv_bias2 = float(1.0 / bias2);
    const float wd = decay ? lr * config_.weight_decay : 0.f;
    float* gw = p->grad.data();
    parallel_for(p->size() >= 65536 ? pool : nullptr, p->size(), 16384, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) {
        const float gj = g[j] * clip;
        m[j] = b1 * m[j] + (1 - b1) * gj;
        v[j] = b2 * v[j] + (1 - b2) * gj * gj;
        w[j] -= wd * w[j];
        w[j] -= step_size * m[j] / (std::sqrt(v[j] * inv_bias2) + config_.eps);
        gw[j] = 0.f;  // zero_grad, fused
      }
    });
  }
  return norm;
}

}  // namespace canvas::train
