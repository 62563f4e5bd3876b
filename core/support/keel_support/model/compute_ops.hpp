// A model's ops at its compute type (backend.h 0.8: fp32, or bf16 storage with fp32 arithmetic).
// Elems is a pointer into elements of that type whose arithmetic counts elements, so a model
// writes `a.qkv + l * N * 3 * C` once for either type. ComputeOps calls the backend's *_dt op,
// or, for fp32 on a backend built before 0.8, the fp32 op of 0.1/0.6: the one place that
// chooses. Weight gradients, norm statistics, lse and scalars are fp32 (float*) throughout.
#pragma once

#include <keel/backend.h>
#include <keel/plugin.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "keel_support/common/abi_guard.hpp"
#include "keel_support/common/backend_ops.hpp"

namespace keel_support {

class Elems {
 public:
  Elems() = default;
  Elems(std::nullptr_t) {}
  Elems(void* data, int32_t element_bytes) : data_(static_cast<char*>(data)), bytes_(element_bytes) {}
  Elems(const void* data, int32_t element_bytes) : Elems(const_cast<void*>(data), element_bytes) {}
  Elems operator+(int64_t n) const { return data_ ? Elems(data_ + n * bytes_, bytes_) : Elems(); }
  explicit operator bool() const { return data_ != nullptr; }
  void* get() const { return data_; }
  float* as_fp32() const { return reinterpret_cast<float*>(data_); }  // fp32 compute type only
  int32_t element_bytes() const { return bytes_; }

 private:
  char* data_ = nullptr;
  int32_t bytes_ = 4;
};

// The backend's compute type: fp32 before 0.8 (no compute_dtype slot).
inline keel_dtype compute_dtype_of(const BackendOps& backend) {
  keel_dtype dtype{KEEL_DTYPE_FLOAT, 32, 1};
  if (KEEL_HAS_SLOT(backend.api, compute_dtype))
    check_callee(backend.api->compute_dtype(backend.obj, &dtype), "backend compute_dtype");
  return dtype;
}

inline bool is_fp32(keel_dtype dtype) { return dtype.code == KEEL_DTYPE_FLOAT && dtype.bits == 32; }

class ComputeOps {
 public:
  ComputeOps() = default;
  explicit ComputeOps(BackendOps backend)
      : be_(backend), dt_(compute_dtype_of(backend)), bytes_(int32_t(dt_.bits / 8)) {}

  keel_dtype dtype() const { return dt_; }
  int32_t element_bytes() const { return bytes_; }
  const BackendOps& backend() const { return be_; }
  Elems at(void* data) const { return Elems(data, bytes_); }
  Elems at(const void* data) const { return Elems(data, bytes_); }
  size_t bytes(int64_t n) const { return size_t(n) * size_t(bytes_); }

  void copy(Elems dst, Elems src, int64_t n) const {
    if (n > 0) check(be_.api->copy(be_.obj, dst.get(), src.get(), bytes(n), KEEL_COPY_DEVICE_TO_DEVICE), "copy");
  }
  void fill_zero(Elems x, int64_t n) const {
    if (n > 0) check(be_.api->fill_zero(be_.obj, x.get(), bytes(n)), "fill_zero");
  }
  // dst(n) fp32 = src(n) at the compute type (a copy at fp32).
  void to_fp32(float* dst, Elems src, int64_t n) const {
    if (n <= 0) return;
    if (is_fp32(dt_)) return copy(Elems(dst, 4), src, n);
    need(KEEL_HAS_SLOT(be_.api, convert), "convert");
    check(be_.api->convert(be_.obj, dst, keel_dtype{KEEL_DTYPE_FLOAT, 32, 1}, src.get(), dt_, n), "convert");
  }

