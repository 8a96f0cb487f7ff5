// ParameterStore layout: parameters in spec order, each starting on a 256-byte boundary.
#include "models/parameter_store.h"

#include <algorithm>

namespace ferry::models {

ParameterStore::ParameterStore(const std::vector<ParamSpec>& params) {
  constexpr int64_t kAlignFloats = 256 / sizeof(float);
  int64_t total = 0;
  for (const auto& p : params) {
    offset_.push_back(total);
    size_.push_back(numel(p.shape));
    total += static_cast<int64_t>(memory::align_up(static_cast<size_t>(size_.back()), kAlignFloats));
  }
  values_ = memory::HostBuffer(static_cast<size_t>(total) * sizeof(float));
  grads_ = memory::HostBuffer(static_cast<size_t>(total) * sizeof(float));
}

std::vector<std::span<float>> ParameterStore::value_views() {
  std::vector<std::span<float>> views;
  for (int i = 0; i < count(); ++i) views.push_back(value(i));
  return views;
}

void ParameterStore::zero_grads() {
  auto g = grads();
  std::fill(g.begin(), g.end(), 0.0f);
}

}  // namespace ferry::models
