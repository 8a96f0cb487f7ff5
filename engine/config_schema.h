// The one table of an experiment file's keys (type, allowed values, default, meaning) and what is made from
// it: the validation that reads a YAML tree into a Config, `ferry train --help`'s key list and docs/config.md.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/config.h"

namespace YAML {
class Node;
}

namespace ferry::engine {

// A bad value in an experiment file; the message names the key (parse_config puts the file in front).
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One key of the table, in words.
struct ConfigKey {
  std::string name;           // dotted: "optim.lr"; an optim.groups entry's: "optim.groups[].lr_scale"
  std::string type;           // "integer", "number", "choice", "size", "file", ...
  std::string allowed;        // the range or the choices: "[1, 1024]", ">= 0", "cosine | constant"
  std::string default_value;  // "0.0003", "optim.lr / 10", "required"
  std::string meaning;        // one line
  std::string model_kind;     // not empty: the key applies to these model kinds only ("bert", "gpt2 or bert")
};

// Every key, section by section, in the table's order.
const std::vector<ConfigKey>& config_keys();
// The key list of `ferry train --help` and `ferry config`: one entry per key, grouped by section.
std::string config_keys_text();
// docs/config.md (`ferry config --markdown`).
std::string config_markdown();

// Reads `root` (the file's top-level mapping) into `config` as the table says. An unknown section or key, one
// given twice, a wrong type, a value out of range or not among the choices is a ConfigError naming the key,
// the value and what is allowed. Returns the dotted names of the keys given.
std::vector<std::string> read_config_keys(const YAML::Node& root, const std::filesystem::path& base_dir, Config& config);

}  // namespace ferry::engine
