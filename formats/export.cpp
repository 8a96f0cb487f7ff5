// export_checkpoint: check the weights against their checksum and the model shape, copy them, write a
// GPT2Config or BertConfig; a failed export leaves no partial file, no temporary, and an earlier export in
// the folder as it was.
#include "formats/export.h"

#include <nlohmann/json.hpp>
#include <stdexcept>

#include "formats/atomic_file.h"
#include "formats/checkpoint.h"
#include "formats/hf_config.h"
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

// Both files under temporary names, on disk, before either replaces an earlier export's: a failure leaves
// the folder as it was.
void write_export(const std::filesystem::path& out, const std::vector<SafetensorsTensorRef>& weights, const nlohmann::json& config) {
  AtomicFile weights_file(out / "model.safetensors", "export"), config_file(out / "config.json", "export");
  write_safetensors(weights_file, weights, {{"format", "pt"}});
  config_file.write(config.dump(2) + "\n");
  weights_file.finish();
  config_file.finish();
  weights_file.commit();
  config_file.commit();
}

}  // namespace

ExportedCheckpoint export_checkpoint(const std::filesystem::path& checkpoint, const std::filesystem::path& out) {
  const auto [state, dir] = read_checkpoint_state(checkpoint);
  const models::ModelConfig& m = state.model;
  if ((m.kind != "gpt2" && m.kind != "bert") || m.n_layer <= 0)
    throw std::runtime_error("'" + dir.string() + "': export needs a GPT-2 or BERT checkpoint written by `ferry train`");
  const models::ModelSpec spec = build_model(m, 1, 1);
  ExportedCheckpoint exported{dir, state.step, false};
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
  std::error_code ec;
  const bool created = std::filesystem::create_directories(out, ec);
  if (ec) throw std::runtime_error("export: cannot create the folder '" + out.string() + "': " + ec.message());
  try {
    write_export(out, refs, hf_config(m));
  } catch (const std::exception&) {
    if (created) std::filesystem::remove(out, ec);  // the folder this export made, empty again
    throw;
  }
  return exported;
}

}  // namespace ferry::formats