  void matmul_forward(Elems out, Elems inp, Elems weight, Elems bias, int64_t N, int64_t IC, int64_t OC) const {
    if (KEEL_HAS_SLOT(be_.api, matmul_forward_dt))
      return check(be_.api->matmul_forward_dt(be_.obj, dt_, out.get(), nullptr, inp.get(), weight.get(), bias.get(), N,
                                              IC, OC),
                   "matmul_forward_dt");
    fp32_only("matmul_forward");
    check(be_.api->matmul_forward(be_.obj, out.as_fp32(), inp.as_fp32(), weight.as_fp32(), bias.as_fp32(), N, IC, OC),
          "matmul_forward");
  }
  // out(N,OC) = GELU(pre), pre(N,OC) = inp·weightᵀ + bias: one call where the backend fuses the
  // GELU into the matmul (matmul_forward_dt's gelu_pre, a cuBLASLt epilogue on the cuda backend).
  void matmul_gelu_forward(Elems out, Elems pre, Elems inp, Elems weight, Elems bias, int64_t N, int64_t IC,
                           int64_t OC) const {
    if (KEEL_HAS_SLOT(be_.api, matmul_forward_dt))
      return check(be_.api->matmul_forward_dt(be_.obj, dt_, out.get(), pre.get(), inp.get(), weight.get(), bias.get(),
                                              N, IC, OC),
                   "matmul_forward_dt");
    matmul_forward(pre, inp, weight, bias, N, IC, OC);
    gelu_forward(out, pre, N * OC);
  }
  void matmul_backward(Elems dinp, float* dweight, float* dbias, Elems dout, Elems inp, Elems weight, int64_t N,
                       int64_t IC, int64_t OC) const {
    if (KEEL_HAS_SLOT(be_.api, matmul_backward_dt))
      return check(be_.api->matmul_backward_dt(be_.obj, dt_, dinp.get(), dweight, dbias, dout.get(), inp.get(),
                                               weight.get(), N, IC, OC),
                   "matmul_backward_dt");
    fp32_only("matmul_backward");
    check(be_.api->matmul_backward(be_.obj, dinp.as_fp32(), dweight, dbias, dout.as_fp32(), inp.as_fp32(),
                                   weight.as_fp32(), N, IC, OC),
          "matmul_backward");
  }
  void layernorm_forward(Elems out, float* mean, float* rstd, Elems inp, Elems weight, Elems bias, int64_t N,
                         int64_t C) const {
    if (KEEL_HAS_SLOT(be_.api, layernorm_forward_dt))
      return check(be_.api->layernorm_forward_dt(be_.obj, dt_, out.get(), mean, rstd, inp.get(), weight.get(),
                                                 bias.get(), N, C),
                   "layernorm_forward_dt");
    fp32_only("layernorm_forward");
    check(be_.api->layernorm_forward(be_.obj, out.as_fp32(), mean, rstd, inp.as_fp32(), weight.as_fp32(),
                                     bias.as_fp32(), N, C),
          "layernorm_forward");
  }
  void layernorm_backward(Elems dinp, float* dweight, float* dbias, Elems dout, Elems inp, Elems weight,
                          const float* mean, const float* rstd, int64_t N, int64_t C) const {
    if (KEEL_HAS_SLOT(be_.api, layernorm_backward_dt))
      return check(be_.api->layernorm_backward_dt(be_.obj, dt_, dinp.get(), dweight, dbias, dout.get(), inp.get(),
                                                  weight.get(), mean, rstd, N, C),
                   "layernorm_backward_dt");
    fp32_only("layernorm_backward");
    check(be_.api->layernorm_backward(be_.obj, dinp.as_fp32(), dweight, dbias, dout.as_fp32(), inp.as_fp32(),
                                      weight.as_fp32(), mean, rstd, N, C),
          "layernorm_backward");
  }
  // Bytes of `saved` per call of attention_forward at this shape; throws for a shape the backend refuses.
  int64_t attention_saved_bytes(int64_t B, int64_t T, int64_t C, int64_t NH) const {
    const int64_t bytes = KEEL_HAS_SLOT(be_.api, attention_saved_bytes)
                              ? be_.api->attention_saved_bytes(be_.obj, dt_, B, T, C, NH)
                              : (fp32_only("attention_saved_floats"),
                                 be_.api->attention_saved_floats(be_.obj, B, T, C, NH) * int64_t(sizeof(float)));
    if (bytes < 0) check_callee(KEEL_ERR_UNIMPLEMENTED, "backend attention_saved_bytes");  // its message is set
    return bytes;
  }
  void attention_forward(Elems out, void* saved, Elems qkv, int64_t B, int64_t T, int64_t C, int64_t NH) const {
    if (KEEL_HAS_SLOT(be_.api, attention_forward_dt))
      return check(be_.api->attention_forward_dt(be_.obj, dt_, out.get(), saved, qkv.get(), B, T, C, NH),
                   "attention_forward_dt");
    fp32_only("attention_forward");
    check(be_.api->attention_forward(be_.obj, out.as_fp32(), static_cast<float*>(saved), qkv.as_fp32(), B, T, C, NH),
          "attention_forward");
  }
  // Attention while decoding with a key/value cache (backend.h 0.18), where the backend has it.
  bool has_attention_decode() const {
    return KEEL_HAS_SLOT(be_.api, attention_decode_dt) && be_.api->attention_decode_dt;
  }
  void attention_decode(Elems out, void* k_cache, void* v_cache, Elems qkv, int64_t B, int64_t T, int64_t C,
                        int64_t NH, int64_t NKV, int64_t past, int64_t capacity) const {
    if (!has_attention_decode())
      throw StatusError(KEEL_ERR_UNIMPLEMENTED, "the backend has no attention_decode_dt (ABI 0.18)");
    check(be_.api->attention_decode_dt(be_.obj, dt_, out.get(), k_cache, v_cache, qkv.get(), B, T, C, NH, NKV, past,
                                       capacity),
          "attention_decode_dt");
  }
  void attention_backward(Elems dqkv, Elems dout, Elems qkv, Elems out, const void* saved, int64_t B, int64_t T,
                          int64_t C, int64_t NH) const {
    if (KEEL_HAS_SLOT(be_.api, attention_backward_dt))
      return check(be_.api->attention_backward_dt(be_.obj, dt_, dqkv.get(), dout.get(), qkv.get(), out.get(), saved,
                                                  B, T, C, NH),
                   "attention_backward_dt");
    fp32_only("attention_backward");
    check(be_.api->attention_backward(be_.obj, dqkv.as_fp32(), dout.as_fp32(), qkv.as_fp32(),
                                      static_cast<const float*>(saved), B, T, C, NH),
          "attention_backward");
  }
  void gelu_forward(Elems out, Elems inp, int64_t n) const {
    if (KEEL_HAS_SLOT(be_.api, gelu_forward_dt))
      return check(be_.api->gelu_forward_dt(be_.obj, dt_, out.get(), inp.get(), n), "gelu_forward_dt");
    fp32_only("gelu_forward");
    check(be_.api->gelu_forward(be_.obj, out.as_fp32(), inp.as_fp32(), n), "gelu_forward");
  }
  void gelu_backward(Elems dinp, Elems inp, Elems dout, int64_t n) const {
    if (KEEL_HAS_SLOT(be_.api, gelu_backward_dt))
      return check(be_.api->gelu_backward_dt(be_.obj, dt_, dinp.get(), inp.get(), dout.get(), n), "gelu_backward_dt");
    fp32_only("gelu_backward");
    check(be_.api->gelu_backward(be_.obj, dinp.as_fp32(), inp.as_fp32(), dout.as_fp32(), n), "gelu_backward");
  }
  void add(Elems out, Elems a, Elems b, int64_t n) const {
    if (KEEL_HAS_SLOT(be_.api, add_dt))
      return check(be_.api->add_dt(be_.obj, dt_, out.get(), a.get(), b.get(), n), "add_dt");
    fp32_only("add");
    check(be_.api->add(be_.obj, out.as_fp32(), a.as_fp32(), b.as_fp32(), n), "add");
  }
  void accumulate(Elems dst, Elems src, int64_t n) const {
    if (KEEL_HAS_SLOT(be_.api, accumulate_dt))
      return check(be_.api->accumulate_dt(be_.obj, dt_, dst.get(), src.get(), n), "accumulate_dt");
    fp32_only("accumulate");
    check(be_.api->accumulate(be_.obj, dst.as_fp32(), src.as_fp32(), n), "accumulate");
  }
  void embedding_forward(Elems out, const int32_t* tokens, Elems wte, Elems wpe, int64_t B, int64_t T,
                         int64_t C) const {
    if (KEEL_HAS_SLOT(be_.api, embedding_forward_dt))
      return check(be_.api->embedding_forward_dt(be_.obj, dt_, out.get(), tokens, wte.get(), wpe.get(), B, T, C),
                   "embedding_forward_dt");
    fp32_only("embedding_forward");
    check(be_.api->embedding_forward(be_.obj, out.as_fp32(), tokens, wte.as_fp32(), wpe.as_fp32(), B, T, C),
          "embedding_forward");
  }
  void embedding_backward(float* dwte, float* dwpe, Elems dout, const int32_t* tokens, int64_t B, int64_t T,
                          int64_t C) const {
    if (KEEL_HAS_SLOT(be_.api, embedding_backward_dt))
      return check(be_.api->embedding_backward_dt(be_.obj, dt_, dwte, dwpe, dout.get(), tokens, B, T, C),
                   "embedding_backward_dt");
    fp32_only("embedding_backward");
    check(be_.api->embedding_backward(be_.obj, dwte, dwpe, dout.as_fp32(), tokens, B, T, C), "embedding_backward");
  }
  void embedding_rows_forward(Elems out, const int32_t* tokens, Elems wte_rows, Elems wpe, int64_t B, int64_t T,
                              int64_t C, int64_t row_begin, int64_t rows) const {
    if (KEEL_HAS_SLOT(be_.api, embedding_rows_forward_dt))
      return check(be_.api->embedding_rows_forward_dt(be_.obj, dt_, out.get(), tokens, wte_rows.get(), wpe.get(), B,
                                                      T, C, row_begin, rows),
                   "embedding_rows_forward_dt");
    fp32_only("embedding_rows_forward");
    need06(KEEL_HAS_SLOT(be_.api, embedding_rows_forward), "embedding_rows_forward");
    check(be_.api->embedding_rows_forward(be_.obj, out.as_fp32(), tokens, wte_rows.as_fp32(), wpe.as_fp32(), B, T, C,
                                          row_begin, rows),
          "embedding_rows_forward");
  }
  void embedding_rows_backward(float* dwte_rows, float* dwpe, Elems dout, const int32_t* tokens, int64_t B,
                               int64_t T, int64_t C, int64_t row_begin, int64_t rows) const {
    if (KEEL_HAS_SLOT(be_.api, embedding_rows_backward_dt))
      return check(be_.api->embedding_rows_backward_dt(be_.obj, dt_, dwte_rows, dwpe, dout.get(), tokens, B, T, C,
                                                       row_begin, rows),
                   "embedding_rows_backward_dt");
    fp32_only("embedding_rows_backward");
    need06(KEEL_HAS_SLOT(be_.api, embedding_rows_backward), "embedding_rows_backward");
    check(be_.api->embedding_rows_backward(be_.obj, dwte_rows, dwpe, dout.as_fp32(), tokens, B, T, C, row_begin, rows),
          "embedding_rows_backward");
  }
  void crossentropy_stats(float* stats, Elems logits, const int32_t* targets, int64_t N, int64_t col_begin,
                          int64_t valid_cols, int64_t cols) const {
    if (KEEL_HAS_SLOT(be_.api, crossentropy_stats_dt))
      return check(be_.api->crossentropy_stats_dt(be_.obj, dt_, stats, logits.get(), targets, N, col_begin,
                                                  valid_cols, cols),
                   "crossentropy_stats_dt");
    fp32_only("crossentropy_shard_stats");
    check(be_.api->crossentropy_shard_stats(be_.obj, stats, logits.as_fp32(), targets, N, col_begin, valid_cols, cols),
          "crossentropy_shard_stats");
  }
  void crossentropy_combine(float* lse, float* loss_sum, const float* stats, int32_t n_shards,
                            const int32_t* targets, int64_t N, float weight) const {
    need(KEEL_HAS_SLOT(be_.api, crossentropy_combine), "crossentropy_combine");
    check(be_.api->crossentropy_combine(be_.obj, lse, loss_sum, stats, n_shards, targets, N, weight),
          "crossentropy_combine");
  }
  void crossentropy_backward(Elems dlogits, Elems logits, const float* lse, const int32_t* targets, float dloss,
                             int64_t N, int64_t col_begin, int64_t valid_cols, int64_t cols) const {
    if (KEEL_HAS_SLOT(be_.api, crossentropy_backward_dt))
      return check(be_.api->crossentropy_backward_dt(be_.obj, dt_, dlogits.get(), logits.get(), lse, targets, dloss,
                                                     N, col_begin, valid_cols, cols),
                   "crossentropy_backward_dt");
    fp32_only("crossentropy_shard_backward");
    check(be_.api->crossentropy_shard_backward(be_.obj, dlogits.as_fp32(), logits.as_fp32(), lse, targets, dloss, N,
                                               col_begin, valid_cols, cols),
          "crossentropy_shard_backward");
  }

