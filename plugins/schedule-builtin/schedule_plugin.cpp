// The four built-in schedules as KEEL_KIND_SCHEDULE plugins (abi/keel/schedule.h): each table
// reads its "parallel.schedule" section, checks a shape with the same check build_schedule
// uses, and writes build_schedule's list into the caller's buffer.
#include <keel/plugin.h>
#include <keel/schedule.h>
#include <keel_support/common/abi_guard.hpp>
#include <keel_support/common/json_section.hpp>
#include <keel_support/common/plugin_entry.hpp>

#include <string>

#include "schedule_abi.hpp"
#include "schedules.hpp"

namespace keel_schedule {
namespace {

using keel_support::StatusError;

constexpr const char* kSectionPath = "parallel.schedule";

// The section's only key today is the "plugin" selector; anything else is refused by path.
void read_section(const char* config_json, const char* json_path) {
  auto section = keel_support::JsonSection::parse(config_json, json_path && *json_path ? json_path : kSectionPath);
  section.allow("plugin");
  section.finish();
}

// A shape this schedule cannot run is a configuration problem (pp, virtual_stages, batch sizes).
void require_runnable(const char* name, const PipelineShape& shape) {
  if (std::string problem = shape_problem(name, shape); !problem.empty())
    throw StatusError(KEEL_ERR_INVALID_CONFIG, problem);
}

struct ScheduleEntry {
  const char* name;
  const char* source;  // prefixes every message
  const char* description;
  int32_t splits_backward;
};

constexpr ScheduleEntry kEntries[] = {
    {"gpipe", "schedule gpipe", "GPipe: every micro-batch forward, then every backward; holds m activations", 0},
    {"1f1b", "schedule 1f1b", "1F1B (PipeDream-flush): warm-up forwards, then one forward one backward; holds <= p", 0},
    {"interleaved", "schedule interleaved",
     "Interleaved 1F1B (Megatron): v chunks per rank, bubble (p-1)/(v*m); micro-batches a multiple of p", 0},
    {"zero-bubble", "schedule zero-bubble",
     "Zero-bubble ZB-H1: backward split into input and weight gradients, weight gradients fill the bubble", 1},
};

template <int I>
keel_status validate_config(const keel_host* host, const char* config_json, const char* json_path) {
  return keel_support::guard(host, kEntries[I].source, [&] { read_section(config_json, json_path); });
}

template <int I>
keel_status check_shape(const keel_host* host, const char* config_json, const keel_schedule_shape* shape) {
  return keel_support::guard(host, kEntries[I].source, [&] {
    read_section(config_json, kSectionPath);
    require_runnable(kEntries[I].name, shape_from_abi(shape));
  });
}

template <int I>
keel_status build(const keel_host* host, const char* config_json, const keel_schedule_shape* shape,
                  keel_schedule_action* out, size_t capacity, size_t* out_count) {
  return keel_support::guard(host, kEntries[I].source, [&] {
    read_section(config_json, kSectionPath);
    const PipelineShape pipeline = shape_from_abi(shape);
    require_runnable(kEntries[I].name, pipeline);
    write_actions(build_schedule(kEntries[I].name, pipeline.stages, pipeline.microbatches, pipeline.stage,
                                 pipeline.virtual_stages),
                  out, capacity, out_count);
  });
}

template <int I>
constexpr keel_schedule_api make_table() {
  return keel_schedule_api{sizeof(keel_schedule_api), validate_config<I>, check_shape<I>, build<I>,
                           kEntries[I].splits_backward};
}

const keel_schedule_api kTables[] = {make_table<0>(), make_table<1>(), make_table<2>(), make_table<3>()};
static_assert(sizeof(kTables) / sizeof(kTables[0]) == sizeof(kEntries) / sizeof(kEntries[0]));

constexpr keel_plugin_info info(int i) {
  return keel_support::plugin_info(KEEL_KIND_SCHEDULE, kEntries[i].name, "0.1.0", &kTables[i], kEntries[i].description);
}

const keel_plugin_info kInfos[] = {info(0), info(1), info(2), info(3)};

const keel_plugin_list kList = keel_support::plugin_list(kInfos);

}  // namespace
}  // namespace keel_schedule

extern "C" KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) { return &keel_schedule::kList; }
