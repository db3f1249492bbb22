// Step-level batching of concurrent generations' forward passes.
#include "serve/batcher.h"

#include "decode/events.h"

namespace canvas::serve {

StepBatcher::StepBatcher(const Model& model, ThreadPool* pool) : model_(model), pool_(pool) {
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

void StepBatcher::join() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++active_;
}

void StepBatcher::leave() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    --active_;
  }
  wake_batcher_.notify_all();  // the others may all be waiting for this one
}

void StepBatcher::forward(KvCache& cache, std::span<const ForwardRequest> requests) {
  Waiter waiter{&cache, requests, false, nullptr};
  std::unique_lock<std::mutex> lock(mutex_);
  waiting_.push_back(&waiter);
  wake_batcher_.notify_all();
  wake_waiters_.wait(lock, [&] { return waiter.done; });
  if (waiter.error) std::rethrow_exception(waiter.error);
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
  return active_;
}
int64_t StepBatcher::largest_batch() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return largest_batch_;
}

void StepBatcher::run(std::vector<Waiter*>& group) {
  std::vector<KvCache*> caches;
  std::vector<ForwardRequest> requests;
  for (Waiter* w : group)
    for (const ForwardRequest& r : w->requests) {
      caches.push_back(w->cache);
      requests.push_back(r);
    }
  try {
    forward_batch(model_, caches, requests, pool_);
  } catch (...) {
    // Rerun one by one so that only the request at fault gets the error.
    for (Waiter* w : group) {
      try {
        forward_on(model_, *w->cache, w->requests, pool_);
      } catch (...) {
        w->error = std::current_exception();
      }
    }
  }
}

void StepBatcher::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_batcher_.wait(lock, [&] {
      return stopping_ || (!waiting_.empty() && int64_t(waiting_.size()) >= active_);
    });
    if (stopping_ && waiting_.empty()) return;
    std::vector<Waiter*> batch;
    batch.swap(waiting_);
    lock.unlock();
    // Decoder passes (DiffusionGemma) and encoder passes share the batch (forward_batch takes both).
    run(batch);
    lock.lock();
    ++batches_;
    passes_ += int64_t(batch.size());
    largest_batch_ = std::max(largest_batch_, int64_t(batch.size()));
    for (Waiter* w : batch) w->done = true;
    wake_waiters_.notify_all();
  }
}

}  // namespace canvas::serve
