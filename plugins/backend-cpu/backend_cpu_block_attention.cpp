// The cpu backend's 0.19 attention over blocks (keel_attention_args), the merge of two blocks'
// results by their statistics (context parallelism), and rope at given positions: kernels/cpu/attention_block.h and rope.h run through the bf16 widening of
// backend_cpu_dt.hpp. A fused qkv row and its gradient hold q and kv (dq and dkv) interleaved in
// one buffer, so at bf16 interleaved operands are widened as one span and rounded back once.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include <keel_support/backend/attention_args.hpp>  // defines: check_attention_args, check_rope_at
#include <keel_support/backend/backend_slots.hpp>   // defines: KEEL_FILL_BACKEND_SLOTS

#include "backend_cpu.hpp"         // defines: run
#include "backend_cpu_dt.hpp"      // defines: bf16_storage, Fp32Input, Fp32Output
#include "cpu/attention_block.h"  // defines: AttentionBlock, attention_block_forward, attention_block_backward
#include "cpu/rope.h"             // defines: rope_forward_at, rope_backward_at

namespace keel_backend_cpu {
namespace {

namespace cpu = keel::cpu;

// Elements from a row-strided operand's start to its last element: rows of `stride`, `width` used.
int64_t span_of(int64_t rows, int64_t stride, int64_t width) { return rows == 0 ? 0 : (rows - 1) * stride + width; }

// The fp32 views of two operands that may interleave in one buffer (q and kv of a fused row; dq
// and dkv of its gradient): at bf16, one widened span when they overlap, two otherwise.
template <typename Operand, typename Pointer, typename... Access>
struct Pair {
  Pair(bool bf, Pointer a, int64_t a_elems, Pointer b, int64_t b_elems, Access... access) {
    const auto* a_bytes = reinterpret_cast<const char*>(a);
    const auto* b_bytes = reinterpret_cast<const char*>(b);
    const bool overlap = bf && a_bytes < b_bytes + 2 * b_elems && b_bytes < a_bytes + 2 * a_elems;
    if (!overlap) {
      first.emplace(bf, a, a_elems, access...);
      second.emplace(bf, b, b_elems, access...);
      a_ptr = first->get();
      b_ptr = second->get();
      return;
    }
    const char* lo = std::min(a_bytes, b_bytes);
    const char* hi = std::max(a_bytes + 2 * a_elems, b_bytes + 2 * b_elems);
    first.emplace(bf, const_cast<Pointer>(reinterpret_cast<const void*>(lo)), (hi - lo) / 2, access...);
    a_ptr = first->get() + (a_bytes - lo) / 2;
    b_ptr = first->get() + (b_bytes - lo) / 2;
  }
  void store() const {
    if constexpr (sizeof...(Access) > 0) {
      first->store();
      if (second) second->store();
    }
  }
  std::optional<Operand> first, second;
  decltype(std::declval<Operand>().get()) a_ptr = nullptr, b_ptr = nullptr;
};
using InputPair = Pair<Fp32Input, const void*>;
using OutputPair = Pair<Fp32Output, void*, Access>;

cpu::AttentionBlock fp32_block(const keel_attention_args& a, const float* q, const float* kv) {
  cpu::AttentionBlock block;
  block.B = a.B, block.Tq = a.Tq, block.Tkv = a.Tkv, block.NH = a.NH, block.NKV = a.NKV, block.hs = a.hs;
  block.q = q, block.q_stride = a.q_stride;
  block.kv = kv, block.kv_stride = a.kv_stride;
  block.positions = a.positions;
  block.q_index0 = a.q_index0, block.kv_index0 = a.kv_index0;
  return block;
}

keel_status attention_block_forward(void* backend, const keel_attention_args* args) {
  return run(backend, [&] {
    const keel_attention_args& a = keel_support::check_attention_args(args, false, "attention_block_forward");
    const bool bf = bf16_storage(a.dt, "attention_block_forward");
    const int64_t q_elems = span_of(a.B * a.Tq, a.q_stride, a.NH * a.hs);
    const int64_t kv_elems = span_of(a.B * a.Tkv, a.kv_stride, 2 * a.NKV * a.hs);
    const InputPair in(bf, a.q, q_elems, a.kv, kv_elems);
    const Fp32Output out(bf, a.out, span_of(a.B * a.Tq, a.out_stride, a.NH * a.hs), kAccumulate);
    cpu::attention_block_forward(fp32_block(a, in.a_ptr, in.b_ptr), out.get(), a.out_stride, a.lse);
    out.store();
  });
}

keel_status attention_block_backward(void* backend, const keel_attention_args* args) {
  return run(backend, [&] {
    const keel_attention_args& a = keel_support::check_attention_args(args, true, "attention_block_backward");
    const bool bf = bf16_storage(a.dt, "attention_block_backward");
    const int64_t q_elems = span_of(a.B * a.Tq, a.q_stride, a.NH * a.hs);
    const int64_t kv_elems = span_of(a.B * a.Tkv, a.kv_stride, 2 * a.NKV * a.hs);
    const int64_t out_elems = span_of(a.B * a.Tq, a.out_stride, a.NH * a.hs);
    const InputPair in(bf, a.q, q_elems, a.kv, kv_elems);
    const Fp32Input out(bf, a.out, out_elems), dout(bf, a.dout, out_elems);
    const OutputPair grads(bf, a.dq, q_elems, a.dkv, kv_elems, kAccumulate);
    cpu::attention_block_backward(fp32_block(a, in.a_ptr, in.b_ptr), out.get(), dout.get(), a.out_stride, a.lse,
                                  grads.a_ptr, grads.b_ptr);
    grads.store();
  });
}

keel_status attention_merge_dt(void* backend, keel_dtype dt, void* out, int64_t out_stride, float* lse, const void* out_b,
                              int64_t out_b_stride, const float* lse_b, int64_t B, int64_t T, int64_t NH, int64_t hs) {
  return run(backend, [&] {
    require_sizes({B, T, NH, hs}, "attention_merge_dt");
    require(out_stride >= NH * hs && out_b_stride >= NH * hs,
            "attention_merge_dt: a row stride is shorter than its NH·hs channels");
    require(B * T * NH == 0 || (out && lse && out_b && lse_b), "attention_merge_dt: a pointer is NULL");
    const bool bf = bf16_storage(dt, "attention_merge_dt");
    const Fp32Output o(bf, out, span_of(B * T, out_stride, NH * hs), kAccumulate);
    const Fp32Input ob(bf, out_b, span_of(B * T, out_b_stride, NH * hs));
    cpu::attention_merge(o.get(), out_stride, lse, ob.get(), out_b_stride, lse_b, B, T, NH, hs);
    o.store();
  });
}

keel_status copy_rows_dt(void* backend, keel_dtype dt, void* dst, int64_t dst_stride, const void* src,
                        int64_t src_stride, int64_t rows, int64_t width, int32_t accumulate) {
  return run(backend, [&] {
    require_sizes({rows, width}, "copy_rows_dt");
    require(dst_stride >= width && src_stride >= width, "copy_rows_dt: a row stride is shorter than its width");
    require(rows * width == 0 || (dst && src), "copy_rows_dt: a pointer is NULL");
    const bool bf = bf16_storage(dt, "copy_rows_dt");
    const Fp32Input from(bf, src, span_of(rows, src_stride, width));
    const Fp32Output to(bf, dst, span_of(rows, dst_stride, width), kAccumulate);
#pragma omp parallel for if (rows * width > (1 << 16))
    for (int64_t r = 0; r < rows; ++r) {
      const float* s = from.get() + r * src_stride;
      float* d = to.get() + r * dst_stride;
      for (int64_t c = 0; c < width; ++c) d[c] = accumulate ? d[c] + s[c] : s[c];
    }
    to.store();
  });
}

// Elements from x to the last turned one: the span a bf16 x is widened over.
int64_t rope_at_span(const int32_t* positions, int64_t B, int64_t T, int64_t heads, int64_t head_dim, int64_t stride,
                     int64_t first, const char* op) {
  keel_support::check_rope_at(positions, B, T, heads, head_dim, stride, first, op);
  return span_of(B * T, stride, first + heads * head_dim);
}

keel_status rope_at_forward_dt(void* backend, keel_dtype dt, void* x, const float* inv_freq, const int32_t* positions,
                               int64_t B, int64_t T, int64_t heads, int64_t head_dim, int64_t stride, int64_t first) {
  return run(backend, [&] {
    const int64_t span = rope_at_span(positions, B, T, heads, head_dim, stride, first, "rope_at_forward_dt");
    const Fp32Output v(bf16_storage(dt, "rope_at_forward_dt"), x, span, kAccumulate);
    cpu::rope_forward_at(v.get(), inv_freq, positions, B, T, heads, head_dim, stride, first);
    v.store();
  });
}

keel_status rope_at_backward_dt(void* backend, keel_dtype dt, void* dx, const float* inv_freq,
                                const int32_t* positions, int64_t B, int64_t T, int64_t heads, int64_t head_dim,
                                int64_t stride, int64_t first) {
  return run(backend, [&] {
    const int64_t span = rope_at_span(positions, B, T, heads, head_dim, stride, first, "rope_at_backward_dt");
    const Fp32Output g(bf16_storage(dt, "rope_at_backward_dt"), dx, span, kAccumulate);
    cpu::rope_backward_at(g.get(), inv_freq, positions, B, T, heads, head_dim, stride, first);
    g.store();
  });
}

}  // namespace

void fill_block_attention_slots(keel_backend_api& api) {
  KEEL_FILL_BACKEND_SLOTS(api, KEEL_BACKEND_BLOCK_ATTENTION_SLOTS_0_19);
  KEEL_FILL_BACKEND_SLOTS(api, KEEL_BACKEND_ATTENTION_MERGE_SLOTS_0_19);
}

}  // namespace keel_backend_cpu
