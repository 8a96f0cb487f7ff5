// The CUDA ops: one plain C++ launch function per op and pass, beside the CPU ops of kernels/cpu/ops.h and with
// their shapes and accumulation rules: backward adds (+=) into parameter gradients always and into its activation
// gradients (dx, dgate/dup, da/db, dlogits) while `accumulate`, else writes them, every element, without reading
// them (kernels/op_kernels.h). Raw typed pointers in `type` storage (fp32, bf16 or
// fp16; mean/rstd, losses and the sums are fp32), math in fp32. Each returns the launch's cudaError_t, or
// cudaErrorInvalidValue for a type or shape it does not take. Built only with FERRY_WITH_CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "foundation/rope.h"
#include "kernels/adamw_math.h"
#include "memory/dtype.h"

namespace ferry::kernels::cuda {

// out (B,T,C) = (wte[tokens] + type) + wpe[t]; tokens (B,T) int32; type (C) may be null.
cudaError_t embedding_forward(void* out, const int32_t* tokens, const void* wte, const void* wpe, const void* type,
                              int64_t B, int64_t T, int64_t C, DType dtype, cudaStream_t stream);
// Scratch of embedding_backward (sorted tokens and positions, the radix sort's temporary, column partials).
// CUB sizes the sort's temporary for the current device: without one it counts 0 for it, and embedding_backward
// then refuses with CUB's error; a workspace is sized on the machine whose GPU uses it.
size_t embedding_backward_scratch_bytes(int64_t B, int64_t T, int64_t C);
// dwte (V,C), dwpe (maxT,C), dtype (C) += ... (each may be null: frozen); deterministic: tokens sorted (stable radix sort),
// one block per run of equal tokens summing its rows in position order; no float atomics.
cudaError_t embedding_backward(void* dwte, void* dwpe, void* dtype_row, const void* dout, const int32_t* tokens,
                               int64_t B, int64_t T, int64_t C, int64_t V, void* scratch, DType dtype,
                               cudaStream_t stream);

// x, out (N,C); w, b (C); mean, rstd (N) fp32.
cudaError_t layernorm_forward(void* out, float* mean, float* rstd, const void* x, const void* w, const void* b,
                              int64_t N, int64_t C, float eps, DType dtype, cudaStream_t stream);
// Floats of scratch layernorm_backward needs (column partials of dw and db; dw and db may be null: frozen).
int64_t layernorm_backward_scratch_floats(int64_t N, int64_t C);
// dx (N,C) += ... (= when not accumulating); dw, db (C) += ...
cudaError_t layernorm_backward(void* dx, void* dw, void* db, const void* dout, const void* x, const void* w,
                               const float* mean, const float* rstd, int64_t N, int64_t C, float* scratch,
                               bool accumulate, DType dtype, cudaStream_t stream);

// RMSNorm (Llama): x, out (N,C); w (C); rstd (N) fp32. out = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps).
cudaError_t rmsnorm_forward(void* out, float* rstd, const void* x, const void* w, int64_t N, int64_t C, float eps,
                            DType dtype, cudaStream_t stream);
// Floats of scratch rmsnorm_backward needs (column partials of dw; none when dw is null: frozen).
int64_t rmsnorm_backward_scratch_floats(int64_t N, int64_t C);
// dx (N,C) += ... (= when not accumulating); dw (C) += ... (may be null).
cudaError_t rmsnorm_backward(void* dx, void* dw, const void* dout, const void* x, const void* w, const float* rstd,
                             int64_t N, int64_t C, float* scratch, bool accumulate, DType dtype, cudaStream_t stream);

// Rotary position embedding of q or k (kernels/cpu/ops.h's rope_forward): x, out (B,T,H,hs), the rows of one
// token row_stride elements apart in both; hs even, at most 512. dx += (or =) the rotation of dout by -angle.
cudaError_t rope_forward(void* out, const void* x, int64_t B, int64_t T, int64_t H, int64_t hs, int64_t row_stride,
                         const RopeScaling& scaling, DType dtype, cudaStream_t stream);
cudaError_t rope_backward(void* dx, const void* dout, int64_t B, int64_t T, int64_t H, int64_t hs, int64_t row_stride,
                          const RopeScaling& scaling, bool accumulate, DType dtype, cudaStream_t stream);

// SwiGLU (Llama's MLP): out (N) = silu(gate) * up; dgate += dout * up * silu'(gate), dup += dout * silu(gate).
cudaError_t swiglu_forward(void* out, const void* gate, const void* up, int64_t N, DType dtype, cudaStream_t stream);
cudaError_t swiglu_backward(void* dgate, void* dup, const void* dout, const void* gate, const void* up, int64_t N,
                            bool accumulate, DType dtype, cudaStream_t stream);

// x, out (N); exact: the erf form (BERT), else tanh (GPT-2). dx += dout * gelu'(x).
cudaError_t gelu_forward(void* out, const void* x, int64_t N, bool exact, DType dtype, cudaStream_t stream);
cudaError_t gelu_backward(void* dx, const void* dout, const void* x, int64_t N, bool exact, bool accumulate,
                          DType dtype, cudaStream_t stream);

// out = a + b (N); da += dout, db += dout.
cudaError_t residual_forward(void* out, const void* a, const void* b, int64_t N, DType dtype, cudaStream_t stream);
cudaError_t residual_backward(void* da, void* db, const void* dout, int64_t N, bool accumulate, DType dtype,
                              cudaStream_t stream);

// dst (cols) += column sums of src (rows, cols): partial sums over chunks of rows, then the chunks in order; no
// atomics, so the same bits every run (Linear's dbias, BERT's token-type row). scratch: column_sums_scratch_bytes.
size_t column_sums_scratch_bytes(int64_t rows, int64_t cols);
cudaError_t column_sums(void* dst, const void* src, int64_t rows, int64_t cols, void* scratch, DType dtype, cudaStream_t stream);

// logits (N,stride) whose first V columns are the classes (the rest a padded vocabulary's, never read), targets
// (N) (< 0: ignored), losses (N) fp32; dlogits[:, :V] += dloss (softmax - onehot), the padded columns and ignored
// rows untouched; not accumulating: dlogits = the same, every element, zeros in the padded columns and ignored rows.
// The backward reads the forward's losses (each row's log-sum-exp is its loss + logits[r, target]); dlogits may be
// the logits' own memory.
cudaError_t cross_entropy_forward(float* losses, const void* logits, const int32_t* targets, int64_t N, int64_t V,
                                  int64_t stride, DType dtype, cudaStream_t stream);
cudaError_t cross_entropy_backward(void* dlogits, const void* logits, const int32_t* targets, const float* losses,
                                   float dloss, int64_t N, int64_t V, int64_t stride, bool accumulate, DType dtype,
                                   cudaStream_t stream);
// The same with dloss read from device memory when the kernel runs (an earlier kernel counted the targets on
// the device: no host round trip inside a step).
cudaError_t cross_entropy_backward_from_device(void* dlogits, const void* logits, const int32_t* targets,
                                               const float* losses, const float* dloss, int64_t N, int64_t V,
                                               int64_t stride, bool accumulate, DType dtype, cudaStream_t stream);

// The gradients' sum of squares (double) and inf/nan flag of grad (n): out[0] = {sum, nonfinite}.
// scratch: sum_squares_scratch_bytes(n).
size_t sum_squares_scratch_bytes(int64_t n);
struct SquaresResult {
  double sum;
  uint32_t nonfinite, pad;
};
cudaError_t sum_squares(SquaresResult* out, const void* grad, int64_t n, void* scratch, DType grad_type,
                        cudaStream_t stream);

// AdamW over n elements of the device tier: fp32 master, m, v; grad in grad_type; the working copy
// (weights, may be null) written in weight_type, bf16 stochastically rounded when `stochastic` (random
// bits of element i keyed by c.random_key, as the CPU optimizer draws them).
cudaError_t adamw(float* master, float* m, float* v, const void* grad, DType grad_type, void* weights,
                  DType weight_type, bool stochastic, int64_t n, const kernels::AdamWCoefficients& c,
                  cudaStream_t stream);

// The step decision as the device AdamW reads it from device memory, where a kernel computed it from the
// gradients' statistics (no host round trip): skip (an inf/nan gradient) or scale every gradient.
struct AdamWGate {
  float grad_scale;  // replaces c.grad_scale
  uint32_t skip;     // nonzero: nothing changes
};
// adamw under a gate read when the kernel runs.
cudaError_t adamw_gated(float* master, float* m, float* v, const void* grad, DType grad_type, void* weights,
                        DType weight_type, bool stochastic, int64_t n, const kernels::AdamWCoefficients& c,
                        const AdamWGate* gate, cudaStream_t stream);

}  // namespace ferry::kernels::cuda
