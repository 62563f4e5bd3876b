// Loss-free balancing (DeepSeek-V3, Wang et al. 2024), model.router_bias_update_speed γ > 0: each
// sparse layer keeps a per-expert bias that only changes which experts a token's top-k picks (its
// weights come from the scores without it). Once per optimizer step, not per micro-batch, every
// bias moves by γ towards balance: b_e += γ·sign(mean load − load_e), the loads being the step's
// (token, slot) pairs per expert over the whole data-parallel group, which the core sums
// (model.h 0.19 step_tallies, end_step). The biases are checkpointed as named arrays, one per layer,
// under DeepSeek-V3's Hugging Face name; every replica holds the same values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <keel_support/common/backend_buffer.hpp>  // defines: BackendBuffer
#include <keel_support/common/backend_ops.hpp>     // defines: BackendOps
#include <keel_support/model/rule_state.hpp>       // defines: RuleState

namespace keel_llama {

class ExpertBias : public keel_support::RuleState {
 public:
  // `blocks`: the model's indices of the sparse blocks this rank runs, in order; `experts` each.
  ExpertBias(const keel_support::BackendOps& backend, std::vector<int64_t> blocks, int64_t experts, double speed);

  // Block `block`'s bias in backend memory (E fp32), for moe_route's selection_bias.
  const float* device(int64_t block) const;
  // A training micro-batch's pairs per expert of block `block` (host, E values).
  void tally(int64_t block, const std::vector<int64_t>& counts);

  const std::vector<double>& step_tallies() const override { return tallies_; }
  void end_step(const double* summed, int64_t count, bool applied) override;
  size_t array_count() const override { return blocks_.size(); }
  const std::string& array_name(size_t index) const override { return names_.at(index); }
  int64_t array_size(size_t) const override { return experts_; }
  void read_array(size_t index, float* dst) const override;
  void write_array(size_t index, const float* src) override;

 private:
  size_t slot(int64_t block) const;  // the block's place in blocks_
  void upload();

  keel_support::BackendOps be_;
  std::vector<int64_t> blocks_;
  std::vector<std::string> names_;
  int64_t experts_;
  double speed_;
  std::vector<float> bias_;        // (blocks, E) host copy: the truth
  std::vector<double> tallies_;    // (blocks, E) this step's pairs per expert
  keel_support::BackendBuffer device_;  // (blocks, E) fp32
};

}  // namespace keel_llama
