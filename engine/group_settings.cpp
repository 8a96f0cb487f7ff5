// What optim.groups become for one model: frozen marks on its spec and AdamW's ranges per bucket.
#include "engine/group_settings.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace ferry::engine {

std::vector<ParamSettings> resolve_param_groups(std::span<const ParamGroup> groups, const models::ModelSpec& spec,
                                                double default_weight_decay) {
  std::vector<std::string> names;
  for (const auto& p : spec.params) names.push_back(p.name);
  return resolve_param_groups(groups, names, default_weight_decay);
}

void mark_frozen(models::ModelSpec& spec, std::span<const ParamSettings> settings) {
  if (settings.empty()) return;
  if (settings.size() != spec.params.size())
    throw std::logic_error(fmt::format("mark_frozen: {} settings for {} parameters", settings.size(), spec.params.size()));
  for (size_t p = 0; p < settings.size(); ++p) spec.params[p].frozen = settings[p].frozen;
}

namespace {

// Which backward ops a step needs: those that accumulate a trained parameter's gradient, and those that
// write a gradient a needed op reads. Readers of a gradient run after its writers, so one pass from the
// last op back decides each op after every reader of what it writes.
std::vector<bool> needed_ops(const models::ModelSpec& spec) {
  std::vector<bool> keep(spec.ops.size(), true), read(spec.tensors.size(), false);
  for (size_t i = spec.ops.size(); i-- > 0;) {
    const models::OpSpec& op = spec.ops[i];
    if (op.pass == models::Pass::Backward) {
      const bool trains = std::any_of(op.params.begin(), op.params.end(), [&](int p) { return !spec.params[p].frozen; });
      keep[i] = trains || std::any_of(op.outputs.begin(), op.outputs.end(), [&](int t) { return read[t]; });
    }
    if (keep[i])
      for (int t : op.inputs) read[t] = true;
  }
  return keep;
}

}  // namespace

void drop_frozen_backward(models::ModelSpec& spec) {
  const std::vector<bool> keep = needed_ops(spec);
  if (std::all_of(keep.begin(), keep.end(), [](bool k) { return k; })) return;
  std::vector<models::OpSpec> ops;
  std::vector<int> renumber(spec.tensors.size(), -1);
  for (size_t i = 0; i < spec.ops.size(); ++i)
    if (keep[i]) ops.push_back(std::move(spec.ops[i]));
  for (size_t t = 0; t < spec.tensors.size(); ++t)
    if (spec.tensors[t].is_input) renumber[t] = 0;  // batch inputs stay, used or not
  for (const models::OpSpec& op : ops)
    for (const auto* list : {&op.inputs, &op.outputs})
      for (int t : *list) renumber[t] = 0;
  std::vector<models::TensorSpec> tensors;  // the gradients only dropped ops wrote go
  for (size_t t = 0; t < spec.tensors.size(); ++t)
    if (renumber[t] == 0) renumber[t] = static_cast<int>(tensors.size()), tensors.push_back(std::move(spec.tensors[t]));
  for (models::OpSpec& op : ops)
    for (auto* list : {&op.inputs, &op.outputs})
      for (int& t : *list) t = renumber[t];
  spec.ops = std::move(ops);
  spec.tensors = std::move(tensors);
  spec.finalize();
}

models::ModelSpec with_frozen(models::ModelSpec spec, std::span<const ParamGroup> groups) {
  if (groups.empty()) return spec;
  mark_frozen(spec, resolve_param_groups(groups, spec, 0.0));
  drop_frozen_backward(spec);
  return spec;
}

std::vector<std::vector<cpu_optim::HyperRange>> bucket_hyper_ranges(const memory::BucketLayout& layout,
                                                                    std::span<const ParamSettings> settings,
                                                                    double default_weight_decay) {
  std::vector<std::vector<cpu_optim::HyperRange>> out(layout.buckets().size());
  if (settings.empty()) return out;
  for (size_t b = 0; b < out.size(); ++b) {
    const memory::BucketLayout::Bucket& bucket = layout.buckets()[b];
    std::vector<cpu_optim::HyperRange>& ranges = out[b];
    bool plain = true;
    for (size_t i = 0; i < bucket.params.size(); ++i) {
      const ParamSettings& s = settings[bucket.params[i]];
      plain = plain && s.lr_scale == 1.0 && s.weight_decay == default_weight_decay;
      const size_t begin = static_cast<size_t>(layout.slot(bucket.params[i]).offset);
      const size_t end = i + 1 < bucket.params.size() ? static_cast<size_t>(layout.slot(bucket.params[i + 1]).offset)
                                                      : static_cast<size_t>(bucket.numel);
      if (!ranges.empty() && ranges.back().lr_scale == s.lr_scale && ranges.back().weight_decay == s.weight_decay)
        ranges.back().end = end;  // the same settings as the parameter before: one range
      else
        ranges.push_back({begin, end, s.lr_scale, s.weight_decay});
    }
    if (plain) ranges.clear();
  }
  return out;
}

std::string describe_param_groups(std::span<const ParamGroup> groups, std::span<const ParamSettings> settings,
                                  const models::ModelSpec& spec) {
  std::vector<int64_t> numel;
  for (const auto& p : spec.params) numel.push_back(models::numel(p.shape));
  return describe_param_groups(groups, settings, numel);
}

}  // namespace ferry::engine
