// The export command: find the checkpoint, rebuild its trainer from the model and backend of the
// config it stores, load the checkpoint's parameters, write the external files. Rebuilding the trainer (rather than reading the
// checkpoint's tensors directly) lets the model plugin own every name and layout decision.
#include "export_command.h"

#include <filesystem>
#include <optional>
#include <stdexcept>

#include "checkpoint/checkpoint.h"
#include "config/init_from_config.h"
#include "host/errors.h"
#include "host/plural.h"
#include "interop/hf_tokenizer_files.h"
#include "interop/huggingface.h"
#include "loader/plugin_registry.h"
#include "train/trainer.h"

namespace keel {

const char* const kExportUsage =
    "usage: keel export CHECKPOINT --out FILE.safetensors [--merge | --quantize] [--tokenizer PATH]\n"
    "                   [--plugin-path DIR ...]\n"
    "  writes a checkpoint (a step folder, or a root with 'latest') as one safetensors file in the Hugging Face\n"
    "  layout its model plugin names (GPT-2's for gpt, Llama's or Qwen2's for llama), with the config.json\n"
    "  transformers needs beside it: from_pretrained loads that folder. A LoRA run's checkpoint exports its\n"
    "  adapters as a PEFT folder instead (--out DIR/adapter_model.safetensors, adapter_config.json beside it)\n"
    "  --merge            a LoRA run's adapters merged into the weights (W + s·B·A): the full model, as above\n"
    "  --quantize         a quantization-aware training run's (model.qat) linears as it trained them: int8\n"
    "                     values and fp32 scales per group, with a quantization_config in config.json\n"
    "  --tokenizer PATH   the tokenizer.json the data was prepared with (or a folder holding one, with its\n"
    "                     tokenizer_config.json) copied beside the model, its end- and start-of-text ids\n"
    "                     written as config.json's and generation_config.json's bos/eos/pad\n"
    "  --plugin-path DIR  a folder searched for plugin libraries (a third-party model's), as keel plugins takes;\n"
    "                     KEEL_PLUGIN_PATH and the install's plugin folder are searched too\n";

namespace {

struct ExportArgs {
  std::string checkpoint, out;
  bool merge = false;  // --merge: a LoRA run's adapters folded into the full model
  bool quantize = false;  // --quantize: a QAT run's linears quantized
  std::vector<std::string> plugin_path;  // --plugin-path: folders searched for the model's plugin
  std::string tokenizer;  // --tokenizer: copied beside a model export (interop/hf_tokenizer_files.h)
};

// Throws std::invalid_argument with what is wrong.
ExportArgs parse_export_args(const std::vector<std::string>& args) {
  ExportArgs parsed;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--out") {
      if (i + 1 >= args.size()) throw std::invalid_argument("--out needs a value");
      parsed.out = args[++i];
    } else if (arg.rfind("--out=", 0) == 0) {
      parsed.out = arg.substr(6);
    } else if (arg == "--merge") {
      parsed.merge = true;
    } else if (arg == "--quantize") {
      parsed.quantize = true;
    } else if (arg == "--tokenizer") {
      if (i + 1 >= args.size()) throw std::invalid_argument("--tokenizer needs a tokenizer.json or a folder");
      parsed.tokenizer = args[++i];
    } else if (arg.rfind("--tokenizer=", 0) == 0) {
      parsed.tokenizer = arg.substr(12);
    } else if (arg == "--plugin-path") {
      if (i + 1 >= args.size()) throw std::invalid_argument("--plugin-path needs a folder");
      parsed.plugin_path.push_back(args[++i]);
    } else if (arg.rfind("--plugin-path=", 0) == 0) {
      parsed.plugin_path.push_back(arg.substr(14));
    } else if (!arg.empty() && arg[0] == '-') {
      throw std::invalid_argument("unknown option " + arg);
    } else if (parsed.checkpoint.empty()) {
      parsed.checkpoint = arg;
    } else {
      throw std::invalid_argument("unexpected argument " + arg);
    }
  }
  if (parsed.checkpoint.empty()) throw std::invalid_argument("keel export needs a CHECKPOINT folder");
  if (parsed.out.empty()) throw std::invalid_argument("keel export needs --out FILE.safetensors");
  if (parsed.merge && parsed.quantize) throw std::invalid_argument("--merge and --quantize do not go together");
  // Refused before the checkpoint is read: --out is the file itself, and config.json goes beside it.
  std::error_code error;
  if (std::filesystem::is_directory(parsed.out, error))
    throw std::invalid_argument("--out " + parsed.out + " is a folder; name the file to write in it, such as " +
                                (std::filesystem::path(parsed.out) / "model.safetensors").string() +
                                " (config.json goes beside it)");
  return parsed;
}

