// Config parsing: a table of known keys per section drives type, range and choice checks, so a typo,
// a wrong type or an out-of-range value is reported with the key, the value and what is allowed.
#include "engine/config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <type_traits>

#include "dataset/token_shard.h"
#include "formats/hf_config.h"
#include "memory/bucket_layout.h"

namespace ferry::engine {
namespace {

struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One known key: how to read it into the Config.
struct Field {
  std::string key;
  std::function<void(const YAML::Node&, const std::string& where)> read;
};

std::string scalar_text(const YAML::Node& n) {
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  std::ostringstream os;
  os << YAML::Dump(n);
  return os.str();
}

// Whether a scalar is written as a decimal integer: one that does not decode into a field's type is then too
// large for it, not "not an integer".
bool is_integer_literal(const std::string& s) {
  const size_t digits = s.find_first_not_of("+-") == 1 ? 1 : 0;
  return s.size() > digits && s.find_first_not_of("0123456789", digits) == std::string::npos;
}

// "out of range; expected an integer >= 1 (at most 2147483647)": for a value above the range, its upper
// bound is named when the allowed text leaves it out, so a value too large never reads as one too small.
std::string out_of_range(const std::string& where, const std::string& value, const std::string& allowed,
                         const std::string& hi, bool above) {
  const std::string note = above && allowed.find(hi) == std::string::npos ? " (at most " + hi + ")" : "";
  return where + ": " + value + " is out of range; expected " + allowed + note;
}

// A number in [lo, hi]. Floating-point fields refuse YAML's .nan and .inf, which every range check passes
// or fails for the wrong reason; integer fields compare in their own type, so 2^64-1 fits a uint64_t.
template <class T>
Field number(const std::string& key, T& dst, std::type_identity_t<T> lo, std::type_identity_t<T> hi,
             const std::string& allowed) {
  return {key, [&dst, lo, hi, allowed](const YAML::Node& n, const std::string& where) {
            const std::string hi_text = std::is_integral_v<T> ? fmt::format("{}", hi) : fmt::format("{:g}", double(hi));
            T v{};
            const bool decoded = n.IsScalar() && YAML::convert<T>::decode(n, v);
            const bool literal = std::is_integral_v<T> && n.IsScalar() && is_integer_literal(n.Scalar());
            const bool zero = literal && n.Scalar().find_first_not_of("+-0") == std::string::npos;  // -0 for an unsigned
            if (!decoded && literal && !zero)
              throw ConfigError(out_of_range(where, n.Scalar(), allowed, hi_text, n.Scalar()[0] != '-'));
            if (!decoded && !zero)
              throw ConfigError(where + ": " + scalar_text(n) + " is not " +
                                (std::is_integral_v<T> ? "an integer" : "a number") + "; expected " + allowed);
            if constexpr (std::is_floating_point_v<T>) {
              if (!std::isfinite(v)) throw ConfigError(where + ": " + n.Scalar() + " is not a finite number; expected " + allowed);
            }
            if (v < lo || v > hi) throw ConfigError(out_of_range(where, n.Scalar(), allowed, hi_text, v > hi));
            dst = v;
          }};
}

Field choice(const std::string& key, std::string& dst, std::vector<std::string> options) {
  return {key, [&dst, options, key](const YAML::Node& n, const std::string& where) {
            std::string list;
            for (const auto& o : options) list += (list.empty() ? "" : " | ") + o;
            if (!n.IsScalar() || std::find(options.begin(), options.end(), n.Scalar()) == options.end())
              throw ConfigError(where + ": " + scalar_text(n) + " is not allowed; expected one of " + list);
            dst = n.Scalar();
          }};
}

// A list of distinct entries of `options` ([] or a single entry written without brackets as well).
Field choice_list(const std::string& key, std::vector<std::string>& dst, std::vector<std::string> options) {
  return {key, [&dst, options, key](const YAML::Node& n, const std::string& where) {
            if (!n.IsSequence() && !n.IsScalar()) throw ConfigError(where + ": expected a list, e.g. [" + options[0] + "]");
            std::vector<std::string> read;
            for (size_t i = 0; i < (n.IsSequence() ? n.size() : 1); ++i) {
              std::string entry;
              choice(key, entry, options).read(n.IsSequence() ? n[i] : n, n.IsSequence() ? fmt::format("{}[{}]", where, i) : where);
              if (std::find(read.begin(), read.end(), entry) != read.end()) throw ConfigError(where + ": '" + entry + "' is listed twice");
              read.push_back(entry);
            }
            dst = read;
          }};
}

// A path relative to the config file's folder that must exist (as a regular file when file_only).
Field existing_path(const std::string& key, std::filesystem::path& dst, const std::filesystem::path& base,
                    bool file_only) {
  return {key, [&dst, base, file_only](const YAML::Node& n, const std::string& where) {
            if (!n.IsScalar() || n.Scalar().empty()) throw ConfigError(where + ": expected a path");
            const std::filesystem::path path = n.Scalar();
            dst = path.is_absolute() ? path : base / path;
            if (file_only ? !std::filesystem::is_regular_file(dst) : !std::filesystem::exists(dst))
              throw ConfigError(where + ": '" + dst.string() + (file_only ? "' does not exist or is not a file" : "' does not exist"));
          }};
}

void read_section(const YAML::Node& node, const std::string& section, const std::vector<Field>& fields) {
  if (!node) return;
  if (!node.IsMap()) throw ConfigError(section + ": expected a mapping of keys, got " + scalar_text(node));
  std::vector<std::string> seen;
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    const std::string where = section + "." + key;
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) throw ConfigError(where + ": given twice");
    seen.push_back(key);
    auto it = std::find_if(fields.begin(), fields.end(), [&](const Field& f) { return f.key == key; });
    if (it == fields.end()) {
      std::string known;
      for (const auto& f : fields) known += (known.empty() ? "" : ", ") + f.key;
      throw ConfigError(where + ": unknown key; " + section + " takes " + known);
    }
    it->read(kv.second, where);
  }
}

