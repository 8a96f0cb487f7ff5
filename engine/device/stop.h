// The process-wide stop request (Ctrl-C, SIGTERM, SIGHUP): set from a signal handler; the trainer finishes its step
// and checkpoints, and a wait that might not end by itself (a throttled copy) gives up instead of hanging.
#pragma once

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>

namespace ferry::device {

// Work abandoned because a stop was requested; the CLI reports it with exit status 130.
struct Interrupted : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// After a stop request, throttled copies may go on this long: a step whose copies end by then finishes
// (and is checkpointed); one that cannot is abandoned, so a stop takes well under a second.
constexpr std::chrono::milliseconds kStopGrace{500};

// Async-signal-safe: sets the flag and notes the time once.
void request_stop() noexcept;
bool stop_requested() noexcept;
// The flag itself, for engine::TrainOptions::stop.
const std::atomic<bool>& stop_flag() noexcept;
// For tests: forget a request.
void clear_stop_request() noexcept;

// Whether a stop now has work to finish (a run is training: finish the step, checkpoint). While none
// has, a signal handler may end the process at once: start-up has nothing to save.
bool stop_has_work_to_finish() noexcept;
class StopFinishesWork {  // marks a scope (the training loop) as such work
 public:
  StopFinishesWork() noexcept;
  ~StopFinishesWork();
  StopFinishesWork(const StopFinishesWork&) = delete;
  StopFinishesWork& operator=(const StopFinishesWork&) = delete;
};

// Sleeps until `until`, in short slices; throws Interrupted ("<what>: ...") as soon as a stop is requested
// and `done_by` (when the work this sleep belongs to ends) lies beyond the request plus kStopGrace.
void sleep_until_unless_stopped(std::chrono::steady_clock::time_point until, std::chrono::steady_clock::time_point done_by,
                                const std::string& what);

}  // namespace ferry::device
