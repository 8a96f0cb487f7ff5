// How the planner spreads independent work over its caller's ParallelFor (internal to offload/): results in the
// order a loop would give them, so that no decision depends on which call finished first; and a value per key
// computed once however many threads ask for it.
#pragma once

#include <cstddef>
#include <exception>
#include <mutex>
#include <optional>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "offload/parallel_for.h"

namespace ferry::offload::detail {

// f(0), ..., f(n - 1) through `parallel` (a loop when it is empty), their results in index order. Where some
// throw, the exception of the lowest index is rethrown, as a loop would have.
template <class F>
auto in_parallel(const ParallelFor& parallel, size_t n, F f) {
  using Result = std::invoke_result_t<F&, size_t>;
  std::vector<std::optional<Result>> results(n);
  std::vector<std::exception_ptr> errors(n);
  const std::function<void(size_t)> body = [&](size_t i) {
    try {
      results[i].emplace(f(i));
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
  if (parallel) parallel(n, body);
  else
    for (size_t i = 0; i < n; ++i) body(i);
  for (const std::exception_ptr& error : errors)
    if (error) std::rethrow_exception(error);
  std::vector<Result> ordered;
  ordered.reserve(n);
  for (std::optional<Result>& r : results) ordered.push_back(std::move(*r));
  return ordered;
}

// A value per key, computed by the first thread that asks for it; a thread asking meanwhile waits for it. The
// computations must not call the ParallelFor (with oneTBB's, a thread waiting here could be handed, and block,
// the very work it waits for). Values never move: references stay valid while the map lives.
template <class Key, class Value, class Hash>
class ComputedOnce {
 public:
  template <class Compute>
  const Value& get(const Key& key, Compute compute) {
    Entry* entry = nullptr;
    {
      const std::lock_guard lock(mutex_);
      entry = &entries_[key];
    }
    const std::lock_guard lock(entry->mutex);
    if (!entry->value) entry->value.emplace(compute());
    return *entry->value;
  }

 private:
  struct Entry {
    std::mutex mutex;
    std::optional<Value> value;
  };
  std::mutex mutex_;
  std::unordered_map<Key, Entry, Hash> entries_;
};

}  // namespace ferry::offload::detail
