// Splitting the world into the mesh's groups (mesh.h), in the layout of mesh_layout.h.
#include "mesh/mesh.h"

#include "host/errors.h"
#include "host/host_table.h"
#include "host/log.h"
#include "loader/plugin_registry.h"

namespace keel {

CommGroup Mesh::split(int32_t color, int32_t key, const char* name) {
  CommGroup group{comm_, nullptr, 0, 1, name};
  check_plugin(comm_->split(world.obj, color, key, &group.obj), std::string("comm split (") + name + ")");
  check_plugin(comm_->rank(group.obj, &group.rank), std::string("comm rank (") + name + ")");
  check_plugin(comm_->size(group.obj, &group.size), std::string("comm size (") + name + ")");
  return group;
}

void Mesh::create(const RunConfig& config) {
  world.name = "world";
  strategy_dp.name = core_dp.name = "data-parallel group";
  model_tp.name = core_tp.name = "tensor-parallel group";
  pipeline.name = "pipeline group";
  embedding.name = "embedding group";
  try {
    comm_ = static_cast<const keel_comm_api*>(PluginRegistry::instance().find(KEEL_KIND_COMM, config.comm.plugin).info.api);
  } catch (const KeelError& e) {
    if (config.comm_explicit) throw KeelError(e.code, config.file + ": comm.plugin: " + e.what());
    if (config.tp * config.pp > 1)
      throw KeelError(KEEL_ERR_INVALID_CONFIG, config.file + ": parallel: tp " + std::to_string(config.tp) + " × pp " +
                                                   std::to_string(config.pp) + " needs that many ranks, but no comm "
                                                   "plugin is installed (" + e.what() + ")");
    layout_ = plan_mesh_layout(config, 1);
    return;  // one process: every group is this rank alone
  }
  const std::string comm_json = config.comm.json.dump();
  world.comm = comm_;
  check_plugin(comm_->create_world(host_table(), comm_json.c_str(), config.comm.json_path.c_str(), &world.obj),
               "comm '" + config.comm.plugin + "' create_world");
  check_plugin(comm_->rank(world.obj, &world.rank), "comm rank");
  check_plugin(comm_->size(world.obj, &world.size), "comm size");
  set_log_rank(world.rank, world.size);
  layout_ = plan_mesh_layout(config, world.size);
  position_ = layout_.position_of(world.rank);
  const int32_t tp = layout_.tp, dp = layout_.dp, pp = layout_.pp;
  const MeshPosition at = position_;
  // Groups are colored by the other axes' indices and ordered by their own, so a group's rank
  // is this rank's index along its axis. Every split is made by every rank.
  strategy_dp = split(at.pp * tp + at.tp, at.dp, "data-parallel group");
  core_dp = split(at.pp * tp + at.tp, at.dp, "the core's data-parallel communicator");
  model_tp = split(at.pp * dp + at.dp, at.tp, "tensor-parallel group");
  core_tp = split(at.pp * dp + at.dp, at.tp, "the core's tensor-parallel communicator");
  if (model_tp.size != tp || model_tp.rank != at.tp || strategy_dp.size != dp || strategy_dp.rank != at.dp)
    throw KeelError(KEEL_ERR_INTERNAL, "comm split gave tp rank " + std::to_string(model_tp.rank) + " of " +
                                           std::to_string(model_tp.size) + " and dp rank " +
                                           std::to_string(strategy_dp.rank) + " of " + std::to_string(strategy_dp.size) +
                                           ", expected " + std::to_string(at.tp) + " of " + std::to_string(tp) + " and " +
                                           std::to_string(at.dp) + " of " + std::to_string(dp));
  if (pp == 1) return;
  pipeline = split(at.dp * tp + at.tp, at.pp, "pipeline group");
  // The embedding group (Megatron's): the first and the last stage of this pipeline, which both
  // hold the tied word embedding. Every other rank gets a group of its own and drops it.
  const bool holds_embedding = at.pp == 0 || at.pp == pp - 1;
  CommGroup tied = split(holds_embedding ? at.dp * tp + at.tp : dp * tp + world.rank, at.pp, "embedding group");
  if (holds_embedding) embedding = tied;
  else comm_->destroy(tied.obj);
}

void Mesh::abort_world(const std::string& why) const {
  if (comm_ && world.obj) comm_->abort_world(world.obj, 1, why.c_str());
}

Mesh::~Mesh() {
  for (CommGroup* group : {&embedding, &pipeline, &core_tp, &model_tp, &core_dp, &strategy_dp, &world})
    if (group->obj) comm_->destroy(group->obj);
}

}  // namespace keel
