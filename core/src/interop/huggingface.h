// Hugging Face interop (docs/architecture.md §6): a model's parameters as one safetensors file with the
// names and layouts its model plugin declares for the "huggingface" format (external_name),
// plus the config.json transformers needs to load it (external_config).
#pragma once

#include <string>

namespace keel {

class ModelParameters;

// Writes `out_safetensors_path` (F32 tensors under their external names, metadata
// {"format": "pt"}) and config.json in the same folder, creating the folder; each file is
// written to a temporary name, fsync'ed and renamed, so a reader never sees half of one.
void export_huggingface(ModelParameters& params, const std::string& out_safetensors_path);

// Sets every parameter the model names externally from such a file: transposed back where the
// format transposes, padded vocabulary rows set to zero. Throws KeelError naming the file and
// the tensor when one is missing, not F32, or of the wrong shape, and when the file holds
// tensors the model does not have (another architecture or size). Ignored: "lm_head.weight"
// (tied to the embedding; refused if it differs from it) and the attention buffers
// "*.attn.bias" / "*.attn.masked_bias" that older transformers versions saved. Names without
// the "transformer." prefix (how GPT2Model and the gpt2 download store them) are accepted too.
void import_huggingface(ModelParameters& params, const std::string& safetensors_path);

}  // namespace keel
