// Fibers on POSIX ucontext, with address sanitizer's stack-switch annotations so that its checks follow
// the switches.
#include "core/fiber.h"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "core/error.h"

#if defined(__SANITIZE_ADDRESS__)
#define CANVAS_ASAN_FIBERS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CANVAS_ASAN_FIBERS 1
#endif
#endif

#ifdef CANVAS_ASAN_FIBERS
#include <sanitizer/common_interface_defs.h>
#endif

namespace canvas {

namespace {

thread_local Fiber* current_fiber = nullptr;

// Address sanitizer must be told which stack a switch goes to (else it reports the other stack's frames
// as overflows); without it these do nothing.
void start_switch([[maybe_unused]] void** fake_stack_save, [[maybe_unused]] const void* bottom,
                  [[maybe_unused]] size_t size) {
#ifdef CANVAS_ASAN_FIBERS
  __sanitizer_start_switch_fiber(fake_stack_save, bottom, size);
#endif
}

void finish_switch([[maybe_unused]] void* fake_stack_save, [[maybe_unused]] const void** bottom_old,
                   [[maybe_unused]] size_t* size_old) {
#ifdef CANVAS_ASAN_FIBERS
  __sanitizer_finish_switch_fiber(fake_stack_save, bottom_old, size_old);
#endif
}

size_t page_size() { return size_t(sysconf(_SC_PAGESIZE)); }

}  // namespace

Fiber::Fiber(std::function<void()> body, size_t stack_bytes) : body_(std::move(body)) {
  const size_t page = page_size();
  const size_t usable = (std::max(stack_bytes, size_t(64) << 10) + page - 1) / page * page;
  mapped_ = usable + page;  // the guard page below the stack (stacks grow down)
  stack_ = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK,
                -1, 0);
  if (stack_ == MAP_FAILED) {
    stack_ = nullptr;
    throw Error("cannot reserve a fiber's stack (" + std::to_string(mapped_ >> 10) + " KiB)");
  }
  mprotect(stack_, page, PROT_NONE);
  auto* context = new ucontext_t();
  context_ = context;
  caller_ = new ucontext_t();
  check(getcontext(context) == 0, "getcontext failed");
  context->uc_stack.ss_sp = static_cast<char*>(stack_) + page;
  context->uc_stack.ss_size = usable;
  context->uc_link = nullptr;  // the body never returns through here: entry() switches out itself
  const auto self = reinterpret_cast<uintptr_t>(this);
  makecontext(context, reinterpret_cast<void (*)()>(&Fiber::entry), 2, unsigned(self & 0xffffffffu),
              unsigned(uint64_t(self) >> 32));
}

Fiber::~Fiber() {
  if (state_ == State::Running || state_ == State::Suspended) {
    std::fprintf(stderr, "canvas: internal error: a fiber was destroyed before it finished\n");
    std::abort();
  }
  delete static_cast<ucontext_t*>(context_);
  delete static_cast<ucontext_t*>(caller_);
  if (stack_) munmap(stack_, mapped_);
}

bool Fiber::inside() { return current_fiber != nullptr; }

bool Fiber::resume() {
  check(current_fiber == nullptr, "Fiber::resume called from inside a fiber");
  if (state_ == State::Finished) return false;
  state_ = State::Running;
  current_fiber = this;
  void* fake_stack = nullptr;
  auto* context = static_cast<ucontext_t*>(context_);
  start_switch(&fake_stack, context->uc_stack.ss_sp, context->uc_stack.ss_size);
  swapcontext(static_cast<ucontext_t*>(caller_), context);
  finish_switch(fake_stack, nullptr, nullptr);
  current_fiber = nullptr;
  if (state_ != State::Finished) return true;
  body_ = nullptr;  // what it captured goes now
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  return false;
}

void Fiber::suspend() {
  Fiber* self = current_fiber;
  check(self != nullptr, "Fiber::suspend called outside a fiber");
  self->state_ = State::Suspended;
  self->switch_out(false);
  // Resumed: resume() set the state and current_fiber.
}

void Fiber::switch_out(bool final_switch) {
  // A finished fiber's fake stack is released (a null save slot says so).
  start_switch(final_switch ? nullptr : &fake_stack_, caller_stack_, caller_stack_size_);
  if (final_switch) {
    setcontext(static_cast<ucontext_t*>(caller_));
  } else {
    swapcontext(static_cast<ucontext_t*>(context_), static_cast<ucontext_t*>(caller_));
    finish_switch(fake_stack_, &caller_stack_, &caller_stack_size_);
  }
}

void Fiber::entry(unsigned low, unsigned high) {
  Fiber* self = reinterpret_cast<Fiber*>(uintptr_t(low) | (uintptr_t(high) << 32));
  finish_switch(nullptr, &self->caller_stack_, &self->caller_stack_size_);
  try {
    self->body_();
  } catch (...) {
    self->error_ = std::current_exception();
  }
  self->state_ = State::Finished;
  self->switch_out(true);
}

}  // namespace canvas
