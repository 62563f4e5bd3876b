// The keel_host table handed to every plugin: errors, logging, parameter initialisation.
#pragma once

#include <keel/host.h>

namespace keel {
const keel_host* host_table();
}
