// The host device's cost model, measured at start-up in about a second: its matmul rate, its memory
// bandwidth (which is also its "link": host-device copies are memcpys), and its CPU AdamW rate.
#pragma once

#include "offload/cost_model.h"

namespace ferry::engine {

offload::CostModel measure_host_cost_model(int threads);

}  // namespace ferry::engine
