// A request's append-only events (serve/job.h).
#include "serve/job.h"

namespace canvas::serve {

void EventLog::append(JobEvent e, const std::function<void(const JobEvent&)>& listener) {
  const bool step = std::holds_alternative<event::CanvasStep>(e);
  const JobEvent* appended = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (step && latest_step_ > 0)  // superseded: its readers have copied it or will read the new one
      std::vector<int32_t>().swap(std::get<event::CanvasStep>(events_[latest_step_ - 1]).canvas);
    finished_ = finished_ || std::holds_alternative<event::Finished>(e);
    events_.push_back(std::move(e));
    if (step) latest_step_ = events_.size();
    appended = &events_.back();  // stays put until the next append, which is this thread's
  }
  changed_.notify_all();
  if (listener) listener(*appended);
}

std::vector<JobEvent> EventLog::read(size_t& next) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<JobEvent> out(events_.begin() + std::min(next, events_.size()), events_.end());
  next = events_.size();
  return out;
}

std::vector<JobEvent> EventLog::wait_finished() const {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return finished_; });
  return events_;
}

}  // namespace canvas::serve
