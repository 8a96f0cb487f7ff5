// Initial values of a model's parameters: each a constant or N(0, std^2) from the model's one random stream,
// filled in parallel (oneTBB) with the same bytes as one sequential walk over the parameters.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "models/model_spec.h"

namespace ferry::models {

// How one parameter starts: every element `value`, or (normal) each drawn as float(Rng::normal() * std).
struct InitRule {
  bool normal = false;
  float value = 0.0f;  // when not normal
  double std = 0.0;    // when normal

  static InitRule constant(float v) { return {false, v, 0.0}; }
  static InitRule gaussian(double s) { return {true, 0.0f, s}; }
};

// values[i] per rules[i]. The normal parameters share one Rng(seed) stream, consumed in parameter order and
// element order, as a sequential loop would; chunks of every parameter start at their place in that stream
// (Rng::discard), so the result does not depend on the number of threads.
void fill_initial_values(std::span<const InitRule> rules, std::span<const std::span<float>> values, uint64_t seed);
// The same with each parameter's number of elements given apart (numel[i]): an empty view is skipped, its
// elements still counted in the stream, so that a part of the model initialised alone (a device-tier bucket
// through a staging buffer) gets the values a whole-model fill gives it.
void fill_initial_values(std::span<const InitRule> rules, std::span<const int64_t> numel,
                         std::span<const std::span<float>> values, uint64_t seed);
// Per parameter of the spec, its number of elements (the sizes fill_initial_values counts in the stream).
std::vector<int64_t> param_numels(const ModelSpec& spec);

// Any elements of any parameter, each the value fill_initial_values gives it, without the rest of the model: a
// parameter the device alone keeps goes there a few MiB at a time, with no transient copy of all of it.
class InitialValues {
 public:
  InitialValues(std::vector<InitRule> rules, std::span<const int64_t> numel, uint64_t seed);
  // Elements [begin, begin + out.size()) of parameter `param`, in parallel.
  void fill(int param, int64_t begin, std::span<float> out) const;

 private:
  std::vector<InitRule> rules_;
  std::vector<int64_t> numel_;
  std::vector<uint64_t> first_normal_;  // per parameter, where its elements start in the stream of normals
  uint64_t seed_;
};

}  // namespace ferry::models
