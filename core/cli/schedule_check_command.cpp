// The schedule-check command (schedule_check_command.h): argument parsing, then the same
// build_stage_lists and schedule_problem a run uses, with the whole report printed.
#include "schedule_check_command.h"

#include <keel/keel.h>

#include <cstdio>
#include <iomanip>
#include <stdexcept>

#include "host/errors.h"
#include "host/host_table.h"
#include "loader/plugin_registry.h"
#include "train/batch_geometry.h"
#include "train/schedule_lists.h"

namespace keel {

const char* const kScheduleCheckUsage =
    "usage: keel schedule-check NAME --pp P --microbatches M [--virtual-stages V] [--section JSON]\n"
    "                           [--plugin-path DIR ...] [--list]\n"
    "       builds schedule NAME's action list for every stage and checks them together as a run does\n"
    "       (--section: the parallel.schedule object, default {\"plugin\": NAME}; --list prints the lists)\n";

namespace {

struct CheckArgs {
  std::string name, section;
  int32_t stages = 0, microbatches = 0, virtual_stages = 1;
  std::vector<std::string> plugin_path;
  bool list = false;
};

int32_t count_value(const std::string& flag, const std::string& value, int32_t most) {
  char* end = nullptr;
  const long n = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || n < 1 || n > most)
    throw std::invalid_argument(flag + " expects a whole number from 1 to " + std::to_string(most) + ", found '" +
                                value + "'");
  return int32_t(n);
}

CheckArgs parse_check_args(const std::vector<std::string>& args) {
  CheckArgs parsed;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto value = [&]() {
      if (i + 1 >= args.size()) throw std::invalid_argument(arg + " needs a value");
      return args[++i];
    };
    if (arg == "--pp") parsed.stages = count_value(arg, value(), 1024);
    else if (arg == "--microbatches") parsed.microbatches = count_value(arg, value(), int32_t(kMaxMicroStepsPerStep));
    else if (arg == "--virtual-stages") parsed.virtual_stages = count_value(arg, value(), 64);
    else if (arg == "--section") parsed.section = value();
    else if (arg == "--plugin-path") parsed.plugin_path.push_back(value());
    else if (arg == "--list") parsed.list = true;
    else if (!arg.empty() && arg[0] == '-') throw std::invalid_argument("unknown option " + arg);
    else if (parsed.name.empty()) parsed.name = arg;
    else throw std::invalid_argument("unexpected argument " + arg);
  }
  if (parsed.name.empty()) throw std::invalid_argument("no schedule NAME given");
  if (!parsed.stages) throw std::invalid_argument("--pp is required");
  if (!parsed.microbatches) throw std::invalid_argument("--microbatches is required");
  return parsed;
}

// The section the plugin's calls take: --section, checked to be a JSON object naming NAME.
std::string section_json(const CheckArgs& args) {
  if (args.section.empty()) return nlohmann::json{{"plugin", args.name}}.dump();
  nlohmann::json section = nlohmann::json::parse(args.section, nullptr, false);
  if (!section.is_object())
    throw KeelError(KEEL_ERR_INVALID_CONFIG, "--section: expected a JSON object such as {\"plugin\": \"" + args.name +
                                                 "\"}, found '" + args.section + "'");
  section["plugin"] = args.name;
  return section.dump();
}

void print_lists(const keel_support::ScheduleLists& lists, std::ostream& out) {
  for (size_t stage = 0; stage < lists.size(); ++stage) {
    out << "stage " << stage << ":";
    for (const auto& action : lists[stage]) out << " " << keel_support::describe_action(action);
    out << "\n";
  }
}

void print_report(const keel_support::ScheduleReport& report, std::ostream& out) {
  for (size_t stage = 0; stage < report.max_in_flight.size(); ++stage)
    out << "  stage " << stage << ": at most " << report.max_in_flight[stage] << " activation set(s) held, busy "
        << report.busy_time[stage] << " of " << report.makespan << " time units\n";
  out << "  bubble " << std::fixed << std::setprecision(1) << 100 * report.bubble_fraction
      << "% of the unit-time model (forward 1, backward 2; split backward 1 + 1)\n";
}

}  // namespace

int schedule_check_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CheckArgs parsed;
  try {
    parsed = parse_check_args(args);
  } catch (const std::invalid_argument& e) {
    err << "keel schedule-check: " << e.what() << "\n" << kScheduleCheckUsage;
    return 2;
  }
  try {
    auto& registry = PluginRegistry::instance();
    registry.add_search_folders(parsed.plugin_path);
    const LoadedPlugin& plugin = registry.find(KEEL_KIND_SCHEDULE, parsed.name);
    ScheduleRequest request;
    request.schedule = static_cast<const keel_schedule_api*>(plugin.info.api);
    request.name = parsed.name;
    request.where = "schedule '" + parsed.name + "' (" + plugin.path + ")";
    request.section_json = section_json(parsed);
    request.stages = parsed.stages;
    request.microbatches = parsed.microbatches;
    request.virtual_stages = parsed.virtual_stages;
    check_plugin(request.schedule->validate_config(host_table(), request.section_json.c_str(), "parallel.schedule"),
                 request.where + " validate_config");
    const keel_support::ScheduleLists lists = build_stage_lists(request);
    keel_support::ScheduleReport report;
    const std::string problem = schedule_problem(request, lists, &report);
    if (parsed.list) print_lists(lists, out);
    out << request.where << ", pp " << parsed.stages << ", " << parsed.microbatches << " micro-batches, virtual_stages "
        << parsed.virtual_stages << ": ";
    if (problem.empty()) {
      out << "the lists can run\n";
      print_report(report, out);
      return 0;
    }
    out << "the lists cannot run\n";
    if (!report.deadlock.empty()) out << "  deadlock: " << report.deadlock << "\n";
    for (const auto& violation : report.violations) out << "  " << violation << "\n";
    if (report.ok()) out << "  " << problem << "\n";  // the executor's own rule
    return 1;
  } catch (const KeelError& e) {
    err << "keel: error: " << e.what() << std::endl;
    return 1;
  }
}

}  // namespace keel
