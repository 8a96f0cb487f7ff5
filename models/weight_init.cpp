// fill_initial_values: the parameters cut into chunks, each filled on its own from its place in the stream.
#include "models/weight_init.h"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "foundation/rng.h"

namespace ferry::models {
namespace {

// Elements per chunk: large enough that skipping ahead and scheduling cost nothing beside the draws (each
// normal is a log and a cos), small enough that one embedding table spreads over every core.
constexpr size_t kChunk = size_t{1} << 16;

// Elements [begin, end) of one parameter; for a normal one, `first_normal` is the index, in the stream of
// normals, of its element `begin`.
struct Chunk {
  size_t param = 0, begin = 0, end = 0;
  uint64_t first_normal = 0;
};

std::vector<Chunk> chunks_of(std::span<const InitRule> rules, std::span<const int64_t> numel,
                             std::span<const std::span<float>> values) {
  std::vector<Chunk> chunks;
  uint64_t normals_before = 0;  // normals drawn by the parameters before this one
  for (size_t p = 0; p < rules.size(); ++p) {
    const size_t n = static_cast<size_t>(numel[p]);
    if (!values[p].empty())
      for (size_t b = 0; b < n; b += kChunk) chunks.push_back({p, b, std::min(n, b + kChunk), normals_before + b});
    if (rules[p].normal) normals_before += n;
  }
  return chunks;
}

void fill_chunk(const Chunk& c, const InitRule& rule, std::span<float> v, uint64_t seed) {
  const auto first = v.begin() + static_cast<std::ptrdiff_t>(c.begin);
  const auto last = v.begin() + static_cast<std::ptrdiff_t>(c.end);
  if (!rule.normal) return std::fill(first, last, rule.value);
  Rng rng(seed);
  rng.discard(c.first_normal * Rng::kDrawsPerNormal);
  for (auto w = first; w != last; ++w) *w = static_cast<float>(rng.normal() * rule.std);
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
      fill_chunk(c, rules[c.param], values[c.param], seed);
    }
  });
}

std::vector<int64_t> param_numels(const ModelSpec& spec) {
  std::vector<int64_t> n;
  for (const ParamSpec& p : spec.params) n.push_back(numel(p.shape));
  return n;
}

}  // namespace ferry::models
