// State a model moves by a rule once per optimizer step rather than through its gradient
// (model.h 0.19: step_tallies, end_step, own_state_*), loss-free balancing's per-expert bias for
// one. A model that keeps such state hands model_slots.hpp an object of this interface from
// rule_state() (nullptr: none in this configuration, so nothing is tallied or saved).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace keel_support {

class RuleState {
 public:
  virtual ~RuleState() = default;
  // This rank's counts over the step's training micro-batches so far (the same length on every
  // data-parallel rank); unchanged until end_step.
  virtual const std::vector<double>& step_tallies() const = 0;
  // The tallies summed over the data-parallel group; `applied` false for a skipped step. Starts the
  // next step's tallies afresh either way.
  virtual void end_step(const double* summed, int64_t count, bool applied) = 0;
  // The state as named fp32 arrays (checkpoints).
  virtual size_t array_count() const = 0;
  virtual const std::string& array_name(size_t index) const = 0;
  virtual int64_t array_size(size_t index) const = 0;
  virtual void read_array(size_t index, float* dst) const = 0;
  // Refuses values it cannot hold (non-finite) by throwing.
  virtual void write_array(size_t index, const float* src) = 0;
};

}  // namespace keel_support
