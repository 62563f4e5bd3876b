// When a call into another plugin (backend, optimizer) fails, that plugin has already set the
// host's error message; keel_support::guard would overwrite it with a less precise one.
// These helpers pass the callee's status on and leave its message in place.
#pragma once

#include <keel/types.h>
#include <keel_support/abi_guard.hpp>

namespace keel_ddp {

// Thrown for a failed nested ABI call; deliberately not a std::exception, so only
// guard_keeping_nested_errors catches it.
struct NestedCallFailed {
  keel_status code;
};

inline void check_nested(keel_status status) {
  if (status != KEEL_OK) throw NestedCallFailed{status};
}

template <typename Body>
keel_status guard_keeping_nested_errors(const keel_host* host, const char* source, Body&& body) noexcept {
  keel_status nested = KEEL_OK;
  const keel_status status = keel_support::guard(host, source, [&] {
    try {
      body();
    } catch (const NestedCallFailed& failure) {
      nested = failure.code;
    }
  });
  return nested != KEEL_OK ? nested : status;
}

}  // namespace keel_ddp
