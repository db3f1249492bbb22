// Step-level batching: the forward passes of concurrently running generations gathered into one
// batched pass per step.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "core/thread_pool.h"
#include "model/model.h"

namespace canvas::serve {

// Generations run on their own threads and call forward() (through DecodeCallbacks::forward) as if
// they were alone. The batcher's thread waits until every generation that has joined is either waiting
// in forward() or gone, then runs all waiting passes as one forward_batch and wakes them. So each step
// costs one pass over the weights however many requests are active, generations join and leave between
// steps, and each one's outputs are bit for bit those of decoding it alone (forward_batch's guarantee).
class StepBatcher {
 public:
  StepBatcher(const Model& model, ThreadPool* pool);
  ~StepBatcher();
  StepBatcher(const StepBatcher&) = delete;
  StepBatcher& operator=(const StepBatcher&) = delete;

  // A generation registers before its first pass and leaves after its last one (Membership does both).
  void join();
  void leave();
  class Membership {
   public:
    explicit Membership(StepBatcher& batcher) : batcher_(batcher) { batcher_.join(); }
    ~Membership() { batcher_.leave(); }
    Membership(const Membership&) = delete;
    Membership& operator=(const Membership&) = delete;

   private:
    StepBatcher& batcher_;
  };

  // One pass of a joined generation (several requests on its cache run in order within the batch, as
  // forward_on runs them); blocks until the batch holding it has run. Rethrows the pass's error (a batch
  // that fails is rerun one generation at a time, so an error reaches only its own generation).
  void forward(KvCache& cache, std::span<const ForwardRequest> requests);

  // Counters since start (for /health and the tests).
  int64_t batches() const;
  int64_t passes() const;
  int64_t active() const;
  int64_t largest_batch() const;

 private:
  struct Waiter {
    KvCache* cache;
    std::span<const ForwardRequest> requests;
    bool done = false;
    std::exception_ptr error;
  };
  void loop();
  void run(std::vector<Waiter*>& group);

  const Model& model_;
  ThreadPool* pool_;
  mutable std::mutex mutex_;
  std::condition_variable wake_batcher_, wake_waiters_;
  int64_t active_ = 0;
  std::vector<Waiter*> waiting_;
  bool stopping_ = false;
  int64_t batches_ = 0, passes_ = 0, largest_batch_ = 0;
  std::thread thread_;
};

}  // namespace canvas::serve
