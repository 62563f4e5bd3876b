// The cuda backend's 0.19 attention over blocks (keel_attention_args), their merge by statistics
// (context parallelism) and rope at given positions,
// over kernels/cuda/attention_block.cu and llama_ops.cu. The backward's rowdot scratch comes from
// the caching allocator, as the whole-row attention's does.
#include <keel_support/backend/attention_args.hpp>
#include <keel_support/backend/backend_slots.hpp>

#include <cstddef>
#include <string>

#include "backend_cuda.hpp"  // defines: CudaBackend, StreamScratch, run, require, elem_of

namespace keel_cuda {
namespace {

keel::cuda::AttentionBlockShape read_args(const keel_attention_args* args, bool backward, const char* op) {
  const keel_attention_args& a =
      keel_support::check_attention_args(args, backward, op, keel::cuda::kAttentionMaxHeadSize);
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

keel_status attention_merge_dt(void* backend, keel_dtype dt, void* out, int64_t out_stride, float* lse, const void* out_b,
                              int64_t out_b_stride, const float* lse_b, int64_t B, int64_t T, int64_t NH, int64_t hs) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "attention_merge");
    require_sizes({B, T, NH, hs}, "attention_merge");
    require(out_stride >= NH * hs && out_b_stride >= NH * hs,
            "attention_merge: a row stride is shorter than its NH·hs channels");
    keel::cuda::attention_merge(e, out, out_stride, lse, out_b, out_b_stride, lse_b, B, T, NH, hs, b.stream);
    launched("attention_merge");
  });
}

keel_status copy_rows_dt(void* backend, keel_dtype dt, void* dst, int64_t dst_stride, const void* src,
                        int64_t src_stride, int64_t rows, int64_t width, int32_t accumulate) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "copy_rows");
    require_sizes({rows, width}, "copy_rows");
    require(dst_stride >= width && src_stride >= width, "copy_rows: a row stride is shorter than its width");
    keel::cuda::copy_rows(e, dst, dst_stride, src, src_stride, rows, width, accumulate != 0, b.stream);
    launched("copy_rows");
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

keel_status rope_at_forward_dt(void* backend, keel_dtype dt, void* x, const float* inv_freq, const int32_t* positions,
                               int64_t B, int64_t T, int64_t heads, int64_t head_dim, int64_t stride, int64_t first) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "rope_at_forward");
    keel_support::check_rope_at(positions, B, T, heads, head_dim, stride, first, "rope_at_forward");
    keel::cuda::rope(e, x, inv_freq, B, T, heads, head_dim, stride, first, 0, false, b.stream, positions);
    launched("rope_at_forward");
  });
}

keel_status rope_at_backward_dt(void* backend, keel_dtype dt, void* dx, const float* inv_freq,
                                const int32_t* positions, int64_t B, int64_t T, int64_t heads, int64_t head_dim,
                                int64_t stride, int64_t first) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "rope_at_backward");
    keel_support::check_rope_at(positions, B, T, heads, head_dim, stride, first, "rope_at_backward");
    keel::cuda::rope(e, dx, inv_freq, B, T, heads, head_dim, stride, first, 0, true, b.stream, positions);
    launched("rope_at_backward");
  });
}

}  // namespace

void fill_block_attention_slots(keel_backend_api& api) {
  KEEL_FILL_BACKEND_SLOTS(api, KEEL_BACKEND_BLOCK_ATTENTION_SLOTS_0_19);
  KEEL_FILL_BACKEND_SLOTS(api, KEEL_BACKEND_ATTENTION_MERGE_SLOTS_0_19);
}

}  // namespace keel_cuda
