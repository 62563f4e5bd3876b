// Writing an ABI output struct the caller sized (share/doc/keel/plugin-contract.md §2): a caller built against
// an older minor passes a shorter struct, so only the prefix it declared in struct_size is
// written, and struct_size comes back as the number of bytes filled. The one way every plugin
// answers a describe-like call.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include "keel_support/common/abi_guard.hpp"

namespace keel_support {

// Throws StatusError (KEEL_ERR_INVALID_ARGUMENT) naming `what` when out is NULL or its
// struct_size does not cover at least `minimum` bytes (the fields every version has).
template <typename Info>
void write_sized_output(Info* out, const Info& value, size_t minimum, const char* what) {
  if (!out) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string(what) + " is NULL");
  if (out->struct_size < minimum)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string(what) + "->struct_size is " +
                                                     std::to_string(out->struct_size) + ", below the " +
                                                     std::to_string(minimum) + " bytes of its first version; set it "
                                                     "to sizeof the struct");
  const size_t filled = std::min(out->struct_size, sizeof(Info));
  std::memcpy(reinterpret_cast<char*>(out) + sizeof(size_t), reinterpret_cast<const char*>(&value) + sizeof(size_t),
              filled - sizeof(size_t));
  out->struct_size = filled;
}

}  // namespace keel_support
