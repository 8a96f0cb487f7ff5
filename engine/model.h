// The model a config names (model.kind: gpt2 | bert) as a ModelSpec, and its initial weights.
#pragma once

#include <cstdint>

#include "engine/config.h"
#include "models/model_spec.h"
#include "models/parameter_store.h"

namespace ferry::engine {

models::ModelSpec build_model(const ModelConfig& model, int64_t batch, int64_t seq);
void init_model(const ModelConfig& model, const models::ModelSpec& spec, models::ParameterStore& params, uint64_t seed);

}  // namespace ferry::engine
