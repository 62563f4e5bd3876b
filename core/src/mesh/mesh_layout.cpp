// The one place the rank arithmetic and the layout's refusals are written (mesh_layout.h).
#include "mesh/mesh_layout.h"

#include <keel/keel.h>

#include <cstddef>
#include <utility>

#include "host/errors.h"
#include "host/plural.h"
#include "loader/plugin_registry.h"

namespace keel {
namespace {

std::string text(int64_t n) { return std::to_string(n); }

}  // namespace

std::string MeshLayout::describe() const {
  return plural(ranks, "rank") + " = tp " + text(tp) + " × dp " + text(dp) + " × pp " + text(pp) +
         (ep > 1 ? " (experts over ep " + text(ep) + " of the dp ranks)" : "") +
         (cp > 1 ? " (each sequence over cp " + text(cp) + " of the dp ranks)" : "") +
         (virtual_stages > 1 ? " (" + text(virtual_stages) + " chunks per rank)" : "");
}

MeshLayout plan_mesh_layout(const RunConfig& config, int32_t ranks) {
  const int64_t tp = config.tp, pp = config.pp;
  if (ranks < 1 || ranks % (tp * pp) != 0)
    throw KeelError(KEEL_ERR_INVALID_CONFIG, config.file + ": parallel: " + text(ranks) + " ranks do not divide into tp " +
                                                 text(tp) + " × pp " + text(pp) + " (dp = ranks / (tp · pp) must be a "
                                                 "whole number); launch a multiple of " + text(tp * pp) + " ranks");
  MeshLayout layout;
  layout.ranks = ranks;
  layout.tp = config.tp;
  layout.pp = config.pp;
  layout.dp = int32_t(ranks / (tp * pp));
  layout.virtual_stages = config.virtual_stages;
  if (layout.dp % config.ep != 0)
    throw KeelError(KEEL_ERR_INVALID_CONFIG, config.file + ": parallel.ep: " + text(config.ep) + " does not divide the " +
                                                 "data-parallel size " + text(layout.dp) + " (" + text(ranks) +
                                                 " ranks / (tp " + text(tp) + " × pp " + text(pp) + ")); the experts " +
                                                 "are split over blocks of ep data-parallel ranks, so ep must divide dp");
  layout.ep = config.ep;
  if (layout.dp % config.cp != 0)
    throw KeelError(KEEL_ERR_INVALID_CONFIG, config.file + ": parallel.cp: " + text(config.cp) + " does not divide the " +
                                                 "data-parallel size " + text(layout.dp) + " (" + text(ranks) +
                                                 " ranks / (tp " + text(tp) + " × pp " + text(pp) + ")); each sequence " +
                                                 "is split over blocks of cp data-parallel ranks, so cp must divide dp");
  layout.cp = config.cp;
  if (layout.cp > 1) {  // context parallelism's first cut (parallelism.md §6a): what it lacks, by name
    auto refuse = [&](const std::string& what) {
      throw KeelError(KEEL_ERR_INVALID_CONFIG, config.file + ": parallel.cp: " + text(config.cp) +
                                                   " splits each sequence, which does not combine with " + what +
                                                   " yet; run at parallel.cp 1 or without it");
    };
    if (!config.data_plugin.plugin.empty()) refuse("a data plugin (data.plugin '" + config.data_plugin.plugin + "')");
    if (config.data.batch_schedule.enabled) refuse("data.batch_schedule");
    if (config.train.sample_tokens > 0)
      refuse("sampling at the end of a run (train.sample_tokens " + text(config.train.sample_tokens) + "; set it to 0)");
  }
  return layout;
}

void require_sequence_split(const RunConfig& config, const keel_model_info& info) {
  if (config.cp <= 1) return;
  const bool says = info.struct_size >= offsetof(keel_model_info, splits_sequences) + sizeof(info.splits_sequences);
  if (!says || info.splits_sequences != 1)
    throw KeelError(KEEL_ERR_UNIMPLEMENTED, config.file + ": parallel.cp " + text(config.cp) + ": " +
                                                config.model.json_path + ".plugin '" + config.model.plugin +
                                                "' does not split its sequences over context-parallel ranks (its "
                                                "keel_model_info.splits_sequences is not 1); run it at parallel.cp 1");
}

void require_plugins_for_layout(const RunConfig& config, const MeshLayout& layout) {
  const uint32_t needed = layout.pp > 1 || layout.ep > 1 ? 7 : layout.tp > 1 ? 6 : 0;
  if (layout.cp > 1) {
    const keel_plugin_info& info = PluginRegistry::instance().find(KEEL_KIND_MODEL, config.model.plugin).info;
    if (info.abi_minor < 19)
      throw KeelError(KEEL_ERR_UNIMPLEMENTED, config.file + ": " + config.model.json_path + ".plugin '" +
                                                  config.model.plugin + "' was built against ABI 0." +
                                                  text(info.abi_minor) + ", but parallel.cp > 1 needs a model of 0.19 "
                                                  "(its context-parallel group). Rebuild it, or run at cp 1");
  }
  if (needed == 0) return;
  const std::string why = layout.pp > 1   ? "parallel.pp > 1 needs 0.7 (pipeline chunks)"
                          : layout.ep > 1 ? "parallel.ep > 1 needs 0.7 (a layer with none of its parameters)"
                                          : "parallel.tp > 1 needs 0.6 (tensor-parallel pieces)";
  auto& registry = PluginRegistry::instance();
  for (auto [kind, section] : {std::pair<int32_t, const PluginSection*>{KEEL_KIND_MODEL, &config.model},
                               {KEEL_KIND_STRATEGY, &config.strategy}}) {
    const keel_plugin_info& info = registry.find(kind, section->plugin).info;
    if (kind == KEEL_KIND_MODEL && layout.ep > 1 && info.abi_minor < 19)
      throw KeelError(KEEL_ERR_UNIMPLEMENTED, config.file + ": " + section->json_path + ".plugin '" + section->plugin +
                                                  "' was built against ABI 0." + text(info.abi_minor) +
                                                  ", but parallel.ep > 1 needs a model of 0.19 (its expert-parallel "
                                                  "group). Rebuild it, or run at ep 1");
    if (info.abi_minor < needed)
      throw KeelError(KEEL_ERR_UNIMPLEMENTED, config.file + ": " + section->json_path + ".plugin '" + section->plugin +
                                                  "' was built against ABI 0." + text(info.abi_minor) + ", but " + why +
                                                  ". Rebuild it, or run without it");
  }
}

}  // namespace keel
