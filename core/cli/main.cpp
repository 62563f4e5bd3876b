// The keel command: run, validate, plugins, inspect, export, schedule-check, prepare-data and launch,
// and plot, which keel_plot carries. Every failure prints one message that says what,
// where and what was expected, and exits non-zero (2 for a misused command line).
#include <keel/version.h>

#include <cstring>
#include <algorithm>
#include <chrono>
#include <csignal>
#include <iomanip>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "command_usage.h"
#include "export_command.h"
#include "launch_command.h"
#include "prepare_data_command.h"
#include "schedule_check_command.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/manifest_check.h"
#include "config/run_config.h"
#include "host/errors.h"
#include "host/host_table.h"
#include "host/log.h"
#include "io/writable_folder.h"
#include "loader/plugin_registry.h"
#include "mesh/launcher_check.h"
#include "plot/plot.h"
#include "train/plugin_instances.h"
#include "train/mesh_plan.h"
#include "session/run_session.h"
#include "mesh/stop_signals.h"
#include "interop/huggingface.h"
#include "train/trainer.h"

namespace {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A failure's last line ("keel: error: ..."), whole in one write (host/log.h): when every rank of
// a launched job fails alike, their lines stand one under the other, each naming its rank, rather
// than run into each other ("keel: error: keel: error: ...").
void print_failure(const std::string& kind, const std::string& message) {
  std::string rank;
  try {
    const auto launched = keel::launcher();
    if (launched && launched->world > 1)
      rank = "rank " + std::to_string(launched->rank) + " of " + std::to_string(launched->world) + ": ";
  } catch (const std::exception&) {
    // malformed launcher variables: the failure is said without a rank
  }
  keel::write_stderr_line("keel: " + kind + ": " + rank + message);
}

// A rank keeping quiet about a failure rank 0 states for all leaves a moment after it: the
// launcher ends the job at the first rank to exit, and by then has passed rank 0's line on. Its
// SIGTERM then ends this rank as the default action does, without a stop notice of its own.
void leave_after_rank_0() {
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  std::this_thread::sleep_for(std::chrono::seconds(2));
}

struct CommandLine {
  std::string command, config;
  std::vector<std::string> overrides, plugin_path;
  std::string resume;  // "latest" or a checkpoint folder
  int32_t ranks = 0;   // keel validate --ranks; 0: the launcher's world size
};

CommandLine parse_command_line(int argc, char** argv) {
  if (argc < 2) throw UsageError("no command given");
  CommandLine line;
  line.command = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const char* flag) {
      if (i + 1 >= argc) throw UsageError(std::string(flag) + " needs a value");
      return std::string(argv[++i]);
    };
    if (arg == "--set") line.overrides.push_back(value("--set"));
    else if (arg.rfind("--set=", 0) == 0) line.overrides.push_back(arg.substr(6));
    else if (arg == "--plugin-path") line.plugin_path.push_back(value("--plugin-path"));
    else if (arg == "--resume") line.resume = value("--resume");
    else if (arg == "--ranks") {
      const std::string n = value("--ranks");
      char* end = nullptr;
      const long ranks = std::strtol(n.c_str(), &end, 10);
      if (n.empty() || *end != '\0' || ranks < 1 || ranks > (1 << 24))
        throw UsageError("--ranks expects a number of ranks from 1 to 16777216, found '" + n + "'");
      line.ranks = int32_t(ranks);
    }
    else if (!arg.empty() && arg[0] == '-') throw UsageError("unknown option " + arg);
    else if (line.config.empty()) line.config = arg;
    else throw UsageError("unexpected argument " + arg);
  }
  if ((line.command == "run" || line.command == "validate") && line.config.empty())
    throw UsageError("keel " + line.command + " needs a CONFIG file");
  if (line.command == "inspect" && line.config.empty()) throw UsageError("keel inspect needs a CHECKPOINT folder");
  if (!line.resume.empty() && line.command != "run") throw UsageError("--resume belongs to keel run");
  if (line.ranks != 0 && line.command != "validate") throw UsageError("--ranks belongs to keel validate");
  return line;
}

