// The cuda backend's mixture-of-experts slots (ABI 0.19) over kernels/cuda/moe.cu: routing, the
// plan (its counts copied to the host), the moves into and out of expert order, and the grouped
// matmul as a loop of the cuBLASLt matmul, one per expert with rows (a grouped GEMM later).
// Indices live in device memory: the plan reports the first bad expert, the moves trust the
// positions a plan made (the cpu backend checks them on the host).
#include <keel_support/backend/backend_slots.hpp>

#include <climits>
#include <string>

#include "backend_cuda.hpp"  // defines: CudaBackend, run, require, elem_of

namespace keel_cuda {
namespace {

// --- 0.19: a mixture-of-experts layer's ops (kernels/cuda/moe.cu; the grouped matmul is a loop of
// the cuBLASLt matmuls above, one per expert with rows: a grouped GEMM later) ---

constexpr int32_t kRouteFlags = KEEL_ROUTE_SIGMOID | KEEL_ROUTE_NORMALIZE;

// N*K (token, expert) pairs address int32 positions; checked without forming a product that could
// overflow for a hostile N, which also keeps N*K*C inside int64 for any C below 2^32.
void require_pairs_fit(int64_t N, int32_t K, const char* op) {
  require(K >= 1 && N <= (INT32_MAX - 1) / K, std::string(op) + ": N = " + std::to_string(N) + " tokens of K = " +
                                                 std::to_string(K) + " pairs each do not fit the int32 positions");
}

void require_experts_shape(int64_t N, int32_t E, int32_t K, const char* op) {
  require_sizes({N}, op);
  require(E > 0 && K >= 1 && K <= E, std::string(op) + ": K = " + std::to_string(K) +
                                         " experts per token must lie in [1, E = " + std::to_string(E) + "]");
  require_pairs_fit(N, K, op);
}

void require_route_flags(int32_t flags, const char* op) {
  require((flags & ~kRouteFlags) == 0, std::string(op) + ": flags " + std::to_string(flags) +
                                           " has bits other than KEEL_ROUTE_SIGMOID (1) and KEEL_ROUTE_NORMALIZE (2)");
}

keel_status moe_route(void* backend, float* weights, int32_t* experts, float* scores, const float* logits,
                      const float* selection_bias, int64_t N, int32_t E, int32_t K, int32_t flags) {
  return run(backend, [&](CudaBackend& b) {
    require_experts_shape(N, E, K, "moe_route");
    require_route_flags(flags, "moe_route");
    keel::cuda::moe_route(weights, experts, scores, logits, selection_bias, N, E, K, flags & KEEL_ROUTE_SIGMOID,
                          flags & KEEL_ROUTE_NORMALIZE, b.stream);
    launched("moe_route");
  });
}

// The expert indices are the forward's, in device memory: not checked again here.
keel_status moe_route_backward(void* backend, float* dlogits, const float* dweights, const float* logits,
                               const float* scores, const int32_t* experts, const float* expert_dscores, float z_grad,
                               int64_t N, int32_t E, int32_t K, int32_t flags) {
  return run(backend, [&](CudaBackend& b) {
    require_experts_shape(N, E, K, "moe_route_backward");
    require_route_flags(flags, "moe_route_backward");
    keel::cuda::moe_route_backward(dlogits, dweights, logits, scores, experts, expert_dscores, z_grad, N, E, K,
                                   flags & KEEL_ROUTE_SIGMOID, flags & KEEL_ROUTE_NORMALIZE, b.stream);
    launched("moe_route_backward");
  });
}

// The counts reach the host, so this waits for the queue; a bad expert index is found then.
keel_status moe_permute_plan(void* backend, int32_t* positions, int64_t* counts_host, const int32_t* experts, int64_t N,
                             int32_t E, int32_t K) {
  return run(backend, [&](CudaBackend& b) {
    require_experts_shape(N, E, K, "moe_permute_plan");
    require(counts_host != nullptr, "moe_permute_plan: counts_host is NULL");
    StreamScratch scratch(b, sizeof(unsigned long long) + size_t(E) * sizeof(int64_t));
    auto* first_bad = static_cast<unsigned long long*>(scratch.ptr);
    auto* counts = reinterpret_cast<int64_t*>(first_bad + 1);
    check_cuda(cudaMemsetAsync(first_bad, 0xff, sizeof(*first_bad), b.stream), "moe_permute_plan: cudaMemsetAsync");
    keel::cuda::moe_permute_plan(positions, counts, first_bad, experts, N, E, K, b.stream);
    launched("moe_permute_plan");
    unsigned long long bad = 0;
    check_cuda(cudaMemcpyAsync(&bad, first_bad, sizeof(bad), cudaMemcpyDeviceToHost, b.stream),
               "moe_permute_plan: cudaMemcpyAsync");
    check_cuda(cudaMemcpyAsync(counts_host, counts, size_t(E) * sizeof(int64_t), cudaMemcpyDeviceToHost, b.stream),
               "moe_permute_plan: cudaMemcpyAsync");
    check_cuda(cudaStreamSynchronize(b.stream), "moe_permute_plan: cudaStreamSynchronize");
    if (bad != ~0ull) {
      int32_t value = 0;
      check_cuda(cudaMemcpy(&value, experts + bad, sizeof(value), cudaMemcpyDeviceToHost), "moe_permute_plan: cudaMemcpy");
      require(false, "moe_permute_plan: experts[" + std::to_string(bad / K) + "," + std::to_string(bad % K) + "] = " +
                         std::to_string(value) + " is outside [0, E = " + std::to_string(E) + ")");
    }
  });
}

// Positions come from moe_permute_plan in device memory: not checked here.
void require_positions_shape(int64_t N, int32_t K, int64_t C, const char* op) {
  require_sizes({N, K, C}, op);
  require(K >= 1, std::string(op) + ": K = " + std::to_string(K) + " must be at least 1");
  require_pairs_fit(N, K, op);
  require(C < (int64_t(1) << 32), std::string(op) + ": C = " + std::to_string(C) + " columns is past 2^32");
}

keel_status moe_permute_dt(void* backend, keel_dtype dt, void* out, const void* inp, const float* scale,
                           const int32_t* positions, int64_t N, int32_t K, int64_t C) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "moe_permute_dt");
    require_positions_shape(N, K, C, "moe_permute_dt");
    keel::cuda::moe_permute(e, out, inp, scale, positions, N, K, C, b.stream);
    launched("moe_permute_dt");
  });
}

