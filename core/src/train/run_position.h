// Where a run stands, as plain values: what a checkpoint saves of it (RunPosition, this rank's
// now) and what a resume reads back (SavedPosition, every rank's as saved). The trainer fills the
// first and applies the second; checkpoint code only carries them, so it never calls into training.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace keel {

// The most bytes one rank's data position may take, saved or read back.
inline constexpr int64_t kMaxDataPositionBytes = int64_t(1) << 20;

struct RunPosition {
  int64_t step = 0;         // optimizer steps done
  int64_t tokens_seen = 0;  // tokens trained
  // The built-in sampler's state, or the data plugin's name and whether it resumes.
  nlohmann::json data_state;
  // Running statistics kept across steps (the gradient noise scale's averages, the batch
  // schedule's): an object, or null when there are none.
  nlohmann::json statistics;
  // With replicas that step on their own (strategy.h 0.14): this replica's steps and samples
  // taken (an object with dp_rank); null otherwise.
  nlohmann::json replica_position;
  // A data plugin's position on this rank (data.h 0.16 save_position), as its text; "" when the
  // run reads built-in data or the source cannot save one.
  std::string data_position;
};

// A checkpoint's position, untrusted until the trainer applies it (each field is checked there,
// naming `where`).
struct SavedPosition {
  std::string where;  // the manifest's path, for messages
  int64_t step = 0;
  int64_t tokens_seen = 0;
  nlohmann::json data_state;
  // Every replica's saved position (null: none saved). `same_ranks`: the checkpoint's strategy,
  // dp and tp are this run's, so the strategy's per-rank state was restored too and each replica
  // may continue from its own.
  nlohmann::json replica_positions;
  bool same_ranks = false;
  // Every rank's data plugin text, in world-rank order (null: none saved). `same_layout`: the
  // checkpoint's dp, tp, pp and world size are this run's, so each rank may take its own back.
  nlohmann::json data_positions;
  bool same_layout = false;
  nlohmann::json statistics;  // null: none saved (older checkpoints), the averages start over
};

}  // namespace keel
