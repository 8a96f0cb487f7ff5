// ParallelFor: how plan_step may spread its independent pieces of work (candidate schedules, checkpointing
// counts), given by its caller; offload itself starts no thread. The engine passes oneTBB's (parallel_planning.h).
#pragma once

#include <cstddef>
#include <functional>

namespace ferry::offload {

// Calls body(0), ..., body(n - 1), each once, in any order, on any threads, and returns once every call has
// returned. The planner's bodies throw nothing (in_parallel keeps each index's exception) and may call it again:
// plan_step nests (each checkpointing count's greedy search spreads its own candidates). Empty: a loop on the
// calling thread. Plans are the same whichever is given (tests/offload: GreedyPins).
using ParallelFor = std::function<void(size_t n, const std::function<void(size_t)>& body)>;

}  // namespace ferry::offload
