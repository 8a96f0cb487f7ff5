// export_checkpoint and export_starting_point: the weights (a checkpoint's, checked against their checksum,
// or those a run starts from) with the source's untrained tensors, config.json, the tokenizer files and the
// source folder's other files; a failed export leaves no partial file, no temporary, and the folder as it was.
#include "formats/export.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>

#include "foundation/atomic_file.h"
#include "formats/hf_config.h"
#include "formats/hf_source.h"
#include "formats/model_folder.h"
#include "formats/safetensors.h"
#include "formats/weights.h"

namespace ferry::formats {
namespace {

namespace fs = std::filesystem;

// LlamaConfig (or Qwen2Config: Hugging Face's Llama with attention_bias has an o_proj bias too, Qwen2's q, k
// and v biases alone are Ferry's).
nlohmann::json llama_config(const models::ModelConfig& m) {
  const bool qwen2 = m.attention_bias;
  nlohmann::json j{{"architectures", {qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"}},
                   {"model_type", qwen2 ? "qwen2" : "llama"},
                   {"num_hidden_layers", m.n_layer},
                   {"num_attention_heads", m.n_head},
                   {"num_key_value_heads", m.kv_heads()},
                   {"hidden_size", m.n_embd},
                   {"head_dim", m.n_embd / m.n_head},
                   {"intermediate_size", m.mlp_width()},
                   {"vocab_size", m.vocab_size},
                   {"max_position_embeddings", m.seq_len},
                   {"hidden_act", "silu"},
                   {"rms_norm_eps", m.norm_eps()},
                   {"rope_theta", m.rope_theta},
                   {"rope_scaling", nullptr},
                   {"tie_word_embeddings", m.tie_word_embeddings},
                   {"attention_dropout", 0.0},
                   {"initializer_range", 0.02},
                   {"torch_dtype", "float32"}};
  if (!qwen2) j.update({{"attention_bias", false}, {"mlp_bias", false}});
  else j.update({{"use_sliding_window", false}, {"sliding_window", nullptr}});
  // transformers 4 reads rope_theta and rope_scaling, 5 rope_parameters (or rope_scaling where both are).
  const models::RopeScalingConfig& r = m.rope_scaling;
  nlohmann::json rope{{"rope_type", r.rope_type}, {"rope_theta", m.rope_theta}};
  if (r.rope_type == "llama3") {
    rope.update({{"factor", r.factor},
                 {"low_freq_factor", r.low_freq_factor},
                 {"high_freq_factor", r.high_freq_factor},
                 {"original_max_position_embeddings", r.original_max_position_embeddings}});
    j["rope_scaling"] = rope;
    j["rope_scaling"].erase("rope_theta");
  }
  j["rope_parameters"] = rope;
  return j;
}

// Hugging Face's config.json for the model: GPT2Config, BertConfig or LlamaConfig.
nlohmann::json hf_config(const models::ModelConfig& m) {
  if (m.kind == "llama") return llama_config(m);
  return m.kind == "bert" ? nlohmann::json{{"architectures", {"BertForMaskedLM"}},
                                          {"model_type", "bert"},
                                          {"num_hidden_layers", m.n_layer},
                                          {"num_attention_heads", m.n_head},
                                          {"hidden_size", m.n_embd},
                                          {"intermediate_size", m.mlp_width()},
                                          {"vocab_size", m.vocab_size},
                                          {"max_position_embeddings", m.seq_len},
                                          {"type_vocab_size", m.type_vocab_size},
                                          {"hidden_act", hf_activation_name(m.gelu())},
                                          {"layer_norm_eps", m.norm_eps()},
                                          {"hidden_dropout_prob", 0.0},
                                          {"attention_probs_dropout_prob", 0.0},
                                          {"tie_word_embeddings", true},
                                          {"pad_token_id", 0},
                                          {"torch_dtype", "float32"}}
                         : nlohmann::json{{"architectures", {"GPT2LMHeadModel"}},
                                          {"model_type", "gpt2"},
                                          {"n_layer", m.n_layer},
                                          {"n_head", m.n_head},
                                          {"n_embd", m.n_embd},
                                          {"vocab_size", m.vocab_size},
                                          {"n_positions", m.seq_len},
                                          {"n_ctx", m.seq_len},
                                          {"n_inner", m.intermediate_size > 0 ? nlohmann::json(m.mlp_width()) : nlohmann::json(nullptr)},
                                          {"activation_function", hf_activation_name(m.gelu())},
                                          {"layer_norm_epsilon", m.norm_eps()},
                                          {"resid_pdrop", 0.0},
                                          {"embd_pdrop", 0.0},
                                          {"attn_pdrop", 0.0},
                                          {"tie_word_embeddings", true},
                                          {"bos_token_id", 0},
                                          {"eos_token_id", 0},
                                          {"torch_dtype", "float32"}};
}

// The source's config.json; null when it has none.
nlohmann::json source_config(const HfWeights& source) {
  const ModelFolder folder(source.folder, source.what);
  if (!folder.has("config.json")) return nullptr;
  nlohmann::json j = nlohmann::json::parse(folder.read("config.json"), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw std::runtime_error(fmt::format("{}: '{}' is not a JSON object (a config.json)", source.what,
                                         (source.folder / "config.json").string()));
  return j;
}

// The source model of a checkpoint's export: --source, else the run's model.init_from; it must still be there.
// Each is named as what it is: a run that never used model.init_from is not told about it.
fs::path export_source(const TrainState& state, const ExportOptions& options) {
  if (options.source) {
    if (!options.source->empty() && !fs::exists(*options.source))
      throw std::runtime_error(
          fmt::format("export: --source '{}' does not exist; name the Hugging Face model folder (or .safetensors "
                      "file) whose untrained tensors, config.json and tokenizer files the export carries, or "
                      "export without one with --source none",
                      options.source->string()));
    return *options.source;
  }
  const fs::path source = state.origin.init_from;
  if (!source.empty() && !fs::exists(source))
    throw std::runtime_error(fmt::format("export: the run started from '{}' (model.init_from), which is gone; the export carries its "
                                         "untrained tensors (BERT's pooler, ...), config.json and tokenizer files: restore it, name "
                                         "its copy with --source, or export without it with --source none",
                                         source.string()));
  return source;
}

// A tensor of a weights file as the export writes it: F32, BF16 or F16 (nullopt for another dtype).
std::optional<DType> float_dtype(const std::string& dtype) {
  if (dtype == "F32") return DType::F32;
  if (dtype == "BF16") return DType::BF16;
  if (dtype == "F16") return DType::F16;
  return std::nullopt;
}

// `names` for a message: the first `most`, then how many more.
std::string listed(const std::vector<std::string>& names, size_t most = 8) {
  if (names.size() <= most) return fmt::format("{}", fmt::join(names, ", "));
  return fmt::format("{} and {} more", fmt::join(names.begin(), names.begin() + most, ", "), names.size() - most);
}

// What the folder holds at its top, a folder's name with a trailing '/', sorted.
std::vector<std::string> entries_of(const fs::path& folder) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(folder, ec)) names.push_back(e.path().filename().string() + (e.is_directory() ? "/" : ""));
  std::sort(names.begin(), names.end());
  return names;
}

// The folder the export writes: never one it reads from (it would replace the weights it copies); one that
// holds files already only with options.overwrite, and then what it replaces and keeps is reported.
void check_out(const fs::path& out, const std::vector<fs::path>& read_from, const ExportOptions& options, ExportReport& report) {
  std::error_code ec;
  for (const fs::path& folder : read_from)
    if (!folder.empty() && fs::equivalent(out, folder, ec))
      throw std::runtime_error(fmt::format("export: --out '{}' is the folder of the model it exports ('{}'), whose files the export would "
                                           "replace; export into another folder",
                                           out.string(), folder.string()));
  const std::vector<std::string> held = entries_of(out);
  if (held.empty()) return;
  if (!options.overwrite)
    throw std::runtime_error(fmt::format("export: --out '{}' holds files already ({}); export into a new or empty folder, or add "
                                         "--overwrite to replace the export's own files there ({}) and keep the others",
                                         out.string(), listed(held), listed(report.files)));
  for (const std::string& file : report.files)
    if (fs::exists(out / file)) report.replaced.push_back(file);
  for (const std::string& name : held) {
    const std::string top = name.ends_with('/') ? name.substr(0, name.size() - 1) : name;
    const bool written = std::any_of(report.files.begin(), report.files.end(), [&](const std::string& f) {
      return f == top || f.starts_with(top + "/");
    });
    if (written) continue;
    report.kept.push_back(name);
    // An earlier export's tokenizer file that this one does not write would be read with these weights.
    const auto& tokenizer = tokenizer_file_names();
    if (std::find(tokenizer.begin(), tokenizer.end(), top) != tokenizer.end())
      report.note += fmt::format("{}kept {}, which this export does not write: AutoTokenizer reads it with these weights; remove it "
                                 "unless it is this model's",
                                 report.note.empty() ? "" : "; ", top);
  }
}

// The folders the export's files need that do not exist yet: `out` (and the folders above it) and the source's
// subfolders (1_Pooling/), parents first.
std::vector<fs::path> folders_to_make(const fs::path& out, const std::vector<ExportFile>& files) {
  std::set<fs::path> needed;
  for (fs::path dir = out; !dir.empty() && !fs::exists(dir); dir = dir.parent_path()) needed.insert(dir);
  for (const ExportFile& f : files)
    for (fs::path dir = fs::path(f.name).parent_path(); !dir.empty(); dir = dir.parent_path()) needed.insert(out / dir);
  std::vector<fs::path> missing;
  for (const fs::path& dir : needed)
    if (!fs::exists(dir)) missing.push_back(dir);
  return missing;  // std::set's order puts a folder before the folders inside it
}

// One weights file of the export: model.safetensors, or a shard of a sharded export.
struct Shard {
  std::string name;
  std::vector<SafetensorsTensorRef> tensors;
  int64_t bytes = 0;
};

int64_t tensor_bytes(const SafetensorsTensorRef& t) {
  if (!t.raw_dtype.empty()) return static_cast<int64_t>(t.raw_bytes);
  return models::numel(t.shape) * dtype_bytes(t.dtype);
}

// The tensors in order, cut into shards of at most `max_bytes` each (a larger tensor alone in its own), named
// as save_pretrained names them: model-00001-of-00004.safetensors, ...; a single one is model.safetensors.
std::vector<Shard> shards_of(const std::vector<SafetensorsTensorRef>& tensors, int64_t max_bytes) {
  std::vector<Shard> shards(1);
  for (const SafetensorsTensorRef& t : tensors) {
    const int64_t bytes = tensor_bytes(t);
    if (!shards.back().tensors.empty() && shards.back().bytes + bytes > max_bytes) shards.emplace_back();
    shards.back().tensors.push_back(t), shards.back().bytes += bytes;
  }
  if (shards.size() == 1) shards[0].name = "model.safetensors";
  for (size_t i = 0; i < shards.size() && shards.size() > 1; ++i)
    shards[i].name = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
  return shards;
}

// model.safetensors.index.json of a sharded export: every tensor's shard.
ExportFile shard_index(const std::vector<Shard>& shards) {
  nlohmann::json map = nlohmann::json::object();
  int64_t total = 0;
  for (const Shard& s : shards) {
    total += s.bytes;
    for (const SafetensorsTensorRef& t : s.tensors) map[t.name] = s.name;
  }
  return {"model.safetensors.index.json",
          nlohmann::json{{"metadata", {{"total_size", total}}}, {"weight_map", map}}.dump(2) + "\n"};
}

// Every file under a temporary name, on disk, before any replaces the folder's own: a failure leaves the
// folder as it was, and removes the folders this export made.
void write_export(const fs::path& out, const std::vector<Shard>& shards, const std::vector<ExportFile>& files) {
  std::vector<fs::path> made;
  try {
    for (const fs::path& dir : folders_to_make(out, files)) {
      std::error_code ec;
      fs::create_directory(dir, ec);
      if (ec) throw std::runtime_error("export: cannot create the folder '" + dir.string() + "': " + ec.message());
      made.push_back(dir);
    }
    std::vector<std::unique_ptr<AtomicFile>> written;
    for (const Shard& shard : shards) {
      written.push_back(std::make_unique<AtomicFile>(out / shard.name, "export"));
      write_safetensors(*written.back(), shard.tensors, {{"format", "pt"}});
    }
    for (const ExportFile& f : files) {
      written.push_back(std::make_unique<AtomicFile>(out / f.name, "export"));
      written.back()->write(f.bytes);
    }
    for (auto& f : written) f->finish();
    for (auto& f : written) f->commit();
  } catch (const std::exception&) {
    std::error_code ec;
    for (auto dir = made.rbegin(); dir != made.rend(); ++dir) fs::remove(*dir, ec);  // empty again: the temporaries are gone
    throw;
  }
}

// generation_config.json for a causal LM of the Llama family, unless the source carries its own: the special
// token ids config.json holds (none for the byte tokenizer).
std::optional<ExportFile> generation_config(const models::ModelConfig& m, const nlohmann::json& config,
                                            const std::vector<ExportFile>& carried) {
  if (m.kind != "llama") return std::nullopt;
  for (const ExportFile& f : carried)
    if (f.name == "generation_config.json") return std::nullopt;
  nlohmann::json g{{"_from_model_config", true}};
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"})
    if (config.contains(key) && !config[key].is_null()) g[key] = config[key];
  return ExportFile{"generation_config.json", g.dump(2) + "\n"};
}

// The export of the model `m`, whose parameters' tensors are `tensors`: with what `source` (an opened Hugging
// Face model; null: none) carries over, written into `out`. `read_from`: the folders the export reads.
void export_model(const models::ModelConfig& m, const models::ModelSpec& spec, std::vector<SafetensorsTensorRef> tensors,
                  const HfWeights* source, TokenizerOrigin tokens, const fs::path& out, std::vector<fs::path> read_from,
                  const ExportOptions& options, ExportReport& report) {
  nlohmann::json config;
  std::vector<ExportFile> carried;
  if (source) {
    std::vector<SafetensorsTensorRef> untrained = carried_tensors(*source, spec, tensors);
    for (const auto& t : untrained) report.carried.push_back(t.name);
    tensors.insert(tensors.end(), untrained.begin(), untrained.end());
    if (!source->folder.empty()) {
      config = source_config(*source);
      carried = carried_files(source->folder, out, &report.left_out);
      read_from.push_back(source->folder);
    }
    tokens.source_folder = source->folder, tokens.source_key = source->what;
  }
  std::vector<ExportFile> tokenizer = tokenizer_files(tokens, m, &report.note);
  nlohmann::json written_config = round_trip_config(config, hf_config(m));
  set_special_token_ids(tokens, tokenizer, written_config, carried);
  std::vector<ExportFile> files{{"config.json", written_config.dump(2) + "\n"}};
  if (std::optional<ExportFile> g = generation_config(m, written_config, carried)) files.push_back(std::move(*g));
  for (ExportFile& f : tokenizer) files.push_back(std::move(f));
  for (ExportFile& f : carried) {
    report.carried_files.push_back(f.name);
    files.push_back(std::move(f));
  }
  const std::vector<Shard> shards = shards_of(tensors, options.max_shard_bytes);
  if (shards.size() > 1) files.insert(files.begin(), shard_index(shards));
  for (const Shard& s : shards) report.files.push_back(s.name);
  for (const ExportFile& f : files) report.files.push_back(f.name);
  check_out(out, read_from, options, report);
  write_export(out, shards, files);
}

// What made the run's tokens (`kind`) and the files and special tokens its state records.
TokenizerOrigin tokenizer_origin(const std::string& kind, const TrainState::Origin& o) {
  TokenizerOrigin t;
  t.kind = kind, t.vocab = o.vocab, t.merges = o.merges, t.lowercase = o.lowercase;
  t.bos_token = o.bos_token, t.eos_token = o.eos_token;
  return t;
}

void check_exportable(const models::ModelConfig& m, const std::string& what) {
  if ((m.kind != "gpt2" && m.kind != "bert" && m.kind != "llama") || m.n_layer <= 0)
    throw std::runtime_error(what + ": export needs a GPT-2, BERT or Llama model");
}

}  // namespace

ExportReport export_checkpoint(const fs::path& checkpoint, const fs::path& out, const ExportOptions& options) {
  const auto [state, dir] = read_checkpoint_state(checkpoint);
  const models::ModelConfig& m = state.model;
  check_exportable(m, fmt::format("'{}' (a checkpoint written by `ferry train`)", dir.string()));
  const models::ModelSpec spec = build_model(m, 1, 1);
  ExportReport report;
  report.folder = dir, report.step = state.step;
  // Checked against its checksum; every tensor present, with its shape, and written from the file's own
  // bytes: no second copy of the weights.
  const SafetensorsFile weights = open_checkpoint_weights(dir, state, spec, &report.verified);
  std::vector<SafetensorsTensorRef> refs;
  for (const models::ParamSpec& p : spec.params) {
    const SafetensorsEntry* e = weights.find(p.name);
    const std::optional<DType> type = e ? float_dtype(e->dtype) : std::nullopt;
    if (!e || e->shape != p.file_shape() || !type)
      throw std::runtime_error(fmt::format("'{}' lacks {} as a floating-point tensor of its shape; the checkpoint is damaged",
                                           (dir / "model.safetensors").string(), p.name));
    refs.push_back({p.name, p.file_shape(), weights.data(*e), *type});
  }
  const fs::path source = export_source(state, options);
  std::optional<HfWeights> source_weights;  // its bytes stay in memory until the export is written
  if (!source.empty())
    source_weights = open_hf_weights(source, options.source ? "--source" : "model.init_from"), report.source = source;
  const TokenizerOrigin tokens = tokenizer_origin(state.tokenizer, state.origin);
  export_model(m, spec, std::move(refs), source_weights ? &*source_weights : nullptr, tokens, out, {dir}, options, report);
  return report;
}

ExportReport export_starting_point(const StartingPoint& start, const fs::path& out, const ExportOptions& options) {
  const models::ModelConfig& m = start.model;
  check_exportable(m, "model.kind");
  const models::ModelSpec spec = build_model(m, 1, 1);
  // What the run's masters start as: the seed's initialisation, then init_from's tensors over it (checked:
  // every one present with its shape, unless model.init_missing allows it).
  int64_t total = 0;
  for (const models::ParamSpec& p : spec.params) total += models::numel(p.shape);
  std::vector<float> initial(total);
  std::vector<std::span<float>> views;
  for (int64_t at = 0; const models::ParamSpec& p : spec.params) {
    views.push_back(std::span<float>(initial).subspan(at, models::numel(p.shape)));
    at += models::numel(p.shape);
  }
  models::init_model(m, spec, views, start.seed);
  ExportReport report;
  std::optional<HfWeights> source;
  std::map<std::string, std::pair<const SafetensorsFile*, const SafetensorsEntry*>> from_source;
  if (!m.init_from.empty()) {
    report.initialised = load_weights(m.init_from, spec, views, {m.init_missing});
    source = open_hf_weights(m.init_from, "model.init_from"), report.source = m.init_from;
    for (const SafetensorsFile& file : source->files)
      for (const SafetensorsEntry& e : file.entries())
        if (const std::string p = parameter_of(e.name, spec); !p.empty()) from_source[p] = {&file, &e};
  }
  // The source's own bytes where it has the tensor (in its dtype: bitwise), the initialisation elsewhere.
  std::vector<SafetensorsTensorRef> refs;
  for (size_t i = 0; i < spec.params.size(); ++i) {
    const models::ParamSpec& p = spec.params[i];
    const auto it = from_source.find(p.name);
    const std::optional<DType> type = it == from_source.end() ? std::nullopt : float_dtype(it->second.second->dtype);
    if (type) refs.push_back({p.name, p.file_shape(), it->second.first->data(*it->second.second), *type});
    else refs.push_back({p.name, p.file_shape(), views[i].data(), DType::F32});  // the real rows: the first elements
  }
  const TokenizerOrigin tokens = tokenizer_origin(start.tokenizer, start.origin);
  export_model(m, spec, std::move(refs), source ? &*source : nullptr, tokens, out, {}, options, report);
  return report;
}

}  // namespace ferry::formats
