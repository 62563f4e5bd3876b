// The cuda backend's 0.19 attention over blocks (keel_attention_args) and rope at given positions,
// over kernels/cuda/attention_block.cu and llama_ops.cu. The backward's rowdot scratch comes from
// the caching allocator, as the whole-row attention's does.
#include <keel_support/backend/backend_slots.hpp>

#include <cstddef>
#include <string>

#include "backend_cuda.hpp"  // defines: CudaBackend, StreamScratch, run, require, elem_of

namespace keel_cuda {
namespace {

keel::cuda::AttentionBlockShape read_args(const keel_attention_args* args, bool backward, const char* op) {
  require(args != nullptr, std::string(op) + ": args is NULL");
  require(args->struct_size >= offsetof(keel_attention_args, dkv) + sizeof(void*),
          std::string(op) + ": args->struct_size " + std::to_string(args->struct_size) +
              " is smaller than keel_attention_args (0.19)");
  const keel_attention_args& a = *args;
  require_sizes({a.B, a.Tq, a.Tkv, a.q_stride, a.kv_stride, a.out_stride}, op);
  require(a.hs > 0 && a.hs <= keel::cuda::kAttentionMaxHeadSize && a.NKV > 0 && a.NH > 0 && a.NH % a.NKV == 0,
          std::string(op) + ": need 0 < hs <= " + std::to_string(keel::cuda::kAttentionMaxHeadSize) +
              " and NH a positive multiple of NKV, found NH " + std::to_string(a.NH) + ", NKV " +
              std::to_string(a.NKV) + ", hs " + std::to_string(a.hs));
  require(a.q_stride >= a.NH * a.hs && a.out_stride >= a.NH * a.hs && a.kv_stride >= 2 * a.NKV * a.hs,
          std::string(op) + ": a row stride is narrower than the heads it holds (q " + std::to_string(a.q_stride) +
              ", kv " + std::to_string(a.kv_stride) + ", out " + std::to_string(a.out_stride) + ")");
  require(a.q && a.kv && a.out && a.lse, std::string(op) + ": q, kv, out and lse are required");
  if (backward) require(a.dout && a.dq && a.dkv, std::string(op) + ": dout, dq and dkv are required");
  return {a.B, a.Tq, a.Tkv, a.NH, a.NKV, a.hs, a.q_stride, a.kv_stride, a.out_stride, a.q_index0, a.kv_index0,
          a.positions};
}

keel_status attention_block_forward(void* backend, const keel_attention_args* args) {
  return run(backend, [&](CudaBackend& b) {
    const keel::cuda::AttentionBlockShape s = read_args(args, false, "attention_block_forward");
    const Elem e = elem_of(args->dt, "attention_block_forward");
    count_flops(4.0 * s.B * s.NH * s.Tq * s.Tkv * s.hs / 2);  // about half the pairs are seen
    keel::cuda::attention_block_forward(e, s, args->out, args->lse, args->q, args->kv, b.stream);
    launched("attention_block_forward");
  });
}

keel_status attention_block_backward(void* backend, const keel_attention_args* args) {
  return run(backend, [&](CudaBackend& b) {
    const keel::cuda::AttentionBlockShape s = read_args(args, true, "attention_block_backward");
    const Elem e = elem_of(args->dt, "attention_block_backward");
    count_flops(8.0 * s.B * s.NH * s.Tq * s.Tkv * s.hs / 2);
    StreamScratch rowdot(b, static_cast<size_t>(s.B * s.NH * s.Tq) * sizeof(float));
    keel::cuda::attention_block_backward(e, s, args->dq, args->dkv, args->dout, args->out, args->lse, args->q,
                                         args->kv, static_cast<float*>(rowdot.ptr), b.stream);
    launched("attention_block_backward");
  });
}

void require_rope_at(const int32_t* positions, int64_t B, int64_t T, int64_t heads, int64_t head_dim, int64_t stride,
                     int64_t first, const char* op) {
  require_sizes({B, T, heads, head_dim, stride, first}, op);
  require(positions != nullptr || B * T == 0, std::string(op) + ": positions is NULL");
  require(head_dim % 2 == 0, std::string(op) + ": head_dim " + std::to_string(head_dim) + " is odd");
  require(first + heads * head_dim <= stride, std::string(op) + ": heads end at column " +
                                                  std::to_string(first + heads * head_dim) +
                                                  ", past the row stride " + std::to_string(stride));
}

keel_status rope_at_forward_dt(void* backend, keel_dtype dt, void* x, const float* inv_freq, const int32_t* positions,
                               int64_t B, int64_t T, int64_t heads, int64_t head_dim, int64_t stride, int64_t first) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "rope_at_forward");
    require_rope_at(positions, B, T, heads, head_dim, stride, first, "rope_at_forward");
    keel::cuda::rope(e, x, inv_freq, B, T, heads, head_dim, stride, first, 0, false, b.stream, positions);
    launched("rope_at_forward");
  });
}

keel_status rope_at_backward_dt(void* backend, keel_dtype dt, void* dx, const float* inv_freq,
                                const int32_t* positions, int64_t B, int64_t T, int64_t heads, int64_t head_dim,
                                int64_t stride, int64_t first) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "rope_at_backward");
    require_rope_at(positions, B, T, heads, head_dim, stride, first, "rope_at_backward");
    keel::cuda::rope(e, dx, inv_freq, B, T, heads, head_dim, stride, first, 0, true, b.stream, positions);
    launched("rope_at_backward");
  });
}

}  // namespace

void fill_block_attention_slots(keel_backend_api& api) {
  KEEL_FILL_BACKEND_SLOTS(api, KEEL_BACKEND_BLOCK_ATTENTION_SLOTS_0_19);
}

}  // namespace keel_cuda
