// The plugin objects of one run, created in dependency order (backend, model, optimizer,
// strategy) and destroyed in reverse through their own tables.
#pragma once

#include <keel/keel.h>

#include "config/run_config.h"
#include "mesh/mesh.h"

#include <exception>
#include <optional>
#include <vector>

namespace keel {

struct PluginInstances {
  const keel_backend_api* backend = nullptr;
  const keel_model_api* model = nullptr;
  const keel_optimizer_api* optimizer = nullptr;
  const keel_strategy_api* strategy = nullptr;
  const keel_data_api* data = nullptr;  // only with "data": {"plugin": ...}
  const keel_schedule_api* schedule = nullptr;  // parallel.schedule (also at pp 1)
  const keel_offload_api* offload = nullptr;    // only with an "offload" section: the strategy's
  void* offload_obj = nullptr;                  // tier, created before it and destroyed after it
  void* backend_obj = nullptr;
  void* model_obj = nullptr;
  void* optimizer_obj = nullptr;
  void* strategy_obj = nullptr;
  void* data_obj = nullptr;
  Mesh mesh;  // the groups of pp × dp × tp and their communicators (mesh/mesh.h)
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
  // before the abort ends the job; a FailedOnEveryRank is said once, by rank 0, as
  // "keel: every rank of N: reason"), tears down the strategy and its offload tier (whose files
  // would outlive the process), bounded by kFailureTeardownSeconds, then ends the world; it
  // returns only on one rank, where the caller's unwinding tears everything down.
  void abort_all_ranks(const std::exception& failure);
  static constexpr int kFailureTeardownSeconds = 10;

 private:
  void create_backend(const RunConfig& config);
  void require_model_for_compute_type(const RunConfig& config) const;
  void create_model(const RunConfig& config);
  void create_strategy(const RunConfig& config);
  void adopt_model_specs(const RunConfig& config);
  void create_offload(const RunConfig& config);
  void require_strategy_for_packed_state(const RunConfig& config) const;
};

// Asks each configured plugin to check its own section, without creating anything.
void validate_plugin_sections(const RunConfig& config);

}  // namespace keel
