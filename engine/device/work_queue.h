// WorkQueue: one thread running tasks in the order they were queued: the host's model of a stream.
// Events mark points in a queue; other queues (or threads) wait on them. A task that throws fails its
// queue: later tasks are skipped and every later event carries the error, so nothing waits forever.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "engine/device/trace.h"

namespace ferry::device {

class HostEvent {
 public:
  void signal(std::string error);
  // Blocks until signalled; returns the error of the work before the event ("" when it succeeded).
  std::string wait();
  bool done() const;

 private:
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::string error_;
};

class WorkQueue {
 public:
  // trace: null, or where every task becomes a slice on this queue's track.
  WorkQueue(std::string name, Trace* trace);
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  const std::string& name() const { return name_; }
  // Queues work; label names it in errors ("<queue>: <label>: <what went wrong>") and in the trace.
  void run(std::string label, std::function<void()> work);
  // An event done once everything queued so far has run.
  std::shared_ptr<HostEvent> record();
  // Later tasks run only once `event` is done; a failed event fails this queue too.
  void wait(std::shared_ptr<HostEvent> event, std::string label);
  // Blocks until everything queued so far has run; throws the queue's error if it failed.
  void drain();
  // Seconds this queue's thread has spent blocked in wait() tasks (stalls), since construction.
  double blocked_seconds() const;

 private:
  struct Task {
    enum class Kind { Work, Record, Wait } kind;
    std::string label;
    std::function<void()> work;
    std::shared_ptr<HostEvent> event;
  };
  void push(Task task);
  void loop();

  std::string name_;
  Trace* trace_;
  int track_ = -1;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> tasks_;
  bool stopping_ = false;
  std::string error_;       // first failure; touched only by the worker thread
  double blocked_s_ = 0;    // guarded by mutex_
  std::thread thread_;
};

}  // namespace ferry::device