void apply_override(YAML::Node& root, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError("--set " + assignment + ": expected key=value, e.g. train.steps=10");
  const std::string key = assignment.substr(0, eq);
  YAML::Node value;
  try {
    value = YAML::Load(assignment.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    throw ConfigError("--set " + assignment + ": the value is not valid YAML (" + e.msg + ")");
  }
  // Walk the dotted path, creating mappings; `device: cpu` may grow into `device: {kind: cpu, ...}`.
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const size_t dot = key.find('.', start);
    parts.push_back(key.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (parts.size() > 1 && parts[0] == "device" && root["device"] && root["device"].IsScalar()) {
    const std::string kind = root["device"].Scalar();
    YAML::Node map(YAML::NodeType::Map);
    map["kind"] = kind;
    root["device"] = map;
  }
  std::vector<YAML::Node> path{root};
  // (yaml-cpp: assigning to an existing Node overwrites what it refers to, so nodes are only copy-constructed)
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node parent = path.back();
    if (!parent[parts[i]] || parent[parts[i]].IsNull()) parent[parts[i]] = YAML::Node(YAML::NodeType::Map);
    else if (!parent[parts[i]].IsMap()) throw ConfigError("--set " + assignment + ": '" + parts[i] + "' is not a section");
    path.push_back(parent[parts[i]]);
  }
  YAML::Node leaf_parent = path.back();
  leaf_parent[parts.back()] = value;
}

constexpr int kIntMax = std::numeric_limits<int>::max();

// The YAML text as a mapping of sections, with the --set overrides applied.
YAML::Node load_root(const std::string& yaml, const std::vector<std::string>& overrides) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    throw ConfigError("invalid YAML at line " + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap())
    throw ConfigError("the top level must be a mapping with sections model, data, optim, train, offload, device");
  for (const auto& o : overrides) apply_override(root, o);
  return root;
}

// A misspelt section would otherwise be ignored and its keys silently take their defaults.
void check_section_names(const YAML::Node& root) {
  const std::vector<std::string> sections{"model", "data", "optim", "train", "offload", "device"};
  std::vector<std::string> seen;
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    if (std::find(sections.begin(), sections.end(), key) == sections.end())
      throw ConfigError(key + ": unknown section; expected model, data, optim, train, offload or device");
    if (std::find(seen.begin(), seen.end(), key) != seen.end())
      throw ConfigError(key + ": section given twice; merge them into one");
    seen.push_back(key);
  }
}

// The model section's keys as written (after --set): what config.json beside model.init_from must not change.
std::vector<std::string> stated_keys(const YAML::Node& node) {
  std::vector<std::string> keys;
  if (node && node.IsMap())
    for (const auto& kv : node) keys.push_back(kv.first.as<std::string>());
  return keys;
}

