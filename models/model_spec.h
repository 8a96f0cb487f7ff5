// ModelSpec: a model as data. Its parameters (Hugging Face names and shapes) and the ordered op list of
// one training step, with each op's parameter uses, the tensors it reads and writes, lifetimes and FLOPs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "foundation/rope.h"
#include "memory/dtype.h"
#include "memory/planner.h"

namespace ferry::models {

using Shape = std::vector<int64_t>;
int64_t numel(const Shape& shape);

struct ParamSpec {
  std::string name;  // Hugging Face name, e.g. "transformer.h.0.attn.c_attn.weight"
  Shape shape;
  // Never updated (optim.groups): backward computes no gradient for it, so no gradient buffer, copy or
  // optimizer step is planned for it. Set after the model is built (engine/param_groups.h).
  bool frozen = false;
  // A table indexed by token id: its first dimension's real rows, the vocabulary; `shape` has padded_vocab of
  // them (models/vocab.h), the rows past it zero. 0: not such a table.
  int64_t vocab = 0;
  // The shape outside the engine (Hugging Face files, checkpoints, export): `shape` with only the real rows.
  // Row-major, so the real elements are the first numel(file_shape()) of the parameter.
  Shape file_shape() const;
};

// A tensor that is not a parameter: batch data, an activation, or an activation's gradient.
struct TensorSpec {
  std::string name;  // e.g. "h.0.ln_1.out", "h.0.ln_1.out.grad"
  Shape shape;
  DType dtype = DType::F32;
  bool is_grad = false;  // an activation's gradient: begun by one backward op, added into by later ones
  bool is_input = false; // filled from the batch before the step, not by an op
  // Stored in `dtype` whatever the training precision: token ids, and what numerics keep in fp32 (LayerNorm
  // statistics, per-token losses). Every other tensor is stored in the precision the step computes in.
  bool fixed_dtype = false;
  // The tensor whose memory this one takes (-1: none): the loss's gradient is written over the logits by the op
  // that reads them last, as llm.c's fused classifier does (memory::TensorLifetime::in_place_of).
  int in_place_of = -1;
  int64_t bytes() const { return numel(shape) * dtype_bytes(dtype); }
};

enum class OpKind { Embedding, LayerNorm, Linear, Attention, Gelu, Residual, CrossEntropy, RmsNorm, Rope, SwiGlu };
enum class Pass { Forward, Backward };
const char* to_string(OpKind kind);

// Shape attributes of an op; which fields matter depends on the kind (see kernels/cpu/ops.h).
struct OpAttrs {
  int64_t rows = 0;       // tokens: B*T
  int64_t in = 0, out = 0;    // Linear: in/out features. Norms, Gelu, Residual, Rope, SwiGlu: channels in `in`.
                              // CrossEntropy: `in` the logits' row (the padded vocabulary), `out` the classes of
                              // the softmax (the real vocabulary, the first `out` of each row)
  bool weight_out_in = false; // Linear: weight stored [out, in] (nn.Linear, tied LM head) vs [in, out] (HF Conv1D)
  int64_t batch = 0, seq = 0, heads = 0;  // Attention, Embedding; Rope: the heads of q or k it rotates
  int64_t kv_heads = 0;                   // Attention: key/value heads (grouped-query attention); 0: as many as heads
  bool causal = true;         // Attention: GPT-2's causal mask; false: BERT's bidirectional with key padding mask
  bool exact_gelu = false;    // Gelu: the erf form (BERT) instead of the tanh approximation (GPT-2)
  float eps = 1e-5f;          // LayerNorm, RmsNorm
  RopeScaling rope{};         // Rope: theta and Llama 3's scaling
};

// One op of the step. The tensor slots per kind and pass are fixed (documented in op_dispatch.cpp); an op reaches
// only for the parameters in `params` and the tensors in `inputs`/`outputs`.
struct OpSpec {
  std::string name;  // e.g. "h.0.attn.c_attn.fwd"
  OpKind kind;
  Pass pass;
  std::vector<int> params;   // forward: read; backward: read, and their grads accumulated
  std::vector<int> inputs;   // tensors read
  std::vector<int> outputs;  // tensors written (overwritten in forward, accumulated in backward)
  OpAttrs attrs;
  double flops = 0;
  int layer = -1;  // the transformer block this op belongs to (-1: embeddings, head, loss): the unit of
                   // activation checkpointing
  // Lifetimes, derived by ModelSpec::finalize(): tensors that begin life here, and whose last use is here.
  std::vector<int> creates;
  std::vector<int> frees;
};

struct ModelSpec {
  std::string kind;  // "gpt2"
  // The storage of the weights, their gradients, the activations and the activations' gradients on the
  // device (train.precision); tensors of a fixed dtype keep theirs. Set by set_precision.
  DType precision = DType::F32;
  std::vector<ParamSpec> params;
  std::vector<TensorSpec> tensors;
  std::vector<OpSpec> ops;  // forward ops, the loss, then backward ops in reverse

  int param_index(const std::string& name) const;   // throws when absent
  int tensor_index(const std::string& name) const;  // throws when absent
  int64_t param_count() const;                      // the real elements: a padded vocabulary's padding is not counted
  double step_flops() const;  // forward + backward
  double forward_flops() const;
  // Every tensor's bytes and live interval over the op list, for the memory Planner. The batch inputs
  // stay alive for the whole step, so a batch may serve several steps.
  std::vector<memory::TensorLifetime> tensor_lifetimes() const;
  // Parameter indices in the order the op list first uses them (the order buckets travel in).
  std::vector<int> params_in_first_use_order() const;

  // Derives each op's `creates`/`frees` from first and last use, and checks the op list: every tensor
  // read is live (written earlier or a batch input), parameter and tensor indices are in range.
  void finalize();
  // Whether backward op `op` writes its outputs (the gradients it produces first, every one of them) rather
  // than adding into them; an op that adds into a gradient another op began accumulates into all of its
  // outputs (those it creates zeroed first). False for forward ops, which overwrite theirs anyway.
  bool writes_gradients(const OpSpec& op) const;
  // Whether op `op` is the first to write tensor `t` and `t` is a gradient.
  bool creates_gradient(const OpSpec& op, int t) const;
  // Stores every tensor that is not of a fixed dtype (and every parameter) in `storage`: F32, BF16 or F16.
  void set_precision(DType storage);
};

}  // namespace ferry::models