// The run's config narrowed to what export needs: its model and backend. The checkpoint sets
// every parameter (the run's init file may be gone), and only parameters are loaded, so the
// run's optimizer, strategy and comm plugins need not be installed: built-in sgd and ddp on one
// process stand in for them, at tp 1. config_from_checkpoint has already dropped the plugin_path
// (--plugin-path names folders instead).
RunConfig export_config(RunConfig config) {
  config.model_init_from.clear();
  config.optimizer = {"sgd", {{"plugin", "sgd"}}, "optimizer"};
  config.strategy = {"ddp", {{"plugin", "ddp"}}, "parallel.strategy"};
  config.schedule = {"1f1b", {{"plugin", "1f1b"}}, "parallel.schedule"};
  config.comm = {"mpi", {{"plugin", "mpi"}}, "comm"};
  config.comm_explicit = false;  // one process, with or without an MPI plugin installed
  // One rank holds whole tensors: the checkpoint's boxes, whatever (tp, dp) saved them, are
  // reassembled as they load (docs/parallelism.md §2).
  config.tp = config.pp = config.ep = 1;
  config.sequence_parallel = false;
  config.virtual_stages = 1;
  config.layers_per_stage.clear();
  return config;
}

// The run's model.init_from as its manifest records it ("" when none).
std::string saved_init_from(const std::string& checkpoint) {
  const nlohmann::json manifest = read_verified_manifest(checkpoint);
  const nlohmann::json model = manifest.at("config").value("model", nlohmann::json::object());
  const nlohmann::json init_from = model.is_object() ? model.value("init_from", nlohmann::json()) : nlohmann::json();
  return init_from.is_string() ? init_from.get<std::string>() : "";
}

// The base a LoRA run's adapters belong on, for adapter_config.json: the run's model.init_from
// (the base of the adapter folder it continued from), as an absolute path; empty when the run
// started from random weights.
std::string adapter_base(const std::string& init_from) {
  if (init_from.empty()) return "";
  std::string base = init_from;
  try {
    if (const std::optional<AdapterFolder> adapter = adapter_folder(init_from)) base = adapter->base;
  } catch (const KeelError&) {
    return "";  // the folder changed since the run: the user names the base when loading
  }
  std::error_code error;
  const std::filesystem::path absolute = std::filesystem::absolute(base, error);
  return error ? base : absolute.lexically_normal().string();
}

// A model export's tokenizer, when --tokenizer names one (beside --out's file).
void attach_tokenizer(const ExportArgs& parsed) {
  if (!parsed.tokenizer.empty())
    attach_hf_tokenizer(std::filesystem::path(parsed.out).parent_path().string(), parsed.tokenizer);
}

}  // namespace

int export_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  ExportArgs parsed;
  try {
    parsed = parse_export_args(args);
  } catch (const std::invalid_argument& e) {
    err << "keel export: " << e.what() << "\n" << kExportUsage;
    return 2;
  }
  try {
    // The folders are this command line's, never the checkpoint's (config_from_checkpoint).
    PluginRegistry::instance().add_search_folders(parsed.plugin_path);
    const std::string checkpoint = resolve_checkpoint(parsed.checkpoint);
    Trainer trainer(export_config(config_from_checkpoint(checkpoint)), TrainerData::none);
    const int64_t step = load_checkpoint_parameters(trainer.state_view(), checkpoint);  // no optimizer state or data position
    if (parsed.quantize) {
      export_quantized(trainer.parameters(), parsed.out);
      attach_tokenizer(parsed);
      out << "exported " << checkpoint << " (step " << step << ") with its linears quantized to " << parsed.out
          << " and config.json beside it" << std::endl;
      return 0;
    }
    if (parsed.merge) {
      if (!has_adapter_format(trainer.parameters()))
        throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "--merge: " + checkpoint + " holds no LoRA adapters to merge; "
                                                       "leave --merge out to export the model");
      export_merged(trainer.parameters(), parsed.out);
      attach_tokenizer(parsed);
      out << "exported " << checkpoint << " (step " << step << ") with its adapters merged to " << parsed.out
          << " and config.json beside it" << std::endl;
      return 0;
    }
    if (has_adapter_format(trainer.parameters())) {
      if (!parsed.tokenizer.empty())
        throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "--tokenizer: " + checkpoint + " exports a PEFT adapter folder, "
                                                   "which holds no tokenizer (the base's folder does); leave it out, "
                                                   "or add --merge for the full model");
      // A LoRA run: its adapters, as the PEFT folder PeftModel.from_pretrained(base, folder) reads.
      if (std::filesystem::path(parsed.out).filename() != "adapter_model.safetensors")
        throw KeelError(KEEL_ERR_INVALID_ARGUMENT,
                        checkpoint + " holds LoRA adapters, which export as a PEFT adapter folder: --out must name "
                                     "its adapter_model.safetensors (PEFT reads that name), such as " +
                            (std::filesystem::path(parsed.out).parent_path() / "adapter_model.safetensors").string());
      export_adapter(trainer.parameters(), parsed.out, adapter_base(saved_init_from(checkpoint)));
      out << "exported the adapters of " << checkpoint << " (step " << step << ") to " << parsed.out
          << " and adapter_config.json beside it" << std::endl;
      return 0;
    }
    export_huggingface(trainer.parameters(), parsed.out);
    attach_tokenizer(parsed);
    // model_info().n_params counts tensors, not the numbers in them.
    out << "exported " << checkpoint << " (step " << step << ", " << plural(int64_t(trainer.model_info().n_params), "tensor")
        << ") to " << parsed.out << " and config.json beside it" << std::endl;
    return 0;
  } catch (const KeelError& e) {
    err << "keel export: error: " << e.what() << std::endl;
    return 1;
  } catch (const std::exception& e) {
    err << "keel export: internal error: " << e.what() << std::endl;
    return 1;
  }
}

}  // namespace keel