// model.init_from's config.json fills every key the section does not state (formats/hf_config.h).
void apply_init_from_config(models::ModelConfig& model, const std::vector<std::string>& stated) {
  try {
    formats::apply_hf_config(model, stated);
  } catch (const std::runtime_error& e) {
    throw ConfigError(std::string("model.init_from: ") + e.what());
  }
}

void read_model(const YAML::Node& node, models::ModelConfig& model, const std::filesystem::path& base_dir) {
  read_section(node, "model",
               {choice("kind", model.kind, {"gpt2", "bert"}),
                number("n_layer", model.n_layer, 1, 1024, "an integer in [1, 1024]"),
                number("n_head", model.n_head, 1, 1024, "an integer in [1, 1024]"),
                number("n_embd", model.n_embd, 1, 65536, "an integer in [1, 65536]"),
                number("vocab_size", model.vocab_size, 1, 1 << 22, "an integer in [1, 4194304]"),
                number("seq_len", model.seq_len, 1, 1 << 20, "an integer in [1, 1048576]"),
                number("intermediate_size", model.intermediate_size, 1, 1 << 20, "an integer in [1, 1048576]"),
                number("layer_norm_eps", model.layer_norm_eps, 1e-30, 1.0, "a number in (0, 1], e.g. 1e-5"),
                choice("activation", model.activation, models::kActivations),
                number("type_vocab_size", model.type_vocab_size, 1, 1024, "an integer in [1, 1024]"),
                existing_path("init_from", model.init_from, base_dir, false),
                choice_list("init_missing", model.init_missing, models::kInitMissingParts)});
  const std::vector<std::string> stated = stated_keys(node);
  apply_init_from_config(model, stated);
  if (model.kind != "bert" && std::find(stated.begin(), stated.end(), "type_vocab_size") != stated.end())
    throw ConfigError("model.type_vocab_size: applies to model.kind: bert only (GPT-2 has no token types); remove the key");
}

// What the data section says that only the checks across sections can judge.
struct DataKeys {
  std::string path;              // data.path as written: whether a small vocabulary is allowed depends on it being a token shard
  bool mask_token_id = false;    // given: it means something to BERT only
};

DataKeys read_data(const YAML::Node& node, DataConfig& data, const std::filesystem::path& base_dir) {
  DataKeys given;
  const Field mask = number("mask_token_id", data.mask_token_id, -1, 1 << 22,
                            "a token id >= 0, or -1 for the vocabulary's [MASK] (the last id for the byte tokenizer)");
  read_section(node, "data",
               {{"path", [&](const YAML::Node& n, const std::string& where) {
                   if (!n.IsScalar() || n.Scalar().empty()) throw ConfigError(where + ": expected a file path");
                   given.path = n.Scalar();
                 }},
                {"tokenizer", [&](const YAML::Node& n, const std::string& where) {
                   choice("tokenizer", data.tokenizer, {"byte", "gpt2", "wordpiece"}).read(n, where);
                   data.tokenizer_given = true;
                 }},
                existing_path("vocab", data.vocab, base_dir, true),
                existing_path("merges", data.merges, base_dir, true),
                choice("lowercase", data.lowercase, {"auto", "true", "false"}),
                {"cache_dir", [&](const YAML::Node& n, const std::string& where) {
                   if (!n.IsScalar() || n.Scalar().empty()) throw ConfigError(where + ": expected a folder path");
                   data.cache_dir = std::filesystem::path(n.Scalar()).is_absolute() ? std::filesystem::path(n.Scalar()) : base_dir / n.Scalar();
                 }},
                choice("format", data.format, {"auto", "text", "shard"}),
                number("val_fraction", data.val_fraction, 0.0, 0.5, "a fraction in [0, 0.5]"),
                {"mask_token_id", [&](const YAML::Node& n, const std::string& where) {
                   mask.read(n, where);
                   given.mask_token_id = true;
                 }}});
  return given;
}

// The folder of a Hugging Face model that model.init_from names (the folder itself, or a weights file's).
std::filesystem::path init_from_folder(const std::filesystem::path& init_from) {
  if (init_from.empty()) return {};
  return std::filesystem::is_directory(init_from) ? init_from : init_from.parent_path();
}

// data.lowercase: auto, as the tokenizer_config.json beside the vocabulary says (do_lower_case), else true.
std::string resolved_lowercase(const DataConfig& d) {
  if (d.lowercase != "auto") return d.lowercase;
  std::ifstream in(d.vocab.empty() ? std::filesystem::path() : d.vocab.parent_path() / "tokenizer_config.json");
  const nlohmann::json tc = in ? nlohmann::json::parse(in, nullptr, false) : nlohmann::json();
  return tc.is_object() && tc.contains("do_lower_case") && tc["do_lower_case"] == false ? "false" : "true";
}

