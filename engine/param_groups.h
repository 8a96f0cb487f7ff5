// Parameter groups (optim.groups): optimizer settings chosen per parameter by name pattern: frozen, or a
// learning-rate multiplier and a weight decay of their own. Patterns are globs over the Hugging Face names
// of the model Ferry builds (GPT2LMHeadModel's, BertForMaskedLM's), e.g. transformer.h.0.ln_1.weight.
// Names only: what the groups become for a model and its buckets is engine/group_settings.h.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace ferry::engine {

// One entry of optim.groups, as written.
struct ParamGroup {
  std::string params;                  // the pattern
  bool frozen = false;
  std::optional<double> lr_scale;      // times the schedule's lr; unset: 1
  std::optional<double> weight_decay;  // unset: optim.weight_decay
};

// What one parameter gets: from the first group whose pattern matches its name, else the optim section's.
struct ParamSettings {
  bool frozen = false;
  double lr_scale = 1;
  double weight_decay = 0;
  int group = -1;  // the group that chose it; -1: none
};

// Pattern syntax. Alternatives are separated by '|' (spaces around them are ignored); each is a glob that
// must match the whole name: '*' any run of characters (dots included), '?' one character, '[0-5]' or
// '[ab]' one character of a set, '[!0-5]' one not in it. Nothing else is special.
// Throws std::invalid_argument naming the problem for an empty alternative or an unclosed '['.
void check_pattern(const std::string& pattern);
bool pattern_matches(const std::string& pattern, const std::string& name);

// Each parameter's settings (indexed like `names`); the first matching group wins. Throws
// std::invalid_argument, naming optim.groups[i].params and a few real names, for a group that matches no
// parameter or only parameters an earlier group took, and when every parameter ends up frozen.
std::vector<ParamSettings> resolve_param_groups(std::span<const ParamGroup> groups, const std::vector<std::string>& names,
                                                double default_weight_decay);

// "optim.groups: 'cls.*': 5 tensors (17153 parameters) lr x10; ...": the start-up line. numel: per name.
std::string describe_param_groups(std::span<const ParamGroup> groups, std::span<const ParamSettings> settings,
                                  std::span<const int64_t> numel);

}  // namespace ferry::engine
