// Step-level batching: the forward passes of concurrently running generations gathered into one
// batched pass per step, run by one thread that also steps the generations it drives itself.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "core/thread_pool.h"
#include "model/model.h"

namespace canvas::serve {

// The batcher's thread runs every step as one forward_batch over the generations it steps: each Sequence
// gives its next pass, the thread runs them all as one batch and hands each its logits back (AR steps
// directly; diffusion and verify generations run on fibers that pause in their passes: serve/engine.cpp).
// So each step costs one pass over the weights however many requests are active, generations join and leave
// between steps, and each one's outputs are bit for bit those of decoding it alone (forward_batch's
// guarantee).
class StepBatcher {
 public:
  // A generation that the batcher's thread steps; every call is on that thread.
  class Sequence {
   public:
    virtual ~Sequence() = default;
    // Its next pass (requests on one cache, run in order within the batch); false once it has ended.
    virtual bool next(KvCache*& cache, std::span<const ForwardRequest>& requests) = 0;
    // Its pass ran (error: the pass failed for it; a batch that fails is rerun one generation at a time).
    virtual void ran(std::exception_ptr error) = 0;
    // It has ended (next() said false) and is dropped after this call.
    virtual void done() = 0;
  };
  // Called on the batcher's thread, without its lock, after wake(): appends the sequences to step from now
  // on (the engine's queued requests).
  using Intake = std::function<void(std::vector<std::unique_ptr<Sequence>>& added)>;

  StepBatcher(const Model& model, ThreadPool* pool, Intake intake = {});
  ~StepBatcher();  // the sequences still held are dropped unfinished: end them first
  StepBatcher(const StepBatcher&) = delete;
  StepBatcher& operator=(const StepBatcher&) = delete;

  // Asks the thread to call `intake` before its next step (a request was queued or a slot freed).
  void wake();

  // Counters since start (for /health and the tests): batches run, passes in them (one per generation per
  // step), the largest batch, and the generations stepping now.
  int64_t batches() const;
  int64_t passes() const;
  int64_t active() const;
  int64_t largest_batch() const;

 private:
  struct Stepped {
    std::unique_ptr<Sequence> sequence;
    KvCache* cache = nullptr;
    std::span<const ForwardRequest> requests;  // its pending pass
    std::exception_ptr error;
  };
  void loop();
  // Asks each new sequence for its first pass (ending those that have none).
  void admit(std::vector<std::unique_ptr<Sequence>>& added);
  void run();  // the batch: every stepped sequence's pending pass

  const Model& model_;
  ThreadPool* pool_;
  Intake intake_;
  mutable std::mutex mutex_;
  std::condition_variable wake_batcher_;
  bool intake_due_ = false, stopping_ = false;
  size_t stepped_count_ = 0;      // stepped_.size(), readable under mutex_
  int64_t batches_ = 0, passes_ = 0, largest_batch_ = 0;
  // The batcher thread's own: the sequences it steps and the batch's inputs (kept to reuse their memory).
  std::vector<Stepped> stepped_;
  std::vector<std::unique_ptr<Sequence>> added_;
  std::vector<KvCache*> caches_;
  std::vector<ForwardRequest> requests_;
  std::thread thread_;  // last: it runs on the members above
};

}  // namespace canvas::serve
