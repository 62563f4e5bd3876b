// The message a failed ABI call left on the CALLING thread (host->set_error is thread-local).
// The ddp communication thread needs it: a comm failure there must surface on the training
// thread with the comm plugin's own words, read through host->last_error (ABI 0.4).
#pragma once

#include <keel/host.h>

#include <string>

namespace keel_ddp {

// "" when the host table predates the last_error slot.
std::string this_thread_last_error(const keel_host* host);

}  // namespace keel_ddp
