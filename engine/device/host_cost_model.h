// The host device's cost model, measured at start-up in about a second: its matmul rate, its memory
// bandwidth (which is also its "link": host-device copies are memcpys), and its CPU AdamW rate.
#pragma once

#include <string>

#include "offload/cost_model.h"

namespace ferry::device {

offload::CostModel measure_host_cost_model(int threads);

// The measured model of this machine at this thread count, from the cache when it was measured before
// ($XDG_CACHE_HOME or ~/.cache, ferry/host-<cpu>-<threads>t.json), else measured now and cached.
// `cache_path` receives the file used.
offload::CostModel host_cost_model(int threads, std::string* cache_path = nullptr);

}  // namespace ferry::device
