// Which usage text belongs to which command (command_usage.h). The texts of run, validate,
// plugins and inspect live here because main.cpp parses those commands itself.
#include "command_usage.h"

#include <cstring>

#include "prepare_data_command.h"
#include "export_command.h"
#include "launch_command.h"
#include "plot/plot.h"
#include "schedule_check_command.h"

namespace keel_cli {

const char* const kOverviewUsage =
    "usage: keel run CONFIG [--set path=value ...] [--resume latest|DIR]   train from a JSON config\n"
    "       keel launch CONFIG --hosts FILE [--max-restarts N] [--launcher CMD] [--set ...]   run on hosts, restart on\n"
    "                                                 those that answer after a failure (elastic)\n"
    "       keel inspect CHECKPOINT                   verify a checkpoint as a resume would and summarise it\n"
    "       keel validate CONFIG [--set path=value ...] [--ranks N]   check a config and its parallel layout for N ranks\n"
    "                                                 (default: the launcher's world size, else 1) without training\n"
    "       keel plugins [--plugin-path DIR ...]      list plugins found, with versions and ABI\n"
    "       keel prepare-data INPUT... --out DIR [--tokenizer tokenizer.json|bytes] [--val-fraction F] [--shard-tokens N]\n"
    "                                                 text → llm.c token shards, byte by byte or with a tokenizer.json's BPE\n"
    "       keel export CHECKPOINT --out FILE.safetensors [--plugin-path DIR ...]   a checkpoint in its model's Hugging\n"
    "                                                 Face layout (GPT-2 or Llama), with config.json beside it\n"
    "       keel plot METRICS.jsonl [MORE.jsonl ...] --out PLOT.svg [--title T] [--x step|tokens|comm_bytes]\n"
    "                 [--y both|loss|val_loss]         loss and val_loss of one or several runs\n"
    "       keel schedule-check NAME --pp P --microbatches M [--virtual-stages V]   simulate a schedule plugin's lists\n"
    "       keel --version\n"
    "       keel COMMAND --help                       that command's usage\n"
    "--set values are parsed as JSON (a bare word is a string): --set train.steps=20 --set optimizer.lr=1e-3\n"
    "Plugins are searched in the config's plugin_path, then KEEL_PLUGIN_PATH, then the install's plugin folder.\n";

namespace {

const char* const kRunUsage =
    "usage: keel run CONFIG [--set path=value ...] [--resume latest|DIR]\n"
    "  trains as the JSON file CONFIG says, on the ranks mpirun (or another launcher) started\n"
    "  --set path=value  replaces one value of CONFIG, parsed as JSON (a bare word is a string):\n"
    "                    --set train.steps=20 --set optimizer.lr=1e-3\n"
    "  --resume latest   continues from the newest checkpoint in train.checkpoint.dir; --resume DIR from that one\n"
    "  SIGINT or SIGTERM stops every rank after the same step; keel run then exits 128 + the signal\n";

const char* const kValidateUsage =
    "usage: keel validate CONFIG [--set path=value ...] [--ranks N]\n"
    "  checks CONFIG, each plugin's section of it, and that its parallel layout fits N ranks (default: the\n"
    "  launcher's world size, else 1), without training; --set as keel run takes it\n";

const char* const kPluginsUsage =
    "usage: keel plugins [--plugin-path DIR ...]\n"
    "  lists the plugins found (kind, name, version, ABI, file), backends that cannot run here and why,\n"
    "  libraries shadowed or refused, and the folders searched: each DIR, then KEEL_PLUGIN_PATH, then the\n"
    "  install's plugin folder\n";

const char* const kInspectUsage =
    "usage: keel inspect CHECKPOINT\n"
    "  verifies CHECKPOINT (a step folder, or a root with 'latest') as a resume would (its manifest, each\n"
    "  file's size and checksum, every slice present and finite) and summarises its step, model and mesh\n";

struct NamedUsage {
  const char* command;
  const char* usage;
};

}  // namespace

const char* command_usage(const std::string& command) {
  const NamedUsage every_command[] = {
      {"run", kRunUsage},
      {"launch", keel::kLaunchUsage},
      {"inspect", kInspectUsage},
      {"validate", kValidateUsage},
      {"plugins", kPluginsUsage},
      {"prepare-data", keel::kPrepareDataUsage},
      {"export", keel::kExportUsage},
      {"plot", keel::kPlotUsage},
      {"schedule-check", keel::kScheduleCheckUsage},
  };
  for (const NamedUsage& named : every_command)
    if (command == named.command) return named.usage;
  return nullptr;
}

bool asks_for_help(int argc, char** argv) {
  for (int i = 2; i < argc; ++i)
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) return true;
  return false;
}

}  // namespace keel_cli
