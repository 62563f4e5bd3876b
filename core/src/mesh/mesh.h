// The communicators of a run's pp × dp × tp mesh (mesh_layout.h) and which plugin owns each.
// comm.h allows one thread per communicator, so where a plugin talks on a group from its own
// thread the core has a second communicator over the same ranks. Built by every rank at
// start-up (split is collective over the world) and destroyed after the plugins, before the
// backend. Every group is for buffers of one side (comm_bridge.h): the plugins' groups and the
// pipeline's activations move backend memory, the core's own groups host memory.
#pragma once

#include <keel/keel.h>

#include <string>

#include "config/run_config.h"
#include "mesh/comm_bridge.h"
#include "mesh/mesh_layout.h"
#include "mesh/topology.h"

namespace keel {

// One group of ranks as seen from this rank. With no communicator (one process, or a group this
// rank is alone in) obj is NULL, and every collective on it is the identity.
struct CommGroup {
  const keel_comm_api* comm = nullptr;
  void* obj = nullptr;
  int32_t rank = 0, size = 1;
  const char* name = "";  // in messages: "data-parallel group"

  bool alone() const { return !obj || size <= 1; }
};

class Mesh {
 public:
  Mesh() = default;
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;
  ~Mesh();

  // Creates the world through config's comm plugin, on `backend` where the plugin takes one
  // (comm.h create_world_on), and splits it into the groups. Without a comm plugin (none
  // installed and none asked for) the run is one process and every group is this rank alone.
  // Throws KeelError naming the config.
  void create(const RunConfig& config, keel_support::BackendOps backend);
  // Destroys every communicator (before the backend they may be ordered on).
  void destroy();

  const MeshLayout& layout() const { return layout_; }
  const MeshPosition& position() const { return position_; }
  // Every rank's host and site (topology.h); this process alone without a comm plugin.
  const Topology& topology() const { return topology_; }

  // Ends every rank (comm abort_world); returns only without a world to end.
  void abort_world(const std::string& why) const;

  CommGroup world;        // every rank; the core's (checkpoint gathers, stop agreement)
  CommGroup checkpoint_io;  // every rank again, with train.checkpoint.async: the background writer's
  CommGroup strategy_dp;  // this rank's data-parallel group (the world while tp = pp = 1): the strategy's
  CommGroup core_dp;      // the same ranks: the core's (the loss)
  CommGroup model_tp;     // this rank's tensor-parallel group: the model's
  CommGroup core_tp;      // the same ranks: the core's (the gradient norm's tp sum)
  CommGroup pipeline;     // this rank's pipeline group (pp > 1): the core's, for the loss and the norm
  CommGroup stage_io;     // the same ranks, for activations and their gradients (backend memory)
  CommGroup embedding;    // the first and last stage of this pipeline (pp > 1, those two ranks
                          // only): the strategy's, for STAGE_TIED gradients
  // Expert parallelism (ep > 1; architecture.md §4):
  CommGroup model_ep;            // this rank's ep block: the model's, for tokens to their experts
  CommGroup core_ep;             // the same ranks: the core's (the experts' share of the gradient norm)
  CommGroup strategy_expert_dp;  // the ranks holding this rank's experts: the expert half's strategy
  // The data-parallel group's two levels (parallel.dp_groups, parallelism.md §8; both alone when flat):
  CommGroup strategy_dp_inner;  // the ranks of this rank's inner group (host, site, N dp ranks): the strategy's
  CommGroup strategy_dp_outer;  // the ranks at this rank's place in every inner group: the strategy's
  // Context parallelism (cp > 1; parallelism.md §6a):
  CommGroup model_cp;  // this rank's cp block: the model's, for the ring of key/value chunks
  CommGroup core_cp;   // the same ranks: the core's (evaluation's loss over the block)

 private:
  CommGroup split(int32_t color, int32_t key, const char* name, BufferSide side);
  void create_world(const RunConfig& config);
  void split_expert_groups();
  void split_context_groups();
  void split_dp_levels(const RunConfig& config);

  const keel_comm_api* comm_ = nullptr;  // the plugin's table
  void* plugin_world_ = nullptr;         // the plugin's world, which `world` bridges
  keel_support::BackendOps backend_;
  MeshLayout layout_;
  MeshPosition position_;
  Topology topology_;
};

}  // namespace keel
