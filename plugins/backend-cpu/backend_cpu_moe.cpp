// The cpu backend's ABI 0.19 slots, a mixture-of-experts layer's ops: routing (fp32 at any compute
// type), the plan that puts the (token, slot) pairs in expert order, the moves into that order and
// back, and the grouped matmul of the experts (kernels/cpu moe_route, moe_permute, grouped_matmul).
// The cpu's memory is the host's, so expert indices and positions are checked here before anything
// is read or written through them.
#include <keel/backend.h>

#include <climits>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <keel_support/backend/backend_slots.hpp>  // defines: KEEL_FILL_BACKEND_SLOTS

#include "backend_cpu.hpp"        // defines: run, require*
#include "backend_cpu_dt.hpp"     // defines: bf16_storage, Fp32Input, Fp32Output
#include "cpu/grouped_matmul.h"   // defines: grouped_matmul_forward, grouped_matmul_backward
#include "cpu/moe_permute.h"      // defines: moe_permute_plan, moe_permute, moe_unpermute, ...
#include "cpu/moe_route.h"        // defines: MoeRouteShape, moe_route, moe_route_backward

namespace keel_backend_cpu {
namespace {

namespace cpu = keel::cpu;

constexpr int32_t kRouteFlags = KEEL_ROUTE_SIGMOID | KEEL_ROUTE_NORMALIZE;

// N tokens, E experts, K per token: the pairs' rows must fit the int32 positions.
// N*K (token, expert) pairs address int32 positions; checked without forming a product that could
// overflow for a hostile N, which also keeps N*K*C inside int64 for any C below 2^32.
void require_pairs_fit(int64_t N, int32_t K, const char* op) {
  require(K >= 1 && N <= (INT32_MAX - 1) / K, std::string(op) + ": N = " + std::to_string(N) + " tokens of K = " +
                                                 std::to_string(K) + " pairs each do not fit the int32 positions");
}

void require_experts_shape(int64_t N, int32_t E, int32_t K, const char* op) {
  require_sizes({N}, op);
  require(E > 0 && K >= 1 && K <= E, std::string(op) + ": K = " + std::to_string(K) + " experts per token must lie in [1, E = " +
                                         std::to_string(E) + "]");
  require_pairs_fit(N, K, op);
}

// Every expert index in [0,E), naming the first that is not.
void require_expert_indices(const int32_t* experts, int64_t N, int32_t E, int32_t K, const char* op) {
  for (int64_t i = 0; i < N * K; ++i)
    require(experts[i] >= 0 && experts[i] < E, std::string(op) + ": experts[" + std::to_string(i / K) + "," +
                                                   std::to_string(i % K) + "] = " + std::to_string(experts[i]) +
                                                   " is outside [0, E = " + std::to_string(E) + ")");
}

// Every position a row of the N*K permuted rows.
void require_positions(const int32_t* positions, int64_t N, int32_t K, int64_t C, const char* op) {
  require_sizes({N, K, C}, op);
  require(K >= 1, std::string(op) + ": K = " + std::to_string(K) + " must be at least 1");
  require_pairs_fit(N, K, op);
  require(C < (int64_t(1) << 32), std::string(op) + ": C = " + std::to_string(C) + " columns is past 2^32");
  for (int64_t i = 0; i < N * K; ++i)
    require(positions[i] >= 0 && positions[i] < N * K, std::string(op) + ": positions[" + std::to_string(i / K) + "," +
                                                           std::to_string(i % K) + "] = " + std::to_string(positions[i]) +
                                                           " is outside the " + std::to_string(N * K) + " rows");
}

cpu::MoeRouteShape route_shape(int64_t N, int32_t E, int32_t K, int32_t flags, const char* op) {
  require_experts_shape(N, E, K, op);
  require((flags & ~kRouteFlags) == 0, std::string(op) + ": flags " + std::to_string(flags) +
                                           " has bits other than KEEL_ROUTE_SIGMOID (1) and KEEL_ROUTE_NORMALIZE (2)");
  return {N, E, K, (flags & KEEL_ROUTE_SIGMOID) != 0, (flags & KEEL_ROUTE_NORMALIZE) != 0};
}

keel_status moe_route(void* backend, float* weights, int32_t* experts, float* scores, const float* logits,
                      const float* selection_bias, int64_t N, int32_t E, int32_t K, int32_t flags) {
  return run(backend, [&] {
    const cpu::MoeRouteShape shape = route_shape(N, E, K, flags, "moe_route");
    count_work(0.0, 4.0 * (2 * N * E + 2 * N * K));
    cpu::moe_route(weights, experts, scores, logits, selection_bias, shape);
  });
}

keel_status moe_route_backward(void* backend, float* dlogits, const float* dweights, const float* logits,
                               const float* scores, const int32_t* experts, const float* expert_dscores, float z_grad,
                               int64_t N, int32_t E, int32_t K, int32_t flags) {
  return run(backend, [&] {
    const cpu::MoeRouteShape shape = route_shape(N, E, K, flags, "moe_route_backward");
    require_expert_indices(experts, N, E, K, "moe_route_backward");
    count_work(0.0, 4.0 * (3 * N * E + 2 * N * K));
    cpu::moe_route_backward(dlogits, dweights, logits, scores, experts, expert_dscores, z_grad, shape);
  });
}

keel_status moe_permute_plan(void* backend, int32_t* positions, int64_t* counts_host, const int32_t* experts, int64_t N,
                             int32_t E, int32_t K) {
  return run(backend, [&] {
    require_experts_shape(N, E, K, "moe_permute_plan");
    require(counts_host != nullptr, "moe_permute_plan: counts_host is NULL");
    require_expert_indices(experts, N, E, K, "moe_permute_plan");
    cpu::moe_permute_plan(positions, counts_host, experts, N, E, K);
  });
}

keel_status moe_permute_dt(void* backend, keel_dtype dt, void* out, const void* inp, const float* scale,
                           const int32_t* positions, int64_t N, int32_t K, int64_t C) {
  return run(backend, [&] {
    require_positions(positions, N, K, C, "moe_permute_dt");
    const bool bf = bf16_storage(dt, "moe_permute_dt");
    count_work(0.0, (bf ? 2.0 : 4.0) * (N * C + N * K * C));
    const Fp32Input x(bf, inp, N * C);
    const Fp32Output y(bf, out, N * K * C, kWrite);
    cpu::moe_permute(y.get(), x.get(), scale, positions, N, K, C);
    y.store();
  });
}

keel_status moe_unpermute_dt(void* backend, keel_dtype dt, void* out, const void* inp, const float* scale,
                             const int32_t* positions, int64_t N, int32_t K, int64_t C) {
  return run(backend, [&] {
    require_positions(positions, N, K, C, "moe_unpermute_dt");
    const bool bf = bf16_storage(dt, "moe_unpermute_dt");
    count_work(2.0 * N * K * C, (bf ? 2.0 : 4.0) * (N * C + N * K * C));
    const Fp32Input x(bf, inp, N * K * C);
    const Fp32Output y(bf, out, N * C, kWrite);
    cpu::moe_unpermute(y.get(), x.get(), scale, positions, N, K, C);
    y.store();
  });
}

keel_status moe_unpermute_scale_backward_dt(void* backend, keel_dtype dt, float* dscale, const void* dout,
                                            const void* inp, const int32_t* positions, int64_t N, int32_t K,
                                            int64_t C) {
  return run(backend, [&] {
    require_positions(positions, N, K, C, "moe_unpermute_scale_backward_dt");
    const bool bf = bf16_storage(dt, "moe_unpermute_scale_backward_dt");
    count_work(2.0 * N * K * C, (bf ? 2.0 : 4.0) * (N * C + N * K * C));
    const Fp32Input g(bf, dout, N * C), x(bf, inp, N * K * C);
    cpu::moe_unpermute_scale_backward(dscale, g.get(), x.get(), positions, N, K, C);
  });
}

// The rows of all groups, checking each count and that a group with rows has its weight.
int64_t grouped_rows(const void* const* weights, const int64_t* counts, int32_t E, int64_t IC, int64_t OC,
                     const char* op) {
  require_sizes({IC, OC}, op);
  require(E > 0 && weights && counts, std::string(op) + ": E = " + std::to_string(E) +
                                          " must be positive, with host arrays of E weights and E counts");
  int64_t M = 0;
  for (int32_t e = 0; e < E; ++e) {
    require(counts[e] >= 0, std::string(op) + ": counts[" + std::to_string(e) + "] = " + std::to_string(counts[e]) +
                                " is negative");
    require(counts[e] == 0 || weights[e], std::string(op) + ": weights[" + std::to_string(e) + "] is NULL but " +
                                              std::to_string(counts[e]) + " rows need it");
    M += counts[e];
  }
  return M;
}

// The E weights at fp32: the caller's pointers, or a widened copy of each one a group reads.
class Fp32Weights {
 public:
  Fp32Weights(bool widen, const void* const* weights, const int64_t* counts, int32_t E, int64_t n) : ptrs_(E) {
    for (int32_t e = 0; e < E; ++e) {
      const void* w = counts[e] > 0 ? weights[e] : nullptr;
      inputs_.emplace_back(std::make_unique<Fp32Input>(widen, w, n));
      ptrs_[e] = inputs_.back()->get();
    }
  }
  const float* const* get() const { return ptrs_.data(); }

