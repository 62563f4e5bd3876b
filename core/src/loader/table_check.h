// What makes a plugin's kind table acceptable: a known kind, a table at least as large as the
// kind's table in ABI 0.1, and every required slot filled. Returns "" or the reason.
#pragma once

#include <keel/plugin.h>

#include <string>

namespace keel {
std::string check_kind_table(const keel_plugin_info& info);
}