// data.vocab and data.merges, from model.init_from's folder when not given; data.lowercase: auto resolved.
// Raw text needs the files; a shard may do without (its sidecar may name them).
void resolve_tokenizer_files(DataConfig& d, const std::filesystem::path& init_from, bool text) {
  const std::string& kind = d.tokenizer;
  if (kind == "byte") {
    if (!d.vocab.empty() || !d.merges.empty())
      throw ConfigError("data.vocab: the byte tokenizer has no vocabulary file; set data.tokenizer: wordpiece or gpt2, or remove "
                        "data.vocab and data.merges");
    return;
  }
  if (kind == "wordpiece" && !d.merges.empty()) throw ConfigError("data.merges: WordPiece has no merges (that is gpt2's); remove the key");
  const std::filesystem::path folder = init_from_folder(init_from);
  const auto from_folder = [&](std::filesystem::path& file, const char* name) {
    if (file.empty() && !folder.empty() && std::filesystem::is_regular_file(folder / name)) file = folder / name;
  };
  const std::string vocab_name = kind == "wordpiece" ? "vocab.txt" : "vocab.json";
  from_folder(d.vocab, vocab_name.c_str());
  if (kind == "gpt2" && !d.vocab.empty()) from_folder(d.merges, "merges.txt");
  if (d.vocab.empty()) from_folder(d.vocab, "tokenizer.json");  // what transformers 5 saves alone
  const bool from_json = d.vocab.filename() == "tokenizer.json";
  if (from_json && !d.merges.empty()) throw ConfigError("data.merges: a tokenizer.json holds its merges; remove the key");
  const std::string where = folder.empty() ? std::string("; or set model.init_from to a Hugging Face folder that holds it")
                                           : fmt::format(" (model.init_from's folder '{}' has none)", folder.string());
  if (text && d.vocab.empty())
    throw ConfigError(fmt::format("data.vocab: missing; data.tokenizer: {} on text needs its {} or a tokenizer.json{}", kind, vocab_name, where));
  if (text && kind == "gpt2" && d.merges.empty() && !from_json)
    throw ConfigError(fmt::format("data.merges: missing; data.tokenizer: gpt2 on text needs merges.txt{}", where));
  d.lowercase = resolved_lowercase(d);
}

// optim.groups: a list of {params: pattern, frozen | lr_scale | weight_decay}. Patterns are checked for
// syntax here; what they match is known once the model is built (engine/param_groups.h).
std::vector<ParamGroup> read_param_groups(const YAML::Node& node, const std::string& where) {
  if (!node.IsSequence())
    throw ConfigError(where + ": expected a list of groups, e.g. [{params: \"*.bias|*LayerNorm*\", weight_decay: 0}]");
  std::vector<ParamGroup> groups(node.size());
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string at = fmt::format("{}[{}]", where, i);
    ParamGroup& g = groups[i];
    double lr_scale = 1, weight_decay = 0;
    bool has_params = false;
    read_section(node[i], at,
                 {{"params",
                   [&](const YAML::Node& n, const std::string& key) {
                     if (!n.IsScalar() || n.Scalar().empty()) throw ConfigError(key + ": expected a name pattern, e.g. \"cls.*\"");
                     try {
                       check_pattern(n.Scalar());
                     } catch (const std::invalid_argument& e) {
                       throw ConfigError(key + ": " + e.what());
                     }
                     g.params = n.Scalar(), has_params = true;
                   }},
                  {"frozen",
                   [&](const YAML::Node& n, const std::string& key) {
                     if (!n.IsScalar() || !YAML::convert<bool>::decode(n, g.frozen))
                       throw ConfigError(key + ": " + scalar_text(n) + " is not allowed; expected true or false");
                   }},
                  number("lr_scale", lr_scale, 0.0, 1e6, "a multiplier of optim.lr in [0, 1e6]"),
                  number("weight_decay", weight_decay, 0.0, 10.0, "a number in [0, 10]")});
    if (!node[i].IsMap() || !has_params) throw ConfigError(at + ": expected a mapping with a params pattern, e.g. {params: \"cls.*\", lr_scale: 10}");
    if (node[i]["lr_scale"]) g.lr_scale = lr_scale;
    if (node[i]["weight_decay"]) g.weight_decay = weight_decay;
    if (g.frozen && (g.lr_scale || g.weight_decay))
      throw ConfigError(at + ": a frozen group is never updated; drop its lr_scale and weight_decay, or frozen");
  }
  return groups;
}

