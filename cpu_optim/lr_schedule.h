// Learning-rate schedule: linear warmup, then constant or cosine decay to min_lr.
#pragma once

#include <cstdint>
#include <string>

namespace ferry::cpu_optim {

struct LrSchedule {
  enum class Kind { Constant, Cosine };
  Kind kind = Kind::Cosine;
  float lr = 3e-4f;       // peak
  float min_lr = 3e-5f;   // floor of the cosine
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;

  // lr for step s (0-based): (s+1)/warmup * lr during warmup; then the decay over the remaining steps.
  float at(int64_t s) const;
};

}  // namespace ferry::cpu_optim
