// fill_initial_values and InitialValues: the parameters cut into chunks, each filled on its own from its place in
// the stream.
#include "models/weight_init.h"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "foundation/rng.h"

namespace ferry::models {
namespace {

// Elements per chunk: large enough that skipping ahead and scheduling cost nothing beside the draws (each
// normal is a log and a cos), small enough that one embedding table spreads over every core.
constexpr size_t kChunk = size_t{1} << 16;

// Per parameter, the index in the stream of normals of its first element: each normal parameter before it drew
// one normal an element.
std::vector<uint64_t> first_normals(std::span<const InitRule> rules, std::span<const int64_t> numel) {
  std::vector<uint64_t> first(rules.size());
  uint64_t drawn = 0;
  for (size_t p = 0; p < rules.size(); ++p) {
    first[p] = drawn;
    if (rules[p].normal) drawn += static_cast<uint64_t>(numel[p]);
  }
  return first;
}

// Elements [begin, end) of one parameter; for a normal one, `first_normal` is the index, in the stream of
// normals, of its element `begin`.
struct Chunk {
  size_t param = 0, begin = 0, end = 0;
  uint64_t first_normal = 0;
};

std::vector<Chunk> chunks_of(std::span<const InitRule> rules, std::span<const int64_t> numel,
                             std::span<const std::span<float>> values) {
  const std::vector<uint64_t> first = first_normals(rules, numel);
  std::vector<Chunk> chunks;
  for (size_t p = 0; p < rules.size(); ++p) {
    const size_t n = static_cast<size_t>(numel[p]);
    if (!values[p].empty())
      for (size_t b = 0; b < n; b += kChunk) chunks.push_back({p, b, std::min(n, b + kChunk), first[p] + b});
  }
  return chunks;
}

// Consecutive elements of one parameter, the first of them normal number `first_normal` of the stream.
void fill_run(const InitRule& rule, uint64_t first_normal, std::span<float> out, uint64_t seed) {
  if (!rule.normal) return std::fill(out.begin(), out.end(), rule.value);
  Rng rng(seed);
  rng.discard(first_normal * Rng::kDrawsPerNormal);
  for (float& w : out) w = static_cast<float>(rng.normal() * rule.std);
}

}  // namespace

void fill_initial_values(std::span<const InitRule> rules, std::span<const std::span<float>> values, uint64_t seed) {
  std::vector<int64_t> numel;
  for (const auto& v : values) numel.push_back(static_cast<int64_t>(v.size()));
  fill_initial_values(rules, numel, values, seed);
}

void fill_initial_values(std::span<const InitRule> rules, std::span<const int64_t> numel,
                         std::span<const std::span<float>> values, uint64_t seed) {
  if (rules.size() != values.size() || numel.size() != values.size())
    throw std::invalid_argument("fill_initial_values: " + std::to_string(rules.size()) + " rules and " +
                                std::to_string(numel.size()) + " sizes for " + std::to_string(values.size()) +
                                " parameters; give one of each per parameter");
  for (size_t p = 0; p < values.size(); ++p)
    if (!values[p].empty() && static_cast<int64_t>(values[p].size()) != numel[p])
      throw std::invalid_argument("fill_initial_values: parameter " + std::to_string(p) + " has " +
                                  std::to_string(numel[p]) + " elements and a view of " +
                                  std::to_string(values[p].size()));
  const std::vector<Chunk> chunks = chunks_of(rules, numel, values);
  tbb::parallel_for(tbb::blocked_range<size_t>(0, chunks.size(), 1), [&](const tbb::blocked_range<size_t>& r) {
    for (size_t i = r.begin(); i != r.end(); ++i) {
      const Chunk& c = chunks[i];
      fill_run(rules[c.param], c.first_normal, values[c.param].subspan(c.begin, c.end - c.begin), seed);
    }
  });
}

std::vector<int64_t> param_numels(const ModelSpec& spec) {
  std::vector<int64_t> n;
  for (const ParamSpec& p : spec.params) n.push_back(numel(p.shape));
  return n;
}

InitialValues::InitialValues(std::vector<InitRule> rules, std::span<const int64_t> numel, uint64_t seed)
    : rules_(std::move(rules)), numel_(numel.begin(), numel.end()), seed_(seed) {
  if (rules_.size() != numel_.size())
    throw std::invalid_argument("InitialValues: " + std::to_string(rules_.size()) + " rules for " +
                                std::to_string(numel_.size()) + " parameters; give one per parameter");
  first_normal_ = first_normals(rules_, numel_);
}

void InitialValues::fill(int param, int64_t begin, std::span<float> out) const {
  if (param < 0 || param >= static_cast<int>(rules_.size()))
    throw std::out_of_range("InitialValues: parameter " + std::to_string(param) + " of a model of " +
                            std::to_string(rules_.size()));
  const int64_t end = begin + static_cast<int64_t>(out.size());
  if (begin < 0 || end > numel_[param])
    throw std::out_of_range("InitialValues: elements [" + std::to_string(begin) + ", " + std::to_string(end) +
                            ") of parameter " + std::to_string(param) + ", which has " + std::to_string(numel_[param]));
  tbb::parallel_for(size_t{0}, (out.size() + kChunk - 1) / kChunk, [&](size_t c) {
    const size_t b = c * kChunk;
    fill_run(rules_[param], first_normal_[param] + static_cast<uint64_t>(begin) + b,
             out.subspan(b, std::min(kChunk, out.size() - b)), seed_);
  });
}

}  // namespace ferry::models