int list_plugins(const CommandLine& line) {
  auto& registry = keel::PluginRegistry::instance();
  registry.add_search_folders(line.plugin_path);
  auto plugins = registry.list();
  // Columns as wide as their longest entry (names and versions are the plugins' own), two
  // spaces apart, so a long name never runs into the next column.
  size_t name_w = 4, version_w = 7;
  for (const auto& p : plugins) {
    name_w = std::max(name_w, std::string(p.info.name).size());
    version_w = std::max(version_w, std::string(p.info.version).size());
  }
  auto row = [&](const std::string& kind, const std::string& name, const std::string& version, const std::string& abi,
                 const std::string& path) {
    std::cout << std::left << std::setw(9) << kind << "  " << std::setw(int(name_w)) << name << "  "
              << std::setw(int(version_w)) << version << "  " << std::setw(4) << abi << "  " << path << "\n";
  };
  row("KIND", "NAME", "VERSION", "ABI", "PATH");
  for (const auto& p : plugins)
    row(keel::kind_name(p.info.kind), p.info.name, p.info.version,
        std::to_string(p.info.abi_major) + "." + std::to_string(p.info.abi_minor), p.path);
  // A backend that cannot run here (no GPU) is listed, and says why (backend.h probe).
  for (const auto& p : plugins) {
    if (p.info.kind != KEEL_KIND_BACKEND) continue;
    const auto* backend = static_cast<const keel_backend_api*>(p.info.api);
    if (!KEEL_HAS_SLOT(backend, probe)) continue;
    try {
      keel::check_plugin(backend->probe(keel::host_table()), "probe");
    } catch (const keel::KeelError& e) {
      std::cout << "unavailable: backend '" << p.info.name << "' (" << p.info.description << "): " << e.what() << "\n";
    }
  }
  for (const auto& shadow : registry.shadowed()) std::cout << "shadowed: " << keel::shadow_notice(shadow) << "\n";
  for (const auto& r : registry.refusals()) std::cout << "refused: " << r.reason << "\n";
  std::cout << "searched:";
  for (const auto& f : registry.search_folders()) std::cout << " " << f;
  std::cout << std::endl;
  return 0;
}