 private:
  std::vector<std::unique_ptr<Fp32Input>> inputs_;
  std::vector<const float*> ptrs_;
};

keel_status grouped_matmul_forward_dt(void* backend, keel_dtype dt, void* out, const void* inp,
                                      const void* const* weights, const int64_t* counts, int32_t E, int64_t IC,
                                      int64_t OC) {
  return run(backend, [&] {
    const int64_t M = grouped_rows(weights, counts, E, IC, OC, "grouped_matmul_forward_dt");
    const bool bf = bf16_storage(dt, "grouped_matmul_forward_dt");
    count_work(2.0 * M * IC * OC, (bf ? 2.0 : 4.0) * (M * IC + E * OC * IC + M * OC));
    const Fp32Input x(bf, inp, M * IC);
    const Fp32Weights w(bf, weights, counts, E, OC * IC);
    const Fp32Output y(bf, out, M * OC, kWrite);
    cpu::grouped_matmul_forward(y.get(), x.get(), w.get(), counts, E, IC, OC);
    y.store();
  });
}

keel_status grouped_matmul_backward_dt(void* backend, keel_dtype dt, void* dinp, float* const* dweights,
                                       const void* dout, const void* inp, const void* const* weights,
                                       const int64_t* counts, int32_t E, int64_t IC, int64_t OC) {
  return run(backend, [&] {
    const int64_t M = grouped_rows(weights, counts, E, IC, OC, "grouped_matmul_backward_dt");
    const bool bf = bf16_storage(dt, "grouped_matmul_backward_dt");
    count_work(2.0 * M * IC * OC * ((dinp ? 1 : 0) + (dweights ? 1 : 0)),
               (bf ? 2.0 : 4.0) * (M * OC + M * IC + (dinp ? E * OC * IC + M * IC : 0)) +
                   (dweights ? 8.0 * E * OC * IC : 0.0));
    const Fp32Input g(bf, dout, M * OC), x(bf, dweights ? inp : nullptr, M * IC);  // inp only if read
    const Fp32Weights w(bf && dinp, weights, counts, E, OC * IC);
    const Fp32Output dx(bf, dinp, M * IC, kAccumulate);
    cpu::grouped_matmul_backward(dx.get(), dweights, g.get(), x.get(), w.get(), counts, E, IC, OC);
    dx.store();
  });
}

}  // namespace

void fill_moe_slots(keel_backend_api& api) { KEEL_FILL_BACKEND_SLOTS(api, KEEL_BACKEND_MOE_SLOTS_0_19); }

}  // namespace keel_backend_cpu
