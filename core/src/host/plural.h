// A count and its noun in a sentence a user reads: "1 micro-step", "4 micro-steps". One helper,
// so that a one-step run or a single rank is not told "1 steps"; used where a count of 1 is
// common, not for every count in every message.
#pragma once

#include <cstdint>
#include <string>

namespace keel {

// "1 rank", "0 ranks", "8 ranks". `irregular_plural` for a noun that does not take an "s".
inline std::string plural(int64_t count, const std::string& noun, const std::string& irregular_plural = "") {
  const std::string& many = irregular_plural.empty() ? noun + "s" : irregular_plural;
  return std::to_string(count) + " " + (count == 1 ? noun : many);
}

}  // namespace keel
