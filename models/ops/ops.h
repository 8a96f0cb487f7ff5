// The math of every op of the models, CPU side, fp32: one function per op and pass, shapes in comments.
// Forward functions overwrite their outputs; backward functions ACCUMULATE (+=) into every gradient they
// write (activation and parameter grads alike), so residual branches, tied weights and micro-batches add up.
// Every reduction is split the same way whatever the thread count, so results are bitwise reproducible.
#pragma once

#include <cstdint>

namespace ferry::models::ops {

// ---- Embedding: out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
// tokens (B,T) int32; wte (V,C); wpe (maxT,C); out (B,T,C)
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t B,
                       int64_t T, int64_t C);
// dwte (V,C) += scatter of dout rows by token; dwpe (maxT,C) += sum over b of dout[b,t,:]
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B,
                        int64_t T, int64_t C);

// ---- LayerNorm over the last dim (eps 1e-5): out = (x - mean) * rstd * w + b
// x, out (N,C); w, b (C); mean, rstd (N) saved for backward
void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b,
                       int64_t N, int64_t C);
// dx (N,C) += ...; dw, db (C) += ...
void layernorm_backward(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w,
                        const float* mean, const float* rstd, int64_t N, int64_t C);

// ---- Linear: out (N,OC) = x (N,IC) @ W + bias (OC); bias may be null.
// W is [IC,OC] (HF Conv1D) or, with weight_out_in, [OC,IC] (nn.Linear, the tied LM head).
void linear_forward(float* out, const float* x, const float* W, const float* bias, int64_t N, int64_t IC,
                    int64_t OC, bool weight_out_in);
// dx (N,IC) += dout @ W^T; dW += x^T @ dout (laid out like W); dbias (OC) += column sums of dout.
void linear_backward(float* dx, float* dW, float* dbias, const float* dout, const float* x, const float* W,
                     int64_t N, int64_t IC, int64_t OC, bool weight_out_in);

// ---- Causal multi-head self-attention (GPT-2): qkv (B,T,3C) packed [q | k | v], heads of size C/NH.
// att (B,NH,T,T) softmax(q k^T / sqrt(hs)) with the causal mask, saved for backward; out (B,T,C).
void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C, int64_t NH);
// dqkv (B,T,3C) += ...
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int64_t B,
                        int64_t T, int64_t C, int64_t NH);

// ---- GELU, tanh form: out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); x, out (N)
void gelu_forward(float* out, const float* x, int64_t N);
void gelu_backward(float* dx, const float* dout, const float* x, int64_t N);

// ---- Residual add: out = a + b (N); backward: da += dout, db += dout
void residual_forward(float* out, const float* a, const float* b, int64_t N);
void residual_backward(float* da, float* db, const float* dout, int64_t N);

// ---- Softmax cross-entropy over the vocabulary, fused.
// logits (N,V), targets (N); losses (N) = logsumexp(logits) - logits[target].
void cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t N, int64_t V);
// dlogits (N,V) += dloss * (softmax(logits) - onehot(target)); dloss is d(total loss)/d(losses[i]), e.g. 1/N.
void cross_entropy_backward(float* dlogits, const float* logits, const int32_t* targets, float dloss, int64_t N,
                            int64_t V);

}  // namespace ferry::models::ops
