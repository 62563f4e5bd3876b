// Counter differences over a logging interval (interval_traffic.h).
#include "session/interval_traffic.h"

#include <algorithm>

#include "mesh/collectives.h"

namespace keel {
namespace {

nlohmann::json per_step_bytes(const keel_comm_counters& now, const keel_comm_counters& start, int64_t steps) {
  static const char* const kOpNames[KEEL_COMM_OP_COUNT] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                                           "send",       "recv",           "barrier"};
  nlohmann::json per_step = nlohmann::json::object();
  for (int op = 0; op < KEEL_COMM_OP_COUNT; ++op)
    if (now.bytes[op] > start.bytes[op]) per_step[kOpNames[op]] = double(now.bytes[op] - start.bytes[op]) / double(steps);
  if (now.all_to_all_bytes > start.all_to_all_bytes)  // appended in 0.19, after the arrays
    per_step["all_to_all"] = double(now.all_to_all_bytes - start.all_to_all_bytes) / double(steps);
  return per_step;
}

// The data-parallel traffic of every level together (each op's bytes summed).
keel_comm_counters dp_total(const Mesh& mesh) {
  keel_comm_counters total = comm_counters(mesh.strategy_dp);
  for (const CommGroup* level : {&mesh.strategy_dp_inner, &mesh.strategy_dp_outer}) {
    const keel_comm_counters part = comm_counters(*level);
    for (int op = 0; op < KEEL_COMM_OP_COUNT; ++op) total.calls[op] += part.calls[op], total.bytes[op] += part.bytes[op];
    total.all_to_all_calls += part.all_to_all_calls;
    total.all_to_all_bytes += part.all_to_all_bytes;
  }
  return total;
}

}  // namespace

IntervalTraffic::IntervalTraffic(const Trainer& trainer)
    : trainer_(trainer),
      dp_start_(dp_total(trainer.mesh())),
      tp_start_(comm_counters(trainer.mesh().model_tp)),
      pp_start_(comm_counters(trainer.mesh().stage_io)),
      ep_start_(comm_counters(trainer.mesh().model_ep)),
      expert_dp_start_(comm_counters(trainer.mesh().strategy_expert_dp)),
      cp_start_(comm_counters(trainer.mesh().model_cp)),
      dp_inner_start_(comm_counters(trainer.mesh().strategy_dp_inner)),
      dp_outer_start_(comm_counters(trainer.mesh().strategy_dp_outer)),
      offload_start_(trainer.offload_counters()) {}

void IntervalTraffic::report(StepReport& report, int64_t steps, double seconds) {
  const Mesh& mesh = trainer_.mesh();
  if (!mesh.world.alone()) {
    const keel_comm_counters dp_now = dp_total(mesh);
    report.extra["comm_bytes_per_step"] = per_step_bytes(dp_now, dp_start_, steps);
    dp_start_ = dp_now;
    if (mesh.strategy_dp_inner.obj) {  // parallel.dp_groups: inside the groups, and across them
      const keel_comm_counters inner_now = comm_counters(mesh.strategy_dp_inner);
      const keel_comm_counters outer_now = comm_counters(mesh.strategy_dp_outer);
      report.extra["dp_inner_comm_bytes_per_step"] = per_step_bytes(inner_now, dp_inner_start_, steps);
      report.extra["dp_outer_comm_bytes_per_step"] = per_step_bytes(outer_now, dp_outer_start_, steps);
      dp_inner_start_ = inner_now;
      dp_outer_start_ = outer_now;
    }
    if (mesh.layout().tp > 1) {  // the model's tensor-parallel mappings
      const keel_comm_counters tp_now = comm_counters(mesh.model_tp);
      report.extra["tp_comm_bytes_per_step"] = per_step_bytes(tp_now, tp_start_, steps);
      tp_start_ = tp_now;
    }
    if (mesh.layout().pp > 1) {  // activations and their gradients between stages
      const keel_comm_counters pp_now = comm_counters(mesh.stage_io);
      report.extra["pp_comm_bytes_per_step"] = per_step_bytes(pp_now, pp_start_, steps);
      pp_start_ = pp_now;
    }
    if (mesh.layout().ep > 1) {  // tokens to their experts and back; the experts' own reduction
      const keel_comm_counters ep_now = comm_counters(mesh.model_ep);
      const keel_comm_counters expert_dp_now = comm_counters(mesh.strategy_expert_dp);
      report.extra["ep_comm_bytes_per_step"] = per_step_bytes(ep_now, ep_start_, steps);
      report.extra["expert_dp_comm_bytes_per_step"] = per_step_bytes(expert_dp_now, expert_dp_start_, steps);
      ep_start_ = ep_now;
      expert_dp_start_ = expert_dp_now;
    }
    if (mesh.layout().cp > 1) {  // the ring of key/value chunks (and their gradients) in attention
      const keel_comm_counters cp_now = comm_counters(mesh.model_cp);
      report.extra["cp_comm_bytes_per_step"] = per_step_bytes(cp_now, cp_start_, steps);
      cp_start_ = cp_now;
    }
  }
  if (offload_start_) {
    const keel_offload_counters now = *trainer_.offload_counters();
    const double read = double(now.bytes_read - offload_start_->bytes_read);
    const double written = double(now.bytes_written - offload_start_->bytes_written);
    const double wall = std::max(seconds, 1e-9);
    report.extra["offload"] = {{"read_bytes_per_step", read / double(steps)},
                               {"write_bytes_per_step", written / double(steps)},
                               {"busy_ms_per_step", 1e3 * (now.busy_seconds - offload_start_->busy_seconds) / double(steps)},
                               {"read_GBps", read / wall / 1e9},
                               {"write_GBps", written / wall / 1e9}};
    report.offload_GBps = {read / wall / 1e9, written / wall / 1e9};
    offload_start_ = now;
  }
}

void IntervalTraffic::restart_after_evaluation() {
  pp_start_ = comm_counters(trainer_.mesh().stage_io);
  ep_start_ = comm_counters(trainer_.mesh().model_ep);
  if (offload_start_) offload_start_ = trainer_.offload_counters();
}

}  // namespace keel
