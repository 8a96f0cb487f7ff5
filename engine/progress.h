// Progress: the one-line training status. On a terminal it rewrites itself in place; otherwise
// (a log file, CI) it prints one plain line per update. Thread-safe (start-up stages report from a watcher).
#pragma once

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

namespace ferry::engine {

class Progress {
 public:
  explicit Progress(std::FILE* out);  // null: silent
  ~Progress();
  // step counts from 1; elapsed in seconds since training started; extra: more fields, e.g. what moved.
  void update(int step, int total, float loss, double tokens_per_s, double elapsed_s, const std::string& extra = {});
  // Prints a line that must stay (an evaluation, a warning) without garbling the status line.
  void message(const std::string& line);
  void finish();

 private:
  std::FILE* out_;
  bool tty_;
  bool dirty_ = false;  // a status line is on screen without a newline
  std::recursive_mutex mutex_;  // message() finishes the status line through finish()
};

std::string format_duration(double seconds);  // "1:02:03" or "2:03"

// A step's figures on the status line: its time beside the prediction, and, when the plan offloads parameters,
// the bytes each way and the share of the step the compute waited for them. A resident run's line leaves them
// out: it moves only the batch, and its "0.0 MiB | stall 0%" said nothing.
struct StepFigures {
  bool offloaded = false;
  int64_t h2d_bytes = 0, d2h_bytes = 0;
  double stall_s = 0, step_s = 0, predicted_s = 0;
};
std::string format_step_figures(const StepFigures& step);

}  // namespace ferry::engine
