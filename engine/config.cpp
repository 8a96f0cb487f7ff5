// Loading an experiment file: the YAML text, the --set overrides, the keys read through the one table of
// engine/config_schema.cpp, then what no single key can check. Every error names the key, the value and what is
// allowed.
#include "engine/config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <thread>

#include "dataset/token_shard.h"
#include "dataset/tokenizer.h"
#include "engine/config_schema.h"
#include "formats/hf_config.h"
#include "formats/model_folder.h"
#include "foundation/regular_file.h"
#include "memory/bucket_layout.h"

namespace ferry::engine {
namespace {

// An override of a key inside parts[0..at] where the file has a value, not a section. When the table has a
// section there, the file is what to change (train: fast), so the error names the file's line, not the
// override's flag; otherwise the override names a key inside a key.
ConfigError not_a_section(const YAML::Node& node, const std::vector<std::string>& parts, size_t at,
                          const std::string& assignment) {
  const auto joined = [&](size_t begin, size_t end) {
    std::string name;
    for (size_t i = begin; i < end; ++i) name += (name.empty() ? "" : ".") + parts[i];
    return name;
  };
  const std::string section = joined(0, at + 1), inner = joined(at + 1, parts.size());
  const std::string value = assignment.substr(assignment.find('=') + 1);
  const auto& keys = config_keys();
  if (std::none_of(keys.begin(), keys.end(), [&](const ConfigKey& k) { return k.name.starts_with(section + "."); }))
    return ConfigError(
        fmt::format("--set {}: {} is a key, not a section with keys inside it; `ferry config` lists the keys",
                    assignment, section));
  const std::string line = node.Mark().is_null() ? "" : fmt::format(" (line {})", node.Mark().line + 1);
  const std::string is = node.IsScalar()     ? "the value '" + node.Scalar() + "'"
                         : node.IsSequence() ? "a list"
                                             : "not a mapping";
  return ConfigError(
      fmt::format("{}{} is {}, not a section of keys, so {}={} (from --set, --steps or --seed) has nowhere to go; "
                  "write {} as a mapping of keys, e.g. {}: {{{}: {}}}",
                  section, line, is, section + "." + inner, value, section, section, inner, value));
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
    else if (!parent[parts[i]].IsMap()) throw not_a_section(parent[parts[i]], parts, i, assignment);
    path.push_back(parent[parts[i]]);
  }
  YAML::Node leaf_parent = path.back();
  leaf_parent[parts.back()] = value;
}

// The YAML text as a mapping of sections, with the --set overrides applied. (A top level that is not a
// mapping is left for read_config_keys, which names the sections it expects.)
YAML::Node load_root(const std::string& yaml, const std::vector<std::string>& overrides) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    throw ConfigError("invalid YAML at line " + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (root.IsMap())
    for (const auto& o : overrides) apply_override(root, o);
  return root;
}

// model.init_from's config.json fills every key the model section does not state (formats/hf_config.h).
void apply_init_from_config(models::ModelConfig& model, const std::vector<std::string>& given) {
  std::vector<std::string> stated;
  for (const std::string& key : given)
    if (key.starts_with("model.")) stated.push_back(key.substr(6));
  try {
    formats::apply_hf_config(model, stated);
  } catch (const std::runtime_error& e) {
    throw ConfigError(std::string("model.init_from: ") + e.what());
  }
}

// Whether a key for `model_kind` ("bert", "gpt2 or bert") applies to the model kind `kind`.
bool applies_to(const std::string& model_kind, const std::string& kind) {
  for (size_t at = 0; at < model_kind.size();) {
    const size_t end = std::min(model_kind.find(" or ", at), model_kind.size());
    if (model_kind.substr(at, end - at) == kind) return true;
    at = end + 4;
  }
  return false;
}

// A key the table says applies to some model kinds (BERT's type_vocab_size, mask_token_id; Llama's rope),
// given for another. Checked once config.json has had its say on the kind.
void check_model_kind(const Config& c, const std::vector<std::string>& given) {
  for (const ConfigKey& key : config_keys())
    if (!key.model_kind.empty() && !applies_to(key.model_kind, c.model.kind) &&
        std::find(given.begin(), given.end(), key.name) != given.end())
      throw ConfigError(fmt::format("{}: applies to model.kind: {} only (this is {}); remove the key", key.name, key.model_kind,
                                    c.model.kind));
}

// The folder of a Hugging Face model that model.init_from names (the folder itself, or a weights file's).
std::filesystem::path init_from_folder(const std::filesystem::path& init_from) {
  if (init_from.empty()) return {};
  return std::filesystem::is_directory(init_from) ? init_from : init_from.parent_path();
}

// data.lowercase: auto, as the tokenizer_config.json beside the vocabulary says (do_lower_case), else true.
std::string resolved_lowercase(const DataConfig& d) {
  if (d.lowercase != "auto" || d.vocab.empty()) return d.lowercase == "auto" ? "true" : d.lowercase;
  const formats::ModelFolder folder(d.vocab.parent_path(),
                                    "data.lowercase: auto reads the tokenizer_config.json beside data.vocab");
  const nlohmann::json tc = folder.has("tokenizer_config.json")
                                ? nlohmann::json::parse(folder.read("tokenizer_config.json"), nullptr, false)
                                : nlohmann::json();
  return tc.is_object() && tc.contains("do_lower_case") && tc["do_lower_case"] == false ? "false" : "true";
}

// A tokenizer.json given as data.vocab under another name would be read as a vocab.txt or vocab.json, and
// fail on its first line that is not one.
void check_not_a_renamed_tokenizer_json(const DataConfig& d) {
  if (d.tokenizer == "hf" || d.vocab.empty() || d.vocab.filename() == "tokenizer.json" ||
      !dataset::is_tokenizer_json(d.vocab))
    return;
  throw ConfigError("data.vocab: " +
                    dataset::renamed_tokenizer_json(d.vocab, d.tokenizer == "gpt2" ? "vocab.json" : "vocab.txt"));
}

// Raw text needs its tokenizer's files: data.vocab (`vocab_name`), and gpt2's merges.txt unless it reads a
// tokenizer.json; the error says where they were looked for (model.init_from's `folder`).
void check_tokenizer_files_found(const DataConfig& d, const std::string& vocab_name, bool from_json,
                                 const std::filesystem::path& folder) {
  const std::string where = folder.empty()
                                ? std::string("; or set model.init_from to a Hugging Face folder that holds it")
                                : fmt::format(" (model.init_from's folder '{}' has none)", folder.string());
  if (d.vocab.empty())
    throw ConfigError(fmt::format("data.vocab: missing; data.tokenizer: {} on text needs its {}{}", d.tokenizer,
                                  d.tokenizer == "hf" ? vocab_name : vocab_name + " or a tokenizer.json", where));
  if (d.tokenizer == "gpt2" && d.merges.empty() && !from_json)
    throw ConfigError(fmt::format("data.merges: missing; data.tokenizer: gpt2 on text needs merges.txt{}", where));
}

// data.vocab and data.merges, from model.init_from's folder when not given; data.lowercase: auto resolved.
// Raw text needs the files; a shard may do without (its sidecar may name them).
void resolve_tokenizer_files(DataConfig& d, const std::filesystem::path& init_from, bool text) {
  const std::string& kind = d.tokenizer;
  if (kind == "byte") {
    if (!d.vocab.empty() || !d.merges.empty())
      throw ConfigError(
          "data.vocab: the byte tokenizer has no vocabulary file; set data.tokenizer: wordpiece, gpt2 or hf, or remove "
          "data.vocab and data.merges");
    return;
  }
  if (kind == "wordpiece" && !d.merges.empty()) throw ConfigError("data.merges: WordPiece has no merges (that is gpt2's); remove the key");
  check_not_a_renamed_tokenizer_json(d);
  const std::filesystem::path folder = init_from_folder(init_from);
  const std::optional<formats::ModelFolder> source =
      folder.empty() ? std::nullopt : std::optional(formats::ModelFolder(folder, "model.init_from"));
  const auto from_folder = [&](std::filesystem::path& file, const char* name) {
    if (file.empty() && source && source->has(name))
      file = source->file(name);  // refused by name when it is no regular file in it
  };
  const std::string vocab_name = kind == "wordpiece" ? "vocab.txt" : kind == "hf" ? "tokenizer.json" : "vocab.json";
  from_folder(d.vocab, vocab_name.c_str());
  if (kind == "gpt2" && !d.vocab.empty()) from_folder(d.merges, "merges.txt");
  if (d.vocab.empty()) from_folder(d.vocab, "tokenizer.json");  // what transformers 5 saves alone
  const bool from_json = kind == "hf" || d.vocab.filename() == "tokenizer.json";
  if (from_json && !d.merges.empty()) throw ConfigError("data.merges: a tokenizer.json holds its merges; remove the key");
  if (text) check_tokenizer_files_found(d, vocab_name, from_json, folder);
  d.lowercase = resolved_lowercase(d);
}

// data.path, made absolute against the config file's folder when it was read; the file must exist.
void check_data_path(const DataConfig& data) {
  if (data.path.empty()) throw ConfigError("data.path: missing; name the training text file");
  if (!std::filesystem::is_regular_file(data.path))
    throw ConfigError("data.path: '" + data.path.string() + "' does not exist or is not a file");
}

// Decoupled weight decay multiplies each weight by 1 - lr * weight_decay every step (cpu_optim/adamw_math.h):
// from lr * weight_decay = 1 on, that zeroes or flips every weight whatever its gradient, and beyond 2 it
// grows them without bound. Checked at optim.lr, the schedule's peak, for the optim section and each group.
void check_weight_decay(const OptimConfig& o) {
  const auto check = [&](const std::string& where, double lr_scale, double weight_decay, const std::string& lr_words) {
    const double lr = o.lr * lr_scale;
    if (lr * weight_decay < 1) return;
    throw ConfigError(
        fmt::format("{}: {:g} with {} multiplies every weight by 1 - {:g} * {:g} = {:g} each step (decoupled weight "
                    "decay), {} it whatever its gradient; keep the learning rate times weight_decay below 1, e.g. "
                    "weight_decay 0.1 at optim.lr 6e-4",
                    where, weight_decay, lr_words, lr, weight_decay, 1 - lr * weight_decay,
                    lr * weight_decay == 1 ? "zeroing" : "flipping the sign of"));
  };
  check("optim.weight_decay", 1, o.weight_decay, fmt::format("optim.lr {:g}", o.lr));
  for (size_t i = 0; i < o.groups.size(); ++i) {
    const ParamGroup& g = o.groups[i];
    if (g.frozen || !(g.lr_scale || g.weight_decay)) continue;  // frozen, or the optim section's settings
    const double lr_scale = g.lr_scale.value_or(1);
    check(fmt::format("optim.groups[{}].weight_decay", i), lr_scale, g.weight_decay.value_or(o.weight_decay),
          fmt::format("its learning rate {:g} (optim.lr {:g} times lr_scale {:g})", o.lr * lr_scale, o.lr, lr_scale));
  }
}

// Llama's heads: k and v heads each serve a whole number of query heads; rotary embeddings rotate pairs.
void check_llama_heads(const models::ModelConfig& m) {
  if (m.kind != "llama") return;
  if (m.n_head % m.kv_heads() != 0)
    throw ConfigError(fmt::format(
        "model.num_key_value_heads: {} does not divide model.n_head ({}); each key/value head serves a whole "
        "number of query heads: set a divisor of {}",
        m.kv_heads(), m.n_head, m.n_head));
  if ((m.n_embd / m.n_head) % 2 != 0)
    throw ConfigError(
        fmt::format("model.n_embd: the head size {} / {} = {} is odd; rotary embeddings rotate pairs of a head's "
                    "channels: make n_embd / n_head even",
                    m.n_embd, m.n_head, m.n_embd / m.n_head));
}

// optim.state: compact keeps bf16 weights that the CPU's AdamW updates in place: the weights travel as they
// are (bf16), no device AdamW holds a copy of the state, and no step reads the weights while they update.
void check_compact_state(const Config& c) {
  if (!c.optim.compact()) return;
  if (c.train.precision != "bf16")
    throw ConfigError("optim.state: compact stores the weights in bf16, and train.precision is " + c.train.precision +
                      "; set train.precision: bf16 or optim.state: exact");
  if (c.offload.policy == "resident")
    throw ConfigError(
        "optim.state: compact keeps the optimizer state on the host for the CPU's AdamW, and offload.policy: resident "
        "runs AdamW on the device; use offload.policy: greedy, zero-offload or chunk-lru, or optim.state: exact");
  if (c.offload.overlap == "delayed")
    throw ConfigError(
        "optim.state: compact updates the weights in place, and offload.overlap: delayed reads the old weights while "
        "they update; use offload.overlap: backward or pipelined, or optim.state: exact");
}

// What no single key can check; also fills the default of optim.min_lr, which depends on optim.lr.
void check_across_keys(Config& c) {
  if (c.model.n_embd % c.model.n_head != 0)
    throw ConfigError("model.n_embd: " + std::to_string(c.model.n_embd) + " is not a multiple of model.n_head (" +
                      std::to_string(c.model.n_head) + ")");
  check_llama_heads(c.model);
  const bool shard = dataset::reads_as_token_shard(c.data.path, dataset::parse_data_format(c.data.format));
  const int byte_vocab = c.model.kind == "bert" ? 257 : 256;  // BERT: the bytes and [MASK]
  if (c.data.tokenizer == "byte" && c.model.vocab_size < byte_vocab && !shard)
    throw ConfigError("model.vocab_size: " + std::to_string(c.model.vocab_size) + " is smaller than the byte tokenizer's 256 symbols" +
                      (c.model.kind == "bert" ? std::string(" plus BERT's [MASK]; use at least 257") : std::string("; use at least 256")));
  check_data_path(c.data);
  try {
    resolve_tokenizer_files(c.data, c.model.init_from, !shard);
  } catch (const ConfigError&) {
    throw;
  } catch (const std::runtime_error& e) {  // a file of model.init_from's folder, or one beside data.vocab
    throw ConfigError(e.what());
  }
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
  check_weight_decay(c.optim);
  check_compact_state(c);
}

}  // namespace

