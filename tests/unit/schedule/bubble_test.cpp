// Unit-time bubbles (forward 1, backward 2, or input 1 + weight 1 for zero-bubble) against theory.
#include <gtest/gtest.h>

#include <cstdio>

#include "schedule_test_support.hpp"

namespace keel_schedule_test {
namespace {

TEST(Bubble, Print) {
  for (const char* name : {"gpipe", "1f1b", "zero-bubble"})
    for (int p : {2, 4})
      for (int m : {1, 2, 4, 8}) {
        auto r = simulate(name, p, m, 1);
        std::printf("%s p=%d m=%d: makespan %.1f bubble %.4f theory %.4f\n", name, p, m, r.makespan, r.bubble_fraction,
                    double(p - 1) / (m + p - 1));
      }
  for (int p : {2, 4})
    for (int m : {4, 8}) {
      auto r = simulate("interleaved", p, m, 2);
      std::printf("interleaved p=%d m=%d v=2: makespan %.1f bubble %.4f\n", p, m, r.makespan, r.bubble_fraction);
    }
}

}  // namespace
}  // namespace keel_schedule_test