void read_optim(const YAML::Node& node, OptimConfig& optim) {
  read_section(node, "optim",
               {number("lr", optim.lr, 0.0, 10.0, "a learning rate in [0, 10]"),
                {"betas",
                 [&](const YAML::Node& n, const std::string& where) {
                   double b1 = 0, b2 = 0;
                   if (!n.IsSequence() || n.size() != 2 || !YAML::convert<double>::decode(n[0], b1) ||
                       !YAML::convert<double>::decode(n[1], b2) || !(b1 >= 0 && b1 < 1) || !(b2 >= 0 && b2 < 1))  // NaN fails
                     throw ConfigError(where + ": " + scalar_text(n) + " is not allowed; expected [beta1, beta2] with each in [0, 1)");
                   optim.beta1 = b1, optim.beta2 = b2;
                 }},
                number("eps", optim.eps, 0.0, 1.0, "a number in [0, 1]"),
                number("weight_decay", optim.weight_decay, 0.0, 10.0, "a number in [0, 10]"),
                number("grad_clip", optim.grad_clip, 0.0, 1e9, "a max global norm >= 0 (0 disables)"),
                number("warmup_steps", optim.warmup_steps, 0, kIntMax, "an integer >= 0"),
                choice("schedule", optim.schedule, {"cosine", "constant"}),
                number("min_lr", optim.min_lr, 0.0, 10.0, "a learning rate in [0, 10]"),
                number("cpu_threads", optim.cpu_threads, 0, 4096, "an integer >= 0 (0: all cores)"),
                choice("isa", optim.isa, {"auto", "scalar", "avx2", "avx512"}),
                {"groups", [&](const YAML::Node& n, const std::string& where) { optim.groups = read_param_groups(n, where); }}});
}

void read_train(const YAML::Node& node, TrainConfig& train) {
  read_section(node, "train",
               {number("batch_size", train.batch_size, 1, 1 << 20, "an integer >= 1"),
                number("grad_accum", train.grad_accum, 1, 1 << 20, "an integer >= 1"),
                number("steps", train.steps, 1, kIntMax, "an integer >= 1"),
                number("seed", train.seed, 0, std::numeric_limits<uint64_t>::max(), "an integer >= 0"),
                number("log_every", train.log_every, 1, kIntMax, "an integer >= 1"),
                number("eval_every", train.eval_every, 0, kIntMax, "an integer >= 0 (0: start and end only)"),
                number("eval_batches", train.eval_batches, 1, 1 << 20, "an integer >= 1"),
                number("threads", train.threads, 0, 4096, "an integer >= 0 (0: all cores)"),
                number("checkpoint_every", train.checkpoint_every, 0, kIntMax, "an integer >= 0 (0: only when interrupted)"),
                number("keep_checkpoints", train.keep_checkpoints, 1, 1 << 20, "an integer >= 1"),
                number("seq_len", train.seq_len, 0, 1 << 20, "an integer >= 0 (0: model.seq_len)"),
                choice("precision", train.precision, {"bf16", "fp16", "fp32"}),
                {"loss_scale_init", [&](const YAML::Node& n, const std::string& where) {
                   double v = 0;
                   if (!n.IsScalar() || !YAML::convert<double>::decode(n, v) || v < 1 || v > 1e38 || std::exp2(std::round(std::log2(v))) != v)
                     throw ConfigError(where + ": " + scalar_text(n) + " is not allowed; expected a power of two >= 1, e.g. 65536");
                   train.loss_scale_init = v;
                 }},
                number("loss_scale_growth_interval", train.loss_scale_growth_interval, 1, kIntMax, "an integer >= 1"),
                {"checkpoint_dir", [&](const YAML::Node& n, const std::string& where) {
                   if (!n.IsScalar() || n.Scalar().empty()) throw ConfigError(where + ": expected a folder path");
                   train.checkpoint_dir = n.Scalar();  // relative to where ferry runs, like --metrics
                 }},
                {"activation_checkpointing", [&](const YAML::Node& n, const std::string& where) {
                   // YAML reads true/false as booleans; keep their spelling
                   const std::string v = n.IsScalar() ? n.Scalar() : "";
                   if (v != "auto" && v != "true" && v != "false")
                     throw ConfigError(where + ": " + scalar_text(n) + " is not allowed; expected auto, true or false");
                   train.activation_checkpointing = v;
                 }}});
}

