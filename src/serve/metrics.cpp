// Prometheus text exposition of canvas serve's metrics.
#include "serve/metrics.h"

#include <algorithm>
#include <cmath>
#include <charconv>

namespace canvas::serve {

namespace {

// A sample value as Prometheus reads it (+Inf spelled so).
std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char text[64];
  const auto end = std::to_chars(text, text + sizeof text, v).ptr;  // the shortest text that reads back as v
  return std::string(text, end);
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

// A label value as the exposition format writes it (backslash, quote and newline escaped).
std::string label_value(const std::string& value) {
  std::string out;
  for (char ch : value) {
    if (ch == '\\' || ch == '"') out += '\\';
    out += ch == '\n' ? std::string("\\n") : std::string(1, ch);
  }
  return out;
}

// Seconds: 5 ms to 5 minutes, the span of a request on a CPU.
std::vector<double> second_buckets() {
  return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), counts_(upper_bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  size_t bucket = 0;
  while (bucket < upper_bounds_.size() && value > upper_bounds_[bucket]) ++bucket;
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

void Histogram::write(std::string& out, const std::string& name) const {
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < upper_bounds_.size() ? number(upper_bounds_[i]) : "+Inf";
    out += name + "_bucket{le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_sum " + number(sum_) + "\n";
  out += name + "_count " + std::to_string(count_) + "\n";
}

ServerMetrics::ServerMetrics() : latency_(second_buckets()), queue_wait_(second_buckets()) {}

void ServerMetrics::request_answered(const std::string& endpoint, int status) {
  const std::string status_class = status >= 100 && status < 600 ? std::to_string(status / 100) + "xx" : "other";
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{endpoint, status_class}];
}

void ServerMetrics::generation_finished(const std::string& model, int64_t prompt_tokens,
                                        int64_t generated_tokens, int64_t passes, double queue_seconds,
                                        double latency_seconds) {
  const uint64_t prompt = uint64_t(std::max<int64_t>(0, prompt_tokens));
  const uint64_t generated = uint64_t(std::max<int64_t>(0, generated_tokens));
  const uint64_t forward = uint64_t(std::max<int64_t>(0, passes));
  std::lock_guard<std::mutex> lock(mutex_);
  prompt_tokens_ += prompt;
  generated_tokens_ += generated;
  forward_passes_ += forward;
  ModelCounts& counts = per_model_[model];
  ++counts.generations;
  counts.prompt_tokens += prompt;
  counts.generated_tokens += generated;
  counts.forward_passes += forward;
  queue_wait_.observe(queue_seconds);
  latency_.observe(latency_seconds);
}

std::string ServerMetrics::text(const std::vector<ModelLoad>& loads) const {
  int64_t queue_depth = 0, running = 0;
  for (const ModelLoad& load : loads) {
    queue_depth += load.queued;
    running += load.running;
  }
  std::string out;
  std::lock_guard<std::mutex> lock(mutex_);
  header(out, "canvas_requests_total", "counter", "HTTP requests answered, by endpoint and status class.");
  for (const auto& [key, count] : requests_)
    out += "canvas_requests_total{endpoint=\"" + key.first + "\",status=\"" + key.second + "\"} " +
           std::to_string(count) + "\n";
  header(out, "canvas_tokens_generated_total", "counter", "Tokens generated (the completions' tokens).");
  out += "canvas_tokens_generated_total " + std::to_string(generated_tokens_) + "\n";
  header(out, "canvas_prompt_tokens_total", "counter", "Prompt tokens of the generations run.");
  out += "canvas_prompt_tokens_total " + std::to_string(prompt_tokens_) + "\n";
  header(out, "canvas_forward_passes_total", "counter", "Forward passes that produced logits.");
  out += "canvas_forward_passes_total " + std::to_string(forward_passes_) + "\n";
  header(out, "canvas_queue_depth", "gauge", "Requests waiting for a generation slot.");
  out += "canvas_queue_depth " + std::to_string(queue_depth) + "\n";
  header(out, "canvas_requests_running", "gauge", "Generations running.");
  out += "canvas_requests_running " + std::to_string(running) + "\n";
  header(out, "canvas_request_latency_seconds", "histogram",
         "Seconds from a generation entering the queue to the end of its decoding.");
  latency_.write(out, "canvas_request_latency_seconds");
  header(out, "canvas_queue_wait_seconds", "histogram", "Seconds a generation waited for a slot.");
  queue_wait_.write(out, "canvas_queue_wait_seconds");
  // Per model (every served model, 0 until it has run a generation).
  struct Series {
    const char* name;
    const char* type;
    const char* help;
    uint64_t ModelCounts::*count;  // null: a gauge of ModelLoad
    int64_t ModelLoad::*load;
  };
  static const Series series[] = {
      {"canvas_model_generations_total", "counter", "Generations finished, by model.",
       &ModelCounts::generations, nullptr},
      {"canvas_model_tokens_generated_total", "counter", "Tokens generated, by model.",
       &ModelCounts::generated_tokens, nullptr},
      {"canvas_model_prompt_tokens_total", "counter", "Prompt tokens of the generations run, by model.",
       &ModelCounts::prompt_tokens, nullptr},
      {"canvas_model_forward_passes_total", "counter", "Forward passes that produced logits, by model.",
       &ModelCounts::forward_passes, nullptr},
      {"canvas_model_queue_depth", "gauge", "Requests waiting for a generation slot, by model.", nullptr,
       &ModelLoad::queued},
      {"canvas_model_requests_running", "gauge", "Generations running, by model.", nullptr,
       &ModelLoad::running},
  };
  for (const Series& s : series) {
    header(out, s.name, s.type, s.help);
    for (const ModelLoad& load : loads) {
      const auto counts = per_model_.find(load.model);
      const std::string value = s.count
                                    ? std::to_string(counts == per_model_.end() ? 0 : counts->second.*s.count)
                                    : std::to_string(load.*s.load);
      out += std::string(s.name) + "{model=\"" + label_value(load.model) + "\"} " + value + "\n";
    }
  }
  return out;
}

}  // namespace canvas::serve
