// parallel_planning: oneTBB's parallel_for as the planner's ParallelFor.
#include "engine/parallel_planning.h"

#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>

namespace ferry::engine {

offload::ParallelFor parallel_planning() {
  return [](size_t n, const std::function<void(size_t)>& body) {
    tbb::parallel_for(size_t(0), n, [&](size_t i) { body(i); }, tbb::simple_partitioner());
  };
}

}  // namespace ferry::engine
