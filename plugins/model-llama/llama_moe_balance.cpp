// The per-expert selection bias of loss-free balancing (llama_moe_balance.hpp).
#include "llama_moe_balance.hpp"

#include <keel_support/common/abi_guard.hpp>  // defines: StatusError

#include <algorithm>
#include <cmath>

namespace keel_llama {

using keel_support::StatusError;

ExpertBias::ExpertBias(const keel_support::BackendOps& backend, std::vector<int64_t> blocks, int64_t experts,
                       double speed)
    : be_(backend), blocks_(std::move(blocks)), experts_(experts), speed_(speed) {
  for (int64_t block : blocks_)
    names_.push_back("model.layers." + std::to_string(block) + ".mlp.gate.e_score_correction_bias");
  bias_.assign(blocks_.size() * size_t(experts_), 0.0f);
  tallies_.assign(bias_.size(), 0.0);
  device_ = be_.alloc_bytes(std::max<size_t>(bias_.size(), 1) * sizeof(float));
  upload();
}

size_t ExpertBias::slot(int64_t block) const {
  const auto at = std::find(blocks_.begin(), blocks_.end(), block);
  if (at == blocks_.end())
    throw StatusError(KEEL_ERR_INTERNAL, "loss-free balancing: block " + std::to_string(block) + " is not a sparse "
                                                                                               "block of this rank");
  return size_t(at - blocks_.begin());
}

const float* ExpertBias::device(int64_t block) const { return device_.floats() + slot(block) * size_t(experts_); }

void ExpertBias::tally(int64_t block, const std::vector<int64_t>& counts) {
  double* row = tallies_.data() + slot(block) * size_t(experts_);
  for (int64_t e = 0; e < experts_; ++e) row[e] += double(counts[size_t(e)]);
}

void ExpertBias::end_step(const double* summed, int64_t count, bool applied) {
  if (applied && count == int64_t(bias_.size()))
    for (size_t b = 0; b < blocks_.size(); ++b) {
      const double* load = summed + b * size_t(experts_);
      double mean = 0;
      for (int64_t e = 0; e < experts_; ++e) mean += load[e];
      mean /= double(experts_);
      for (int64_t e = 0; e < experts_; ++e) {
        const double error = mean - load[e];  // positive: the expert is under-loaded, so raise its bias
        const float step = error > 0 ? float(speed_) : error < 0 ? -float(speed_) : 0.0f;
        bias_[b * size_t(experts_) + size_t(e)] += step;
      }
    }
  std::fill(tallies_.begin(), tallies_.end(), 0.0);
  if (applied) upload();
}

void ExpertBias::read_array(size_t index, float* dst) const {
  std::copy_n(bias_.begin() + std::ptrdiff_t(index * size_t(experts_)), experts_, dst);
}

void ExpertBias::write_array(size_t index, const float* src) {
  for (int64_t e = 0; e < experts_; ++e)
    if (!std::isfinite(src[e]))
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, names_.at(index) + "[" + std::to_string(e) + "] is " +
                                                       std::to_string(src[e]) + "; a selection bias must be finite");
  std::copy_n(src, experts_, bias_.begin() + std::ptrdiff_t(index * size_t(experts_)));
  upload();
}

void ExpertBias::upload() {
  if (!bias_.empty())
    be_.copy_bytes(device_.get(), bias_.data(), bias_.size() * sizeof(float), KEEL_COPY_HOST_TO_DEVICE);
}

}  // namespace keel_llama
