/* The backend kind: device memory and the op set models are written against (share/doc/keel/plugin-contract.md §1).
   Shapes follow llm.c's naming: B batch, T time, C channels, NH heads, V true vocabulary,
   Vp padded vocabulary, N rows. All tensors are dense and row-major in the backend's memory:
   fp32 (int32 for token ids) in the ops of 0.1-0.7, the compute type in the *_dt ops of 0.8. Every backward op ACCUMULATES (+=) into the gradients it writes, so a
   caller zeroes a gradient buffer once and several ops may add to it.
   Threading: one backend object is used from one thread at a time, except where noted (0.8:
   copy, the events and host memory). The CPU
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

/* The arguments of the attention over blocks (appended in 0.19): one op that packing (several
   documents in one row) and context parallelism (key/value blocks from other ranks, merged by
   their statistics) share. In each of B rows, query t sits at row index q_index0 + t and key s at
   kv_index0 + s. A query at index i whose position is p (positions[b,t]; i itself when positions
   is NULL) sees the keys at indices i - p .. i: causal, and inside its own document when the
   positions restart at each document's first token. Query head h (NH heads of hs channels) reads
   key/value head h / (NH/NKV); scores are scaled by 1/sqrt(hs). A query that sees no key of the
   block gets out 0 and lse -inf. Pointers are backend memory; elements are at dt, the
   statistics fp32. q, kv, dq and dkv may point into one buffer (a fused qkv row and its
   gradient). */
typedef struct keel_attention_args {
  size_t struct_size;
  keel_dtype dt;
  int32_t reserved;
  int64_t B, Tq, Tkv, NH, NKV, hs;
  const void* q;             /* (B,Tq) rows of q_stride elements, each NH·hs query channels first */
  int64_t q_stride;
  const void* kv;            /* (B,Tkv) rows of kv_stride elements: NKV·hs keys, then NKV·hs values */
  int64_t kv_stride;
  void* out;                 /* (B,Tq) rows of out_stride elements: NH·hs; forward writes it, the
                                backward reads it */
  int64_t out_stride;
  float* lse;                /* (B,NH,Tq): log Σ exp of each query's scaled scores over the keys it
                                sees; forward writes it, the backward reads it */
  const int32_t* positions;  /* (B,Tq) or NULL */
  int64_t q_index0, kv_index0;
  /* the backward's: dout at out's layout; dq and dkv += the gradients, at q's and kv's layouts */
  const void* dout;
  void* dq;
  void* dkv;
} keel_attention_args;

