// `keel export CHECKPOINT --out model.safetensors [--plugin-path DIR]`: a checkpoint's parameters in
// the Hugging Face layout its model plugin names (GPT-2, Llama: interop/huggingface.h), with
// config.json, for transformers' from_pretrained on the output folder.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace keel {

extern const char* const kExportUsage;  // `keel export --help`

// args: what follows "export". Returns the process exit status: 0 done, 1 failed (the message
// on err), 2 a misused command line (with the usage).
int export_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace keel
