// fill_real_values and fill_real_range: the initialisation that leaves a padded vocabulary's rows zero and out of the
// random stream.
#include "models/vocab.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace ferry::models {

std::vector<int64_t> real_numels(const ModelSpec& spec) {
  std::vector<int64_t> real;
  for (const ParamSpec& p : spec.params) real.push_back(numel(p.file_shape()));
  return real;
}

void fill_real_values(const ModelSpec& spec, std::span<const InitRule> rules, std::span<const std::span<float>> values,
                      uint64_t seed) {
  if (values.size() != spec.params.size())
    throw std::invalid_argument("fill_real_values: " + std::to_string(values.size()) + " views for " +
                                std::to_string(spec.params.size()) + " parameters");
  // The real elements come first in each parameter (row-major, padding rows last): views of them alone.
  const std::vector<int64_t> real_numel = real_numels(spec);
  std::vector<std::span<float>> real_views;
  for (size_t p = 0; p < values.size(); ++p)
    real_views.push_back(values[p].empty() ? values[p] : values[p].first(static_cast<size_t>(real_numel[p])));
  fill_initial_values(rules, real_numel, real_views, seed);
  for (size_t p = 0; p < values.size(); ++p)
    if (!values[p].empty()) std::fill(values[p].begin() + real_numel[p], values[p].end(), 0.0f);
}

void fill_real_range(const InitialValues& initial, std::span<const int64_t> real_numel, int param, int64_t begin,
                     std::span<float> out) {
  const auto drawn = static_cast<size_t>(
      std::clamp<int64_t>(real_numel[static_cast<size_t>(param)] - begin, 0, static_cast<int64_t>(out.size())));
  if (drawn > 0) initial.fill(param, begin, out.first(drawn));
  std::fill(out.begin() + static_cast<std::ptrdiff_t>(drawn), out.end(), 0.0f);
}

}  // namespace ferry::models
