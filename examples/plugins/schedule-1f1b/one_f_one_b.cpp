// A whole schedule plugin: 1F1B (PipeDream-flush, Narayanan et al. 2021) as a pure function from
// the pipeline's shape to one rank's action list. Stage s runs p-s-1 warm-up forwards, then
// alternates one forward and one backward, then drains the remaining backwards. It gives the
// same lists as Keel's built-in "1f1b", so a run with either trains to the same losses.
#include <keel/plugin.h>
#include <keel/schedule.h>
#include <keel_support/common/abi_guard.hpp>
#include <keel_support/common/json_section.hpp>
#include <keel_support/common/plugin_entry.hpp>

#include <algorithm>
#include <string>
#include <vector>

namespace my_1f1b {
namespace {

using keel_support::StatusError;

constexpr const char* kSource = "schedule my-1f1b";

// The section arrives as written, "plugin" included; this schedule has no keys of its own.
void read_section(const char* config_json, const char* json_path) {
  auto section = keel_support::JsonSection::parse(config_json, json_path && *json_path ? json_path : "parallel.schedule");
  section.allow("plugin");
  section.finish();
}

// A shape this schedule cannot run is a configuration problem, worded with the config's keys.
keel_schedule_shape checked(const keel_schedule_shape* shape) {
  if (!shape || shape->struct_size < sizeof(keel_schedule_shape))
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "shape is NULL or older than ABI 0.7's");
  const auto refuse = [](const std::string& why) { throw StatusError(KEEL_ERR_INVALID_CONFIG, why); };
  if (shape->stages < 1) refuse("pp is " + std::to_string(shape->stages) + ", expected at least 1");
  if (shape->microbatches < 1) refuse("micro-batches is " + std::to_string(shape->microbatches) + ", expected at least 1");
  if (shape->stage < 0 || shape->stage >= shape->stages)
    refuse("stage is " + std::to_string(shape->stage) + ", expected 0 .. " + std::to_string(shape->stages - 1));
  if (shape->virtual_stages != 1)
    refuse("virtual_stages is " + std::to_string(shape->virtual_stages) + ", expected 1 (one chunk per rank)");
  return *shape;
}

keel_schedule_action action(int32_t kind, int32_t microbatch, int32_t chunk, int32_t peer_stage = -1) {
  return keel_schedule_action{kind, microbatch, chunk, peer_stage, 0};
}

// With one chunk per rank, chunk c is stage c. A transfer names the chunk that consumes it.
std::vector<keel_schedule_action> build_list(const keel_schedule_shape& shape) {
  const int32_t p = shape.stages, m = shape.microbatches, s = shape.stage;
  std::vector<keel_schedule_action> list;
  auto forward = [&](int32_t mb) {
    if (s > 0) list.push_back(action(KEEL_ACTION_RECV_ACTIVATION, mb, s, s - 1));
    list.push_back(action(KEEL_ACTION_FORWARD, mb, s));
    if (s < p - 1) list.push_back(action(KEEL_ACTION_SEND_ACTIVATION, mb, s + 1, s + 1));
  };
  auto backward = [&](int32_t mb) {
    if (s < p - 1) list.push_back(action(KEEL_ACTION_RECV_GRADIENT, mb, s, s + 1));
    list.push_back(action(KEEL_ACTION_BACKWARD, mb, s));
    if (s > 0) list.push_back(action(KEEL_ACTION_SEND_GRADIENT, mb, s - 1, s - 1));
  };
  const int32_t warmup = std::min(p - s - 1, m);
  for (int32_t mb = 0; mb < warmup; ++mb) forward(mb);
  for (int32_t i = 0; i < m - warmup; ++i) forward(warmup + i), backward(i);
  for (int32_t mb = m - warmup; mb < m; ++mb) backward(mb);
  // The last backward writes the chunk's weight gradients for the last time this step: the
  // strategy starts reducing them there.
  for (auto it = list.rbegin(); it != list.rend(); ++it)
    if (it->kind == KEEL_ACTION_BACKWARD) {
      it->flags |= KEEL_ACTION_LAST_FOR_CHUNK;
      break;
    }
  return list;
}

keel_status validate_config(const keel_host* host, const char* config_json, const char* json_path) {
  return keel_support::guard(host, kSource, [&] { read_section(config_json, json_path); });
}

keel_status check_shape(const keel_host* host, const char* config_json, const keel_schedule_shape* shape) {
  return keel_support::guard(host, kSource, [&] {
    read_section(config_json, nullptr);
    checked(shape);
  });
}

// Writes at most `capacity` actions and the list's full length: a caller with too small a
// buffer calls again with a larger one.
keel_status build(const keel_host* host, const char* config_json, const keel_schedule_shape* shape,
                  keel_schedule_action* out, size_t capacity, size_t* out_count) {
  return keel_support::guard(host, kSource, [&] {
    read_section(config_json, nullptr);
    if (!out_count || (!out && capacity > 0))
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "out_count is NULL, or out is NULL with a capacity");
    const std::vector<keel_schedule_action> list = build_list(checked(shape));
    std::copy_n(list.begin(), std::min(capacity, list.size()), out);
    *out_count = list.size();
  });
}

const keel_schedule_api kApi = {sizeof(keel_schedule_api), validate_config, check_shape, build, /*splits_backward=*/0};

const keel_plugin_info kInfos[] = {keel_support::plugin_info(
    KEEL_KIND_SCHEDULE, "my-1f1b", "0.1.0", &kApi,
    "Example schedule: 1F1B, the lists of the built-in \"1f1b\"")};

const keel_plugin_list kList = keel_support::plugin_list(kInfos);

}  // namespace
}  // namespace my_1f1b

extern "C" KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) { return &my_1f1b::kList; }
