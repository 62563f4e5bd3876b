// Hugging Face interop (docs/architecture.md §6): a model's parameters as one safetensors file with the
// names and layouts its model plugin declares for the "huggingface" format (external_name),
// plus the config.json transformers needs to load it (external_config).
#pragma once

#include <string>

namespace keel {

class ModelParameters;

// Writes `out_safetensors_path` (F32 tensors under their external names, metadata
// {"format": "pt"}), config.json and generation_config.json in the same folder (bos/eos ids as
// the model names them, null where it names none), creating the folder; each file is
// written to a temporary name, fsync'ed and renamed, so a reader never sees half of one.
void export_huggingface(ModelParameters& params, const std::string& out_safetensors_path);

// Whether the model is written as a PEFT adapter folder (format "peft": a LoRA run's adapters;
// docs/finetuning.md).
bool has_adapter_format(ModelParameters& params);
// As export_huggingface, each LoRA adapter merged into its base tensor (W + s·B·A): the full
// model transformers loads without PEFT.
void export_merged(ModelParameters& params, const std::string& out_safetensors_path);
// As export_huggingface, a QAT run's targeted linears quantized as it trained them (the model's
// config names the scheme under "keel_qat": bits, group_size (0: per output channel), modules):
// each <module>.weight becomes I8 values q, with <module>.weight_scale F32 (out, in / group), the
// weight being q · scale; config.json gets a quantization_config saying so. docs/finetuning.md.
void export_quantized(ModelParameters& params, const std::string& out_safetensors_path);
// As export_huggingface, in that format: the adapters under PEFT's keys, adapter_config.json beside
// naming `base` (the base model's folder or file; null when empty) as base_model_name_or_path.
void export_adapter(ModelParameters& params, const std::string& out_safetensors_path, const std::string& base);

// Sets every parameter the model names externally from model.init_from: a safetensors file, or
// a Hugging Face checkpoint folder (its model.safetensors, else the shards its
// model.safetensors.index.json names, each a file directly inside the folder). Tensors may be
// F32, BF16 or F16 (widened to fp32 exactly); transposed back where the format transposes,
// padded vocabulary rows set to zero. Collective over the world: each rank takes its own
// parameters (its pipeline stage's, its tensor-parallel piece, the range a sharding strategy
// gives it); every header is checked on every rank before any parameter is written, and one shard
// is in memory at a time. Throws KeelError naming the file and the tensor when
// one is missing, of another dtype or shape, in two shards, and when the files hold tensors the
// model does not have (another architecture or size). Ignored: "lm_head.weight" of a tied model
// (refused if it differs from the embedding) and the attention buffers "*.attn.bias" /
// "*.attn.masked_bias" that older transformers versions saved. Names without the
// "transformer." prefix (how GPT2Model and the gpt2 download store them) are accepted too.
// A non-finite value is refused naming the tensor.
void import_huggingface(ModelParameters& params, const std::string& init_from);

}  // namespace keel
