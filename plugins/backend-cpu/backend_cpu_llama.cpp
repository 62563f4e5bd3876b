// The cpu backend's ABI 0.9 slots, the Llama family's ops at an element type: RMSNorm, rotary
// position embedding, SwiGLU and grouped-query attention, each an fp32 kernel of kernels/cpu run
// through the bf16 widening of backend_cpu_dt.hpp. rstd, inv_freq and the attention's saved
// probabilities are fp32 at either type.
#include <cstdint>
#include <string>

#include <keel_support/backend/backend_slots.hpp>  // defines: KEEL_FILL_BACKEND_SLOTS

#include "backend_cpu.hpp"     // defines: run, require*
#include "backend_cpu_dt.hpp"  // defines: bf16_storage, Fp32Input, Fp32Output
#include "cpu/attention.h"     // defines: attention_forward, attention_backward, attention_saved_floats
#include "cpu/rmsnorm.h"       // defines: rmsnorm_forward, rmsnorm_backward
#include "cpu/rope.h"          // defines: rope_forward, rope_backward
#include "cpu/swiglu.h"        // defines: swiglu_forward, swiglu_backward

namespace keel_backend_cpu {
namespace {

namespace cpu = keel::cpu;

keel_status rmsnorm_forward_dt(void* backend, keel_dtype dt, void* out, float* rstd, const void* inp,
                               const void* weight, int64_t N, int64_t C, float eps) {
  return run(backend, [&] {
    require_sizes({N, C}, "rmsnorm_forward_dt");
    require(eps > 0.0f, "rmsnorm_forward_dt: eps " + std::to_string(eps) + " must be positive");
    const bool bf = bf16_storage(dt, "rmsnorm_forward_dt");
    const Fp32Input x(bf, inp, N * C), w(bf, weight, C);
    const Fp32Output y(bf, out, N * C, kWrite);
    cpu::rmsnorm_forward(y.get(), rstd, x.get(), w.get(), N, C, eps);
    y.store();
  });
}

keel_status rmsnorm_backward_dt(void* backend, keel_dtype dt, void* dinp, float* dweight, const void* dout,
                                const void* inp, const void* weight, const float* rstd, int64_t N, int64_t C) {
  return run(backend, [&] {
    require_sizes({N, C}, "rmsnorm_backward_dt");
    const bool bf = bf16_storage(dt, "rmsnorm_backward_dt");
    const Fp32Input g(bf, dout, N * C), x(bf, inp, N * C), w(bf, weight, C);
    const Fp32Output dx(bf, dinp, N * C, kAccumulate);
    cpu::rmsnorm_backward(dx.get(), dweight, g.get(), x.get(), w.get(), rstd, N, C);
    dx.store();
  });
}

// Elements from x to the last turned one: the span a bf16 x is widened over.
int64_t rope_span(int64_t B, int64_t T, int64_t heads, int64_t head_dim, int64_t stride, int64_t first,
                  const char* op) {
  require_sizes({B, T, heads, head_dim, stride, first}, op);
  require(head_dim % 2 == 0, std::string(op) + ": head_dim " + std::to_string(head_dim) + " is odd");
  require(first + heads * head_dim <= stride, std::string(op) + ": heads end at column " +
                                                  std::to_string(first + heads * head_dim) + ", past the row stride " +
                                                  std::to_string(stride));
  return B * T == 0 ? 0 : (B * T - 1) * stride + first + heads * head_dim;
}

keel_status rope_forward_dt(void* backend, keel_dtype dt, void* x, const float* inv_freq, int64_t B, int64_t T,
                            int64_t heads, int64_t head_dim, int64_t stride, int64_t first, int64_t position0) {
  return run(backend, [&] {
    const int64_t span = rope_span(B, T, heads, head_dim, stride, first, "rope_forward_dt");
    const Fp32Output v(bf16_storage(dt, "rope_forward_dt"), x, span, kAccumulate);
    cpu::rope_forward(v.get(), inv_freq, B, T, heads, head_dim, stride, first, position0);
    v.store();
  });
}

keel_status rope_backward_dt(void* backend, keel_dtype dt, void* dx, const float* inv_freq, int64_t B, int64_t T,
                             int64_t heads, int64_t head_dim, int64_t stride, int64_t first, int64_t position0) {
  return run(backend, [&] {
    const int64_t span = rope_span(B, T, heads, head_dim, stride, first, "rope_backward_dt");
    const Fp32Output g(bf16_storage(dt, "rope_backward_dt"), dx, span, kAccumulate);
    cpu::rope_backward(g.get(), inv_freq, B, T, heads, head_dim, stride, first, position0);
    g.store();
  });
}

keel_status swiglu_forward_dt(void* backend, keel_dtype dt, void* out, const void* gate_up, int64_t N, int64_t F) {
  return run(backend, [&] {
    require_sizes({N, F}, "swiglu_forward_dt");
    const bool bf = bf16_storage(dt, "swiglu_forward_dt");
    const Fp32Input x(bf, gate_up, N * 2 * F);
    const Fp32Output y(bf, out, N * F, kWrite);
    cpu::swiglu_forward(y.get(), x.get(), N, F);
    y.store();
  });
}

keel_status swiglu_backward_dt(void* backend, keel_dtype dt, void* dgate_up, const void* dout, const void* gate_up,
                               int64_t N, int64_t F) {
  return run(backend, [&] {
    require_sizes({N, F}, "swiglu_backward_dt");
    const bool bf = bf16_storage(dt, "swiglu_backward_dt");
    const Fp32Input g(bf, dout, N * F), x(bf, gate_up, N * 2 * F);
    const Fp32Output dx(bf, dgate_up, N * 2 * F, kAccumulate);
    cpu::swiglu_backward(dx.get(), g.get(), x.get(), N, F);
    dx.store();
  });
}

// Floats in a qkv row: q, then k and v of NKV heads each.
int64_t gqa_row(int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV, const char* op) {
  require_attention_shape(B, T, C, NH, op);
  require(NKV > 0 && NH % NKV == 0, std::string(op) + ": NH = " + std::to_string(NH) +
                                        " must be a positive multiple of NKV = " + std::to_string(NKV));
  return C + 2 * NKV * (C / NH);
}

// The cpu keeps its fp32 probabilities, T×T per query head, at either type.
int64_t attention_gqa_saved_bytes(void* backend, keel_dtype dt, int64_t B, int64_t T, int64_t C, int64_t NH,
                                  int64_t NKV) {
  int64_t bytes = -1;
  run(backend, [&] {
    gqa_row(B, T, C, NH, NKV, "attention_gqa_saved_bytes");
    bf16_storage(dt, "attention_gqa_saved_bytes");
    bytes = cpu::attention_saved_floats(B, T, C, NH) * static_cast<int64_t>(sizeof(float));
  });
  return bytes;
}

keel_status attention_gqa_forward_dt(void* backend, keel_dtype dt, void* out, void* saved, const void* qkv, int64_t B,
                                     int64_t T, int64_t C, int64_t NH, int64_t NKV) {
  return run(backend, [&] {
    const int64_t row = gqa_row(B, T, C, NH, NKV, "attention_gqa_forward_dt");
    const bool bf = bf16_storage(dt, "attention_gqa_forward_dt");
    const Fp32Input x(bf, qkv, B * T * row);
    const Fp32Output y(bf, out, B * T * C, kWrite);
    cpu::attention_forward(y.get(), static_cast<float*>(saved), x.get(), B, T, C, NH, NKV);
    y.store();
  });
}

// `out` is not needed: the saved probabilities hold what the backward reads.
keel_status attention_gqa_backward_dt(void* backend, keel_dtype dt, void* dqkv, const void* dout, const void* qkv,
                                      const void* /*out*/, const void* saved, int64_t B, int64_t T, int64_t C,
                                      int64_t NH, int64_t NKV) {
  return run(backend, [&] {
    const int64_t row = gqa_row(B, T, C, NH, NKV, "attention_gqa_backward_dt");
    const bool bf = bf16_storage(dt, "attention_gqa_backward_dt");
    const Fp32Input g(bf, dout, B * T * C), x(bf, qkv, B * T * row);
    const Fp32Output dx(bf, dqkv, B * T * row, kAccumulate);
    cpu::attention_backward(dx.get(), g.get(), x.get(), static_cast<const float*>(saved), B, T, C, NH, NKV);
    dx.store();
  });
}

}  // namespace

void fill_llama_slots(keel_backend_api& api) { KEEL_FILL_BACKEND_SLOTS(api, KEEL_BACKEND_SLOTS_0_9); }

}  // namespace keel_backend_cpu
