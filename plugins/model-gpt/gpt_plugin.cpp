// The gpt plugin's entry: one model, its C table keel_support::ModelSlots over GptModel.
#include <keel/model.h>
#include <keel/plugin.h>
#include <keel_support/model/model_slots.hpp>
#include <keel_support/common/plugin_entry.hpp>

#include "gpt_model.hpp"  // defines: GptModel

namespace {

const keel_plugin_info kPlugins[] = {
    keel_support::plugin_info(KEEL_KIND_MODEL, "gpt", "0.1.0", &keel_support::ModelSlots<keel_gpt::GptModel>::kApi,
                              "GPT-2 (llm.c's layout): tied embeddings, pre-norm blocks, GELU MLP")};

const keel_plugin_list kPluginList = keel_support::plugin_list(kPlugins);

}  // namespace

extern "C" KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) { return &kPluginList; }
