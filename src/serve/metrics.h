// canvas serve's counters, gauges and histograms, written at GET /metrics in Prometheus's text exposition
// format (version 0.0.4). Every method is thread-safe.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace canvas::serve {

// A Prometheus histogram: observations counted into cumulative buckets (le = each upper bound, then +Inf),
// with their sum and count.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  // The _bucket, _sum and _count lines of `name` (the caller holds the lock that guards this histogram).
  void write(std::string& out, const std::string& name) const;

 private:
  std::vector<double> upper_bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative); the last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// One served model's gauges, read from its engine when /metrics is scraped.
struct ModelLoad {
  std::string model;  // its id
  int64_t queued = 0, running = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();
  // One answered HTTP request: its endpoint (the path, "other" for unknown paths) and status code.
  void request_answered(const std::string& endpoint, int status);
  // One finished generation of `model` (its id): its prompt and generated tokens, forward passes, seconds
  // waiting in the queue and seconds from entering the queue to the end of decoding.
  void generation_finished(const std::string& model, int64_t prompt_tokens, int64_t generated_tokens,
                           int64_t passes, double queue_seconds, double latency_seconds);
  // The exposition text: the server's totals, then the canvas_model_* series labelled by model, with the
  // gauges of each model's engine read now.
  std::string text(const std::vector<ModelLoad>& loads) const;

 private:
  struct ModelCounts {
    uint64_t generations = 0, generated_tokens = 0, prompt_tokens = 0, forward_passes = 0;
  };
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, std::string>, uint64_t> requests_;  // (endpoint, "2xx") -> count
  uint64_t generated_tokens_ = 0, prompt_tokens_ = 0, forward_passes_ = 0;
  std::map<std::string, ModelCounts> per_model_;
  Histogram latency_, queue_wait_;
};

}  // namespace canvas::serve
