// Forwarding header: moved to keel_support/offload/offload_tickets.hpp, in keel_support's rooms by plugin kind.
// Kept so plugin source written against the flat layout still compiles; goes away after the next release.
#pragma once
#include "keel_support/offload/offload_tickets.hpp"
