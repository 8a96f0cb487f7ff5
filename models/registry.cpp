// build_model / init_model: dispatch on model.kind.
#include "models/registry.h"

#include <sstream>
#include <stdexcept>

#include "models/bert.h"
#include "models/gpt2.h"
#include "models/llama.h"

namespace ferry::models {

namespace {

bool exact_gelu(const ModelConfig& m) {
  const std::string gelu = m.gelu();
  if (gelu != "gelu" && gelu != "gelu_tanh")
    throw std::invalid_argument("model.activation: '" + gelu + "' is not an activation; expected gelu or gelu_tanh");
  return gelu == "gelu";
}

GptConfig gpt_config(const ModelConfig& m) {
  return {m.n_layer,
          m.n_head,
          m.n_embd,
          m.vocab_size,
          m.seq_len,
          m.mlp_width(),
          static_cast<float>(m.norm_eps()),
          exact_gelu(m),
          m.vocab_multiple};
}

LlamaConfig llama_config(const ModelConfig& m) {
  return {m.n_layer,        m.n_head,
          m.kv_heads(),     m.n_embd,
          m.vocab_size,     m.seq_len,
          m.mlp_width(),    static_cast<float>(m.norm_eps()),
          m.rope(),         m.tie_word_embeddings,
          m.attention_bias, m.vocab_multiple};
}

ModelSpec build_fp32(const ModelConfig& m, int64_t batch, int64_t seq) {
  if (m.kind == "gpt2") return build_gpt2(gpt_config(m), batch, seq);
  if (m.kind == "bert")
    return build_bert({m.n_layer, m.n_head, m.n_embd, m.vocab_size, m.seq_len, m.mlp_width(),
                       static_cast<float>(m.norm_eps()), exact_gelu(m), m.type_vocab_size, m.vocab_multiple},
                      batch, seq);
  if (m.kind == "llama") return build_llama(llama_config(m), batch, seq);
  throw std::invalid_argument("model.kind: '" + m.kind + "' is not a model; expected gpt2, bert or llama");
}

}  // namespace

RopeScaling ModelConfig::rope() const {
  RopeScaling r;
  r.theta = static_cast<float>(rope_theta);
  if (rope_scaling.rope_type == "llama3") {
    r.factor = static_cast<float>(rope_scaling.factor);
    r.low_freq_factor = static_cast<float>(rope_scaling.low_freq_factor);
    r.high_freq_factor = static_cast<float>(rope_scaling.high_freq_factor);
    r.original_max_position = static_cast<float>(rope_scaling.original_max_position_embeddings);
  }
  return r;
}

std::string choices_of(const ModelConfig& m) {
  std::ostringstream text;
  if (m.kind == "llama") {
    const RopeScalingConfig& s = m.rope_scaling;
    text << "intermediate_size " << m.mlp_width() << ", rms_norm_eps " << m.norm_eps() << ", num_key_value_heads "
         << m.kv_heads() << ", rope_theta " << m.rope_theta << ", rope_scaling " << s.rope_type;
    if (s.rope_type == "llama3")
      text << " (factor " << s.factor << ", low_freq_factor " << s.low_freq_factor << ", high_freq_factor "
           << s.high_freq_factor << ", original_max_position_embeddings " << s.original_max_position_embeddings << ")";
    text << ", tie_word_embeddings " << (m.tie_word_embeddings ? "true" : "false") << ", attention_bias "
         << (m.attention_bias ? "true" : "false");
    return text.str();
  }
  text << "intermediate_size " << m.mlp_width() << ", layer_norm_eps " << m.norm_eps() << ", activation " << m.gelu();
  if (m.kind == "bert") text << ", type_vocab_size " << m.type_vocab_size;
  return text.str();
}

ModelSpec build_model(const ModelConfig& m, int64_t batch, int64_t seq, DType precision) {
  ModelSpec spec = build_fp32(m, batch, seq);
  spec.set_precision(precision);
  return spec;
}

void init_model(const ModelConfig& m, const ModelSpec& spec, std::span<const std::span<float>> values, uint64_t seed) {
  fill_real_values(spec, init_rules(m, spec), values, seed);  // checks one view a parameter
}

void init_model(const ModelConfig& m, const ModelSpec& spec, ParameterStore& params, uint64_t seed) {
  init_model(m, spec, params.value_views(), seed);
}

std::vector<InitRule> init_rules(const ModelConfig& m, const ModelSpec& spec) {
  if (m.kind == "bert") return bert_init_rules(spec);
  if (m.kind == "llama") return llama_init_rules(spec);
  return gpt2_init_rules(spec, gpt_config(m));
}

}  // namespace ferry::models
