// Splitting the world into the mesh's groups (mesh.h), in the layout of mesh_layout.h, each
// bridged for the side its buffers are on (comm_bridge.h).
#include "mesh/mesh.h"

#include <set>

#include "host/errors.h"
#include "host/host_table.h"
#include "host/log.h"
#include "loader/plugin_registry.h"
#include "mesh/launcher_check.h"

namespace keel {
namespace {

// One line per kind of staging a run does, so a slow path is never silent.
void log_staging(const keel_comm_api* comm, void* obj, keel_support::BackendOps backend, BufferSide side, const std::string& plugin) {
  const int32_t reach = comm_reach(comm, obj, backend, side);
  if (reach != KEEL_COMM_REACH_NONE) return;
  static std::set<int> said;
  if (!said.insert(int(side)).second) return;
  log_line(KEEL_LOG_INFO, "keel", "comm '" + plugin + "' " + describe_reach(reach, side));
}

}  // namespace

CommGroup Mesh::split(int32_t color, int32_t key, const char* name, BufferSide side) {
  void* part = nullptr;
  check_plugin(comm_->split(plugin_world_, color, key, &part), std::string("comm split (") + name + ")");
  const BridgedComm bridged = bridge_comm(comm_, part, backend_, side);
  CommGroup group{bridged.comm, bridged.obj, 0, 1, name};
  check_plugin(group.comm->rank(group.obj, &group.rank), std::string("comm rank (") + name + ")");
  check_plugin(group.comm->size(group.obj, &group.size), std::string("comm size (") + name + ")");
  return group;
}

void Mesh::create_world(const RunConfig& config) {
  const std::string comm_json = config.comm.json.dump();
  if (KEEL_HAS_SLOT(comm_, create_world_on))
    check_plugin(comm_->create_world_on(host_table(), comm_json.c_str(), config.comm.json_path.c_str(), backend_.api,
                                        backend_.obj, &plugin_world_),
                 "comm '" + config.comm.plugin + "' create_world_on");
  else
    check_plugin(comm_->create_world(host_table(), comm_json.c_str(), config.comm.json_path.c_str(), &plugin_world_),
                 "comm '" + config.comm.plugin + "' create_world");
  log_staging(comm_, plugin_world_, backend_, BufferSide::kHost, config.comm.plugin);
  log_staging(comm_, plugin_world_, backend_, BufferSide::kBackend, config.comm.plugin);
  world.name = "world";
  check_plugin(comm_->rank(plugin_world_, &world.rank), "comm rank");
  check_plugin(comm_->size(plugin_world_, &world.size), "comm size");
  // The world the launcher started must be the one the plugin joined (launcher_check.h).
  check_launched_world(launcher(), world.rank, world.size, config.comm.plugin);
}

void Mesh::create(const RunConfig& config, keel_support::BackendOps backend) {
  backend_ = backend;
  world.name = "world";
  strategy_dp.name = core_dp.name = "data-parallel group";
  model_tp.name = core_tp.name = "tensor-parallel group";
  pipeline.name = stage_io.name = "pipeline group";
  embedding.name = "embedding group";
  model_ep.name = core_ep.name = "expert-parallel group";
  strategy_expert_dp.name = "expert-data-parallel group";
  model_cp.name = core_cp.name = "context-parallel group";
  strategy_dp_inner.name = "inner data-parallel group";
  strategy_dp_outer.name = "outer data-parallel group";
  try {
    comm_ = static_cast<const keel_comm_api*>(PluginRegistry::instance().find(KEEL_KIND_COMM, config.comm.plugin).info.api);
  } catch (const KeelError& e) {
    if (config.comm_explicit) throw KeelError(e.code, config.file + ": comm.plugin: " + e.what());
    if (config.tp * config.pp > 1)
      throw KeelError(KEEL_ERR_INVALID_CONFIG, config.file + ": parallel: tp " + std::to_string(config.tp) + " × pp " +
                                                   std::to_string(config.pp) + " needs that many ranks, but no comm "
                                                   "plugin is installed (" + e.what() + ")");
    check_launched_world(launcher(), 0, 1, "");  // several processes launched, each alone
    layout_ = plan_mesh_layout(config, 1);
    topology_ = topology_of({this_host_name()}, config);
    return;  // one process: every group is this rank alone
  }
  create_world(config);
  set_log_rank(world.rank, world.size);
  log_launcher(launcher(), world.rank);
  // The core's world: a split of the plugin's over every rank, for host memory.
  world = split(0, world.rank, "world", BufferSide::kHost);
  // Asynchronous checkpoints write and publish on a thread of their own (comm.h: one thread per
  // communicator), so they get a world of their own.
  if (config.train.checkpoint.async)
    checkpoint_io = split(0, world.rank, "the checkpoint writer's world", BufferSide::kHost);
  layout_ = plan_mesh_layout(config, world.size);
  position_ = layout_.position_of(world.rank);
  const int32_t tp = layout_.tp, dp = layout_.dp, pp = layout_.pp;
  const MeshPosition at = position_;
  // Groups are colored by the other axes' indices and ordered by their own, so a group's rank
  // is this rank's index along its axis. Every split is made by every rank.
  strategy_dp = split(at.pp * tp + at.tp, at.dp, "data-parallel group", BufferSide::kBackend);
  core_dp = split(at.pp * tp + at.tp, at.dp, "the core's data-parallel communicator", BufferSide::kHost);
  model_tp = split(at.pp * dp + at.dp, at.tp, "tensor-parallel group", BufferSide::kBackend);
  core_tp = split(at.pp * dp + at.dp, at.tp, "the core's tensor-parallel communicator", BufferSide::kHost);
  if (model_tp.size != tp || model_tp.rank != at.tp || strategy_dp.size != dp || strategy_dp.rank != at.dp)
    throw KeelError(KEEL_ERR_INTERNAL, "comm split gave tp rank " + std::to_string(model_tp.rank) + " of " +
                                           std::to_string(model_tp.size) + " and dp rank " +
                                           std::to_string(strategy_dp.rank) + " of " + std::to_string(strategy_dp.size) +
                                           ", expected " + std::to_string(at.tp) + " of " + std::to_string(tp) + " and " +
                                           std::to_string(at.dp) + " of " + std::to_string(dp));
  split_expert_groups();
  split_context_groups();
  split_dp_levels(config);
  if (pp == 1) return;
  pipeline = split(at.dp * tp + at.tp, at.pp, "pipeline group", BufferSide::kHost);
  stage_io = split(at.dp * tp + at.tp, at.pp, "pipeline group", BufferSide::kBackend);
  // The embedding group (Megatron's): the first and the last stage of this pipeline, which both
  // hold the tied word embedding. Every other rank gets a group of its own and drops it.
  const bool holds_embedding = at.pp == 0 || at.pp == pp - 1;
  CommGroup tied = split(holds_embedding ? at.dp * tp + at.tp : dp * tp + world.rank, at.pp, "embedding group",
                         BufferSide::kBackend);
  if (holds_embedding) embedding = tied;
  else tied.comm->destroy(tied.obj);
}

// The ep block is colored by the block (and the other axes), the expert-data-parallel group by
// the place in the block; each ordered along its own axis, as the groups above.
void Mesh::split_expert_groups() {
  const int32_t ep = layout_.ep;
  if (ep == 1) return;
  const MeshPosition at = position_;
  const int32_t tp = layout_.tp, blocks = layout_.expert_dp();
  const int32_t block_color = (at.pp * blocks + layout_.expert_dp_rank(at)) * tp + at.tp;
  const int32_t place_color = (at.pp * ep + layout_.ep_rank(at)) * tp + at.tp;
  model_ep = split(block_color, layout_.ep_rank(at), "expert-parallel group", BufferSide::kBackend);
  core_ep = split(block_color, layout_.ep_rank(at), "the core's expert-parallel communicator", BufferSide::kHost);
  strategy_expert_dp = split(place_color, layout_.expert_dp_rank(at), "expert-data-parallel group", BufferSide::kBackend);
  if (model_ep.size != ep || model_ep.rank != layout_.ep_rank(at) || strategy_expert_dp.size != blocks ||
      strategy_expert_dp.rank != layout_.expert_dp_rank(at))
    throw KeelError(KEEL_ERR_INTERNAL, "comm split gave ep rank " + std::to_string(model_ep.rank) + " of " +
                                           std::to_string(model_ep.size) + " and expert-dp rank " +
                                           std::to_string(strategy_expert_dp.rank) + " of " +
                                           std::to_string(strategy_expert_dp.size) + ", expected " +
                                           std::to_string(layout_.ep_rank(at)) + " of " + std::to_string(ep) + " and " +
                                           std::to_string(layout_.expert_dp_rank(at)) + " of " + std::to_string(blocks));
}

// A cp block is colored by its data replica (and the other axes), ordered by the place in it.
void Mesh::split_context_groups() {
  const int32_t cp = layout_.cp;
  if (cp == 1) return;
  const MeshPosition at = position_;
  const int32_t color = (at.pp * layout_.data_replicas() + layout_.data_replica(at)) * layout_.tp + at.tp;
  model_cp = split(color, layout_.cp_rank(at), "context-parallel group", BufferSide::kBackend);
  core_cp = split(color, layout_.cp_rank(at), "the core's context-parallel communicator", BufferSide::kHost);
  if (model_cp.size != cp || model_cp.rank != layout_.cp_rank(at))
    throw KeelError(KEEL_ERR_INTERNAL, "comm split gave cp rank " + std::to_string(model_cp.rank) + " of " +
                                           std::to_string(model_cp.size) + ", expected " +
                                           std::to_string(layout_.cp_rank(at)) + " of " + std::to_string(cp));
}

// Every rank learns every rank's host; each dp group (one per pp × tp place) is split by level.
// Every dp group's plan is checked on every rank, so an uneven one fails everywhere at once.
void Mesh::split_dp_levels(const RunConfig& config) {
  topology_ = gather_topology(world, config);
  const int32_t tp = layout_.tp, dp = layout_.dp;
  auto members_of = [&](int32_t pp_index, int32_t tp_index) {
    std::vector<int32_t> members;
    for (int32_t d = 0; d < dp; ++d) members.push_back((pp_index * dp + d) * tp + tp_index);
    return members;
  };
  if (world.rank == 0) log_info("topology: " + topology_.describe());
  if (config.dp_groups == RunConfig::DpGroups::kFlat) return;
  check_dp_levels(config, layout_);
  DpGroupPlan mine;
  for (int32_t p = 0; p < layout_.pp; ++p)
    for (int32_t t = 0; t < tp; ++t) {
      DpGroupPlan plan = plan_dp_groups(config, topology_, members_of(p, t));
      if (p == position_.pp && t == position_.tp) mine = std::move(plan);
    }
  const int32_t base = (position_.pp * tp + position_.tp) * dp;
  const int32_t group = mine.group_of[size_t(position_.dp)], place = mine.place_of[size_t(position_.dp)];
  strategy_dp_inner = split(base + group, place, "inner data-parallel group", BufferSide::kBackend);
  strategy_dp_outer = split(base + place, group, "outer data-parallel group", BufferSide::kBackend);
  if (strategy_dp_inner.size != mine.group_size || strategy_dp_outer.size != mine.groups)
    throw KeelError(KEEL_ERR_INTERNAL, "comm split gave inner and outer data-parallel groups of " +
                                           std::to_string(strategy_dp_inner.size) + " and " +
                                           std::to_string(strategy_dp_outer.size) + " ranks, expected " +
                                           std::to_string(mine.group_size) + " and " + std::to_string(mine.groups));
  if (world.rank == 0)
    log_info("data-parallel groups (" + describe_dp_groups(config) + "): " + std::to_string(mine.groups) +
             " groups of " + std::to_string(mine.group_size) + " ranks (the strategy works inside each and exchanges "
             "across)");
}

void Mesh::abort_world(const std::string& why) const {
  if (comm_ && plugin_world_) comm_->abort_world(plugin_world_, 1, why.c_str());
}

void Mesh::destroy() {
  for (CommGroup* group :
       {&strategy_dp_outer, &strategy_dp_inner, &core_cp, &model_cp, &strategy_expert_dp, &core_ep, &model_ep, &embedding, &stage_io, &pipeline, &core_tp, &model_tp, &core_dp, &strategy_dp, &checkpoint_io, &world}) {
    if (group->obj) group->comm->destroy(group->obj);
    group->obj = nullptr;
  }
  if (plugin_world_) comm_->destroy(plugin_world_);
  plugin_world_ = nullptr;
}

Mesh::~Mesh() { destroy(); }

}  // namespace keel
