// Step-level batching of concurrent generations' forward passes, on one thread.
#include "serve/batcher.h"

#include <algorithm>
#include <utility>

#include "decode/events.h"

namespace canvas::serve {

StepBatcher::StepBatcher(const Model& model, ThreadPool* pool, Intake intake)
    : model_(model), pool_(pool), intake_(std::move(intake)) {
  thread_ = std::thread([this] { loop(); });
}

StepBatcher::~StepBatcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_batcher_.notify_all();
  thread_.join();
}

void StepBatcher::wake() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    intake_due_ = true;
  }
  wake_batcher_.notify_one();
}

int64_t StepBatcher::batches() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return batches_;
}
int64_t StepBatcher::passes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return passes_;
}
int64_t StepBatcher::active() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return int64_t(stepped_count_);
}
int64_t StepBatcher::largest_batch() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return largest_batch_;
}

void StepBatcher::admit(std::vector<std::unique_ptr<Sequence>>& added) {
  for (auto& sequence : added) {
    Stepped s;
    s.sequence = std::move(sequence);
    if (s.sequence->next(s.cache, s.requests))
      stepped_.push_back(std::move(s));
    else
      s.sequence->done();
  }
  added.clear();
}

void StepBatcher::run() {
  caches_.clear();
  size_t rows = 0;
  for (Stepped& s : stepped_)
    for (const ForwardRequest& r : s.requests) {
      caches_.push_back(s.cache);
      if (rows < requests_.size())
        requests_[rows] = r;  // reuses the request's memory (its logit rows)
      else
        requests_.push_back(r);
      ++rows;
    }
  try {
    // Decoder passes (DiffusionGemma) and encoder passes share the batch (forward_batch takes both).
    forward_batch(model_, caches_, std::span<const ForwardRequest>(requests_.data(), rows), pool_);
  } catch (...) {
    // Rerun one by one so that only the generation at fault gets the error.
    for (Stepped& s : stepped_) {
      try {
        forward_on(model_, *s.cache, s.requests, pool_);
      } catch (...) {
        s.error = std::current_exception();
      }
    }
  }
}

void StepBatcher::loop() {
  for (;;) {
    bool take = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_batcher_.wait(lock, [&] { return stopping_ || intake_due_ || !stepped_.empty(); });
      if (stopping_ && !intake_due_ && stepped_.empty()) return;
      take = intake_due_;
      intake_due_ = false;
    }
    if (take && intake_) {
      intake_(added_);
      admit(added_);
      std::lock_guard<std::mutex> lock(mutex_);
      stepped_count_ = stepped_.size();
    }
    if (stepped_.empty()) continue;
    run();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++batches_;
      passes_ += int64_t(stepped_.size());
      largest_batch_ = std::max(largest_batch_, int64_t(stepped_.size()));
    }
    // Each sequence takes its step and asks for its next pass; those that end leave, and their slots may
    // take queued requests.
    bool ended = false;
    for (Stepped& s : stepped_) {
      s.sequence->ran(std::exchange(s.error, nullptr));
      if (!s.sequence->next(s.cache, s.requests)) {
        s.sequence->done();
        s.sequence.reset();
        ended = true;
      }
    }
    if (ended) {
      stepped_.erase(std::remove_if(stepped_.begin(), stepped_.end(), [](const Stepped& s) { return !s.sequence; }),
                     stepped_.end());
      std::lock_guard<std::mutex> lock(mutex_);
      stepped_count_ = stepped_.size();
      intake_due_ = true;
    }
  }
}

}  // namespace canvas::serve
