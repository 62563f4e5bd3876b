// What makes a plugin's kind table acceptable: a known kind, a table at least as large as the
// kind's first table (ABI 0.1; 0.3 data, 0.4 comm, 0.7 schedule and offload), and every required slot
// filled. Returns "" or the reason.
#pragma once

#include <keel/plugin.h>

#include <string>

namespace keel {
std::string check_kind_table(const keel_plugin_info& info);
}
