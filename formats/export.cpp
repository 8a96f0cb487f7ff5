// export_checkpoint: check the weights against their checksum and the model shape, copy them with the
// source's untrained tensors, write config.json and the tokenizer files; a failed export leaves no partial
// file, no temporary, and an earlier export in the folder as it was.
#include "formats/export.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "foundation/atomic_file.h"
#include "formats/checkpoint.h"
#include "formats/hf_config.h"
#include "formats/hf_source.h"
#include "formats/safetensors.h"
#include "formats/weights.h"
#include "models/registry.h"

namespace ferry::formats {
namespace {

// Hugging Face's config.json for the model: GPT2Config or BertConfig.
nlohmann::json hf_config(const models::ModelConfig& m) {
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

// Every file under a temporary name, on disk, before any replaces an earlier export's: a failure leaves the
// folder as it was. Tokenizer files of an earlier export that this one does not write are removed after.
void write_export(const std::filesystem::path& out, const std::vector<SafetensorsTensorRef>& weights, const std::vector<ExportFile>& files) {
  AtomicFile weights_file(out / "model.safetensors", "export");
  std::vector<std::unique_ptr<AtomicFile>> others;
  write_safetensors(weights_file, weights, {{"format", "pt"}});
  for (const ExportFile& f : files) {
    others.push_back(std::make_unique<AtomicFile>(out / f.name, "export"));
    others.back()->write(f.bytes);
  }
  weights_file.finish();
  for (auto& f : others) f->finish();
  weights_file.commit();
  for (auto& f : others) f->commit();
  for (const std::string& name : tokenizer_file_names()) {
    std::error_code ec;
    if (std::none_of(files.begin(), files.end(), [&](const ExportFile& f) { return f.name == name; })) std::filesystem::remove(out / name, ec);
  }
}

nlohmann::json read_json_object(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return nullptr;
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw std::runtime_error("export: '" + path.string() + "' is not a JSON object (a config.json)");
  return j;
}

// The source model of the export: --source, else the run's model.init_from; it must still be there.
std::filesystem::path export_source(const TrainState& state, const ExportOptions& options) {
  const std::filesystem::path source = options.source ? *options.source : state.origin.init_from;
  if (!source.empty() && !std::filesystem::exists(source))
    throw std::runtime_error(fmt::format("export: the run started from '{}' (model.init_from), which is gone; the export carries its "
                                         "untrained tensors (BERT's pooler, ...), config.json and tokenizer files: restore it, name "
                                         "its copy with --source, or export without it with --source none",
                                         source.string()));
  return source;
}

}  // namespace

ExportedCheckpoint export_checkpoint(const std::filesystem::path& checkpoint, const std::filesystem::path& out, const ExportOptions& options) {
  const auto [state, dir] = read_checkpoint_state(checkpoint);
  const models::ModelConfig& m = state.model;
  if ((m.kind != "gpt2" && m.kind != "bert") || m.n_layer <= 0)
    throw std::runtime_error("'" + dir.string() + "': export needs a GPT-2 or BERT checkpoint written by `ferry train`");
  const models::ModelSpec spec = build_model(m, 1, 1);
  ExportedCheckpoint exported;
  exported.folder = dir, exported.step = state.step;
  // Checked against its checksum; every tensor present, with its shape, and written from the file's own
  // bytes: no second copy of the weights.
  const SafetensorsFile weights = open_checkpoint_weights(dir, state, spec, &exported.verified);
  std::vector<SafetensorsTensorRef> refs;
  for (const models::ParamSpec& p : spec.params) {
    const SafetensorsEntry* e = weights.find(p.name);
    const DType type = !e ? DType::I32 : e->dtype == "F32" ? DType::F32 : e->dtype == "BF16" ? DType::BF16 : e->dtype == "F16" ? DType::F16 : DType::I32;
    if (!e || e->shape != p.shape || type == DType::I32)
      throw std::runtime_error("'" + (dir / "model.safetensors").string() + "' lacks " + p.name +
                               " as a floating-point tensor of its shape; the checkpoint is damaged");
    refs.push_back({p.name, p.shape, weights.data(*e), type});
  }
  const std::filesystem::path source = export_source(state, options);
  std::vector<ExportFile> files;
  nlohmann::json source_config;
  TokenizerOrigin tokens{state.tokenizer, {}, state.origin.vocab, state.origin.merges, state.origin.lowercase};
  std::optional<HfWeights> source_weights;  // its bytes stay mapped until the export is written
  if (!source.empty()) {
    source_weights = open_hf_weights(source);
    std::vector<SafetensorsTensorRef> carried = carried_tensors(*source_weights, spec, refs);
    for (const auto& t : carried) exported.carried.push_back(t.name);
    refs.insert(refs.end(), carried.begin(), carried.end());
    if (!source_weights->folder.empty()) source_config = read_json_object(source_weights->folder / "config.json");
    tokens.source_folder = source_weights->folder;
    exported.source = source;
  }
  files.push_back({"config.json", round_trip_config(source_config, hf_config(m)).dump(2) + "\n"});
  for (ExportFile& f : tokenizer_files(tokens, m, &exported.note)) files.push_back(std::move(f));
  exported.files.push_back("model.safetensors");
  for (const ExportFile& f : files) exported.files.push_back(f.name);
  std::error_code ec;
  const bool created = std::filesystem::create_directories(out, ec);
  if (ec) throw std::runtime_error("export: cannot create the folder '" + out.string() + "': " + ec.message());
  try {
    write_export(out, refs, files);
  } catch (const std::exception&) {
    if (created) std::filesystem::remove(out, ec);  // the folder this export made, empty again
    throw;
  }
  return exported;
}

}  // namespace ferry::formats
