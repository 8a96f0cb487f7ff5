// The math of every op of the models, CPU side, fp32: one function per op and pass, shapes in comments.
// Forward functions overwrite their outputs; backward functions ACCUMULATE (+=) into every gradient they
// write (activation and parameter grads alike), so residual branches, tied weights and micro-batches add up;
// with `accumulate` false they write their activation gradients instead (every element, as + would onto zeros),
// for the op that produces them first. Parameter gradients always accumulate.
// Every reduction is split the same way whatever the thread count, so results are bitwise reproducible.
#pragma once

#include <cstdint>

#include "foundation/rope.h"

namespace ferry::kernels::cpu {

// ---- Embedding: out[b,t,:] = (wte[tokens[b,t],:] + type[:]) + wpe[t,:]
// tokens (B,T) int32; wte (V,C); wpe (maxT,C), null for Llama (no position table); type: BERT's token-type
// row 0 (C), null for GPT-2; out (B,T,C)
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t B,
                       int64_t T, int64_t C, const float* type = nullptr);
// dwte (V,C) += scatter of dout rows by token; dwpe (maxT,C) += sum over b of dout[b,t,:];
// dtype (C, may be null) += sum over b, t of dout[b,t,:]. Any gradient may be null (a frozen table).
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B,
                        int64_t T, int64_t C, float* dtype = nullptr);

// ---- LayerNorm over the last dim: out = (x - mean) * rstd * w + b, rstd = 1/sqrt(var + eps)
// x, out (N,C); w, b (C); mean, rstd (N) saved for backward. eps: 1e-5 (GPT-2), 1e-12 (BERT)
void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b,
                       int64_t N, int64_t C, float eps = 1e-5f);
// dx (N,C) += ...; dw, db (C) += ... (either may be null: a frozen parameter)
void layernorm_backward(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w,
                        const float* mean, const float* rstd, int64_t N, int64_t C, bool accumulate = true);

// ---- Linear: out (N,OC) = x (N,IC) @ W + bias (OC); bias may be null.
// W is [IC,OC] (HF Conv1D) or, with weight_out_in, [OC,IC] (nn.Linear, the tied LM head).
void linear_forward(float* out, const float* x, const float* W, const float* bias, int64_t N, int64_t IC,
                    int64_t OC, bool weight_out_in);
// dx (N,IC) += dout @ W^T; dW += x^T @ dout (laid out like W); dbias (OC) += column sums of dout. dW and
// dbias may be null (frozen).
void linear_backward(float* dx, float* dW, float* dbias, const float* dout, const float* x, const float* W, int64_t N,
                     int64_t IC, int64_t OC, bool weight_out_in, bool accumulate = true);

// ---- Multi-head self-attention, heads of size hs = C/NH.
// q, k, v: (B,T,C) views whose rows are row_stride floats apart (GPT-2: one packed (B,T,3C) [q | k | v],
// row_stride 3C; BERT: three (B,T,C) tensors, row_stride C). Query t sees key t2 when (not causal or
// t2 <= t) and (no key_mask or key_mask[b,t2] != 0); att (B,NH,T,T) = softmax(q k^T / sqrt(hs)) over the
// visible keys (0 elsewhere), saved for backward; out (B,T,C) = att v.
// Grouped-query attention (Llama): k, v are (B,T,KV*hs) with rows kv_row_stride apart and query head h
// reads key/value head h / (NH/KV); NH must be a multiple of KV. kv_heads 0: KV = NH; kv_row_stride 0:
// row_stride.
struct AttentionShape {
  int64_t B, T, C, NH;
  int64_t row_stride;
  bool causal = true;
  const int32_t* key_mask = nullptr;  // (B,T): 1 a real token, 0 padding
  int64_t kv_heads = 0;
  int64_t kv_row_stride = 0;
};
void attention_forward(float* out, float* att, const float* q, const float* k, const float* v, const AttentionShape& s);
// dq, dk, dv (the same views) += ...
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* att, const AttentionShape& s, bool accumulate = true);
// One query's attention over a key/value cache (decoding a causal LM a token at a time): q, out (NH*hs); k, v
// (len, KV*hs): the keys and values of positions 0..len-1, the query's own last; query head h reads key/value
// head h / (NH/KV). out = softmax(q k^T / sqrt(hs)) v per head.
void attention_decode(float* out, const float* q, const float* k, const float* v, int64_t len, int64_t NH, int64_t KV,
                      int64_t hs);
