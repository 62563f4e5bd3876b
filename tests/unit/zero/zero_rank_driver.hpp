// Drives one rank's zero strategy through training steps the way the core and a model do:
// zero_grads; per micro-batch begin_microbatch, a forward that acquires layers 0..4 in order,
// and a GPT-like backward (layer 0 first as the tied head, not final; then 4..1; then layer 0
// again, final), adding this rank's own gradients; then grad_sq_norm and step. It records what
// a test compares against the single-rank reference: norms, the full layers the forward saw,
// the comm counters, and the final parameters and momentum of the tensor pieces it owns.
// A failing call throws, so ThreadWorld::run wakes the other ranks instead of hanging.
#pragma once

#include <stdexcept>

#include "zero_test_support.hpp"

namespace keel_test {

// This rank's gradient contributions: distinct per step, rank, micro-batch, parameter, element.
inline float head_grad(int32_t step, int32_t rank, int32_t microbatch, int64_t e) {  // wte's first use
  return 0.02f * float((rank + int32_t(e) + microbatch + step) % 5) - 0.04f;
}
inline float main_grad(int32_t step, int32_t rank, int32_t microbatch, size_t index, int64_t e) {
  return 0.01f * float((rank * 7 + microbatch * 3 + int32_t(index) * 5 + int32_t(e) * 2 + step) % 13) - 0.06f +
         0.003f * float(rank);
}

struct DriverOptions {
  int32_t steps = 2;
  int32_t micro_batches = 1;
  float lr = 0.1f;
  float grad_scale = 0.8f;
};

struct RankRecord {
  std::vector<double> norms;                           // grad_sq_norm per step
  std::vector<std::vector<std::vector<float>>> seen;   // [step][param]: the forward's view (step = steps: after)
  keel_comm_counters counters{};                       // after the steps, before the final forward
  std::vector<std::pair<int64_t, int64_t>> owned;      // per parameter, kind -1
  std::vector<std::vector<float>> params;              // per parameter: the owned elements
  std::vector<std::pair<int64_t, int64_t>> state_owned;  // per parameter, kind 0
  std::vector<std::vector<float>> momentum;            // per parameter: state slot 0 over state_owned
};

class RankDriver {
 public:
  RankDriver(const keel_strategy_api& api, ZeroRank& rank, const keel_comm_api* comm_api, void* comm)
      : api_(api), rank_(rank), comm_api_(comm_api), comm_(comm) {}

  RankRecord run(const DriverOptions& options) {
    RankRecord record;
    for (int32_t step = 1; step <= options.steps; ++step) {
      ok(api_.zero_grads(rank_.strategy), "zero_grads");
      for (int32_t m = 0; m < options.micro_batches; ++m) {
        ok(api_.begin_microbatch(rank_.strategy, m, m == options.micro_batches - 1), "begin_microbatch");
        std::vector<std::vector<float>> seen = forward();
        if (m == 0) record.seen.push_back(std::move(seen));
        backward(step, m);
      }
      double norm = -1.0;
      ok(api_.grad_sq_norm(rank_.strategy, &norm), "grad_sq_norm");
      record.norms.push_back(norm);
      keel_strategy_step_args args{sizeof(args), options.lr, options.grad_scale, step};
      ok(api_.step(rank_.strategy, &args), "step");
    }
    if (comm_api_) {
      record.counters.struct_size = sizeof(record.counters);
      ok(comm_api_->counters(comm_, &record.counters), "counters");
    }
    record.seen.push_back(forward());
    read_owned(record);
    return record;
  }

 private:
  void ok(keel_status status, const char* what) const {
    if (status != KEEL_OK)
      throw std::runtime_error("rank " + std::to_string(rank_.rank()) + ": " + what + " failed (" +
                               std::to_string(status) + "): " + zero_last_error());
  }

  size_t layer_size(int32_t layer) const {
    size_t n = 0;
    for (const auto& spec : rank_.specs) n += spec.layer == layer ? 1 : 0;
    return n;
  }
  size_t first_index(int32_t layer) const {
    for (size_t i = 0; i < rank_.specs.size(); ++i)
      if (rank_.specs[i].layer == layer) return i;
    return rank_.specs.size();
  }

  // Acquires every layer in order and copies out what it was handed, per parameter.
  std::vector<std::vector<float>> forward() {
    std::vector<std::vector<float>> seen(rank_.specs.size());
    for (int32_t layer = 0; layer < kZeroLayers; ++layer) {
      const size_t n = layer_size(layer), first = first_index(layer);
      std::vector<keel_tensor> params(n);
      ok(rank_.access.acquire(rank_.access.ctx, layer, KEEL_PHASE_FORWARD, params.data(), nullptr, n), "acquire");
      for (size_t k = 0; k < n; ++k) {
        const float* data = static_cast<const float*>(params[k].data);
        seen[first + k].assign(data, data + kParamNumel[first + k]);
      }
      ok(rank_.access.release(rank_.access.ctx, layer, KEEL_PHASE_FORWARD, 0), "release");
    }
    return seen;
  }

  // Acquires `layer` for backward, lets `add(index, grad)` accumulate into each gradient, releases.
  template <typename Add>
  void backward_use(int32_t layer, int32_t grads_final, Add&& add) {
    const size_t n = layer_size(layer), first = first_index(layer);
    std::vector<keel_tensor> params(n), grads(n);
    ok(rank_.access.acquire(rank_.access.ctx, layer, KEEL_PHASE_BACKWARD, params.data(), grads.data(), n), "acquire");
    for (size_t k = 0; k < n; ++k) add(first + k, static_cast<float*>(grads[k].data));
    ok(rank_.access.release(rank_.access.ctx, layer, KEEL_PHASE_BACKWARD, grads_final), "release");
  }

  void backward(int32_t step, int32_t m) {
    const int32_t r = rank_.rank();
    auto add_main = [&](size_t index, float* grad) {
      for (int64_t e = 0; e < kParamNumel[index]; ++e) grad[e] += main_grad(step, r, m, index, e);
    };
    backward_use(0, 0, [&](size_t index, float* grad) {  // the tied head: wte only
      if (index == 0)
        for (int64_t e = 0; e < kParamNumel[0]; ++e) grad[e] += head_grad(step, r, m, e);
    });
    for (int32_t layer = kZeroLayers - 1; layer >= 1; --layer) backward_use(layer, 1, add_main);
    backward_use(0, 1, add_main);
  }

  void read_owned(RankRecord& record) {
    for (size_t i = 0; i < rank_.specs.size(); ++i) {
      record.owned.push_back(rank_.owned(-1, i));
      const auto [pb, pe] = record.owned.back();
      record.params.emplace_back(size_t(pe - pb));
      ok(api_.read_param(rank_.strategy, i, pb, pe - pb, record.params.back().data()), "read_param");
      record.state_owned.push_back(rank_.owned(0, i));
      const auto [sb, se] = record.state_owned.back();
      record.momentum.emplace_back(size_t(se - sb));
      ok(api_.read_state(rank_.strategy, 0, i, sb, se - sb, record.momentum.back().data()), "read_state");
    }
  }

  const keel_strategy_api& api_;
  ZeroRank& rank_;
  const keel_comm_api* comm_api_;
  void* comm_;
};

}  // namespace keel_test
