// The ParallelFor the engine gives the planner (offload/parallel_for.h): oneTBB's parallel_for, so that planning
// takes the threads the run allows (the trainer's tbb::global_control) and offload itself starts none.
#pragma once

#include "offload/parallel_for.h"

namespace ferry::engine {

// One task per index: the planner's items are large (each builds or estimates whole schedules) and unequal.
offload::ParallelFor parallel_planning();

}  // namespace ferry::engine