Config parse_config(const std::string& yaml, const std::string& origin, const std::filesystem::path& base_dir,
                    const std::vector<std::string>& overrides) {
  Config c;
  try {
    const std::vector<std::string> given = read_config_keys(load_root(yaml, overrides), base_dir, c);
    apply_init_from_config(c.model, given);
    check_model_kind(c, given);
    c.data.tokenizer_given = std::find(given.begin(), given.end(), "data.tokenizer") != given.end();
    check_across_keys(c);
  } catch (const ConfigError& e) {
    throw std::runtime_error(origin + ": " + e.what());
  }
  return c;
}

std::vector<std::string> config_warnings(const Config& c) {
  std::vector<std::string> warnings;
  if (c.optim.warmup_steps > c.train.steps)  // LrSchedule: step s of the warmup runs at lr * (s + 1) / warmup_steps
    warnings.push_back(fmt::format("optim.warmup_steps: {} is more than train.steps ({}): the run ends inside the warmup, and the "
                                   "learning rate never reaches optim.lr ({}), only {:.3g} ({:.0f}% of it) at the last step; lower "
                                   "optim.warmup_steps to at most {} or raise train.steps",
                                   c.optim.warmup_steps, c.train.steps, c.optim.lr, c.optim.lr * c.train.steps / c.optim.warmup_steps,
                                   100.0 * c.train.steps / c.optim.warmup_steps, c.train.steps));
  return warnings;
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
      {"", 1},         {"B", 1},    {"KiB", 0x1p10}, {"MiB", 0x1p20}, {"GiB", 0x1p30}, {"TiB", 0x1p40}, {"PiB", 0x1p50},
      {"EiB", 0x1p60}, {"KB", 1e3}, {"MB", 1e6},     {"GB", 1e9},     {"TB", 1e12},    {"PB", 1e15},    {"EB", 1e18}};
  const auto it = std::find_if(units.begin(), units.end(), [&](const auto& u) { return u.first == unit; });
  if (it == units.end()) throw std::invalid_argument(not_a_size);
  // 0 would read as "not given", and 2^63 bytes no longer fit the int64_t every byte count is. A count of
  // bytes is taken as written (a double would round 2^63-1 up). from_chars says only "out of range" for a
  // number beyond a double: its exponent's sign says which end.
  int64_t exact = 0;
  const auto as_integer = std::from_chars(text.data(), end, exact);
  const bool integer = it->second == 1 && as_integer.ptr == end && as_integer.ec == std::errc();
  const std::string number(text.data(), end);
  const size_t exponent = number.find_first_of("eE");
  const bool beyond = ec == std::errc::result_out_of_range,
             underflow = beyond && exponent != std::string::npos && number[exponent + 1] == '-';
  const double bytes = integer ? double(exact) : beyond ? (underflow ? 0.0 : HUGE_VAL) : value * it->second;
  if (integer ? exact < 1 : !(bytes >= 1))
    throw std::invalid_argument("'" + text + "' is too small: a size is at least 1 byte, e.g. 8GiB");
  if (!integer && !(bytes < 0x1p63))
    throw std::invalid_argument("'" + text +
                                "' is too large: a size is at most 2^63 - 1 bytes (just under 8 EiB), e.g. 8GiB");
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
  if (m.kind == "llama") identity.emplace_back("model (llama's choices)", models::choices_of(m));
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
  if (c.optim.compact()) identity.emplace_back("optim.state", c.optim.state);  // exact: the hash of earlier builds
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
  Config c = parse_config(read_regular_file(path, "the config file"), path.string(), path.parent_path(), overrides);
  c.source = path;
  return c;
}

}  // namespace ferry::engine
