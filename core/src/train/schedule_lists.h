// A pipeline step's action lists, built through the schedule plugin for every stage and checked
// together before the core runs any of them. Each list is a pure function of the shape, so any
// rank can build every rank's list: a schedule whose receive has no send, whose backward comes
// before its forward, or whose LAST_FOR_CHUNK flag is misplaced is refused at start-up (and by
// `keel validate`) naming the plugin and its first bad action, instead of hanging every rank or
// training on wrong gradients. Used by mesh_plan (validate) and PipelineRunner (run).
#pragma once

#include <keel/schedule.h>
#include <keel_support/schedule/schedule_check.hpp>

#include <cstdint>
#include <string>
#include <utility>

#include "config/run_config.h"

namespace keel {

// What to build: a schedule plugin's table and section, the shape, and how messages name it.
struct ScheduleRequest {
  const keel_schedule_api* schedule = nullptr;
  std::string name;          // the plugin's name, for `keel schedule-check NAME`
  std::string where;         // prefixes every message: "run.json: parallel.schedule.plugin 'x'"
  std::string section_json;  // the "parallel.schedule" section, as the plugin's calls take it
  int32_t stages = 1, microbatches = 1, virtual_stages = 1;
  std::string shape_origin;  // where the micro-batch count came from, added to shape refusals
};

// Every stage's list ([stage]), after check_shape and bounds on the plugin's output; throws
// KeelError naming request.where.
keel_support::ScheduleLists build_stage_lists(const ScheduleRequest& request);

// The first reason the lists cannot run: the all-rank simulation's first problem (with how many
// more), else a break of the executor's own rule (transfers sharing a message tag arrive in the
// order sent). Empty when they can run; `report` receives the simulation.
std::string schedule_problem(const ScheduleRequest& request, const keel_support::ScheduleLists& lists,
                             keel_support::ScheduleReport* report = nullptr);

// Every stage's list for `microbatches` micro-batches on config.pp stages with
// config.virtual_stages chunks each (a count check_batch_geometry bounded), built and checked as
// above: throws KeelError naming parallel.schedule.plugin, the first bad action and the
// schedule-check command that lists all.
keel_support::ScheduleLists build_checked_schedule(const RunConfig& config, const keel_schedule_api* schedule,
                                                   int64_t dp, int32_t microbatches);

// The message tag the executor gives a transfer (MPI tags need only be below 32768; messages
// between two ranks with one tag arrive in the order they were sent).
int32_t pipeline_message_tag(int32_t microbatch, int32_t chunk, bool gradient);

}  // namespace keel