// Runs every check a resume makes short of comparing with a model (keel::verify_checkpoint) and
// prints what the checkpoint holds.
int inspect_checkpoint(const std::string& path) {
  const std::string folder = keel::resolve_checkpoint(path);
  const nlohmann::json manifest = keel::verify_checkpoint(folder);
  int64_t elements = 0;  // bounded by check_manifest_structure
  for (const auto& p : manifest.at("params")) elements += keel::manifest_param_elements(p);
  std::cout << folder << ": step " << manifest.at("step") << ", " << manifest.at("tokens_seen") << " tokens seen, model "
            << manifest.at("config").at("model").at("plugin").get<std::string>() << " with " << manifest.at("params").size()
            << " tensors (" << elements << " parameters), optimizer " << manifest.at("optimizer").at("plugin")
            << ", mesh " << manifest.at("mesh").dump() << "; " << manifest.at("files").size()
            << " file(s), checksums verified, every slice present and finite" << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 2 && (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "version"))) {
      std::cout << "keel " << KEEL_VERSION_STRING_CLI << " (ABI " << KEEL_ABI_VERSION_MAJOR << "." << KEEL_ABI_VERSION_MINOR
                << ")\n";
      return 0;
    }
    if (argc == 2 && (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help"))) {
      std::cout << keel_cli::kOverviewUsage;
      return 0;
    }
    // `keel help COMMAND` and `keel COMMAND ... --help`: that command's usage alone.
    const bool help_with_name = argc == 3 && !std::strcmp(argv[1], "help");
    const char* usage = argc >= 2 ? keel_cli::command_usage(argv[help_with_name ? 2 : 1]) : nullptr;
    if (usage && (help_with_name || keel_cli::asks_for_help(argc, argv))) {
      std::cout << usage;
      return 0;
    }
    if (argc >= 2 && !std::strcmp(argv[1], "prepare-data"))
      return keel::prepare_data_command(std::vector<std::string>(argv + 2, argv + argc), std::cout, std::cerr);
    if (argc >= 2 && !std::strcmp(argv[1], "export"))
      return keel::export_command(std::vector<std::string>(argv + 2, argv + argc), std::cout, std::cerr);
    if (argc >= 2 && !std::strcmp(argv[1], "launch"))
      return keel::launch_command(std::vector<std::string>(argv + 2, argv + argc), std::cout, std::cerr);
    if (argc >= 2 && !std::strcmp(argv[1], "plot"))
      return keel::plot_command(std::vector<std::string>(argv + 2, argv + argc), std::cout, std::cerr);
    if (argc >= 2 && !std::strcmp(argv[1], "schedule-check"))
      return keel::schedule_check_command(std::vector<std::string>(argv + 2, argv + argc), std::cout, std::cerr);
    CommandLine line = parse_command_line(argc, argv);
    if (line.command == "plugins") return list_plugins(line);
    if (line.command == "validate") {
      keel::RunConfig config = keel::RunConfig::from_file(line.config, line.overrides);
      keel::validate_plugin_sections(config);
      const std::string mesh = keel::check_mesh_plan(config, line.ranks ? line.ranks : keel::launcher_world_size());
      std::cout << line.config << ": valid (model " << config.model.plugin << ", optimizer " << config.optimizer.plugin
                << ", strategy " << config.strategy.plugin << ", backend " << config.backend.plugin << "; " << mesh << ")"
                << std::endl;
      // Each process launched says who started it and where it sits, as a run would take it.
      if (const auto started_by = keel::launcher())
        std::cout << "launched by " << keel_support::describe_launcher(*started_by) << std::endl;
      return 0;
    }
    if (line.command == "run") {
      keel::RunConfig config = keel::RunConfig::from_file(line.config, line.overrides);
      keel::require_writable_folder(config.train.checkpoint.dir, "train.checkpoint.dir");
      // A resumed run takes every weight from its checkpoint: model.init_from is not read again.
      if (!line.resume.empty()) config.model_init_from.clear();
      keel::install_stop_signal_handlers();
      keel::Trainer trainer(std::move(config), keel::TrainerData::open, keel::import_huggingface);
      try {
        if (!line.resume.empty()) {
          // "latest" is the newest checkpoint of this config's train.checkpoint.dir.
          const std::string where = line.resume == "latest" ? trainer.config().train.checkpoint.dir : line.resume;
          const std::string checkpoint = keel::resolve_checkpoint(where);
          trainer.resume_at(keel::load_checkpoint(trainer.state_view(), checkpoint));
          if (trainer.mesh().world.rank == 0)
            std::cout << "resuming from " << checkpoint << " at step " << trainer.step() << std::endl;
        }
        keel::run_training(trainer, std::cout, !line.resume.empty());
      } catch (const keel::StopRequested& stop) {
        // Every rank stopped after the same step: the trainer's teardown (offload tiers
        // included) runs as at a normal end, then the shell sees 128 + the signal.
        if (trainer.mesh().world.rank == 0) keel::write_stderr_line(std::string("keel: ") + stop.what());
        return 128 + stop.signal_number;
      } catch (const std::exception& e) {
        // The other ranks may be waiting in a collective for this one: end them all, naming why.
        trainer.abort_all_ranks(e);
        throw;
      }
      return 0;
    }
    if (line.command == "inspect") return inspect_checkpoint(line.config);
    throw UsageError("unknown command '" + line.command + "'");
  } catch (const UsageError& e) {
    const char* usage = argc >= 2 ? keel_cli::command_usage(argv[1]) : nullptr;
    std::cerr << "keel: " << e.what() << "\n" << (usage ? usage : keel_cli::kOverviewUsage);
    return 2;
  } catch (const keel::FailedOnEveryRank& e) {
    // A check every rank made and agreed on failed alike everywhere: rank 0 says it for all.
    if (e.says_it())
      keel::write_stderr_line("keel: error: " + e.line());
    else
      leave_after_rank_0();
    return 1;
  } catch (const keel::KeelError& e) {
    print_failure("error", e.what());
    return 1;
  } catch (const std::exception& e) {
    print_failure("internal error", e.what());
    return 1;
  }
}
