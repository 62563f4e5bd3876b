// The launchers of kernels/cuda, as the `cuda` backend plugin calls them: plain functions in
// llm.c's style, a shape comment on every buffer. `Elem` is the element type of the buffers typed
// void* (the compute type; fp32 buffers are typed float*). Every launcher queues its work on
// `stream` and returns at once; launch errors are read with cudaGetLastError by the caller.
// Backward launchers ACCUMULATE (+=) into gradients, as the ABI requires.
// One header for every .cu file: the plugin is their only user.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace keel::cuda {

enum class Elem { f32, bf16 };

// --- elementwise.cu ---
void add(Elem e, void* out, const void* a, const void* b, int64_t n, cudaStream_t stream);  // out may alias a, b
void accumulate(Elem e, void* dst, const void* src, int64_t n, cudaStream_t stream);
void scale(Elem e, void* x, float alpha, int64_t n, cudaStream_t stream);
// out(N,OC) = bias(OC) broadcast over rows, or 0 when bias is NULL (a matmul with IC = 0).
void fill_rows(Elem e, void* out, const void* bias, int64_t N, int64_t OC, cudaStream_t stream);
// dst(n) = src(n), fp32 <-> bf16 (round to nearest even), or a copy when the types agree.
void convert(Elem dst_elem, void* dst, Elem src_elem, const void* src, int64_t n, cudaStream_t stream);

// --- gelu.cu --- (tanh approximation, GPT-2's)
void gelu_forward(Elem e, void* out, const void* inp, int64_t n, cudaStream_t stream);
void gelu_backward(Elem e, void* dinp, const void* inp, const void* dout, int64_t n, cudaStream_t stream);

// --- layernorm.cu --- eps 1e-5; mean(N), rstd(N) fp32
void layernorm_forward(Elem e, void* out, float* mean, float* rstd, const void* inp, const void* weight,
                       const void* bias, int64_t N, int64_t C, cudaStream_t stream);
// dweight(C), dbias(C) fp32; any of dinp, dweight, dbias may be NULL. `scratch` holds
// layernorm_backward_scratch_floats(N, C) floats (the per-chunk sums of dweight and dbias).
int64_t layernorm_backward_scratch_floats(int64_t N, int64_t C);
void layernorm_backward(Elem e, void* dinp, float* dweight, float* dbias, const void* dout, const void* inp,
                        const void* weight, const float* mean, const float* rstd, int64_t N, int64_t C, float* scratch,
                        cudaStream_t stream);

// --- attention_forward.cu, attention_backward.cu --- causal, flash-style (never T×T), grouped-query:
// a qkv row holds NH query heads of hs = C/NH, then NKV key and NKV value heads (W = C + 2·NKV·hs);
// NKV = NH is multi-head attention (W = 3C).
constexpr int64_t kAttentionMaxHeadSize = 128;
// out(B,T,C), lse(B,NH,T) fp32 from qkv(B,T,W).
void attention_forward(Elem e, void* out, float* lse, const void* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                       int64_t NKV, cudaStream_t stream);
// dqkv(B,T,W) += given dout(B,T,C), out(B,T,C), lse(B,NH,T); `rowdot` is scratch of B·NH·T floats.
void attention_backward(Elem e, void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
                        float* rowdot, int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV, cudaStream_t stream);

// --- attention_block.cu --- attention over blocks (keel/backend.h keel_attention_args): query t
// of row b at index q_index0 + t sees the keys at indices i - p .. i of the key/value block (key s
// at kv_index0 + s), p its position (positions[b·Tq + t], or i when NULL). Scalar kernels, any hs
// up to kAttentionMaxHeadSize; a query that sees no key gets out 0 and lse -inf.
struct AttentionBlockShape {
  int64_t B, Tq, Tkv, NH, NKV, hs;
  int64_t q_stride, kv_stride, out_stride;
  int64_t q_index0, kv_index0;
  const int32_t* positions;
};
// out (B,Tq) rows of out_stride, lse (B,NH,Tq) fp32, from q and kv (rows of q_stride, kv_stride).
void attention_block_forward(Elem e, const AttentionBlockShape& s, void* out, float* lse, const void* q,
                             const void* kv, cudaStream_t stream);
// dq, dkv += the block's gradients; `rowdot` is scratch of B·NH·Tq floats.
void attention_block_backward(Elem e, const AttentionBlockShape& s, void* dq, void* dkv, const void* dout,
                              const void* out, const float* lse, const void* q, const void* kv, float* rowdot,
                              cudaStream_t stream);

// Two attentions of the same queries over disjoint key blocks merged by their statistics into out
// and lse (keel/backend.h attention_merge_dt); a thread per (row, head).
void attention_merge(Elem e, void* out, int64_t out_stride, float* lse, const void* out_b, int64_t out_b_stride,
                     const float* lse_b, int64_t B, int64_t T, int64_t NH, int64_t hs, cudaStream_t stream);