keel_status moe_unpermute_dt(void* backend, keel_dtype dt, void* out, const void* inp, const float* scale,
                             const int32_t* positions, int64_t N, int32_t K, int64_t C) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "moe_unpermute_dt");
    require_positions_shape(N, K, C, "moe_unpermute_dt");
    keel::cuda::moe_unpermute(e, out, inp, scale, positions, N, K, C, b.stream);
    launched("moe_unpermute_dt");
  });
}

keel_status moe_unpermute_scale_backward_dt(void* backend, keel_dtype dt, float* dscale, const void* dout,
                                            const void* inp, const int32_t* positions, int64_t N, int32_t K,
                                            int64_t C) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "moe_unpermute_scale_backward_dt");
    require_positions_shape(N, K, C, "moe_unpermute_scale_backward_dt");
    keel::cuda::moe_unpermute_scale_backward(e, dscale, dout, inp, positions, N, K, C, b.stream);
    launched("moe_unpermute_scale_backward_dt");
  });
}

// Checks the host arrays: each count, and a weight for each group with rows.
void require_groups(const void* const* weights, const int64_t* counts, int32_t E, int64_t IC, int64_t OC,
                    const char* op) {
  require_sizes({IC, OC}, op);
  require(E > 0 && weights && counts, std::string(op) + ": E = " + std::to_string(E) +
                                          " must be positive, with host arrays of E weights and E counts");
  for (int32_t e = 0; e < E; ++e) {
    require(counts[e] >= 0, std::string(op) + ": counts[" + std::to_string(e) + "] = " + std::to_string(counts[e]) +
                                " is negative");
    require(counts[e] == 0 || weights[e], std::string(op) + ": weights[" + std::to_string(e) + "] is NULL but " +
                                              std::to_string(counts[e]) + " rows need it");
  }
}


keel_status grouped_matmul_forward_dt(void* backend, keel_dtype dt, void* out, const void* inp,
                                      const void* const* weights, const int64_t* counts, int32_t E, int64_t IC,
                                      int64_t OC) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "grouped_matmul_forward_dt");
    require_groups(weights, counts, E, IC, OC, "grouped_matmul_forward_dt");
    const size_t eb = element_bytes(e);
    int64_t row = 0;
    for (int32_t g = 0; g < E; ++g) {
      if (counts[g] > 0)
        keel::cuda::matmul_forward(b.matmul(), e, static_cast<char*>(out) + row * OC * eb, nullptr,
                                   static_cast<const char*>(inp) + row * IC * eb, weights[g], nullptr, counts[g], IC,
                                   OC);
      row += counts[g];
    }
    launched("grouped_matmul_forward_dt");
    count_flops(2.0 * row * IC * OC);
  });
}

keel_status grouped_matmul_backward_dt(void* backend, keel_dtype dt, void* dinp, float* const* dweights,
                                       const void* dout, const void* inp, const void* const* weights,
                                       const int64_t* counts, int32_t E, int64_t IC, int64_t OC) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "grouped_matmul_backward_dt");
    require_groups(weights, counts, E, IC, OC, "grouped_matmul_backward_dt");
    const size_t eb = element_bytes(e);
    int64_t row = 0;
    for (int32_t g = 0; g < E; ++g) {
      float* dweight = dweights ? dweights[g] : nullptr;
      if (counts[g] > 0 && (dinp || dweight))
        keel::cuda::matmul_backward(b.matmul(), e, dinp ? static_cast<char*>(dinp) + row * IC * eb : nullptr, dweight,
                                    nullptr, static_cast<const char*>(dout) + row * OC * eb,
                                    static_cast<const char*>(inp) + row * IC * eb, weights[g], counts[g], IC, OC,
                                    nullptr);
      row += counts[g];
    }
    launched("grouped_matmul_backward_dt");
    count_flops(2.0 * row * IC * OC * ((dinp ? 1 : 0) + (dweights ? 1 : 0)));
  });
}

}  // namespace

void fill_moe_slots(keel_backend_api& api) { KEEL_FILL_BACKEND_SLOTS(api, KEEL_BACKEND_MOE_SLOTS_0_19); }

}  // namespace keel_cuda
