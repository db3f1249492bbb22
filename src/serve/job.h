// One request of canvas serve and its events: what the engine appends as the request runs (started, text,
// canvas steps, finished with its output), each answer reading them at its own pace.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include "decode/events.h"
#include "decode/generation.h"

namespace canvas::serve {

// What one request asks for (the prompt as ids in Job::prompt), already checked by the API layer.
using GenerationSettings = GenerationRequest;

namespace event {

// A slot took the request: how it is decoded.
struct Started {
  DecodeMode mode = DecodeMode::Diffusion;
  std::string reason;          // why this mode (ModeChoice::reason)
  bool uniform_state = false;  // the canvas holds noise, not masks
  double queued_ms = 0;        // waiting for the slot
};

// A piece of the final text, in order: the deltas of a request concatenate to Finished::text.
struct TextDelta {
  std::string text;
  // The generated region's first tokens whose text the deltas up to this one hold whole (-1: an infilled
  // document, whose text is not its tokens in order).
  int64_t tokens = 0;
  // With logprobs asked: the tokens whose text this delta completes, each with its log-probability, in order
  // (over a request they are Finished::tokens and Finished::logprobs).
  std::vector<TokenLogprob> logprobs;
};

// A decoding step: the generated region as it stands (masked positions hold the mask id).
struct CanvasStep {
  int64_t step = 0;    // counted from 1
  int64_t passes = 0;  // forward passes that produced logits so far
  // Only the latest step keeps its canvas (EventLog::append empties the one before): a long run would
  // otherwise hold a canvas per token, and every reader wants only the newest.
  std::vector<int32_t> canvas;
  int64_t drafts_from = -1;  // verify: positions from here on are drafts being checked (else -1)
};

// The request's end, last of its events: its output, or why there is none.
struct Finished {
  // The text (OpenAI's words: with a suffix, what fills the gap) and why it ended: `finish_reason` in
  // OpenAI's words ("stop", "length", "cancelled"), `ended` the generator's own (eos, stop, ...).
  std::string text, finish_reason, ended;
  std::vector<int32_t> tokens;          // the text's tokens (no end token, no padding)
  std::vector<TokenLogprob> logprobs;   // with logprobs asked: one per token of `tokens`
  std::vector<std::string> fills;       // infilling: each hole's text
  std::vector<int32_t> canvas;          // the generated region at the end
  int64_t prompt_tokens = 0, completion_tokens = 0, passes = 0;
  double decode_ms = 0;
  std::string error;                    // the generation failed (or, with `dropped`, never ran)
  bool cancelled_by_client = false;
  bool dropped = false;                 // the engine stopped before a slot took it (an HTTP 503)
  std::exception_ptr refused;           // a front end refused it before the engine took it (its answer)
};

}  // namespace event

using JobEvent = std::variant<event::Started, event::TextDelta, event::CanvasStep, event::Finished>;

// A request's events, append-only: Started first (unless it never ran), Finished last. Appended on the
// engine's thread (or by a front end that refuses the request), read by its answer on another.
class EventLog {
 public:
  // Appends `e`, then calls `listener` with it (without the lock held: it must return at once). One thread
  // appends at a time: the engine's, or before the engine has the request the front end's.
  void append(JobEvent e, const std::function<void(const JobEvent&)>& listener);
  // The events from `next` on; `next` moves past them.
  std::vector<JobEvent> read(size_t& next) const;
  // Blocks until Finished is appended; all the events.
  std::vector<JobEvent> wait_finished() const;

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::vector<JobEvent> events_;
  size_t latest_step_ = 0;  // + 1: the CanvasStep that keeps its canvas (0: none)
  bool finished_ = false;
};

// One request's life: queued, running, finished, as its events say.
struct Job {
  std::vector<int32_t> prompt;
  GenerationSettings settings;
  std::string model;  // the id of the model that decodes it (for the log line)
  // Called after every event, on the appending thread: it must return at once (the HTTP layer wakes the
  // connection's event loop). Set before submit.
  std::function<void(const JobEvent&)> listener;
  EventLog events;
  std::atomic<bool> cancel{false};  // set by the HTTP layer when the client is gone

  void append(JobEvent e) { events.append(std::move(e), listener); }
};

}  // namespace canvas::serve