// dst(rows) = src(rows), or += with accumulate (keel/backend.h copy_rows_dt); a thread per element.
void copy_rows(Elem e, void* dst, int64_t dst_stride, const void* src, int64_t src_stride, int64_t rows, int64_t width,
               bool accumulate, cudaStream_t stream);

// --- nf4.cu --- out(n) at e = NF4 weights dequantized (keel/backend.h nf4_dequantize_dt's layout;
// the table comes from keel_support/common/nf4.hpp through the plugin).
struct Nf4Table {
  float values[16];
};
void nf4_dequantize(Elem e, void* out, const uint8_t* codes, const int8_t* block_scales, const float* scale_factors,
                    float scale_mean, const Nf4Table& table, int64_t n, cudaStream_t stream);

// --- fake_quantize.cu --- out(rows, cols) = inp fake-quantized per group of `group` columns,
// symmetric, `bits` bits (keel/backend.h fake_quantize_dt); out may be inp.
void fake_quantize(Elem e, void* out, const void* inp, int64_t rows, int64_t cols, int64_t group, int bits,
                   cudaStream_t stream);
// out(rows, cols) = inp with backend.h dropout_dt's hashed mask at drop probability p, kept
// elements scaled by 1 / (1 - p); out may be inp.
void dropout(Elem e, void* out, const void* inp, int64_t rows, int64_t cols, int64_t col_offset, uint64_t seed, float p,
             cudaStream_t stream);
// out(rows, cols) = inp fake-quantized per row, asymmetric (keel/backend.h fake_quantize_tokens_dt).
void fake_quantize_tokens(Elem e, void* out, const void* inp, int64_t rows, int64_t cols, int bits,
                          cudaStream_t stream);

// --- llama_ops.cu --- RMSNorm (rstd(N) fp32), rope in place, SwiGLU over side-by-side gate|up
void rmsnorm_forward(Elem e, void* out, float* rstd, const void* inp, const void* weight, int64_t N, int64_t C,
                     float eps, cudaStream_t stream);
// dinp(N,C) += , dweight(C) fp32 += ; either may be NULL.
// In layernorm.cu (LayerNorm's backward with no mean); `scratch` holds
// layernorm_backward_scratch_floats(N, C) floats when dweight is not NULL.
void rmsnorm_backward(Elem e, void* dinp, float* dweight, const void* dout, const void* inp, const void* weight,
                      const float* rstd, int64_t N, int64_t C, float* scratch, cudaStream_t stream);
// Turns `heads` heads of head_dim in each of B·T rows of x (row stride `stride`, first head at
// column `first`) by position · inv_freq (inv_freq(head_dim/2) fp32); backward turns back. Row r is
// at position positions[r] when `positions` ((B,T) int32) is given, else position0 + r % T.
void rope(Elem e, void* x, const float* inv_freq, int64_t B, int64_t T, int64_t heads, int64_t head_dim, int64_t stride,
          int64_t first, int64_t position0, bool backward, cudaStream_t stream, const int32_t* positions = nullptr);
// out(N,F) = silu(gate) · up from gate_up(N,2F); dgate_up(N,2F) += its gradient.
void swiglu_forward(Elem e, void* out, const void* gate_up, int64_t N, int64_t F, cudaStream_t stream);
void swiglu_backward(Elem e, void* dgate_up, const void* dout, const void* gate_up, int64_t N, int64_t F,
                     cudaStream_t stream);

// --- moe.cu --- a mixture-of-experts layer's routing and moves (keel/backend.h 0.19), as kernels/cpu
// moe_route.h and moe_permute.h compute them. Routing is fp32: logits, scores (N,E); weights,
// experts (N,K).
void moe_route(float* weights, int32_t* experts, float* scores, const float* logits, const float* selection_bias,
               int64_t N, int32_t E, int32_t K, bool sigmoid, bool normalize, cudaStream_t stream);
// dlogits(N,E) OVERWRITTEN; expert_dscores(E) may be NULL; z_grad 0: no z-loss.
void moe_route_backward(float* dlogits, const float* dweights, const float* logits, const float* scores,
                        const int32_t* experts, const float* expert_dscores, float z_grad, int64_t N, int32_t E,
                        int32_t K, bool sigmoid, bool normalize, cudaStream_t stream);
// positions(N,K), counts(E) int64 in device memory. *first_bad (device memory, set to ~0 by the
// caller) is lowered to the index of the first pair whose expert is outside [0,E), if any.
void moe_permute_plan(int32_t* positions, int64_t* counts, unsigned long long* first_bad, const int32_t* experts,
                      int64_t N, int32_t E, int32_t K, cudaStream_t stream);
// out(N·K,C)[positions[n,j]] = scale[n,j]·inp(N,C)[n] (scale NULL: 1).
void moe_permute(Elem e, void* out, const void* inp, const float* scale, const int32_t* positions, int64_t N, int32_t K,
                 int64_t C, cudaStream_t stream);
// out(N,C)[n] = Σ_j scale[n,j]·inp(N·K,C)[positions[n,j]], overwritten.
void moe_unpermute(Elem e, void* out, const void* inp, const float* scale, const int32_t* positions, int64_t N,
                   int32_t K, int64_t C, cudaStream_t stream);