  // The Llama family's ops (0.9): optional slots, required here by name when called.
  void rmsnorm_forward(Elems out, float* rstd, Elems inp, Elems weight, int64_t N, int64_t C, float eps) const {
    need09(KEEL_HAS_SLOT(be_.api, rmsnorm_forward_dt), "rmsnorm_forward_dt");
    check(be_.api->rmsnorm_forward_dt(be_.obj, dt_, out.get(), rstd, inp.get(), weight.get(), N, C, eps),
          "rmsnorm_forward_dt");
  }
  void rmsnorm_backward(Elems dinp, float* dweight, Elems dout, Elems inp, Elems weight, const float* rstd, int64_t N,
                        int64_t C) const {
    need09(KEEL_HAS_SLOT(be_.api, rmsnorm_backward_dt), "rmsnorm_backward_dt");
    check(be_.api->rmsnorm_backward_dt(be_.obj, dt_, dinp.get(), dweight, dout.get(), inp.get(), weight.get(), rstd,
                                       N, C),
          "rmsnorm_backward_dt");
  }
  void rope_forward(Elems x, const float* inv_freq, int64_t B, int64_t T, int64_t heads, int64_t head_dim,
                    int64_t stride, int64_t first, int64_t position0) const {
    need09(KEEL_HAS_SLOT(be_.api, rope_forward_dt), "rope_forward_dt");
    check(be_.api->rope_forward_dt(be_.obj, dt_, x.get(), inv_freq, B, T, heads, head_dim, stride, first, position0),
          "rope_forward_dt");
  }
  void rope_backward(Elems dx, const float* inv_freq, int64_t B, int64_t T, int64_t heads, int64_t head_dim,
                     int64_t stride, int64_t first, int64_t position0) const {
    need09(KEEL_HAS_SLOT(be_.api, rope_backward_dt), "rope_backward_dt");
    check(be_.api->rope_backward_dt(be_.obj, dt_, dx.get(), inv_freq, B, T, heads, head_dim, stride, first, position0),
          "rope_backward_dt");
  }
  void swiglu_forward(Elems out, Elems gate_up, int64_t N, int64_t F) const {
    need09(KEEL_HAS_SLOT(be_.api, swiglu_forward_dt), "swiglu_forward_dt");
    check(be_.api->swiglu_forward_dt(be_.obj, dt_, out.get(), gate_up.get(), N, F), "swiglu_forward_dt");
  }
  void swiglu_backward(Elems dgate_up, Elems dout, Elems gate_up, int64_t N, int64_t F) const {
    need09(KEEL_HAS_SLOT(be_.api, swiglu_backward_dt), "swiglu_backward_dt");
    check(be_.api->swiglu_backward_dt(be_.obj, dt_, dgate_up.get(), dout.get(), gate_up.get(), N, F),
          "swiglu_backward_dt");
  }
  int64_t attention_gqa_saved_bytes(int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV) const {
    need09(KEEL_HAS_SLOT(be_.api, attention_gqa_saved_bytes), "attention_gqa_saved_bytes");
    const int64_t bytes = be_.api->attention_gqa_saved_bytes(be_.obj, dt_, B, T, C, NH, NKV);
    if (bytes < 0) check_callee(KEEL_ERR_UNIMPLEMENTED, "backend attention_gqa_saved_bytes");  // its message is set
    return bytes;
  }
  void attention_gqa_forward(Elems out, void* saved, Elems qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                             int64_t NKV) const {
    need09(KEEL_HAS_SLOT(be_.api, attention_gqa_forward_dt), "attention_gqa_forward_dt");
    check(be_.api->attention_gqa_forward_dt(be_.obj, dt_, out.get(), saved, qkv.get(), B, T, C, NH, NKV),
          "attention_gqa_forward_dt");
  }
  void attention_gqa_backward(Elems dqkv, Elems dout, Elems qkv, Elems out, const void* saved, int64_t B, int64_t T,
                              int64_t C, int64_t NH, int64_t NKV) const {
    need09(KEEL_HAS_SLOT(be_.api, attention_gqa_backward_dt), "attention_gqa_backward_dt");
    check(be_.api->attention_gqa_backward_dt(be_.obj, dt_, dqkv.get(), dout.get(), qkv.get(), out.get(), saved, B, T,
                                             C, NH, NKV),
          "attention_gqa_backward_dt");
  }

