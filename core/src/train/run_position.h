// Where a run stands, as a checkpoint saves it and a resume restores it: optimizer steps done,
// tokens trained, and the data's position. The trainer implements it; checkpoints see only this.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>

namespace keel {

class RunPosition {
 public:
  virtual int64_t step() const = 0;
  virtual int64_t tokens_seen() const = 0;
  virtual nlohmann::json data_state() const = 0;
  // Throws KeelError when `data_state` belongs to another data source.
  virtual void restore_position(int64_t step, int64_t tokens_seen, const nlohmann::json& data_state) = 0;

 protected:
  ~RunPosition() = default;
};

}  // namespace keel
