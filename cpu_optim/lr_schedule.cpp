// LrSchedule::at: warmup then cosine, in double so that long runs do not drift.
#include "cpu_optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace ferry::cpu_optim {

float LrSchedule::at(int64_t s) const {
  if (s < warmup_steps) return lr * static_cast<float>(s + 1) / static_cast<float>(warmup_steps);
  if (kind == Kind::Constant) return lr;
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(s - warmup_steps) / static_cast<double>(decay_steps));
  const double cosine = 0.5 * (1.0 + std::cos(3.14159265358979323846 * progress));
  return static_cast<float>(min_lr + (lr - min_lr) * cosine);
}

}  // namespace ferry::cpu_optim
