// The core's error path: a KeelError carries a status code and a message a user can act on;
// at the ABI edge it becomes the thread's last error (keel_last_error).
#pragma once

#include <keel/types.h>

#include <cstdint>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>

namespace keel {

struct KeelError : std::runtime_error {
  KeelError(keel_status code, const std::string& message) : std::runtime_error(message), code(code) {}
  keel_status code;
};

// A failure every rank of a group reached alike, with the same message, after a check each makes
// and all agree on (mesh/collectives.h rethrow_if_any_failed): one line says it for all, rank 0's,
// so a job's log holds the reason once rather than once a rank. Each rank still fails with it.
struct FailedOnEveryRank : KeelError {
  FailedOnEveryRank(keel_status code, const std::string& message, int32_t rank, int32_t ranks)
      : KeelError(code, message), rank(rank), ranks(ranks) {}
  bool says_it() const { return rank == 0; }
  // "every rank of 4: <message>": the text after "keel: error: " on rank 0's line.
  std::string line() const { return "every rank of " + std::to_string(ranks) + ": " + what(); }
  int32_t rank;   // this rank's place in the group
  int32_t ranks;  // the group's size: every one of them failed alike
};

// Stores the calling thread's last error message.
void set_last_error(const std::string& message);
const char* last_error();

// The core's side of a C table it serves (the embedding API, the strategy tables the core builds
// itself): `body` returns a status; an exception stops here and becomes the status and the
// thread's last error (out of memory, or internal for anything but a KeelError).
template <typename Body>
keel_status status_of(Body&& body) noexcept {
  try {
    return body();
  } catch (const KeelError& e) {
    set_last_error(e.what());
    return e.code;
  } catch (const std::bad_alloc&) {
    set_last_error("out of memory");
    return KEEL_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_last_error(e.what());
    return KEEL_ERR_INTERNAL;
  }
}

// Turns a failed plugin call into a KeelError whose message is the plugin's, prefixed by what
// the core was doing ("model gpt forward").
void check_plugin(keel_status status, const std::string& doing);

}  // namespace keel
