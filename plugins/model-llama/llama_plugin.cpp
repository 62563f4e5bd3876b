// The llama plugin's entry: one model, its C table keel_support::ModelSlots over LlamaModel.
#include <keel/model.h>
#include <keel/plugin.h>
#include <keel_support/model/model_slots.hpp>
#include <keel_support/common/plugin_entry.hpp>

#include "llama_model.hpp"  // defines: LlamaModel

namespace {

const keel_plugin_info kPlugins[] = {keel_support::plugin_info(
    KEEL_KIND_MODEL, "llama", "0.1.0", &keel_support::ModelSlots<keel_llama::LlamaModel>::kApi,
    "The Llama family (transformers' LlamaForCausalLM): RMSNorm, rope, grouped-query attention, SwiGLU")};

const keel_plugin_list kPluginList = keel_support::plugin_list(kPlugins);

}  // namespace

extern "C" KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) { return &kPluginList; }
