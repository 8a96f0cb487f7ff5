// Builder: how a model file writes its ModelSpec: parameters in checkpoint order, the batch inputs and the
// forward graph, one call per op. finish() derives the backward pass from that forward tape (models/backward.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/model_spec.h"
#include "models/vocab.h"

namespace ferry::models {

// The shape of one step's batch, and how its tokens attend to each other.
struct Sequence {
  int64_t batch = 1, seq = 1;  // B sequences of T tokens
  int64_t heads = 1;
  bool causal = true;  // GPT-2; false: BERT's bidirectional attention under a key padding mask
};

enum class WeightLayout { InOut, OutIn };  // HF Conv1D stores [in, out]; nn.Linear (and tied heads) [out, in]
enum class GeluForm { Tanh, Erf };         // GPT-2's approximation; BERT's exact form

// Each op method appends the forward op "<name>.fwd" and its outputs "<name>.out" (plus what the op saves for
// backward), takes its widths from its operands' shapes, and returns the output tensor.
class Builder {
 public:
  Builder(std::string kind, Sequence sequence);

  int param(const std::string& name, Shape shape);
  // A table indexed by token id, (vocab, rest...) outside the engine: padded_vocab(vocab, vocab_multiple) rows
  // inside it (models/vocab.h).
  int vocab_param(const std::string& name, int64_t vocab, Shape rest);
  // "<prefix>weight" and "<prefix>bias", the pair most layers hold: {weight, bias}.
  std::vector<int> weight_and_bias(const std::string& prefix, Shape weight, Shape bias);
  int input(const std::string& name);  // a (B,T) int32 batch input: tokens, targets, attention_mask

  int layer = -1;  // the transformer block the next ops belong to (-1: embeddings, head, loss)
  int64_t vocab_multiple = kVocabMultiple;  // what vocab_param pads to (1: no padding)

  // params: the embedding tables {tokens (V,C), positions (maxT,C)[, token type (2,C)]}, summed per token.
  int embedding(const std::string& name, const std::vector<int>& params, int tokens);
  int layernorm(const std::string& name, const std::vector<int>& params, int x, float eps = 1e-5f);
  // params: {w}. Its statistic (rstd) is fp32 whatever the precision.
  int rmsnorm(const std::string& name, const std::vector<int>& params, int x, float eps);
  // params: {W} or {W, bias}.
  int linear(const std::string& name, const std::vector<int>& params, int x, WeightLayout layout);
  // inputs: {qkv} packed (B,T,3C), {q, k, v, attention_mask}, or {q, k, v} with k and v of fewer heads than q
  // (grouped-query attention: their width says how many).
  int attention(const std::string& name, const std::vector<int>& inputs);
  // x (B,T,heads*head_size) rotated by position, Hugging Face's rotate_half pairing.
  int rope(const std::string& name, int x, int64_t heads, const RopeScaling& scaling);
  // silu(gate) * up, Llama's MLP activation.
  int swiglu(const std::string& name, int gate, int up);
  int gelu(const std::string& name, int x, GeluForm form);
  int residual(const std::string& name, int a, int b);
  // The loss: the mean over targets >= 0 of the softmax cross-entropy of logits (B,T,Vp), its softmax over the
  // first `vocab` columns of each row (the columns past them are the padded vocabulary's).
  int cross_entropy(const std::string& name, int logits, int targets, int64_t vocab);

  // Appends the backward pass, derived from the forward ops, and returns the finalized spec.
  ModelSpec finish() &&;

 private:
  int activation(const std::string& name, Shape shape);
  int statistic(const std::string& name, Shape shape);  // fp32 whatever the precision (TensorSpec::fixed_dtype)
  int64_t width(int tensor) const;  // the last dimension
  int forward(const std::string& name, OpKind kind, std::vector<int> params, std::vector<int> inputs,
              std::vector<int> outputs, const OpAttrs& attrs, double flops);
  OpAttrs rows_of(int64_t channels) const;
  OpAttrs sequence_attrs(int64_t channels) const;

  ModelSpec spec_;
  Sequence seq_;
};

}  // namespace ferry::models
