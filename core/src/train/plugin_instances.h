// The plugin objects of one run, created in dependency order (backend, model, optimizer,
// strategy) and destroyed in reverse through their own tables.
#pragma once

#include <keel/keel.h>

#include "config/run_config.h"

#include <optional>
#include <vector>

namespace keel {

struct PluginInstances {
  const keel_backend_api* backend = nullptr;
  const keel_model_api* model = nullptr;
  const keel_optimizer_api* optimizer = nullptr;
  const keel_strategy_api* strategy = nullptr;
  const keel_data_api* data = nullptr;  // only with "data": {"plugin": ...}
  const keel_comm_api* comm = nullptr;  // NULL: a single process without a comm plugin
  const keel_schedule_api* schedule = nullptr;  // parallel.schedule (also at pp 1)
  const keel_offload_api* offload = nullptr;    // only with an "offload" section: the strategy's
  void* offload_obj = nullptr;                  // tier, created before it and destroyed after it
  void* backend_obj = nullptr;
  void* model_obj = nullptr;
  void* optimizer_obj = nullptr;
  void* strategy_obj = nullptr;
  void* data_obj = nullptr;
  void* world_obj = nullptr;            // every rank
  void* dp_obj = nullptr;               // this rank's data-parallel group (the world while tp = pp = 1):
                                        // the strategy's alone, used from its threads only
  void* core_dp_obj = nullptr;          // the same ranks, the core's own communicator (loss, norm,
                                        // checkpoint gathers): comm.h allows one thread per communicator
  void* tp_obj = nullptr;               // this rank's tensor-parallel group: the model's alone
  void* core_tp_obj = nullptr;          // the same ranks, the core's (the gradient norm's tp sum)
  void* pp_obj = nullptr;               // this rank's pipeline group (pp > 1): the core's, for
                                        // activations, their gradients, the loss and the norm
  void* embedding_obj = nullptr;        // the first and last stage of this pipeline (pp > 1, those
                                        // two ranks only): the strategy's, for STAGE_TIED gradients
  int32_t world_rank = 0, world_size = 1, dp_rank = 0, dp_size = 1, tp_rank = 0, tp_size = 1;
  int32_t pp_rank = 0, pp_size = 1, virtual_stages = 1;
  keel_model_info model_info{};         // params points at `specs`, not at the model's own array
  std::vector<keel_param_spec> specs;   // the model's specs widened to this ABI's struct (0.6 local_offset)
  std::vector<unsigned char> strategy_specs;  // narrowed again for a strategy built before 0.6
  keel_optimizer_info optimizer_info{};
  keel_param_access access{};

  PluginInstances() = default;
  PluginInstances(const PluginInstances&) = delete;
  PluginInstances& operator=(const PluginInstances&) = delete;
  ~PluginInstances();

  // Loads and creates every plugin the config names; throws KeelError naming the section.
  void create(const RunConfig& config);
  // The tier's totals since create (offload.h counters); nullopt when there is no tier.
  std::optional<keel_offload_counters> offload_counters() const;
  // A failing rank ends every rank with its reason rather than leaving them in a collective. On
  // more than one rank: prints "keel: rank R of N: reason" first (flushed, so the launcher has it
  // before the abort ends the job), tears down the strategy and its offload tier (whose files
  // would outlive the process), bounded by kFailureTeardownSeconds, then ends the world; it
  // returns only on one rank, where the caller's unwinding tears everything down.
  void abort_all_ranks(const std::string& reason);
  static constexpr int kFailureTeardownSeconds = 10;

 private:
  void create_mesh(const RunConfig& config);
  void adopt_model_specs(const RunConfig& config);
  void create_offload(const RunConfig& config);
  void require_abi(const RunConfig& config, uint32_t minor, const std::string& what) const;
};

// Asks each configured plugin to check its own section, without creating anything.
void validate_plugin_sections(const RunConfig& config);

}  // namespace keel
