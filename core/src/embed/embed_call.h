// The one error path of the embedding API (abi/keel/embed.h): every entry point runs its body
// through embed_call, so an exception stops at the C boundary and becomes a status code plus
// the calling thread's last error. Shared by embed_api.cpp (trainers, plugins) and
// tokenizer_api.cpp (tokenizers).
#pragma once

#include <keel/embed.h>

#include <exception>
#include <new>

#include "host/errors.h"

namespace keel::embed {

template <typename Body>
keel_status embed_call(Body&& body) noexcept {
  return keel::status_of([&]() -> keel_status {
    keel::set_last_error("");
    body();
    return KEEL_OK;
  });
}

inline void require(bool condition, const char* what) {
  if (!condition) throw keel::KeelError(KEEL_ERR_INVALID_ARGUMENT, what);
}

}  // namespace keel::embed
