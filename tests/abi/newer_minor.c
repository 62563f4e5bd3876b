/* A plugin claiming a minor newer than the core's: the core must refuse it (it might call
   slots the core's tables do not have), saying which versions disagree. */
#include <keel/keel.h>

static const keel_optimizer_api table = {sizeof(keel_optimizer_api)};
static const keel_plugin_info info = {sizeof(keel_plugin_info), KEEL_KIND_OPTIMIZER, "from_the_future", "1.0.0",
                                      KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR + 1, &table, "a newer minor"};
static const keel_plugin_list list = {sizeof(keel_plugin_list), KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR + 1, 1, &info};

KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) { return &list; }
