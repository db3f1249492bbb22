// A fiber: a function that runs on a stack of its own and can pause itself, so that a thread interleaves
// several long computations without a thread each. Serve's engine runs a diffusion or verify generation as
// one: the generation pauses in each forward pass, the engine's step thread runs the pass batched with the
// other generations' passes and resumes it. Switching costs a register save, not a thread hand-off.
#pragma once
#include <cstddef>
#include <exception>
#include <functional>

namespace canvas {

class Fiber {
 public:
  // body runs on the first resume(); stack_bytes of address space are reserved for it (pages are committed
  // as it touches them) with a guard page below.
  explicit Fiber(std::function<void()> body, size_t stack_bytes = size_t(8) << 20);
  // A fiber must have finished (resume() returned false) or never started: its stack's objects are not
  // destroyed otherwise. Checked: an unfinished fiber aborts the process.
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // Runs the body until it calls suspend() (true) or returns (false, and every later call is false). An
  // exception that escapes the body is rethrown here, once, as the fiber finishes. Not from inside a fiber.
  bool resume();
  bool finished() const { return state_ == State::Finished; }

  // From inside a running fiber's body: back to the resume() that ran it; returns at the next resume().
  static void suspend();
  static bool inside();  // this thread is running a fiber's body now

 private:
  enum class State { Fresh, Running, Suspended, Finished };
  static void entry(unsigned low, unsigned high);
  void switch_out(bool final_switch);

  std::function<void()> body_;
  std::exception_ptr error_;
  State state_ = State::Fresh;
  void* stack_ = nullptr;      // the mapping, guard page first
  size_t mapped_ = 0;
  void* context_ = nullptr;    // the fiber's saved registers (ucontext_t)
  void* caller_ = nullptr;     // the resuming thread's (ucontext_t)
  // Sanitizer bookkeeping of the stack being left (address sanitizer's fiber annotations).
  const void* caller_stack_ = nullptr;
  size_t caller_stack_size_ = 0;
  void* fake_stack_ = nullptr;
};

}  // namespace canvas
