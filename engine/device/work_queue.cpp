// WorkQueue: a deque guarded by a mutex, drained in order by one thread.
#include "engine/device/work_queue.h"

#include <stdexcept>

namespace ferry::device {

void HostEvent::signal(std::string error) {
  {
    std::lock_guard lock(mutex_);
    done_ = true;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

std::string HostEvent::wait() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return done_; });
  return error_;
}

bool HostEvent::done() const {
  std::lock_guard lock(mutex_);
  return done_;
}

WorkQueue::WorkQueue(std::string name, Trace* trace) : name_(std::move(name)), trace_(trace) {
  if (trace_) track_ = trace_->track(name_);
  thread_ = std::thread([this] { loop(); });
}

WorkQueue::~WorkQueue() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void WorkQueue::push(Task task) {
  {
    std::lock_guard lock(mutex_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_all();
}

void WorkQueue::run(std::string label, std::function<void()> work) {
  push({Task::Kind::Work, std::move(label), std::move(work), nullptr});
}

std::shared_ptr<HostEvent> WorkQueue::record() {
  auto event = std::make_shared<HostEvent>();
  push({Task::Kind::Record, {}, {}, event});
  return event;
}

void WorkQueue::wait(std::shared_ptr<HostEvent> event, std::string label) {
  push({Task::Kind::Wait, std::move(label), {}, std::move(event)});
}

void WorkQueue::drain() {
  const std::string error = record()->wait();
  if (!error.empty()) throw std::runtime_error(error);
}

double WorkQueue::blocked_seconds() const {
  std::lock_guard lock(mutex_);
  return blocked_s_;
}

void WorkQueue::loop() {
  for (;;) {
    Task task;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping, and everything queued has run
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    switch (task.kind) {
      case Task::Kind::Record: task.event->signal(error_); break;
      case Task::Kind::Wait: {
        if (!error_.empty()) break;
        const auto t0 = Trace::Clock::now();
        const std::string error = task.event->wait();
        const auto t1 = Trace::Clock::now();
        if (!error.empty()) error_ = error;
        {
          std::lock_guard lock(mutex_);
          blocked_s_ += std::chrono::duration<double>(t1 - t0).count();
        }
        if (trace_ && t1 - t0 > std::chrono::microseconds(20)) trace_->slice(track_, "wait " + task.label, t0, t1);
        break;
      }
      case Task::Kind::Work: {
        if (!error_.empty()) break;
        const auto t0 = Trace::Clock::now();
        try {
          task.work();
        } catch (const std::exception& e) {
          error_ = name_ + ": " + task.label + ": " + e.what();
        }
        if (trace_) trace_->slice(track_, task.label, t0, Trace::Clock::now());
        break;
      }
    }
  }
}

}  // namespace ferry::device