  // Quantization-aware training (0.19, optional): out = inp fake-quantized per group of columns.
  void fake_quantize(Elems out, Elems inp, int64_t rows, int64_t cols, int64_t group, int32_t bits) const {
    if (!KEEL_HAS_SLOT(be_.api, fake_quantize_dt))
      throw StatusError(KEEL_ERR_UNIMPLEMENTED, "the backend does not implement fake_quantize_dt (ABI 0.19), which "
                                                "quantization-aware training (model.qat) needs");
    check(be_.api->fake_quantize_dt(be_.obj, dt_, out.get(), inp.get(), rows, cols, group, bits), "fake_quantize_dt");
  }
  // The same for activations: per row (token), asymmetric.
  void fake_quantize_tokens(Elems out, Elems inp, int64_t rows, int64_t cols, int32_t bits) const {
    if (!KEEL_HAS_SLOT(be_.api, fake_quantize_tokens_dt))
      throw StatusError(KEEL_ERR_UNIMPLEMENTED, "the backend does not implement fake_quantize_tokens_dt (ABI 0.19), "
                                                "which model.qat.activations needs");
    check(be_.api->fake_quantize_tokens_dt(be_.obj, dt_, out.get(), inp.get(), rows, cols, bits),
          "fake_quantize_tokens_dt");
  }
  // out(rows, cols) = inp with the hashed dropout mask of `seed` at probability p (backend.h
  // dropout_dt); `col_offset`: where a tensor-parallel piece's columns start in the whole row.
  void dropout(Elems out, Elems inp, int64_t rows, int64_t cols, int64_t col_offset, uint64_t seed, float p) const {
    if (!KEEL_HAS_SLOT(be_.api, dropout_dt))
      throw StatusError(KEEL_ERR_UNIMPLEMENTED, "the backend does not implement dropout_dt (ABI 0.19), which "
                                                "model.lora.dropout needs");
    check(be_.api->dropout_dt(be_.obj, dt_, out.get(), inp.get(), rows, cols, col_offset, seed, p), "dropout_dt");
  }
  // Packed rows (0.19, optional): attention over fused qkv rows (q: NH heads of C/NH, then NKV
  // key and NKV value heads) kept inside each document, positions (B,T) restarting per document,
  // the statistics in lse (B,NH,T); rope turning each row by its own position.
  void attention_documents_forward(Elems out, float* lse, Elems qkv, const int32_t* positions, int64_t B, int64_t T,
                                   int64_t C, int64_t NH, int64_t NKV) const {
    need019(KEEL_HAS_SLOT(be_.api, attention_block_forward), "attention_block_forward");
    const keel_attention_args args = fused_attention(out, lse, qkv, positions, B, T, C, NH, NKV);
    check(be_.api->attention_block_forward(be_.obj, &args), "attention_block_forward");
  }
  void attention_documents_backward(Elems dqkv, Elems dout, Elems qkv, Elems out, const float* lse,
                                    const int32_t* positions, int64_t B, int64_t T, int64_t C, int64_t NH,
                                    int64_t NKV) const {
    need019(KEEL_HAS_SLOT(be_.api, attention_block_backward), "attention_block_backward");
    keel_attention_args args = fused_attention(out, const_cast<float*>(lse), qkv, positions, B, T, C, NH, NKV);
    args.dout = dout.get();
    args.dq = dqkv.get();
    args.dkv = (dqkv + C).get();
    check(be_.api->attention_block_backward(be_.obj, &args), "attention_block_backward");
  }
  // One block of queries over one block of keys and values (keel_attention_args, dt set here),
  // and the merge of two such results by their statistics: context parallelism's pieces.
  void attention_block_forward(keel_attention_args args) const {
    need019(KEEL_HAS_SLOT(be_.api, attention_block_forward), "attention_block_forward");
    args.struct_size = sizeof(args);
    args.dt = dt_;
    check(be_.api->attention_block_forward(be_.obj, &args), "attention_block_forward");
  }
  void attention_block_backward(keel_attention_args args) const {
    need019(KEEL_HAS_SLOT(be_.api, attention_block_backward), "attention_block_backward");
    args.struct_size = sizeof(args);
    args.dt = dt_;
    check(be_.api->attention_block_backward(be_.obj, &args), "attention_block_backward");
  }
  void attention_merge(Elems out, int64_t out_stride, float* lse, Elems out_b, int64_t out_b_stride, const float* lse_b,
                       int64_t B, int64_t T, int64_t NH, int64_t hs) const {
    need019(KEEL_HAS_SLOT(be_.api, attention_merge_dt), "attention_merge_dt");
    check(be_.api->attention_merge_dt(be_.obj, dt_, out.get(), out_stride, lse, out_b.get(), out_b_stride, lse_b, B, T,
                                      NH, hs),
          "attention_merge_dt");
  }
  void copy_rows(Elems dst, int64_t dst_stride, Elems src, int64_t src_stride, int64_t rows, int64_t width,
                 bool accumulate) const {
    need019(KEEL_HAS_SLOT(be_.api, copy_rows_dt), "copy_rows_dt");
    check(be_.api->copy_rows_dt(be_.obj, dt_, dst.get(), dst_stride, src.get(), src_stride, rows, width,
                                accumulate ? 1 : 0),
          "copy_rows_dt");
  }
  void rope_at_forward(Elems x, const float* inv_freq, const int32_t* positions, int64_t B, int64_t T, int64_t heads,
                       int64_t head_dim, int64_t stride, int64_t first) const {
    need019(KEEL_HAS_SLOT(be_.api, rope_at_forward_dt), "rope_at_forward_dt");
    check(be_.api->rope_at_forward_dt(be_.obj, dt_, x.get(), inv_freq, positions, B, T, heads, head_dim, stride,
                                      first),
          "rope_at_forward_dt");
  }
  void rope_at_backward(Elems dx, const float* inv_freq, const int32_t* positions, int64_t B, int64_t T,
                        int64_t heads, int64_t head_dim, int64_t stride, int64_t first) const {
    need019(KEEL_HAS_SLOT(be_.api, rope_at_backward_dt), "rope_at_backward_dt");
    check(be_.api->rope_at_backward_dt(be_.obj, dt_, dx.get(), inv_freq, positions, B, T, heads, head_dim, stride,
                                       first),
          "rope_at_backward_dt");
  }

