// Where a run stands, as a checkpoint saves it and a resume restores it: optimizer steps done,
// tokens trained, the data's position and running statistics. The trainer implements it; checkpoints see only this.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace keel {

// The most bytes one rank's data position may take, saved or read back.
inline constexpr int64_t kMaxDataPositionBytes = int64_t(1) << 20;

class RunPosition {
 public:
  virtual int64_t step() const = 0;
  virtual int64_t tokens_seen() const = 0;
  virtual nlohmann::json data_state() const = 0;
  // Throws KeelError when `data_state` belongs to another data source.
  virtual void restore_position(int64_t step, int64_t tokens_seen, const nlohmann::json& data_state) = 0;
  // With replicas that step on their own (strategy.h 0.14): this replica's steps and data
  // position, saved per replica beside the run's (an object with dp_rank); null otherwise.
  virtual nlohmann::json replica_position() const = 0;
  // After restore_position: every replica's saved position (null: none saved). With
  // `same_ranks` (the checkpoint's strategy, dp and tp are this run's, so the strategy's per-rank
  // state was restored too) each replica continues from its own; otherwise from the run's.
  // Every rank checks every entry, so a malformed one fails all alike (KeelError naming `where`).
  virtual void restore_replica_positions(const nlohmann::json& positions, bool same_ranks, const std::string& where) = 0;
  // A data plugin's position on this rank (data.h 0.16 save_position), as its text; "" when the
  // run reads built-in data or the source cannot save one.
  virtual std::string data_position() const = 0;
  // After restore_position: every rank's saved text, in world-rank order (null: none saved).
  // With `same_layout` (the checkpoint's dp, tp, pp and world size are this run's) each rank
  // hands its own to the source; otherwise, or for a source that cannot restore, the source
  // restarts with a warning. Collective: a source refusing its text fails every rank (KeelError
  // naming `where`).
  virtual void restore_data_positions(const nlohmann::json& positions, bool same_layout, const std::string& where) = 0;
  // Running statistics the run keeps across steps (the gradient noise scale's averages): an
  // object, or null when there are none. restore throws KeelError naming `where`.
  virtual nlohmann::json statistics_state() const = 0;
  virtual void restore_statistics(const nlohmann::json& state, const std::string& where) = 0;

 protected:
  ~RunPosition() = default;
};

}  // namespace keel