// dscale(N,K) fp32 += Σ_c dout[n,c]·inp[positions[n,j],c].
void moe_unpermute_scale_backward(Elem e, float* dscale, const void* dout, const void* inp, const int32_t* positions,
                                  int64_t N, int32_t K, int64_t C, cudaStream_t stream);

// --- embedding.cu --- tokens(B,T) int32; a token outside [row_begin, row_begin+rows) reads zeros
// out(B,T,C) = wte_rows[tok - row_begin] + wpe[t] (wpe may be NULL).
void embedding_forward(Elem e, void* out, const int32_t* tokens, const void* wte_rows, const void* wpe, int64_t B,
                       int64_t T, int64_t C, int64_t row_begin, int64_t rows, cudaStream_t stream);
// dwte_rows(rows,C) += scatter of dout by token (deterministic: no float atomics; a negative token adds
// nothing); dwpe(T,C) += Σ_b dout. Either gradient may be NULL. B·T <= INT32_MAX. The scatter sorts
// positions by token in `scratch`, scratch_bytes >= embedding_backward_scratch_bytes(B, T, C) bytes
// (NULL and 0 when dwte_rows is NULL; 16-byte aligned for the vector paths); the stream orders its
// next user after these kernels. Returns the sort's error, or cudaErrorInvalidValue for too little scratch.
int64_t embedding_backward_scratch_bytes(int64_t B, int64_t T, int64_t C);  // host only, no allocation
cudaError_t embedding_backward(Elem e, float* dwte_rows, float* dwpe, const void* dout, const int32_t* tokens,
                               int64_t B, int64_t T, int64_t C, int64_t row_begin, int64_t rows, void* scratch,
                               int64_t scratch_bytes, cudaStream_t stream);

// --- crossentropy.cu --- logits(N,cols) hold vocabulary columns [col_begin, col_begin+cols)
// stats(N,3): max, Σ exp(x - max) over the first valid_cols columns, the target's logit (or 0).
void crossentropy_stats(Elem e, float* stats, const void* logits, const int32_t* targets, int64_t N, int64_t col_begin,
                        int64_t valid_cols, int64_t cols, cudaStream_t stream);
// stats(n_shards,N,3) -> lse(N); *loss_sum += weight · Σ_{target >= 0} (lse - target logit).
void crossentropy_combine(float* lse, float* loss_sum, const float* stats, int32_t n_shards, const int32_t* targets,
                          int64_t N, float weight, cudaStream_t stream);
// dlogits(N,cols) += (exp(x - lse) - onehot) * dloss over valid columns; `overwrite` writes the
// gradient instead (0 where there is none), for dlogits == logits.
void crossentropy_backward(Elem e, void* dlogits, const void* logits, const float* lse, const int32_t* targets,
                           float dloss, int64_t N, int64_t col_begin, int64_t valid_cols, int64_t cols, bool overwrite,
                           cudaStream_t stream);
// 0.1's fp32 pair: probs(N,Vp) (may alias logits), losses(N); dlogits(N,Vp) += (probs - onehot) * dloss.
void crossentropy_probs_forward(float* losses, float* probs, const float* logits, const int32_t* targets, int64_t N,
                                int64_t V, int64_t Vp, cudaStream_t stream);
void crossentropy_probs_backward(float* dlogits, const float* probs, const int32_t* targets, float dloss, int64_t N,
                                 int64_t V, int64_t Vp, cudaStream_t stream);

// --- reduce.cu --- two passes with a fixed grid and fixed trees: the same bits on every run
constexpr int kSumSquaresBlocks = 512;
// *acc += Σ x² in fp32; partial holds kSumSquaresBlocks floats.
void sum_squares(Elem e, const void* x, int64_t n, float* acc, float* partial, cudaStream_t stream);
// *out = Σ x² in double (fp32 x); partial holds kSumSquaresBlocks doubles.
void sum_squares_double(const float* x, int64_t n, double* out, double* partial, cudaStream_t stream);
// dbias(OC) += Σ_n dout(N,OC), in a fixed order per column.
void column_sum(Elem e, float* dbias, const void* dout, int64_t N, int64_t OC, float* scratch, cudaStream_t stream);
// The floats of column_sum's scratch (per-chunk sums).
int64_t column_sum_scratch_floats(int64_t N, int64_t OC);

// --- optimizer.cu --- the adamw and sgd plugins' rules, on fp32 arrays in place
// Hyperparameters are the config's doubles; terms formed from them are rounded to fp32 once.
void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, float lr, double beta1,
                  double beta2, double eps, double weight_decay, float grad_scale, int64_t step, cudaStream_t stream);
void sgd_update(float* params, const float* grads, float* momentum_buffer, int64_t n, float lr, double momentum,
                double dampening, bool nesterov, double weight_decay, float grad_scale, int64_t step,
                cudaStream_t stream);

}  // namespace keel::cuda