 private:
  keel_attention_args fused_attention(Elems out, float* lse, Elems qkv, const int32_t* positions, int64_t B,
                                      int64_t T, int64_t C, int64_t NH, int64_t NKV) const {
    keel_attention_args args{};
    args.struct_size = sizeof(args);
    args.dt = dt_;
    args.B = B, args.Tq = T, args.Tkv = T, args.NH = NH, args.NKV = NKV, args.hs = C / NH;
    const int64_t row = C + 2 * NKV * (C / NH);
    args.q = qkv.get(), args.q_stride = row;
    args.kv = (qkv + C).get(), args.kv_stride = row;
    args.out = out.get(), args.out_stride = C;
    args.lse = lse;
    args.positions = positions;
    return args;
  }
  void need019(bool present, const char* op) const {
    if (!present)
      throw StatusError(KEEL_ERR_UNIMPLEMENTED, std::string("the backend does not implement ") + op +
                                                    " (ABI 0.19), which packed batches (documents restarting "
                                                    "their positions inside a row) and context parallelism need");
  }
  void check(keel_status status, const char* op) const {
    if (status != KEEL_OK) check_callee(status, (std::string("backend ") + op).c_str());
  }
  void need(bool present, const char* op) const {
    if (!present)
      throw StatusError(KEEL_ERR_UNIMPLEMENTED, std::string("the backend does not implement ") + op + " (ABI 0.8)");
  }
  // The vocabulary-sharded embedding (ABI 0.6, optional): tensor parallelism's, and the gpt
  // model's position embedding by position in a packed batch.
  void need06(bool present, const char* op) const {
    if (!present)
      throw StatusError(KEEL_ERR_UNIMPLEMENTED, std::string("the backend does not implement ") + op +
                                                    " (ABI 0.6), which tensor parallelism and packed batches need");
  }
  void need09(bool present, const char* op) const {
    if (!present)
      throw StatusError(KEEL_ERR_UNIMPLEMENTED, std::string("the backend does not implement ") + op +
                                                    " (ABI 0.9, the Llama family's ops)");
  }
  // A backend without the *_dt op computes in fp32 only.
  void fp32_only(const char* op) const {
    if (!is_fp32(dt_))
      throw StatusError(KEEL_ERR_UNIMPLEMENTED, std::string("the backend computes in bf16 but has no ") + op +
                                                    "_dt (ABI 0.8) to run " + op + " at that type");
  }

  BackendOps be_;
  keel_dtype dt_{KEEL_DTYPE_FLOAT, 32, 1};
  int32_t bytes_ = 4;
};

}  // namespace keel_support
