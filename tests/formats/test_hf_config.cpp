// config.json beside Hugging Face weights fills the model section: every key the YAML does not state takes
// config.json's value, a stated key that differs is an error naming both keys and values, and a computation
// Ferry does not have (another activation, relative positions, a decoder, an untied head) is refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "formats/hf_config.h"
#include "test_helpers.h"

namespace ferry::formats {
namespace {

using nlohmann::json;

// A model folder holding only config.json (nothing else is read): a GPT2Config or BertConfig as
// transformers writes it for a small model, with `changes` applied (a null change removes the key).
struct Folder {
  std::filesystem::path dir = testing::scratch_path("hf_config");
  models::ModelConfig model;

  Folder(const std::string& kind, const json& changes) {
    model.kind = kind;
    model.init_from = dir;
    std::filesystem::create_directories(dir);
    json cfg = kind == "llama"  ? json{{"model_type", "llama"},
                                      {"num_hidden_layers", 3},
                                      {"num_attention_heads", 4},
                                      {"num_key_value_heads", 2},
                                      {"hidden_size", 32},
                                      {"intermediate_size", 88},
                                      {"vocab_size", 300},
                                      {"max_position_embeddings", 40},
                                      {"hidden_act", "silu"},
                                      {"rms_norm_eps", 1e-5},
                                      {"tie_word_embeddings", false},
                                      {"attention_bias", false},
                                      {"mlp_bias", false},
                                      {"head_dim", 8},
                                      {"pretraining_tp", 1},
                                      {"rope_parameters",
                                        {{"rope_type", "llama3"},
                                         {"rope_theta", 500000.0},
                                         {"factor", 32.0},
                                         {"low_freq_factor", 1.0},
                                         {"high_freq_factor", 4.0},
                                         {"original_max_position_embeddings", 8192}}}}
               : kind == "bert" ? json{{"model_type", "bert"},
                                       {"num_hidden_layers", 3},
                                       {"num_attention_heads", 2},
                                       {"hidden_size", 32},
                                       {"intermediate_size", 96},
                                       {"vocab_size", 300},
                                       {"max_position_embeddings", 40},
                                       {"type_vocab_size", 3},
                                       {"hidden_act", "gelu_new"},
                                       {"layer_norm_eps", 1e-7},
                                       {"position_embedding_type", "absolute"},
                                       {"hidden_dropout_prob", 0.1},
                                       {"pad_token_id", 0}}
                                : json{{"model_type", "gpt2"},
                                       {"n_layer", 3},
                                       {"n_head", 2},
                                       {"n_embd", 32},
                                       {"vocab_size", 300},
                                       {"n_positions", 40},
                                       {"n_inner", nullptr},
                                       {"activation_function", "gelu_new"},
                                       {"layer_norm_epsilon", 1e-5},
                                       {"tie_word_embeddings", true},
                                       {"resid_pdrop", 0.1}};
    for (const auto& [key, value] : changes.items()) {
      if (value.is_null() && key != "n_inner") cfg.erase(key);
      else cfg[key] = value;
    }
    std::ofstream(dir / "config.json") << cfg.dump();
  }
  ~Folder() { std::filesystem::remove_all(dir); }