void read_offload(const YAML::Node& node, OffloadConfig& offload, const std::filesystem::path& base_dir) {
  read_section(node, "offload",
               {{"bucket_mb", [&](const YAML::Node& n, const std::string& where) {
                   double mb = 0;
                   if (n.IsScalar() && n.Scalar() == "auto") return;
                   if (!n.IsScalar() || !YAML::convert<double>::decode(n, mb) || !(mb >= 0.25 && mb <= 65536))  // NaN fails
                     throw ConfigError(where + ": " + scalar_text(n) + " is not allowed; expected auto or MiB in [0.25, 65536]");
                   offload.bucket_bytes = static_cast<int64_t>(mb * (1 << 20));
                 }},
                choice("policy", offload.policy, {"resident", "zero-offload", "chunk-lru", "greedy"}),
                {"gpu_budget", [&](const YAML::Node& n, const std::string& where) {
                   if (!n.IsScalar()) throw ConfigError(where + ": " + scalar_text(n) + " is not a size; expected e.g. 8GiB, 512MiB or 1.5GB");
                   try {
                     offload.gpu_budget = parse_bytes(n.Scalar());
                   } catch (const std::invalid_argument& e) {
                     throw ConfigError(where + ": " + e.what());
                   }
                 }},
                existing_path("cost_model", offload.cost_model, base_dir, true),
                choice("overlap", offload.overlap, {"backward", "delayed", "pipelined"}),
                number("sync_steps", offload.sync_steps, 0, kIntMax, "an integer >= 0")});
}

// `device: cpu`, or `device: {kind: cpu, host: {link_gbps: 8}}`.
void read_device(const YAML::Node& node, std::string& device, HostDeviceConfig& host) {
  if (node && node.IsMap()) {
    read_section(node, "device",
                 {choice("kind", device, {"auto", "cpu", "cuda"}),
                  {"host", [&](const YAML::Node& n, const std::string& where) {
                     read_section(n, where, {number("link_gbps", host.link_gbps, 0.0, 1e4, "GB/s in [0, 10000] (0: unthrottled)")});
                   }}});
  } else if (node) {
    choice("device", device, {"auto", "cpu", "cuda"}).read(node, "device");
  }
}

// data.path, as written, made absolute against the config file's folder; the file must exist.
std::filesystem::path resolve_data_path(const std::string& data_path, const std::filesystem::path& base_dir) {
  if (data_path.empty()) throw ConfigError("data.path: missing; name the training text file");
  const std::filesystem::path path = std::filesystem::path(data_path).is_absolute() ? std::filesystem::path(data_path)
                                                                                    : base_dir / data_path;
  if (!std::filesystem::is_regular_file(path))
    throw ConfigError("data.path: '" + path.string() + "' does not exist or is not a file");
  return path;
}

// What no single key can check; also fills data.path and the default of optim.min_lr, which depend on others.
void check_across_keys(Config& c, const DataKeys& data, const std::filesystem::path& base_dir) {
  const std::string& data_path = data.path;
  if (c.model.n_embd % c.model.n_head != 0)
    throw ConfigError("model.n_embd: " + std::to_string(c.model.n_embd) + " is not a multiple of model.n_head (" +
                      std::to_string(c.model.n_head) + ")");
  const int byte_vocab = c.model.kind == "bert" ? 257 : 256;  // BERT: the bytes and [MASK]
  if (c.data.tokenizer == "byte" && c.model.vocab_size < byte_vocab &&
      !dataset::reads_as_token_shard(data_path, dataset::parse_data_format(c.data.format)))
    throw ConfigError("model.vocab_size: " + std::to_string(c.model.vocab_size) + " is smaller than the byte tokenizer's 256 symbols" +
                      (c.model.kind == "bert" ? std::string(" plus BERT's [MASK]; use at least 257") : std::string("; use at least 256")));
  c.data.path = resolve_data_path(data_path, base_dir);
  resolve_tokenizer_files(c.data, c.model.init_from,
                          !dataset::reads_as_token_shard(c.data.path, dataset::parse_data_format(c.data.format)));
  if (data.mask_token_id && c.model.kind != "bert")
    throw ConfigError("data.mask_token_id: applies to model.kind: bert only (this is " + c.model.kind +
                      ", which masks nothing); remove the key");
  if (c.data.mask_token_id >= c.model.vocab_size)
    throw ConfigError("data.mask_token_id: " + std::to_string(c.data.mask_token_id) + " is not below model.vocab_size " +
                      std::to_string(c.model.vocab_size));
  if (c.train.seq_len > c.model.seq_len)
    throw ConfigError("train.seq_len: " + std::to_string(c.train.seq_len) + " is beyond model.seq_len " + std::to_string(c.model.seq_len) +
                      " (the position table's rows: no position beyond it has an embedding); lower it or raise model.seq_len");
  if (!c.model.init_missing.empty() && c.model.init_from.empty())
    throw ConfigError("model.init_missing: says what model.init_from may lack, and model.init_from is not set; set it or remove the key");
  if (c.optim.min_lr > c.optim.lr)
    throw ConfigError("optim.min_lr: " + std::to_string(c.optim.min_lr) + " is above optim.lr");
  if (c.optim.min_lr < 0) c.optim.min_lr = c.optim.lr / 10;
}

}  // namespace

