// Building and checking every stage's action list (schedule_lists.h).
#include "train/schedule_lists.h"

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "host/errors.h"
#include "host/host_table.h"

namespace keel {
namespace {

std::string text(int64_t n) { return std::to_string(n); }

std::string shape_text(int32_t stages, int32_t microbatches, int32_t virtual_stages) {
  return "pp " + text(stages) + ", " + text(microbatches) + " micro-batches per step, virtual_stages " +
         text(virtual_stages);
}

// One stage's list through the plugin's two-call build, its length bounded before allocating:
// a (micro-batch, chunk) needs at most a forward, a backward split in two and four transfers.
std::vector<keel_schedule_action> build_stage(const ScheduleRequest& request, const keel_schedule_shape& shape) {
  const std::string where = request.where + " build for stage " + text(shape.stage);
  const char* json = request.section_json.c_str();
  size_t count = 0;
  check_plugin(request.schedule->build(host_table(), json, &shape, nullptr, 0, &count), where);
  const size_t most = 8 * size_t(shape.microbatches) * size_t(shape.virtual_stages) + 64;
  if (count > most)
    throw KeelError(KEEL_ERR_INVALID_CONFIG, where + ": said its list holds " + text(int64_t(count)) +
                                                 " actions, more than the " + text(int64_t(most)) + " that " +
                                                 shape_text(shape.stages, shape.microbatches, shape.virtual_stages) +
                                                 " can need");
  std::vector<keel_schedule_action> actions(count);
  size_t written = 0;
  check_plugin(request.schedule->build(host_table(), json, &shape, actions.data(), actions.size(), &written), where);
  if (written != count)
    throw KeelError(KEEL_ERR_INVALID_CONFIG, where + ": said " + text(int64_t(count)) + " actions, then wrote " +
                                                 text(int64_t(written)));
  return actions;
}

// The executor tells transfers apart by (peer, tag) alone, and tags repeat every 64
// micro-batches: two transfers sharing both must be received in the order they were sent.
std::string tag_order_problem(const keel_support::ScheduleLists& lists) {
  using Channel = std::tuple<int32_t, int32_t, int32_t>;  // from stage, to stage, tag
  using Transfer = std::pair<int32_t, int32_t>;          // micro-batch, chunk
  std::map<Channel, std::vector<Transfer>> sent, received;
  for (int32_t stage = 0; stage < int32_t(lists.size()); ++stage)
    for (const keel_schedule_action& a : lists[size_t(stage)]) {
      const bool gradient = a.kind == KEEL_ACTION_SEND_GRADIENT || a.kind == KEEL_ACTION_RECV_GRADIENT;
      const int32_t tag = pipeline_message_tag(a.microbatch, a.chunk, gradient);
      if (a.kind == KEEL_ACTION_SEND_ACTIVATION || a.kind == KEEL_ACTION_SEND_GRADIENT)
        sent[{stage, a.peer_stage, tag}].push_back({a.microbatch, a.chunk});
      else if (a.kind == KEEL_ACTION_RECV_ACTIVATION || a.kind == KEEL_ACTION_RECV_GRADIENT)
        received[{a.peer_stage, stage, tag}].push_back({a.microbatch, a.chunk});
    }
  for (const auto& [channel, order] : received) {
    const auto& sends = sent[channel];
    for (size_t i = 0; i < order.size() && i < sends.size(); ++i)
      if (order[i] != sends[i])
        return "stage " + text(std::get<1>(channel)) + " receives micro-batch " + text(order[i].first) + ", chunk " +
               text(order[i].second) + " from stage " + text(std::get<0>(channel)) + " where micro-batch " +
               text(sends[i].first) + ", chunk " + text(sends[i].second) +
               " was sent first with the same message tag (micro-batches 64 apart share a tag): receive them in "
               "the order they are sent";
  }
  return "";
}

}  // namespace

int32_t pipeline_message_tag(int32_t microbatch, int32_t chunk, bool gradient) {
  return ((microbatch % 64) * 256 + chunk % 256) * 2 + (gradient ? 1 : 0);
}

keel_support::ScheduleLists build_stage_lists(const ScheduleRequest& request) {
  keel_support::ScheduleLists lists;
  for (int32_t stage = 0; stage < request.stages; ++stage) {
    const keel_schedule_shape shape{sizeof(shape), request.stages, request.microbatches, stage, request.virtual_stages};
    const keel_status status = request.schedule->check_shape(host_table(), request.section_json.c_str(), &shape);
    if (status != KEEL_OK)
      throw KeelError(status, request.where + " cannot run " +
                                  shape_text(request.stages, request.microbatches, request.virtual_stages) +
                                  request.shape_origin + ": " + last_error());
    lists.push_back(build_stage(request, shape));
  }
  return lists;
}

std::string schedule_problem(const ScheduleRequest& request, const keel_support::ScheduleLists& lists,
                             keel_support::ScheduleReport* report) {
  keel_support::ScheduleReport simulated =
      keel_support::simulate_schedule(lists, request.stages, request.microbatches, request.virtual_stages);
  std::string problem = simulated.first_problem();
  if (!problem.empty() && simulated.problem_count() > 1) {
    const size_t more = simulated.problem_count() - 1;
    problem += " (and " + text(int64_t(more)) + " more problem" + (more > 1 ? "s" : "") + ")";
  }
  if (problem.empty()) problem = tag_order_problem(lists);
  if (report) *report = std::move(simulated);
  return problem;
}

keel_support::ScheduleLists build_checked_schedule(const RunConfig& config, const keel_schedule_api* schedule,
                                                   int64_t dp, int32_t microbatches) {
  ScheduleRequest request;
  request.schedule = schedule;
  request.name = config.schedule.plugin;
  request.where = config.file + ": parallel.schedule.plugin '" + config.schedule.plugin + "'";
  request.section_json = config.schedule.json.dump();
  request.stages = config.pp;
  request.microbatches = microbatches;
  request.virtual_stages = config.virtual_stages;
  request.shape_origin = " (data.global_batch " + text(config.data.global_batch) + " / (micro_batch " +
                         text(config.data.micro_batch) + " × dp " + text(dp) + "))";
  keel_support::ScheduleLists lists = build_stage_lists(request);
  const std::string problem = schedule_problem(request, lists);
  if (problem.empty()) return lists;
  const int32_t v = request.virtual_stages;
  throw KeelError(KEEL_ERR_INVALID_CONFIG,
                  request.where + " built action lists that cannot run (" +
                      shape_text(request.stages, microbatches, v) + "): " + problem + "; `keel schedule-check " +
                      request.name + " --pp " + text(request.stages) + " --microbatches " + text(microbatches) +
                      (v > 1 ? " --virtual-stages " + text(v) : "") + "` lists every problem");
}

}  // namespace keel
