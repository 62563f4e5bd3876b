/* The backend kind: device memory and the op set models are written against (share/doc/keel/plugin-contract.md §1).
   Shapes follow llm.c's naming: B batch, T time, C channels, NH heads, V true vocabulary,
   Vp padded vocabulary, N rows. All tensors are dense, row-major fp32 (int32 for token ids) in
   the backend's memory. Every backward op ACCUMULATES (+=) into the gradients it writes, so a
   caller zeroes a gradient buffer once and several ops may add to it.
   Threading: one backend object is used from one thread at a time, except where noted. The CPU
   backend's thread count is process-wide (OpenMP and OpenBLAS): the last one created sets it. */
#ifndef KEEL_BACKEND_H
#define KEEL_BACKEND_H

#include "keel/host.h"
#include "keel/types.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
  KEEL_COPY_HOST_TO_DEVICE = 0,
  KEEL_COPY_DEVICE_TO_HOST = 1,
  KEEL_COPY_DEVICE_TO_DEVICE = 2
};

typedef struct keel_backend_create_args {
  size_t struct_size;
  const char* config_json; /* the "backend" section as JSON text; borrowed for the call */
  const char* json_path;   /* where that section sits in the config ("backend"), for messages */
} keel_backend_create_args;

typedef struct keel_backend_api {
  size_t struct_size;

  /* --- lifetime and configuration --- */
  /* Checks a config section without creating anything. */
  keel_status (*validate_config)(const keel_host* host, const char* config_json, const char* json_path);
  keel_status (*create)(const keel_host* host, const keel_backend_create_args* args, void** out_backend);
  void (*destroy)(void* backend);
  /* Where this backend's memory lives. */
  keel_status (*device)(void* backend, keel_device* out_device);
  /* Peak fp32 FLOP/s used as the MFU denominator: configured, or measured once. */
  keel_status (*peak_flops)(void* backend, double* out_flops_per_s);

  /* --- memory --- */
  /* Allocates `bytes` of device memory, zero-filled, 64-byte aligned; freed with free_memory. */
  keel_status (*alloc)(void* backend, size_t bytes, void** out_ptr);
  void (*free_memory)(void* backend, void* ptr);
  /* Synchronous: when it returns, dst holds the bytes and src may be reused. */
  keel_status (*copy)(void* backend, void* dst, const void* src, size_t bytes, int32_t direction);
  keel_status (*fill_zero)(void* backend, void* ptr, size_t bytes);
  /* Waits until every op issued so far has finished. */
  keel_status (*synchronize)(void* backend);

  /* --- ops, forward and backward --- */
  /* out(N,OC) = inp(N,IC) · weight(OC,IC)ᵀ + bias(OC); bias may be NULL. */
  keel_status (*matmul_forward)(void* backend, float* out, const float* inp, const float* weight,
                                const float* bias, int64_t N, int64_t IC, int64_t OC);
  /* dinp(N,IC) += dout·weight; dweight(OC,IC) += doutᵀ·inp; dbias(OC) += Σ_rows dout.
     Any of dinp, dweight, dbias may be NULL (not wanted). */
  keel_status (*matmul_backward)(void* backend, float* dinp, float* dweight, float* dbias,
                                 const float* dout, const float* inp, const float* weight,
                                 int64_t N, int64_t IC, int64_t OC);
  /* out(N,C) = (inp - mean) * rstd * weight + bias, eps 1e-5; saves mean(N) and rstd(N). */
  keel_status (*layernorm_forward)(void* backend, float* out, float* mean, float* rstd,
                                   const float* inp, const float* weight, const float* bias,
                                   int64_t N, int64_t C);
  keel_status (*layernorm_backward)(void* backend, float* dinp, float* dweight, float* dbias,
                                    const float* dout, const float* inp, const float* weight,
                                    const float* mean, const float* rstd, int64_t N, int64_t C);
  /* Causal multi-head self-attention. qkv(B,T,3C) holds q, k, v side by side, each (NH, C/NH);
     out(B,T,C). `saved` holds attention_saved_floats(B,T,C,NH) floats the backward needs;
     that call returns -1 (and sets the error) for a shape the backend cannot run. */
  int64_t (*attention_saved_floats)(void* backend, int64_t B, int64_t T, int64_t C, int64_t NH);
  keel_status (*attention_forward)(void* backend, float* out, float* saved, const float* qkv,
                                   int64_t B, int64_t T, int64_t C, int64_t NH);
  /* dqkv(B,T,3C) += ∂loss/∂qkv given dout(B,T,C). */
  keel_status (*attention_backward)(void* backend, float* dqkv, const float* dout, const float* qkv,
                                    const float* saved, int64_t B, int64_t T, int64_t C, int64_t NH);
  /* GELU, tanh approximation (GPT-2's). */
  keel_status (*gelu_forward)(void* backend, float* out, const float* inp, int64_t n);
  keel_status (*gelu_backward)(void* backend, float* dinp, const float* inp, const float* dout, int64_t n);
  /* out = a + b (residual connection); out may alias a or b. */
  keel_status (*add)(void* backend, float* out, const float* a, const float* b, int64_t n);
  /* dst += src (residual backward, gradient fan-in). */
  keel_status (*accumulate)(void* backend, float* dst, const float* src, int64_t n);
  /* x *= alpha */
  keel_status (*scale)(void* backend, float* x, float alpha, int64_t n);
  /* out(B,T,C) = wte[tokens[b,t]] + wpe[t]. */
  keel_status (*embedding_forward)(void* backend, float* out, const int32_t* tokens, const float* wte,
                                   const float* wpe, int64_t B, int64_t T, int64_t C);
  /* dwte += scatter of dout by token; dwpe += Σ_b dout. */
  keel_status (*embedding_backward)(void* backend, float* dwte, float* dwpe, const float* dout,
                                    const int32_t* tokens, int64_t B, int64_t T, int64_t C);
  /* Softmax over the first V of Vp columns of logits(N,Vp) into probs(N,Vp) (columns ≥ V set
     to 0; probs may alias logits), and losses(N) = -log probs[n, targets[n]]. A target < 0
     is ignored: its loss is 0. */
  keel_status (*crossentropy_forward)(void* backend, float* losses, float* probs, const float* logits,
                                      const int32_t* targets, int64_t N, int64_t V, int64_t Vp);
  /* dlogits(N,Vp) += (probs - onehot(targets)) * dloss for columns < V; rows whose target < 0
     get nothing. dloss is the same scalar for every row (the mean's 1/N times any outer factor). */
  keel_status (*crossentropy_backward)(void* backend, float* dlogits, const float* probs,
                                       const int32_t* targets, float dloss, int64_t N, int64_t V,
                                       int64_t Vp);
  /* *out_host = Σ x[i]² accumulated in double, for gradient-norm clipping. */
  keel_status (*sum_squares)(void* backend, const float* x, int64_t n, double* out_host);

  /* --- appended in 0.6: the vocabulary split over tensor-parallel ranks (Megatron's vocabulary-
     parallel embedding and cross-entropy). Optional: a model needs them only at tp > 1. --- */
  /* wte_rows holds rows [row_begin, row_begin+rows) of the embedding. out(B,T,C) = wte_rows[tok -
     row_begin] for a token in that range, else 0; plus wpe[t] when wpe is not NULL. */
  keel_status (*embedding_rows_forward)(void* backend, float* out, const int32_t* tokens, const float* wte_rows,
                                        const float* wpe, int64_t B, int64_t T, int64_t C, int64_t row_begin,
                                        int64_t rows);
  /* dwte_rows += scatter of dout by the tokens in [row_begin, row_begin+rows); dwpe (may be NULL)
     += Σ_b dout. */
  keel_status (*embedding_rows_backward)(void* backend, float* dwte_rows, float* dwpe, const float* dout,
                                         const int32_t* tokens, int64_t B, int64_t T, int64_t C, int64_t row_begin,
                                         int64_t rows);
  /* logits(N,cols) hold vocabulary columns [col_begin, col_begin+cols), of which the first
     valid_cols are real (the rest padding). stats(N,3) gets per row: the maximum m of the valid
     columns (-inf when there are none), Σ exp(logit - m) over them, and the logit of the row's
     target when the target lies in [col_begin, col_begin+valid_cols), else 0. */
  keel_status (*crossentropy_shard_stats)(void* backend, float* stats, const float* logits, const int32_t* targets,
                                          int64_t N, int64_t col_begin, int64_t valid_cols, int64_t cols);
  /* dlogits(N,cols) += (exp(logit - lse[n]) - onehot(target - col_begin)) * dloss over the valid
     columns, where lse(N) is each row's log Σ exp over the whole vocabulary; rows whose target
     < 0 get nothing. */
  keel_status (*crossentropy_shard_backward)(void* backend, float* dlogits, const float* logits, const float* lse,
                                             const int32_t* targets, float dloss, int64_t N, int64_t col_begin,
                                             int64_t valid_cols, int64_t cols);
} keel_backend_api;

#ifdef __cplusplus
}
#endif
#endif
