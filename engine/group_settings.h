// What optim.groups become for one model: the frozen marks on its spec (which the planner, the bindings
// and the executor read) and, per bucket, the ranges CpuAdamW updates with their own lr and weight decay.
#pragma once

#include <span>
#include <vector>

#include "cpu_optim/adamw.h"
#include "engine/param_groups.h"
#include "memory/bucket_layout.h"
#include "models/model_spec.h"

namespace ferry::engine {

// resolve_param_groups over the spec's parameter names.
std::vector<ParamSettings> resolve_param_groups(std::span<const ParamGroup> groups, const models::ModelSpec& spec,
                                                double default_weight_decay);

// Marks the frozen parameters of `spec` (models::ParamSpec::frozen), which the planner and the executor read.
void mark_frozen(models::ModelSpec& spec, std::span<const ParamSettings> settings);
// Removes the backward ops a step with these frozen parameters does not need: those that accumulate no
// trained parameter's gradient and write no gradient a needed op reads (below the lowest trained
// parameter there is nothing left to differentiate), with the gradient tensors only they wrote. The
// forward and every trained parameter's gradient are unchanged; the plan then neither times nor holds
// what they would have. Nothing changes when nothing is frozen.
void drop_frozen_backward(models::ModelSpec& spec);
// The spec with the parameters `groups` freeze marked and the backward they make useless dropped
// (drop_frozen_backward); resolve_param_groups' errors when a group fits none.
models::ModelSpec with_frozen(models::ModelSpec spec, std::span<const ParamGroup> groups);

// Per bucket of `layout`, the ranges CpuAdamW updates with their own lr multiplier and weight decay
// (cpu_optim::Bucket::ranges): one per run of parameters with equal settings, each parameter's padding
// with it. A bucket whose parameters all have lr_scale 1 and default_weight_decay gets none (the plain
// update). `settings` is indexed by parameter id; empty: no groups, no ranges anywhere.
std::vector<std::vector<cpu_optim::HyperRange>> bucket_hyper_ranges(const memory::BucketLayout& layout,
                                                                    std::span<const ParamSettings> settings,
                                                                    double default_weight_decay);

// describe_param_groups for the spec's parameters.
std::string describe_param_groups(std::span<const ParamGroup> groups, std::span<const ParamSettings> settings,
                                  const models::ModelSpec& spec);

}  // namespace ferry::engine