  // The model section after config.json filled it, the YAML stating `stated` (with the values set on `model`).
  models::ModelConfig filled(const std::vector<std::string>& stated = {"kind", "init_from"}) {
    apply_hf_config(model, stated);
    return model;
  }
  std::string error(const std::vector<std::string>& stated = {"kind", "init_from"}) {
    try {
      apply_hf_config(model, stated);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "no error";
  }
};

TEST(HfConfig, FillsEveryKeyTheYamlDoesNotState) {
  const models::ModelConfig bert = Folder("bert", json::object()).filled();
  EXPECT_EQ(bert.n_layer, 3);
  EXPECT_EQ(bert.n_head, 2);
  EXPECT_EQ(bert.n_embd, 32);
  EXPECT_EQ(bert.vocab_size, 300);
  EXPECT_EQ(bert.seq_len, 40);
  EXPECT_EQ(bert.mlp_width(), 96);
  EXPECT_EQ(bert.type_vocab_size, 3);
  EXPECT_DOUBLE_EQ(bert.norm_eps(), 1e-7);
  EXPECT_EQ(bert.gelu(), "gelu_tanh");

  const models::ModelConfig gpt = Folder("gpt2", json::object()).filled();
  EXPECT_EQ(gpt.n_layer, 3);
  EXPECT_EQ(gpt.n_embd, 32);
  EXPECT_EQ(gpt.seq_len, 40);
  EXPECT_EQ(gpt.mlp_width(), 4 * 32);  // n_inner null: 4 * n_embd
  EXPECT_DOUBLE_EQ(gpt.norm_eps(), 1e-5);
  EXPECT_EQ(gpt.gelu(), "gelu_tanh");
  const models::ModelConfig other = Folder("gpt2", {{"n_inner", 100}, {"activation_function", "gelu"}, {"layer_norm_epsilon", 1e-6}}).filled();
  EXPECT_EQ(other.mlp_width(), 100);
  EXPECT_EQ(other.gelu(), "gelu");
  EXPECT_DOUBLE_EQ(other.norm_eps(), 1e-6);
  EXPECT_EQ(Folder("bert", {{"hidden_act", "gelu"}}).filled().gelu(), "gelu");
  EXPECT_EQ(Folder("gpt2", {{"activation_function", "gelu_pytorch_tanh"}}).filled().gelu(), "gelu_tanh");
}

TEST(HfConfig, ModelTypeSetsTheKindUnlessTheYamlStatesIt) {
  Folder f("gpt2", {{"model_type", "bert"}, {"num_hidden_layers", 5}});
  EXPECT_EQ(f.filled({"init_from"}).kind, "bert");
  EXPECT_EQ(f.model.n_layer, 5);  // read with BertConfig's names once the kind is known
  EXPECT_NE(Folder("gpt2", {{"model_type", "bert"}}).error().find("config.json: model_type is \"bert\", and model.kind is gpt2"),
            std::string::npos);
  EXPECT_NE(
      Folder("gpt2", {{"model_type", "roberta"}})
          .error({"init_from"})
          .find("model_type is \"roberta\"; Ferry loads gpt2, bert and the Llama family (llama, mistral, qwen2) only"),
      std::string::npos);
}

TEST(HfConfig, KeysConfigJsonLacksKeepTheModelSection) {
  Folder f("bert", {{"intermediate_size", nullptr}, {"layer_norm_eps", nullptr}, {"hidden_act", nullptr}, {"type_vocab_size", nullptr}});
  const models::ModelConfig m = f.filled();
  EXPECT_EQ(m.mlp_width(), 4 * 32);
  EXPECT_DOUBLE_EQ(m.norm_eps(), 1e-12);
  EXPECT_EQ(m.gelu(), "gelu");
  EXPECT_EQ(m.type_vocab_size, 2);
  // A bare .safetensors file has no config.json to read; the folder's is found beside model.safetensors.
  EXPECT_EQ(hf_config_path(f.dir / "model.safetensors"), f.dir / "config.json");
  EXPECT_TRUE(hf_config_path(f.dir / "weights.safetensors").empty());
}

TEST(HfConfig, AStatedValueThatAgreesPassesAndOneThatDiffersNamesBoth) {
  Folder agree("bert", json::object());
  agree.model.n_embd = 32;
  agree.model.intermediate_size = 96;
  agree.model.layer_norm_eps = 1e-7;
  agree.model.activation = "gelu_tanh";
  EXPECT_EQ(agree.error({"kind", "init_from", "n_embd", "intermediate_size", "layer_norm_eps", "activation"}), "no error");
  Folder gpt_default_width("gpt2", json::object());
  gpt_default_width.model.n_embd = 32;
  gpt_default_width.model.intermediate_size = 128;  // what n_inner: null means
  EXPECT_EQ(gpt_default_width.error({"kind", "init_from", "n_embd", "intermediate_size"}), "no error");

  struct Case {
    std::string kind, yaml_key;
    void (*set)(models::ModelConfig&);
    std::string needle;
  };
  for (const Case& c : std::vector<Case>{
           {"gpt2", "n_embd", [](models::ModelConfig& m) { m.n_embd = 64; },
            "config.json: n_embd is 32, and model.n_embd is 64"},
           {"gpt2", "seq_len", [](models::ModelConfig& m) { m.seq_len = 1024; },
            "config.json: n_positions is 40, and model.seq_len is 1024: the weights were made with config.json's; "
            "remove model.seq_len (config.json "
            "then sets it) or set it to 40 (train.seq_len trains on shorter sequences)"},
           {"bert", "n_layer", [](models::ModelConfig& m) { m.n_layer = 12; },
            "config.json: num_hidden_layers is 3, and model.n_layer is 12"},
           {"bert", "intermediate_size", [](models::ModelConfig& m) { m.intermediate_size = 128; },
            "config.json: intermediate_size is 96, and model.intermediate_size is 128"},
           {"bert", "layer_norm_eps", [](models::ModelConfig& m) { m.layer_norm_eps = 1e-12; },
            "config.json: layer_norm_eps is 1e-07, and model.layer_norm_eps is 1e-12"},
           {"bert", "activation", [](models::ModelConfig& m) { m.activation = "gelu"; },
            "config.json: hidden_act is \"gelu_new\", and model.activation is gelu"},
           {"bert", "type_vocab_size", [](models::ModelConfig& m) { m.type_vocab_size = 2; },
            "config.json: type_vocab_size is 3, and model.type_vocab_size is 2"},
           {"llama", "rope_scaling.rope_type",
            [](models::ModelConfig& m) { m.kind = "llama", m.rope_scaling.rope_type = "default"; },
            "config.json: rope_parameters.rope_type is \"llama3\", and model.rope_scaling.rope_type is default"},
       }) {
    Folder f(c.kind, json::object());
    c.set(f.model);
    const std::string err = f.error({"kind", "init_from", c.yaml_key});
    EXPECT_NE(err.find(c.needle), std::string::npos) << err;
    EXPECT_NE(err.find("remove model." + c.yaml_key), std::string::npos) << err;
  }
}

TEST(HfConfig, EveryKeyThatDiffersIsNamedInOneError) {
  Folder f("bert", json::object());
  f.model.n_layer = 12, f.model.n_embd = 768, f.model.seq_len = 512, f.model.intermediate_size = 128;
  const std::string err = f.error({"kind", "init_from", "n_layer", "n_embd", "seq_len", "intermediate_size"});
  EXPECT_NE(err.find("config.json: 4 keys differ from the model section, and the weights were made with config.json's:\n"),
            std::string::npos) << err;
  for (const char* line : {"\n  num_hidden_layers is 3, and model.n_layer is 12: remove model.n_layer (config.json then sets it) or set it to 3",
                           "\n  hidden_size is 32, and model.n_embd is 768: remove model.n_embd (config.json then sets it) or set it to 32",
                           "\n  max_position_embeddings is 40, and model.seq_len is 512: remove model.seq_len (config.json then sets it) or "
                           "set it to 40 (train.seq_len trains on shorter sequences)",
                           "\n  intermediate_size is 96, and model.intermediate_size is 128: remove model.intermediate_size (config.json then "
                           "sets it) or set it to 96"})
    EXPECT_NE(err.find(line), std::string::npos) << err;
  // GPT-2's n_inner: null is 4 * config.json's n_embd (the weights'), so a YAML width that matches it is no conflict.
  Folder gpt("gpt2", json::object());
  gpt.model.n_embd = 64, gpt.model.intermediate_size = 4 * 32;
  const std::string one = gpt.error({"kind", "init_from", "n_embd", "intermediate_size"});
  EXPECT_NE(one.find("config.json: n_embd is 32, and model.n_embd is 64: the weights were made with config.json's; remove model.n_embd"),
            std::string::npos) << one;
  EXPECT_EQ(one.find("n_inner"), std::string::npos) << one;
}

TEST(HfConfig, WhatFerryCannotComputeIsRefusedByName) {
  struct Case {
    std::string kind;
    json changes;
    std::string needle;
  };
  for (const Case& c : std::vector<Case>{
           {"bert", {{"hidden_act", "relu"}}, "config.json: hidden_act is \"relu\"; Ferry's BERT computes GELU only"},
           {"gpt2",
            {{"activation_function", "quick_gelu"}},
            "config.json: activation_function is \"quick_gelu\"; Ferry's GPT-2 computes GELU only"},
           {"bert",
            {{"position_embedding_type", "relative_key"}},
            "position_embedding_type is \"relative_key\"; Ferry's BERT computes only with position_embedding_type: "
            "\"absolute\""},
           {"bert", {{"is_decoder", true}}, "is_decoder is true; Ferry's BERT computes only with is_decoder: false"},
           {"bert",
            {{"add_cross_attention", true}},
            "add_cross_attention is true; Ferry's BERT computes only with add_cross_attention: false"},
           {"bert",
            {{"tie_word_embeddings", false}},
            "tie_word_embeddings is false; Ferry's BERT computes only with tie_word_embeddings: true"},
           {"gpt2",
            {{"tie_word_embeddings", false}},
            "tie_word_embeddings is false; Ferry's GPT-2 computes only with tie_word_embeddings: true"},
           {"gpt2",
            {{"scale_attn_weights", false}},
            "scale_attn_weights is false; Ferry's GPT-2 computes only with scale_attn_weights: true"},
           {"gpt2", {{"scale_attn_by_inverse_layer_idx", true}}, "scale_attn_by_inverse_layer_idx is true"},
           {"gpt2", {{"n_layer", 0}}, "config.json: n_layer is 0, not an integer in [1, 1024]"},
           {"bert", {{"hidden_size", "32"}}, "config.json: hidden_size is \"32\", not an integer in [1, 65536]"},
           {"bert",
            {{"layer_norm_eps", -1}},
            "config.json: layer_norm_eps is -1, not a number in [1e-30, 1] (a smaller epsilon vanishes in fp32"},
           {"bert", {{"layer_norm_eps", 1e-50}}, "config.json: layer_norm_eps is 1e-50, not a number in [1e-30, 1]"},
       }) {
    const std::string err = Folder(c.kind, c.changes).error();
    EXPECT_NE(err.find(c.needle), std::string::npos) << err;
  }
  Folder damaged("gpt2", json::object());
  std::ofstream(damaged.dir / "config.json") << "[1, 2]";
  EXPECT_NE(damaged.error().find("not a JSON object"), std::string::npos);
}

// LlamaConfig as transformers 5 writes it (rope_parameters), and as transformers 4 did (rope_theta beside
// rope_scaling); Mistral's and Qwen2's model_type are Llama's kind, Qwen2's with q/k/v biases.
TEST(HfConfig, LlamaFamilyFillsItsKeys) {
  const models::ModelConfig m = Folder("llama", json::object()).filled({"init_from"});
  EXPECT_EQ(m.kind, "llama");
  EXPECT_EQ(m.n_layer, 3);
  EXPECT_EQ(m.n_head, 4);
  EXPECT_EQ(m.kv_heads(), 2);
  EXPECT_EQ(m.mlp_width(), 88);
  EXPECT_EQ(m.seq_len, 40);
  EXPECT_DOUBLE_EQ(m.norm_eps(), 1e-5);
  EXPECT_DOUBLE_EQ(m.rope_theta, 500000.0);
  EXPECT_EQ(m.rope_scaling.rope_type, "llama3");
  EXPECT_DOUBLE_EQ(m.rope_scaling.factor, 32.0);
  EXPECT_EQ(m.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_FALSE(m.tie_word_embeddings);
  EXPECT_FALSE(m.attention_bias);

  const models::ModelConfig v4 = Folder("llama", {{"rope_parameters", nullptr},
                                                  {"rope_theta", 10000.0},
                                                  {"rope_scaling",
                                                   {{"type", "llama3"},
                                                    {"factor", 8.0},
                                                    {"low_freq_factor", 2.0},
                                                    {"high_freq_factor", 4.0},
                                                    {"original_max_position_embeddings", 64}}},
                                                  {"tie_word_embeddings", true}})
                                     .filled({"init_from"});
  EXPECT_DOUBLE_EQ(v4.rope_theta, 10000.0);
  EXPECT_EQ(v4.rope_scaling.rope_type, "llama3");
  EXPECT_DOUBLE_EQ(v4.rope_scaling.low_freq_factor, 2.0);
  EXPECT_EQ(v4.rope_scaling.original_max_position_embeddings, 64);
  EXPECT_TRUE(v4.tie_word_embeddings);

  const models::ModelConfig qwen2 =
      Folder(
          "llama",
          {{"model_type", "qwen2"}, {"attention_bias", nullptr}, {"use_sliding_window", false}, {"sliding_window", 4}})
          .filled({"init_from"});
  EXPECT_EQ(qwen2.kind, "llama");
  EXPECT_TRUE(qwen2.attention_bias);
  EXPECT_EQ(Folder("llama", {{"model_type", "mistral"}, {"sliding_window", 40}}).filled({"init_from"}).kind, "llama");

  // No parameter depends on max_position_embeddings: a shorter model.seq_len is no conflict.
  Folder shorter("llama", json::object());
  shorter.model.kind = "llama", shorter.model.seq_len = 16;
  EXPECT_EQ(shorter.filled({"kind", "init_from", "seq_len"}).seq_len, 16);
  Folder stated("llama", json::object());
  stated.model.kind = "llama", stated.model.rope_theta = 10000.0;
  EXPECT_NE(
      stated.error({"kind", "init_from", "rope_theta"}).find("rope_theta is 500000.0, and model.rope_theta is 10000"),
      std::string::npos);
}

TEST(HfConfig, WhatFerrysLlamaCannotComputeIsRefusedByName) {
  struct Case {
    json changes;
    std::string needle;
  };
  for (const Case& c : std::vector<Case>{
           {{{"hidden_act", "gelu"}},
            "config.json: hidden_act is \"gelu\"; Ferry's Llama computes only with hidden_act: \"silu\""},
           {{{"rope_parameters", {{"rope_type", "yarn"}, {"factor", 4.0}}}},
            "config.json: rope_parameters.rope_type is \"yarn\"; Ferry's Llama computes the default rotary embeddings "
            "and Llama 3's"},
           {{{"rope_parameters", nullptr}, {"rope_scaling", {{"type", "linear"}, {"factor", 2.0}}}},
            "rope_scaling.rope_type is \"linear\""},
           {{{"num_local_experts", 8}}, "config.json: num_local_experts is 8; Ferry's Llama has no mixture of experts"},
           {{{"num_experts", 60}}, "num_experts is 60; Ferry's Llama has no mixture of experts"},
           {{{"model_type", "mistral"}, {"sliding_window", 16}},
            "config.json: sliding_window is 16, shorter than the sequence (model.seq_len 40); Ferry's attention sees "
            "the whole "
            "sequence, which equals the window only as long as it: set model.seq_len to at most 16"},
           {{{"mlp_bias", true}}, "mlp_bias is true; Ferry's Llama computes only with mlp_bias: false"},
           {{{"head_dim", 16}},
            "head_dim is 16; Ferry's Llama computes with heads of hidden_size / num_attention_heads"},
       }) {
    const std::string err = Folder("llama", c.changes).error({"init_from"});
    EXPECT_NE(err.find(c.needle), std::string::npos) << err;
  }
}

TEST(HfConfig, ActivationNamesRoundTrip) {
  EXPECT_EQ(hf_activation_name("gelu"), "gelu");
  EXPECT_EQ(hf_activation_name("gelu_tanh"), "gelu_new");
  // What the export writes reads back as what it was.
  for (const std::string a : {"gelu", "gelu_tanh"}) EXPECT_EQ(Folder("bert", {{"hidden_act", hf_activation_name(a)}}).filled().gelu(), a);
}

}  // namespace
}  // namespace ferry::formats