// GPT-2's causal attention on packed qkv (B,T,3C); dqkv (B,T,3C) += ...
void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C, int64_t NH);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int64_t B, int64_t T,
                        int64_t C, int64_t NH, bool accumulate = true);

// ---- GELU, tanh form (GPT-2): out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)));
//      erf form (BERT, exact = true): out = 0.5 x (1 + erf(x / sqrt(2))); x, out (N)
void gelu_forward(float* out, const float* x, int64_t N, bool exact = false);
void gelu_backward(float* dx, const float* dout, const float* x, int64_t N, bool exact = false, bool accumulate = true);

// ---- RMSNorm over the last dim (Llama): out = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps)
// x, out (N,C); w (C); rstd (N) saved for backward.
void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int64_t N, int64_t C, float eps);
// dx (N,C) += ...; dw (C) += ... (may be null: a frozen parameter)
void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                      int64_t N, int64_t C, bool accumulate = true);

// ---- Rotary position embedding (Hugging Face's rotate_half pairing) of q or k.
// x, out (B,T,H,hs), the rows of one token row_stride floats apart in both; with h2 = hs/2 and the angle
// a = (position0 + t) * rope_inv_freq(i, hs, scaling) for i < h2:
//   out[i] = x[i] cos a - x[i+h2] sin a;  out[i+h2] = x[i+h2] cos a + x[i] sin a.  Out of place.
struct RopeShape {
  int64_t B, T, H, hs;
  int64_t row_stride;
  RopeScaling scaling;
  int64_t position0 = 0;  // the first token's position (decoding one token after a key/value cache)
};
void rope_forward(float* out, const float* x, const RopeShape& s);
// dx += the rotation of dout by -a (dx, dout laid out as x)
void rope_backward(float* dx, const float* dout, const RopeShape& s, bool accumulate = true);

// ---- SwiGLU (Llama's MLP): out = silu(gate) * up, silu(g) = g / (1 + exp(-g)); gate, up, out (N)
void swiglu_forward(float* out, const float* gate, const float* up, int64_t N);
// dgate += dout * up * silu'(gate), silu'(g) = s (1 + g (1 - s)) with s = sigmoid(g); dup += dout * silu(gate)
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int64_t N,
                     bool accumulate = true);

// ---- Residual add: out = a + b (N); backward: da += dout, db += dout
void residual_forward(float* out, const float* a, const float* b, int64_t N);
void residual_backward(float* da, float* db, const float* dout, int64_t N, bool accumulate = true);

// ---- Softmax cross-entropy over the vocabulary, fused.
// logits (N,stride) of which the first V columns are the classes (the columns past them, a padded vocabulary's,
// are never read), targets (N); losses (N) = logsumexp(logits[:, :V]) - logits[target]; a negative target
// (BERT's -100: a position not chosen for the masked-LM loss) gives loss 0 and no gradient.
void cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t N, int64_t V,
                           int64_t stride);
// dlogits[:, :V] (N,stride) += dloss * (softmax(logits[:, :V]) - onehot(target)), the padded columns left as they
// are; dloss is d(total loss)/d(losses[i]), e.g. 1/(targets counted).
void cross_entropy_backward(float* dlogits, const float* logits, const int32_t* targets, float dloss, int64_t N,
                            int64_t V, int64_t stride, bool accumulate = true);

}  // namespace ferry::kernels::cpu
