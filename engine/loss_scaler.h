// LossScaler: fp16's dynamic loss scaling. The loss (so every gradient) is multiplied by a power of two
// that keeps small gradients above fp16's underflow; a step whose gradients overflow is skipped and the
// scale halves; after growth_interval good steps in a row it doubles. A power of two scales exactly, so
// where nothing overflows the update is bitwise the unscaled one.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace ferry::engine {

class LossScaler {
 public:
  LossScaler(double initial_scale, int growth_interval) : scale_(initial_scale), growth_interval_(growth_interval) {
    if (!(initial_scale >= 1) || growth_interval < 1)
      throw std::invalid_argument("loss scale: the initial scale must be >= 1 and the growth interval >= 1");
  }
  float scale() const { return static_cast<float>(scale_); }  // inf when the scale is beyond fp32
  double value() const { return scale_; }
  int good_steps() const { return good_steps_; }
  // After a step: finite gradients count toward growth; an overflow halves the scale (never below 1).
  void update(bool finite) {
    if (!finite) {
      scale_ = scale_ > 1 ? scale_ / 2 : 1;
      good_steps_ = 0;
    } else if (++good_steps_ >= growth_interval_) {
      scale_ *= 2;
      good_steps_ = 0;
    }
  }
  // Checkpoint state.
  void restore(double scale, int good_steps) { scale_ = scale, good_steps_ = good_steps; }

 private:
  double scale_;
  int growth_interval_;
  int good_steps_ = 0;
};

}  // namespace ferry::engine
