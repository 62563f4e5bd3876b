// Every schedule over stages {1,2,4} x micro-batches {1..8} x virtual stages {1,2}, where the
// shape is valid: the simulator finds no deadlock and no broken rule, and each rank holds no
// more activations than its schedule promises.
#include <gtest/gtest.h>

#include <algorithm>

#include "schedule_test_support.hpp"
#include "schedules.hpp"

namespace keel_schedule_test {
namespace {

bool valid_shape(const std::string& name, int p, int m, int v) {
  if (name == "interleaved") return v >= 2 && p >= 2 && m % p == 0;
  return v == 1;
}

// Activations (micro-batch, chunk pairs) the rank at stage s may hold at once.
int in_flight_bound(const std::string& name, int p, int m, int s, int v) {
  if (name == "gpipe") return m;
  if (name == "1f1b") return std::min(p - s, m);  // warm-up p-s-1, plus the one in steady state
  if (name == "zero-bubble") return p;            // p-s in flight, plus up to s deferred weight gradients
  // Megatron's interleaved warm-up plus one, counted in chunks (each 1/v of a stage).
  if (m == p) return m * v;
  return std::min(m * v, (p - s - 1) * 2 + (v - 1) * p + 1);
}

TEST(Sweep, EverySchedulePassesTheSimulator) {
  int shapes_checked = 0;
  for (const auto& name : keel_schedule::schedule_names())
    for (int p : {1, 2, 4})
      for (int m = 1; m <= 8; ++m)
        for (int v : {1, 2}) {
          if (!valid_shape(name, p, m, v)) continue;
          SCOPED_TRACE(name + " p=" + std::to_string(p) + " m=" + std::to_string(m) + " v=" + std::to_string(v));
          auto report = simulate(name, p, m, v);
          EXPECT_EQ(report.deadlock, "");
          for (const auto& violation : report.violations) ADD_FAILURE() << violation;
          ASSERT_EQ(report.max_in_flight.size(), static_cast<size_t>(p));
          for (int s = 0; s < p; ++s) {
            EXPECT_LE(report.max_in_flight[s], in_flight_bound(name, p, m, s, v)) << "stage " << s;
            if (v == 1 && name != "gpipe") {
              EXPECT_LE(report.max_in_flight[s], p) << "stage " << s;
            }
          }
          ++shapes_checked;
        }
  // gpipe, 1f1b, zero-bubble: 3 stage counts x 8; interleaved: p=2 m in {2,4,6,8}, p=4 m in {4,8}.
  EXPECT_EQ(shapes_checked, 3 * 24 + 6);
}

}  // namespace
}  // namespace keel_schedule_test
