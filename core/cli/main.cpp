// The keel command: run, validate, plugins. Every failure prints one message that says what,
// where and what was expected, and exits non-zero (2 for a misused command line).
#include <keel/version.h>

#include <cstring>
#include <iomanip>
#include <iostream>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "host/errors.h"
#include "loader/plugin_registry.h"
#include "train/plugin_instances.h"
#include "train/run_loop.h"
#include "train/trainer.h"

namespace {

const char* kUsage =
    "usage: keel run CONFIG [--set path=value ...]   train from a JSON config\n"
    "       keel validate CONFIG [--set path=value ...]   check a config without training\n"
    "       keel plugins [--plugin-path DIR ...]      list plugins found, with versions and ABI\n"
    "       keel --version\n"
    "--set values are parsed as JSON (a bare word is a string): --set train.steps=20 --set optimizer.lr=1e-3\n"
    "Plugins are searched in the config's plugin_path, then KEEL_PLUGIN_PATH, then the install's plugin folder.\n";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct CommandLine {
  std::string command, config;
  std::vector<std::string> overrides, plugin_path;
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
    else if (!arg.empty() && arg[0] == '-') throw UsageError("unknown option " + arg);
    else if (line.config.empty()) line.config = arg;
    else throw UsageError("unexpected argument " + arg);
  }
  if ((line.command == "run" || line.command == "validate") && line.config.empty())
    throw UsageError("keel " + line.command + " needs a CONFIG file");
  return line;
}

int list_plugins(const CommandLine& line) {
  auto& registry = keel::PluginRegistry::instance();
  registry.add_search_folders(line.plugin_path);
  auto plugins = registry.list();
  std::cout << std::left << std::setw(10) << "KIND" << std::setw(12) << "NAME" << std::setw(10) << "VERSION"
            << std::setw(6) << "ABI" << "PATH\n";
  for (const auto& p : plugins)
    std::cout << std::setw(10) << keel::kind_name(p.info.kind) << std::setw(12) << p.info.name << std::setw(10)
              << p.info.version << std::setw(6) << (std::to_string(p.info.abi_major) + "." + std::to_string(p.info.abi_minor))
              << p.path << "\n";
  for (const auto& r : registry.refusals()) std::cout << "refused: " << r.reason << "\n";
  std::cout << "searched:";
  for (const auto& f : registry.search_folders()) std::cout << " " << f;
  std::cout << std::endl;
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
    if (argc == 2 && (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "help"))) {
      std::cout << kUsage;
      return 0;
    }
    CommandLine line = parse_command_line(argc, argv);
    if (line.command == "plugins") return list_plugins(line);
    if (line.command == "validate") {
      keel::RunConfig config = keel::RunConfig::from_file(line.config, line.overrides);
      keel::validate_plugin_sections(config);
      std::cout << line.config << ": valid (model " << config.model.plugin << ", optimizer " << config.optimizer.plugin
                << ", strategy " << config.strategy.plugin << ", backend " << config.backend.plugin << ")" << std::endl;
      return 0;
    }
    if (line.command == "run") {
      keel::Trainer trainer(keel::RunConfig::from_file(line.config, line.overrides));
      keel::run_training(trainer, std::cout);
      return 0;
    }
    throw UsageError("unknown command '" + line.command + "'");
  } catch (const UsageError& e) {
    std::cerr << "keel: " << e.what() << "\n" << kUsage;
    return 2;
  } catch (const keel::KeelError& e) {
    std::cerr << "keel: error: " << e.what() << std::endl;
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "keel: internal error: " << e.what() << std::endl;
    return 1;
  }
}
