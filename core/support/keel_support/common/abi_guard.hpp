// Keeps C++ exceptions from crossing the C ABI: every plugin entry point runs its body through
// guard(), which turns a thrown error into a status code and a message on the host — the one
// error path of every built-in plugin.
#pragma once

#include <keel/host.h>

#include <exception>
#include <new>
#include <string>

#include "keel_support/common/json_section.hpp"

namespace keel_support {

// An error with a chosen status code; the message should say what, where and what was expected.
struct StatusError : std::runtime_error {
  StatusError(keel_status status, const std::string& message) : std::runtime_error(message), code(status) {}
  keel_status code;
};

// A call into another plugin (a backend op, a strategy's acquire, an optimizer step) failed.
// That plugin already set the thread's error message, which is more precise than anything the
// caller could say, so guard() passes its status on and leaves the message in place.
struct CalleeFailed : std::runtime_error {
  CalleeFailed(keel_status status, const std::string& call) : std::runtime_error(call), code(status) {}
  keel_status code;
};

// Throws CalleeFailed when a nested ABI call did not succeed; `call` names it for the debug log.
inline void check_callee(keel_status status, const char* call) {
  if (status != KEEL_OK) throw CalleeFailed(status, call);
}

// `source` prefixes the message with the plugin's name ("model gpt: ...").
template <typename Body>
keel_status guard(const keel_host* host, const char* source, Body&& body) noexcept {
  auto fail = [&](keel_status code, const char* what) {
    std::string message = std::string(source) + ": " + what;
    return host ? host->set_error(code, message.c_str()) : code;
  };
  try {
    body();
    return KEEL_OK;
  } catch (const CalleeFailed& e) {
    if (host) keel_logf(host, KEEL_LOG_DEBUG, source, "%s failed with status %d", e.what(), e.code);
    return e.code;
  } catch (const StatusError& e) {
    return fail(e.code, e.what());
  } catch (const ConfigError& e) {
    return fail(KEEL_ERR_INVALID_CONFIG, e.what());
  } catch (const std::bad_alloc&) {
    return fail(KEEL_ERR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return fail(KEEL_ERR_INTERNAL, e.what());
  } catch (...) {
    return fail(KEEL_ERR_INTERNAL, "unknown exception");
  }
}

// Throws the status of a failed ABI call so nested calls compose inside guard().
inline void check(keel_status status, const char* what) {
  if (status != KEEL_OK) throw StatusError(status, what);
}

}  // namespace keel_support