Config parse_config(const std::string& yaml, const std::string& origin, const std::filesystem::path& base_dir,
                    const std::vector<std::string>& overrides) {
  Config c;
  try {
    const YAML::Node root = load_root(yaml, overrides);
    check_section_names(root);
    read_model(root["model"], c.model, base_dir);
    const DataKeys data = read_data(root["data"], c.data, base_dir);
    read_optim(root["optim"], c.optim);
    read_train(root["train"], c.train);
    read_offload(root["offload"], c.offload, base_dir);
    read_device(root["device"], c.device, c.host_device);
    check_across_keys(c, data, base_dir);
  } catch (const ConfigError& e) {
    throw std::runtime_error(origin + ": " + e.what());
  }
  return c;
}

DType Config::precision() const {
  return train.precision == "fp32" ? DType::F32 : train.precision == "fp16" ? DType::F16 : DType::BF16;
}

int Config::sequence() const { return train.seq_len > 0 ? train.seq_len : model.seq_len; }

int Config::threads() const {
  return train.threads > 0 ? train.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

int64_t Config::bucket_bytes() const {
  return offload.bucket_bytes > 0 ? offload.bucket_bytes : memory::BucketLayout::kDefaultBucketBytes;
}

int64_t parse_bytes(const std::string& text) {
  // A decimal number and a unit. std::from_chars, unlike std::stod, takes no leading space or sign, but it
  // does take nan and inf: the first character must be a digit or a point.
  const std::string not_a_size = "'" + text + "' is not a size; expected e.g. 8GiB, 512MiB or 1.5GB";
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || text.find_first_of("0123456789.") != 0 || ec == std::errc::invalid_argument)
    throw std::invalid_argument(not_a_size);
  std::string unit(end, text.data() + text.size());
  unit.erase(0, unit.find_first_not_of(' '));
  static const std::vector<std::pair<std::string, double>> units{
      {"", 1}, {"B", 1}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
      {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}};
  const auto it = std::find_if(units.begin(), units.end(), [&](const auto& u) { return u.first == unit; });
  if (it == units.end()) throw std::invalid_argument(not_a_size);
  // 0 would read as "not given", and 2^63 bytes no longer fit the int64_t every byte count is. A count of
  // bytes is taken as written (a double would round 2^63-1 up).
  int64_t exact = 0;
  const auto as_integer = std::from_chars(text.data(), end, exact);
  const bool integer = it->second == 1 && as_integer.ptr == end && as_integer.ec == std::errc();
  const double bytes = integer ? double(exact) : ec == std::errc::result_out_of_range ? HUGE_VAL : value * it->second;
  if (integer ? exact < 1 : !(bytes >= 1 && bytes < 9223372036854775808.0))
    throw std::invalid_argument("'" + text + "' is out of range; expected at least 1 byte and less than 8 EiB (2^63 bytes), "
                                "e.g. 8GiB");
  if (integer) return exact;
  return static_cast<int64_t>(bytes);
}

