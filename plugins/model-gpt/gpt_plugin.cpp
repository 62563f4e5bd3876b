// The gpt plugin's entry: one model, its C face keel_support::ModelFace over GptModel.
#include <keel/model.h>
#include <keel/plugin.h>
#include <keel_support/model_face.hpp>
#include <keel_support/plugin_entry.hpp>

#include "gpt_model.hpp"  // defines: GptModel

namespace {

const keel_plugin_info kPlugins[] = {
    keel_support::plugin_info(KEEL_KIND_MODEL, "gpt", "0.1.0", &keel_support::ModelFace<keel_gpt::GptModel>::kApi,
                              "GPT-2 (llm.c's layout): tied embeddings, pre-norm blocks, GELU MLP")};

const keel_plugin_list kPluginList = keel_support::plugin_list(kPlugins);

}  // namespace

extern "C" KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) { return &kPluginList; }
