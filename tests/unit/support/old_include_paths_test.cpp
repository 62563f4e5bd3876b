// The flat include paths from before keel_support's rooms by plugin kind still compile, through
// their forwarding headers (kept for one release), and the old names still name the new things:
// plugin source written against the old layout builds unchanged. One translation unit of
// model_slots_tests; remove it with the forwarding headers after the next release.
#include <keel_support/abi_guard.hpp>
#include <keel_support/activation_cache.hpp>
#include <keel_support/aligned_buffer.hpp>
#include <keel_support/backend_buffer.hpp>
#include <keel_support/backend_ops.hpp>
#include <keel_support/carver.hpp>
#include <keel_support/chunk_calls.hpp>
#include <keel_support/chunk_plan.hpp>
#include <keel_support/comm_worker.hpp>
#include <keel_support/compute_ops.hpp>
#include <keel_support/external_config.hpp>
#include <keel_support/external_names.hpp>
#include <keel_support/json_parse.hpp>
#include <keel_support/json_section.hpp>
#include <keel_support/launcher_env.hpp>
#include <keel_support/layer_lease.hpp>
#include <keel_support/layer_specs.hpp>
#include <keel_support/model_face.hpp>
#include <keel_support/model_support.hpp>
#include <keel_support/offload_engine.hpp>
#include <keel_support/offload_engine_base.hpp>
#include <keel_support/offload_extents.hpp>
#include <keel_support/offload_slots.hpp>
#include <keel_support/offload_tickets.hpp>
#include <keel_support/offload_tier.hpp>
#include <keel_support/optimizer_slots.hpp>
#include <keel_support/packed_state.hpp>
#include <keel_support/parallel_threshold.hpp>
#include <keel_support/param_specs.hpp>
#include <keel_support/param_store.hpp>
#include <keel_support/piece_box.hpp>
#include <keel_support/plugin_entry.hpp>
#include <keel_support/rank_order_sum.hpp>
#include <keel_support/recompute.hpp>
#include <keel_support/rope_frequencies.hpp>
#include <keel_support/schedule_check.hpp>
#include <keel_support/shard_home.hpp>
#include <keel_support/sized_output.hpp>
#include <keel_support/stage_tied_grads.hpp>
#include <keel_support/state_streamer.hpp>
#include <keel_support/store_checks.hpp>
#include <keel_support/store_layout.hpp>
#include <keel_support/strategy_slots.hpp>
#include <keel_support/sum_squares_batch.hpp>
#include <keel_support/testing/host_memory_backend.hpp>
#include <keel_support/testing/offload_conformance.hpp>
#include <keel_support/testing/recording_host.hpp>
#include <keel_support/tier_home.hpp>
#include <keel_support/tp_mappings.hpp>
#include <keel_support/tp_pieces.hpp>
#include <keel_support/tp_regions.hpp>

#include <type_traits>

#include "cpu/parallel_threshold.h"  // defines: keel::cpu::kParallelMinElements (the values' new home)

namespace {
struct AnyModel;
static_assert(std::is_same_v<keel_support::ModelFace<AnyModel>, keel_support::ModelSlots<AnyModel>>,
              "ModelFace is the old name of ModelSlots");
static_assert(keel_support::kParallelMinElements == keel::cpu::kParallelMinElements,
              "the forwarding copy of the threshold differs from the kernels' own");
static_assert(keel_support::kParallelMinElementsHeavy == keel::cpu::kParallelMinElementsHeavy,
              "the forwarding copy of the heavy threshold differs from the kernels' own");
}  // namespace