typedef struct keel_backend_api {
  size_t struct_size;

  /* --- lifetime and configuration --- */
  /* Checks a config section without creating anything. */
  keel_status (*validate_config)(const keel_host* host, const char* config_json, const char* json_path);
  keel_status (*create)(const keel_host* host, const keel_backend_create_args* args, void** out_backend);
  void (*destroy)(void* backend);
  /* Where this backend's memory lives. */
  keel_status (*device)(void* backend, keel_device* out_device);
  /* Peak FLOP/s used as the MFU denominator, configured or measured once: fp32 before 0.8; from
     0.8, of the arithmetic the matmuls use (fp32, TF32 or bf16 tensor cores). */
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
  /* fp32 only, matmul_forward through sum_squares: required of a backend declaring a minor before
     0.8; from 0.8 each may be NULL, its *_dt op standing in (a consumer that calls one itself
     asks for it at create). */
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

  /* --- appended in 0.8: the device-true contract (share/doc/keel/plugin-contract.md §1) ---

     Ordering. A backend owns one queue (a CUDA stream). Every op, fill_zero and copy_async runs
     on it in the order it was issued; the call returns once the op is queued, perhaps before it
     ran. copy and sum_squares (0.1) first wait for everything issued before them, so their
     results are on the host when they return. Host code never dereferences backend memory: it
     moves bytes with copy/copy_async and orders itself with synchronize or an event. A backend
     whose ops run as they are called (cpu) keeps the rule trivially.

     Element types. The *_dt ops take `dt`, the compute type (compute_dtype: fp32, or bf16 under
     "precision": "bf16"). It is the type of every activation and activation gradient (out, inp,
     qkv, dout, dinp, logits, ...) and of the parameters the op reads (weight, bias, wte, wpe).
     Weight gradients (dweight, dbias, dwte, dwpe) are fp32 whatever dt is, so micro-batches add
     up without rounding; so are layernorm's mean and rstd, cross-entropy statistics, lse and
     losses, and every scalar; tokens and targets are int32. Arithmetic and every accumulation
     is fp32 (bf16 is storage only: round to nearest even when stored). An op a backend cannot
     run at `dt` returns KEEL_ERR_UNIMPLEMENTED naming it. Pointers are void* because their
     element type is dt's; fp32 ones are typed. Backward ops accumulate as above. */

  /* KEEL_OK when the backend can run on this machine, else an error naming what is missing (no
     GPU, no driver): `keel plugins` lists the backend as unavailable with that reason, and a
     run that chooses it stops at start-up with it. Callable before create. */
  keel_status (*probe)(const keel_host* host);
  keel_status (*compute_dtype)(void* backend, keel_dtype* out_dtype);
  /* The queue's native handle for a device communicator on the same device (cudaStream_t);
     NULL for a backend whose ops run as they are called. */
  keel_status (*queue)(void* backend, void** out_queue);
  /* Events: record marks everything issued so far; wait makes ops issued later on this backend
     wait for it; synchronize blocks the host until it has passed. An event never recorded has
     passed. Thread-safe, like alloc_host, free_host and copy: a communication thread may stage
     through the backend while the training thread issues ops. */
  keel_status (*event_create)(void* backend, void** out_event);
  void (*event_destroy)(void* backend, void* event);
  keel_status (*event_record)(void* backend, void* event);
  keel_status (*event_wait)(void* backend, void* event);
  keel_status (*event_synchronize)(void* backend, void* event);
  /* Host memory the backend copies to and from without an intermediate (pinned), zero-filled,
     64-byte aligned: staging for host communicators and the offload tier. */
  keel_status (*alloc_host)(void* backend, size_t bytes, void** out_ptr);
  void (*free_host)(void* backend, void* ptr);
  /* A copy on the queue. Its host side must be alloc_host memory, left alone until an event
     recorded after the copy has passed. */
  keel_status (*copy_async)(void* backend, void* dst, const void* src, size_t bytes, int32_t direction);
  /* dst(n) = src(n) converted between fp32 and bf16 (or copied when the types agree). */
  keel_status (*convert)(void* backend, void* dst, keel_dtype dst_dtype, const void* src, keel_dtype src_dtype,
                         int64_t n);

  /* The op set of 0.1 and 0.6 at an element type (see the rules above). */
  /* As matmul_forward. When gelu_pre is not NULL it receives inp·weightᵀ + bias and out gets
     GELU of it (one matmul with a GELU epilogue, as cuBLASLt's). */
  keel_status (*matmul_forward_dt)(void* backend, keel_dtype dt, void* out, void* gelu_pre, const void* inp,
                                   const void* weight, const void* bias, int64_t N, int64_t IC, int64_t OC);
  keel_status (*matmul_backward_dt)(void* backend, keel_dtype dt, void* dinp, float* dweight, float* dbias,
                                    const void* dout, const void* inp, const void* weight, int64_t N, int64_t IC,
                                    int64_t OC);
  keel_status (*layernorm_forward_dt)(void* backend, keel_dtype dt, void* out, float* mean, float* rstd,
                                      const void* inp, const void* weight, const void* bias, int64_t N, int64_t C);
  keel_status (*layernorm_backward_dt)(void* backend, keel_dtype dt, void* dinp, float* dweight, float* dbias,
                                       const void* dout, const void* inp, const void* weight, const float* mean,
                                       const float* rstd, int64_t N, int64_t C);
  /* Bytes of `saved` the attention backward needs (the cpu keeps probabilities, T×T per head; a
     flash-style kernel keeps a log-sum-exp per row); -1 for a shape the backend cannot run. */
  int64_t (*attention_saved_bytes)(void* backend, keel_dtype dt, int64_t B, int64_t T, int64_t C, int64_t NH);
  keel_status (*attention_forward_dt)(void* backend, keel_dtype dt, void* out, void* saved, const void* qkv,
                                      int64_t B, int64_t T, int64_t C, int64_t NH);
  /* out is the forward's output (a flash-style backward needs it). */
  keel_status (*attention_backward_dt)(void* backend, keel_dtype dt, void* dqkv, const void* dout,
                                       const void* qkv, const void* out, const void* saved, int64_t B, int64_t T,
                                       int64_t C, int64_t NH);
  keel_status (*gelu_forward_dt)(void* backend, keel_dtype dt, void* out, const void* inp, int64_t n);
  keel_status (*gelu_backward_dt)(void* backend, keel_dtype dt, void* dinp, const void* inp, const void* dout,
                                  int64_t n);
  keel_status (*add_dt)(void* backend, keel_dtype dt, void* out, const void* a, const void* b, int64_t n);
  keel_status (*accumulate_dt)(void* backend, keel_dtype dt, void* dst, const void* src, int64_t n);
  keel_status (*scale_dt)(void* backend, keel_dtype dt, void* x, float alpha, int64_t n);
  keel_status (*embedding_forward_dt)(void* backend, keel_dtype dt, void* out, const int32_t* tokens,
                                      const void* wte, const void* wpe, int64_t B, int64_t T, int64_t C);
  keel_status (*embedding_backward_dt)(void* backend, keel_dtype dt, float* dwte, float* dwpe, const void* dout,
                                       const int32_t* tokens, int64_t B, int64_t T, int64_t C);
  keel_status (*embedding_rows_forward_dt)(void* backend, keel_dtype dt, void* out, const int32_t* tokens,
                                           const void* wte_rows, const void* wpe, int64_t B, int64_t T, int64_t C,
                                           int64_t row_begin, int64_t rows);
  keel_status (*embedding_rows_backward_dt)(void* backend, keel_dtype dt, float* dwte_rows, float* dwpe,
                                            const void* dout, const int32_t* tokens, int64_t B, int64_t T,
                                            int64_t C, int64_t row_begin, int64_t rows);
  /* Cross-entropy without probabilities (the whole vocabulary is one shard: col_begin 0,
     valid_cols V, cols Vp). stats(N,3) as crossentropy_shard_stats. */
  keel_status (*crossentropy_stats_dt)(void* backend, keel_dtype dt, float* stats, const void* logits,
                                       const int32_t* targets, int64_t N, int64_t col_begin, int64_t valid_cols,
                                       int64_t cols);
  /* stats holds n_shards blocks of (N,3), one per vocabulary shard (all-gathered over tp, or
     one). lse(N) = each row's log Σ exp over every shard (-inf for a row no shard has a valid
     column of); *loss_sum += weight · Σ over rows with a target >= 0 of (lse − the target's
     logit). loss_sum is an fp32 scalar in backend
     memory: the loss stays there until the host reads it once per step. */
  keel_status (*crossentropy_combine)(void* backend, float* lse, float* loss_sum, const float* stats,
                                      int32_t n_shards, const int32_t* targets, int64_t N, float weight);
  /* As crossentropy_shard_backward. When dlogits == logits the gradient overwrites the logits
     (llm.c's in-place classifier: the logits are dead after it), padding columns and rows whose
     target < 0 included (their gradient is 0); otherwise it is added. */
  keel_status (*crossentropy_backward_dt)(void* backend, keel_dtype dt, void* dlogits, const void* logits,
                                          const float* lse, const int32_t* targets, float dloss, int64_t N,
                                          int64_t col_begin, int64_t valid_cols, int64_t cols);
  /* *acc += Σ x[i]² (acc: an fp32 scalar in backend memory), for gradient-norm clipping. */
  keel_status (*sum_squares_dt)(void* backend, keel_dtype dt, const void* x, int64_t n, float* acc);

  /* Fused optimizer updates on fp32 master parameters (n elements, in place), their fp32
     gradients times grad_scale, and fp32 state; step is 1-based. The same rules, rounded the
     same way, as the adamw and sgd plugins (torch.optim.AdamW; torch.optim.SGD with coupled
     weight decay, the first step's momentum buffer the gradient itself): hyperparameters come
     as the doubles the config holds, and terms formed from them (bias corrections, 1 - beta)
     are formed in double and rounded to fp32 once per call. weight_decay 0: no decay here. */
  keel_status (*adamw_update)(void* backend, float* params, const float* grads, float* m, float* v, int64_t n,
                              float lr, double beta1, double beta2, double eps, double weight_decay, float grad_scale,
                              int64_t step);
  keel_status (*sgd_update)(void* backend, float* params, const float* grads, float* momentum_buffer, int64_t n,
                            float lr, double momentum, double dampening, int32_t nesterov, double weight_decay,
                            float grad_scale, int64_t step);

  /* --- appended in 0.9: the Llama family's ops, at the compute type like the 0.8 *_dt ops.
     Optional: a model needs them only to build such a network, and refuses a backend without. */
  /* out(N,C) = (inp · rstd) · weight with rstd = 1/sqrt(mean over the row of inp² + eps): RMSNorm
     (no centring, no bias); saves rstd(N), fp32. */
  keel_status (*rmsnorm_forward_dt)(void* backend, keel_dtype dt, void* out, float* rstd, const void* inp,
                                    const void* weight, int64_t N, int64_t C, float eps);
  keel_status (*rmsnorm_backward_dt)(void* backend, keel_dtype dt, void* dinp, float* dweight, const void* dout,
                                     const void* inp, const void* weight, const float* rstd, int64_t N, int64_t C);
  /* Rotary position embedding in place, Hugging Face's rotate-half convention: in each of B·T
     rows of x (row stride `stride` elements), the `heads` heads of head_dim channels from column
     `first` on are split in halves a, b, and pair i turns by θ = position · inv_freq[i]:
     a' = a cos θ − b sin θ, b' = b cos θ + a sin θ, where row b·T + t is at position
     position0 + t. inv_freq(head_dim/2) is fp32 backend memory; θ is formed in fp32. The
     backward turns by −θ in place: dx holds ∂loss/∂x' on entry and ∂loss/∂x on return. */
  keel_status (*rope_forward_dt)(void* backend, keel_dtype dt, void* x, const float* inv_freq, int64_t B, int64_t T,
                                 int64_t heads, int64_t head_dim, int64_t stride, int64_t first, int64_t position0);
  keel_status (*rope_backward_dt)(void* backend, keel_dtype dt, void* dx, const float* inv_freq, int64_t B,
                                  int64_t T, int64_t heads, int64_t head_dim, int64_t stride, int64_t first,
                                  int64_t position0);
  /* SwiGLU over rows holding the gate and up projections side by side (gate_up(N,2F): gate in
     columns 0..F-1): out(N,F) = silu(gate) · up, silu(g) = g / (1 + e^−g). */
  keel_status (*swiglu_forward_dt)(void* backend, keel_dtype dt, void* out, const void* gate_up, int64_t N,
                                   int64_t F);
  keel_status (*swiglu_backward_dt)(void* backend, keel_dtype dt, void* dgate_up, const void* dout,
                                    const void* gate_up, int64_t N, int64_t F);
  /* Grouped-query attention: as attention_*_dt, but each qkv row holds q as NH heads of
     hs = C/NH, then k and v as NKV heads each (row width C + 2·NKV·hs; NH a multiple of NKV),
     and query head h attends with key/value head h / (NH/NKV). NKV = NH is the 0.8 op. */
  int64_t (*attention_gqa_saved_bytes)(void* backend, keel_dtype dt, int64_t B, int64_t T, int64_t C, int64_t NH,
                                       int64_t NKV);
  keel_status (*attention_gqa_forward_dt)(void* backend, keel_dtype dt, void* out, void* saved, const void* qkv,
                                          int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV);
  keel_status (*attention_gqa_backward_dt)(void* backend, keel_dtype dt, void* dqkv, const void* dout,
                                           const void* qkv, const void* out, const void* saved, int64_t B,
                                           int64_t T, int64_t C, int64_t NH, int64_t NKV);
  /* --- appended in 0.18; optional (NULL: a model generates by running the whole window) --- */
  /* Attention while decoding with a key/value cache. qkv(B,T,C + 2·NKV·hs) holds T new
     positions, past .. past+T-1, laid out as attention_gqa_forward_dt's; their keys and values
     are written into k_cache and v_cache, each (B, NKV, capacity, hs) at the same type, at
     those positions, and out(B,T,C) is causal attention of the new queries over the cache's
     positions 0 .. past+t. Requires past + T <= capacity. No backward: inference only. */
  keel_status (*attention_decode_dt)(void* backend, keel_dtype dt, void* out, void* k_cache, void* v_cache,
                                     const void* qkv, int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV,
                                     int64_t past, int64_t capacity);

  /* --- appended in 0.19: what a mixture-of-experts layer's routing needs, on backend memory.
     Optional: a model with experts refuses a backend without them at create, naming the op.
     N tokens, E experts, K experts per token (1 <= K <= E); flags are KEEL_ROUTE_* bits.
     All of them run on the queue; moe_permute_plan alone returns with its host output written. --- */
  /* Routing. logits(N,E) fp32 -> scores(N,E) fp32 (a softmax over each row, or a sigmoid under
     KEEL_ROUTE_SIGMOID); experts(N,K) int32: the K largest scores + selection_bias[e] of each row,
     largest first, ties to the lower expert index (selection_bias (E) fp32 or NULL: none; it
     changes only which experts are chosen); weights(N,K) fp32 = the chosen experts' scores
     (without the bias), divided by their sum under KEEL_ROUTE_NORMALIZE (a sum of 0, scores
     underflowed, leaves the row's weights 0 and adds no dweights gradient). */
  keel_status (*moe_route)(void* backend, float* weights, int32_t* experts, float* scores, const float* logits,
                           const float* selection_bias, int64_t N, int32_t E, int32_t K, int32_t flags);
  /* dlogits(N,E) fp32, OVERWRITTEN: d loss/d logits given dweights(N,K), plus expert_dscores(E)
     (NULL: none) added to d loss/d scores[n,e] of every row n (a load-balancing loss's gradient),
     plus z_grad * 2 * lse_n * softmax(logits_n), the gradient of z_grad * lse_n^2 with
     lse_n = log sum_e exp logits[n,e] (z_grad 0: no router z-loss). */
  keel_status (*moe_route_backward)(void* backend, float* dlogits, const float* dweights, const float* logits,
                                    const float* scores, const int32_t* experts, const float* expert_dscores,
                                    float z_grad, int64_t N, int32_t E, int32_t K, int32_t flags);
  /* The (token, slot) pairs in expert order: positions(N,K) int32 = each pair's row in that order
     (expert 0's pairs first, then expert 1's, ...; within an expert by token, then slot);
     counts_host(E) int64, HOST memory, = pairs per expert, written when the call returns (a device
     backend synchronises). An expert index outside [0,E) is KEEL_ERR_INVALID_ARGUMENT. */
  keel_status (*moe_permute_plan)(void* backend, int32_t* positions, int64_t* counts_host, const int32_t* experts,
                                  int64_t N, int32_t E, int32_t K);
  /* Scatter into expert order: out(N*K,C)[positions[n,j]] = scale[n,j] * inp(N,C)[n] (scale (N,K)
     fp32, NULL: 1). Every row of out is written (overwritten). Its input gradient is
     moe_unpermute_dt of dout with the same scale. */
  keel_status (*moe_permute_dt)(void* backend, keel_dtype dt, void* out, const void* inp, const float* scale,
                                const int32_t* positions, int64_t N, int32_t K, int64_t C);
  /* Gather back: out(N,C)[n] = sum over j = 0..K-1 of scale[n,j] * inp(N*K,C)[positions[n,j]]
     (scale NULL: 1), summed in fp32 in that order, OVERWRITTEN. Its input gradient is
     moe_permute_dt of dout with the same scale. */
  keel_status (*moe_unpermute_dt)(void* backend, keel_dtype dt, void* out, const void* inp, const float* scale,
                                  const int32_t* positions, int64_t N, int32_t K, int64_t C);
  /* The scale's gradient of moe_unpermute_dt: dscale(N,K) fp32 += sum_c dout[n,c] * inp[positions[n,j],c]. */
  keel_status (*moe_unpermute_scale_backward_dt)(void* backend, keel_dtype dt, float* dscale, const void* dout,
                                                 const void* inp, const int32_t* positions, int64_t N, int32_t K,
                                                 int64_t C);
  /* Grouped matmul: inp(M,IC) holds E groups of consecutive rows, counts[e] rows each (counts:
     HOST memory, int64, M = their sum); each group's out(M,OC) rows = its inp rows · weights[e]ᵀ, as
     matmul_forward_dt without bias or GELU. weights: a HOST array of E pointers to (OC,IC)
     matrices at dt (an entry may be NULL where counts[e] is 0); both arrays borrowed for the call. */
  keel_status (*grouped_matmul_forward_dt)(void* backend, keel_dtype dt, void* out, const void* inp,
                                           const void* const* weights, const int64_t* counts, int32_t E,
                                           int64_t IC, int64_t OC);
  /* As matmul_backward_dt per group: dinp(M,IC) += dout·W_e, dweights[e](OC,IC) fp32 += doutᵀ·inp.
     dinp NULL, a NULL dweights array or a NULL entry of it: not wanted. */
  keel_status (*grouped_matmul_backward_dt)(void* backend, keel_dtype dt, void* dinp, float* const* dweights,
                                            const void* dout, const void* inp, const void* const* weights,
                                            const int64_t* counts, int32_t E, int64_t IC, int64_t OC);

  /* --- appended in 0.19: attention over blocks and rotary embedding at given positions. Optional:
     a model needs them for packed batches (keel_forward_args.positions) and refuses such a batch
     on a backend without them, naming the op. --- */
  /* out and lse of args' queries over args' keys (keel_attention_args). */
  keel_status (*attention_block_forward)(void* backend, const keel_attention_args* args);
  /* dq and dkv += the gradients of this block, from dout and the forward's out and lse (under
     context parallelism, the merged out and lse of every block). */
  keel_status (*attention_block_backward)(void* backend, const keel_attention_args* args);
  /* As rope_forward_dt and rope_backward_dt, but row b·T + t is at position positions[b·T + t]
     ((B,T) int32, backend memory). */
  keel_status (*rope_at_forward_dt)(void* backend, keel_dtype dt, void* x, const float* inv_freq,
                                    const int32_t* positions, int64_t B, int64_t T, int64_t heads,
                                    int64_t head_dim, int64_t stride, int64_t first);
  keel_status (*rope_at_backward_dt)(void* backend, keel_dtype dt, void* dx, const float* inv_freq,
                                     const int32_t* positions, int64_t B, int64_t T, int64_t heads,
                                     int64_t head_dim, int64_t stride, int64_t first);

  /* --- appended in 0.19: QLoRA's base (params.h KEEL_PARAM_NF4). Optional: the core refuses an
     NF4 tensor on a backend without it. --- */
  /* out(n) at dt = the NF4 tensor of n elements, in the layout bitsandbytes and torchao store:
     element i is code c_i of block b = i/64 (the last block may be shorter), value NF4[c_i] ·
     absmax_b, where NF4 is the 16-value NormalFloat table (keel_support/common/nf4.hpp) and
     codes(ceil(n/2)) holds two codes a byte, the even element in the high nibble; absmax_b =
     block_scales[b] · scale_factors[b/256] + scale_mean (block_scales(ceil(n/64)) int8,
     scale_factors(ceil(ceil(n/64)/256)) fp32: the scales quantized again in groups of 256
     blocks, after subtracting their mean). */
  keel_status (*nf4_dequantize_dt)(void* backend, keel_dtype dt, void* out, const uint8_t* codes,
                                   const int8_t* block_scales, const float* scale_factors, float scale_mean,
                                   int64_t n);
  /* Quantization-aware training's fake quantization (torchao's symmetric per-group rule), at dt:
     each row of inp(rows, cols) is cut into groups of `group` columns (group divides cols; group =
     cols: one scale per row, per channel); with qmin = -2^(bits-1), qmax = 2^(bits-1) - 1 and
     scale = max(amax / ((qmax - qmin) / 2), FLT_EPSILON), amax the group's largest |x| in fp32,
     out = clamp(round_half_even(x · (1 / scale)), qmin, qmax) · scale (the reciprocal, as torchao's
     quantize_affine). bits 2..8; out may be inp. */
  keel_status (*fake_quantize_dt)(void* backend, keel_dtype dt, void* out, const void* inp, int64_t rows,
                                  int64_t cols, int64_t group, int32_t bits);
  /* The same for activations, torchao's per-token asymmetric rule: for each row of inp(rows, cols),
     lo = min(0, the row's least x) and hi = max(0, its largest), scale = max((hi - lo) / (qmax - qmin),
     FLT_EPSILON), zero = round_half_even(clamp(z, qmin, qmax)) with z = qmin - lo / scale when
     (qmin + lo / scale) + (qmax + hi / scale) > 0, else qmax - hi / scale, and
     out = (clamp(round_half_even(x · (1 / scale)) + zero, qmin, qmax) - zero) · scale, all in fp32.
     bits 2..8; out may be inp. */
  keel_status (*fake_quantize_tokens_dt)(void* backend, keel_dtype dt, void* out, const void* inp, int64_t rows,
                                         int64_t cols, int32_t bits);
  /* --- appended in 0.19: LoRA's adapter dropout. Optional: a model refuses dropout on a backend
     without it. --- */
  /* out(rows, cols) at dt = inp with each element kept or zeroed by a counter-based hash, so a
     recomputation, a later backward and a reference in another language draw the same mask:
     element (i, j) has key k = (uint64(i) << 32) | uint64(col_offset + j) and
     h = splitmix64(seed ^ splitmix64(k)), where splitmix64(z) = z' ^ (z' >> 31) with
     z' = (z'' ^ (z'' >> 27)) · 0x94D049BB133111EB, z'' = (z0 ^ (z0 >> 30)) · 0xBF58476D1CE4E5B9,
     z0 = z + 0x9E3779B97F4A7C15 (all mod 2^64); u = (h >> 40) · 2^-24; kept when u >= p, as
     out = x · float(1 / (1 - p)) in fp32, else 0. `col_offset` places a tensor-parallel piece's
     columns in the whole row. 0 <= p < 1, rows and col_offset + cols below 2^32; out may be inp. */
  keel_status (*dropout_dt)(void* backend, keel_dtype dt, void* out, const void* inp, int64_t rows, int64_t cols,
                            int64_t col_offset, uint64_t seed, float p);
  /* --- appended in 0.19: context parallelism's merge of partial attentions. Optional. --- */
  /* Two attentions of the same queries over disjoint blocks of keys (attention_block_forward's
     out and lse) become one: per query and head, with lse' = max + log(exp(lse - max) +
     exp(lse_b - max)), max = max(lse, lse_b), out' = out · exp(lse - lse') + out_b · exp(lse_b -
     lse') in fp32, written into out and lse. A side whose lse is -inf (no key seen) adds nothing;
     both -inf leave out 0 and lse -inf. out (B,T) rows of out_stride elements and out_b (B,T) rows
     of out_b_stride, NH·hs channels each, at dt; lse and lse_b (B,NH,T) fp32. */
  keel_status (*attention_merge_dt)(void* backend, keel_dtype dt, void* out, int64_t out_stride, float* lse,
                                    const void* out_b, int64_t out_b_stride, const float* lse_b, int64_t B, int64_t T,
                                    int64_t NH, int64_t hs);
  /* dst(rows) = src(rows), or += with `accumulate` 1 (in fp32, rounded once at bf16): `width`
     elements of each row, rows `dst_stride` and `src_stride` elements apart (context
     parallelism's key/value heads out of a fused qkv row and their gradient back). The two must
     not overlap. */
  keel_status (*copy_rows_dt)(void* backend, keel_dtype dt, void* dst, int64_t dst_stride, const void* src,
                              int64_t src_stride, int64_t rows, int64_t width, int32_t accumulate);
} keel_backend_api;

/* moe_route's flags (0.19). */
#define KEEL_ROUTE_SIGMOID 1   /* scores = sigmoid(logits) (DeepSeek-V3) instead of a softmax over each row */
#define KEEL_ROUTE_NORMALIZE 2 /* the K chosen weights divided by their sum (Mixtral; Qwen's norm_topk_prob) */

#ifdef __cplusplus
}
#endif
#endif
