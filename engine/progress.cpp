// Progress line formatting (fmt) and terminal detection.
#include "engine/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>

#include "memory/host_buffer.h"
#include "foundation/console.h"

namespace ferry::engine {

std::string format_duration(double seconds) {
  const auto s = static_cast<long>(std::llround(std::max(0.0, seconds)));
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

std::string format_step_figures(const StepFigures& f) {
  const std::string step = fmt::format("step {:.3f} s (predicted {:.3f})", f.step_s, f.predicted_s);
  if (!f.offloaded) return step;
  return fmt::format("h2d {} d2h {} | stall {:.0f}% | {}", memory::format_bytes(f.h2d_bytes), memory::format_bytes(f.d2h_bytes),
                     f.step_s > 0 ? 100.0 * f.stall_s / f.step_s : 0.0, step);
}

Progress::Progress(std::FILE* out) : out_(out), tty_(out && isatty(fileno(out)) != 0) {}

Progress::~Progress() { finish(); }

void Progress::update(int step, int total, float loss, double tokens_per_s, double elapsed_s, const std::string& extra) {
  if (!out_) return;
  const std::lock_guard lock(mutex_);
  const double eta = step > 0 ? elapsed_s / step * (total - step) : 0.0;
  const std::string line = fmt::format("step {:>{}}/{} | loss {:.4f} | {:.0f} tok/s | {}{} elapsed | ETA {}", step,
                                       std::to_string(total).size(), total, loss, tokens_per_s,
                                       extra.empty() ? "" : extra + " | ", format_duration(elapsed_s), format_duration(eta));
  if (tty_) {
    console::print(out_, "\r\033[2K{}", line);
    dirty_ = true;
  } else {
    console::print(out_, "{}\n", line);
  }
  console::flush(out_);
}

void Progress::message(const std::string& line) {
  if (!out_) return;
  const std::lock_guard lock(mutex_);
  finish();
  console::print(out_, "{}\n", line);
  console::flush(out_);
}

void Progress::finish() {
  if (!out_) return;
  const std::lock_guard lock(mutex_);
  if (dirty_) console::print(out_, "\n");
  dirty_ = false;
  console::flush(out_);
}

}  // namespace ferry::engine
