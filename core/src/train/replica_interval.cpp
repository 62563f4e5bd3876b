// Replicas that step on their own (strategy.h 0.14, A-EDiT): between syncs each data-parallel
// replica takes steps at its own pace with no collective, so a fast one takes more. At each
// interval's end, which every replica reaches in the same order, all ranks exchange one short
// note and derive the same figures from it: the run's step (the replicas' steps together over the
// data-parallel size, so train.steps is ddp's token budget), tokens, the interval's mean loss.
// To the session the interval is then one step, and saves, evaluation, stops and the end happen
// only there, where every rank stands together.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "host/errors.h"
#include "host/log.h"
#include "mesh/collectives.h"
#include "train/trainer.h"

namespace keel {
namespace {

// What one replica did in an interval, as it tells the others. The loss and norm sums are over
// its steps whose update ran (a skipped step's values are not finite, and JSON has no NaN); a
// replica that stopped on a non-finite step says why, and every rank stops with that reason.
struct ReplicaNote {
  int64_t dp_rank = 0, steps = 0, replica_step = 0, tokens = 0, samples_taken = 0, skipped = 0;
  double loss_sum = 0, grad_norm_sum = 0;
  std::string failure;

  nlohmann::json to_json() const {
    return {{"dp", dp_rank}, {"steps", steps}, {"replica_step", replica_step}, {"tokens", tokens},
            {"samples", samples_taken}, {"skipped", skipped}, {"loss", loss_sum}, {"grad_norm", grad_norm_sum},
            {"failure", failure}};
  }
  static ReplicaNote from_json(const nlohmann::json& j) {
    ReplicaNote n;
    n.dp_rank = j.at("dp");
    n.steps = j.at("steps");
    n.replica_step = j.at("replica_step");
    n.tokens = j.at("tokens");
    n.samples_taken = j.at("samples");
    n.skipped = j.at("skipped");
    n.loss_sum = j.at("loss");
    n.grad_norm_sum = j.at("grad_norm");
    n.failure = j.at("failure");
    return n;
  }
};

int64_t integer_in(const nlohmann::json& entry, const char* key, int64_t most, const std::string& where) {
  const auto it = entry.find(key);
  if (it == entry.end() || !it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > most)
    throw KeelError(KEEL_ERR_IO, where + ": " + key + ": expected an integer in [0, " + std::to_string(most) + "]" +
                                     (it == entry.end() ? std::string(", found none") : ", found " + it->dump()));
  return it->get<int64_t>();
}

}  // namespace

void Trainer::check_independent_replicas() {
  const keel_strategy_api* strategy = plugins_.strategy;
  int32_t independent = 0;
  if (KEEL_HAS_SLOT(strategy, independent_replicas))
    check_plugin(strategy->independent_replicas(plugins_.strategy_obj, &independent), "strategy independent_replicas");
  if (!independent) return;
  const std::string who = config_.file + ": parallel.strategy " + config_.strategy.plugin;
  if (!KEEL_HAS_SLOT(strategy, sync_reached))
    throw KeelError(KEEL_ERR_UNIMPLEMENTED, who + ": says its replicas step on their own but has no sync_reached slot "
                                           "(strategy.h 0.14)");
  if (mesh().layout().pp > 1)
    throw KeelError(KEEL_ERR_INVALID_CONFIG, who + ": replicas that step on their own need parallel.pp 1 (this run has " +
                                                 std::to_string(mesh().layout().pp) + ")");
  if (batch_schedule_)
    throw KeelError(KEEL_ERR_INVALID_CONFIG, who + ": data.batch_schedule follows the noise scale of gradients "
                                                 "reduced every step, which replicas stepping on their own never form; "
                                                 "remove data.batch_schedule");
  independent_replicas_ = true;
}

StepResult Trainer::train_interval() {
  const auto start = std::chrono::steady_clock::now();
  ReplicaNote mine;
  mine.dp_rank = mesh().position().dp;
  StepResult interval;
  int32_t reached = 0;
  while (!reached) {
    StepResult step;
    try {
      step = train_one_step();
    } catch (const KeelError& e) {
      if (e.code != KEEL_ERR_NONFINITE) throw;  // (a failing plugin ends every rank: run_training)
      mine.failure = e.what();  // train.on_nonfinite "stop": the others hear it at the gather
      break;
    }
    ++mine.steps;
    mine.tokens += step.tokens;
    interval.lr = step.lr;
    interval.data_seconds += step.data_seconds;
    interval.forward_seconds += step.forward_seconds;
    interval.backward_seconds += step.backward_seconds;
    interval.optimizer_seconds += step.optimizer_seconds;
    if (step.skipped) {
      ++mine.skipped;  // its time still passed: the strategy is asked as after any step
    } else {
      mine.loss_sum += step.loss;
      mine.grad_norm_sum += step.grad_norm;
    }
    check_plugin(plugins_.strategy->sync_reached(plugins_.strategy_obj, &reached), "strategy sync_reached");
  }
  steps_since_sync_ = 0;
  mine.replica_step = replica_step_;
  mine.samples_taken = train_sampler_ ? train_sampler_->samples_taken() : 0;

  // Every rank of a replica (its tp ranks) says the same: one note per dp rank counts.
  std::vector<ReplicaNote> replicas(size_t(mesh().layout().dp));
  for (const std::string& text : gather_strings(mesh().world, mine.to_json().dump())) {
    const ReplicaNote note = ReplicaNote::from_json(nlohmann::json::parse(text));
    replicas.at(size_t(note.dp_rank)) = note;
  }
  int64_t all_steps = 0, counted = 0, skipped = 0;
  double loss_sum = 0, grad_norm_sum = 0;
  // Every rank reads the same notes, so every rank stops with the same reason: said once, by rank 0.
  for (const ReplicaNote& r : replicas)
    if (!r.failure.empty())
      throw FailedOnEveryRank(KEEL_ERR_NONFINITE, "replica " + std::to_string(r.dp_rank) + ": " + r.failure,
                              mesh().world.rank, mesh().world.size);
  for (const ReplicaNote& r : replicas) {
    all_steps += r.replica_step;
    counted += r.steps - r.skipped;
    skipped += r.skipped;
    loss_sum += r.loss_sum;
    grad_norm_sum += r.grad_norm_sum;
    interval.tokens += r.tokens;
    interval.replica_steps.push_back(r.steps);
    furthest_samples_taken_ = std::max(furthest_samples_taken_, r.samples_taken);
  }
  step_ = std::max(step_ + 1, all_steps / int64_t(replicas.size()));  // every interval is at least one step on
  tokens_seen_ += interval.tokens;
  interval.step = step_;
  interval.loss = counted ? loss_sum / double(counted) : NAN;  // over the steps whose update ran
  interval.grad_norm = counted ? grad_norm_sum / double(counted) : NAN;
  interval.skipped = skipped > 0;
  interval.global_batch = config_.data.global_batch;
  interval.step_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return interval;
}

nlohmann::json Trainer::replica_position() const {
  if (!independent_replicas_) return nullptr;
  return {{"dp_rank", mesh().position().dp},
          {"replica_step", replica_step_},
          {"samples_taken", train_sampler_ ? train_sampler_->samples_taken() : 0}};
}

void Trainer::restore_replica_positions(const nlohmann::json& positions, bool same_ranks, const std::string& where) {
  if (!independent_replicas_) return;  // the run's position alone (restore_position) is where it goes on
  if (positions.is_null() || !same_ranks) {
    log_warn(where + ": saved by " +
             (positions.is_null() ? std::string("replicas that stepped together") : "another strategy or layout") +
             ": every replica of this run continues from the run's step " + std::to_string(step_) +
             " and data position");
    return;
  }
  // The manifest's check bounded each entry and their sum; every rank reads them all, so a bad
  // one stops every rank here rather than one of them at the first sync.
  const int64_t dp = mesh().layout().dp;
  const int64_t most_taken = train_sampler_ ? train_sampler_->most_samples_taken() : 0;
  if (!positions.is_array() || int64_t(positions.size()) != dp)
    throw KeelError(KEEL_ERR_IO, where + ": replica_positions: expected one entry for each of the " +
                                     std::to_string(dp) + " replicas");
  for (size_t i = 0; i < positions.size(); ++i) {
    const std::string at = where + ": replica_positions[" + std::to_string(i) + "]";
    if (!positions[i].is_object()) throw KeelError(KEEL_ERR_IO, at + ": expected an object");
    integer_in(positions[i], "samples_taken", most_taken, at);
  }
  const nlohmann::json& mine = positions[size_t(mesh().position().dp)];
  replica_step_ = mine.at("replica_step").get<int64_t>();
  if (train_sampler_) train_sampler_->set_samples_taken(mine.at("samples_taken").get<int64_t>());
}

}  // namespace keel