namespace {

// optim.groups as one text (only when groups are given: configs without them keep their earlier hash).
std::string param_groups_identity(const std::vector<ParamGroup>& groups) {
  std::string text;
  for (const ParamGroup& g : groups) {
    text += (text.empty() ? "" : "; ") + g.params + (g.frozen ? " frozen" : "");
    if (g.lr_scale) text += fmt::format(" lr_scale {}", *g.lr_scale);
    if (g.weight_decay) text += fmt::format(" weight_decay {}", *g.weight_decay);
  }
  return text;
}

// The model's numeric choices, each only where it differs from what the architecture computed with before it
// could be chosen: checkpoints of those configs keep their hash.
void append_model_choices(const models::ModelConfig& m, std::vector<std::pair<std::string, std::string>>& identity) {
  if (m.mlp_width() != 4 * m.n_embd) identity.emplace_back("model.intermediate_size", fmt::format("{}", m.mlp_width()));
  if (m.norm_eps() != m.default_norm_eps()) identity.emplace_back("model.layer_norm_eps", fmt::format("{}", m.norm_eps()));
  if (m.gelu() != m.default_gelu()) identity.emplace_back("model.activation", m.gelu());
  if (m.kind == "bert" && m.type_vocab_size != 2) identity.emplace_back("model.type_vocab_size", fmt::format("{}", m.type_vocab_size));
}
}  // namespace

std::vector<std::pair<std::string, std::string>> config_identity(const Config& c) {
  const auto text = [](const auto& v) { return fmt::format("{}", v); };
  // The order and the formatting are the hash's: checkpoints of earlier builds keep resuming.
  std::vector<std::pair<std::string, std::string>> identity{{"model.kind", c.model.kind},
          {"model.n_layer", text(c.model.n_layer)},
          {"model.n_head", text(c.model.n_head)},
          {"model.n_embd", text(c.model.n_embd)},
          {"model.vocab_size", text(c.model.vocab_size)},
          {"model.seq_len", text(c.model.seq_len)},
          {"data.path (file name)", c.data.path.filename().string()},
          {"data.tokenizer", c.data.tokenizer},
          {"data.val_fraction", text(c.data.val_fraction)},
          {"optim.lr", text(c.optim.lr)},
          {"optim.betas[0]", text(c.optim.beta1)},
          {"optim.betas[1]", text(c.optim.beta2)},
          {"optim.eps", text(c.optim.eps)},
          {"optim.weight_decay", text(c.optim.weight_decay)},
          {"optim.grad_clip", text(c.optim.grad_clip)},
          {"optim.warmup_steps", text(c.optim.warmup_steps)},
          {"optim.schedule", c.optim.schedule},
          {"optim.min_lr", text(c.optim.min_lr)},
          {"train.batch_size", text(c.train.batch_size)},
          {"train.grad_accum", text(c.train.grad_accum)},
          {"train.steps", text(c.train.steps)},
          {"train.seed", text(c.train.seed)},
          {"data.mask_token_id", text(c.data.mask_token_id)},
          {"offload.overlap", c.offload.overlap},
          {"offload.sync_steps (delayed)", text(c.offload.overlap == "delayed" ? c.offload.sync_steps : 0)},
          {"train.precision", c.train.precision},
          {"train.loss_scale_init", text(c.train.loss_scale_init)},
          {"train.loss_scale_growth_interval", text(c.train.loss_scale_growth_interval)}};
  // Only when it differs from the position table's size: a config without it keeps its earlier hash.
  if (c.sequence() != c.model.seq_len) identity.emplace_back("train.seq_len", text(c.sequence()));
  if (c.data.tokenizer != "byte")  // the tokens depend on the vocabulary's contents too: the token cache's key says so
    for (const auto& [key, value] : {std::pair{"data.vocab (file name)", c.data.vocab.filename().string()},
                                     {"data.merges (file name)", c.data.merges.filename().string()}, {"data.lowercase", c.data.lowercase}})
      if (!value.empty()) identity.emplace_back(key, value);  // (state.json holds no empty values)
  if (!c.optim.groups.empty()) identity.emplace_back("optim.groups", param_groups_identity(c.optim.groups));
  append_model_choices(c.model, identity);
  return identity;
}

std::string config_hash(const Config& c) {
  std::string canonical;
  for (const auto& [key, value] : config_identity(c)) canonical += (canonical.empty() ? "" : "|") + value;
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a: stable across builds and platforms
  for (unsigned char ch : canonical) h = (h ^ ch) * 0x100000001b3ull;
  return fmt::format("{:016x}", h);
}

Config load_config(const std::filesystem::path& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path.string() + ": cannot open the config file");
  std::stringstream ss;
  ss << in.rdbuf();
  Config c = parse_config(ss.str(), path.string(), path.parent_path(), overrides);
  c.source = path;
  return c;
}

}  // namespace ferry::engine
