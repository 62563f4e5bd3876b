// Unit-time bubbles from the simulator (forward 1, backward 2; zero-bubble input 1 + weight 1)
// against theory. bubble_fraction is idle time over all ranks / (p * makespan), so with the
// ideal time 3m per rank:
//   gpipe, 1f1b:   makespan 3(m+p-1),     bubble (p-1)/(m+p-1)    [= (p-1)/m of the ideal time
//                                                                   as idle/busy]
//   interleaved:   makespan 3(vm+p-1) chunk units, bubble (p-1)/(vm+p-1)  [(p-1)/(vm) idle/busy]
//   zero-bubble:   for m >= p, makespan 3m+(p-1) (ZB-H1: (p-1)(F+B-W)), bubble (p-1)/(3m+p-1)
#include <gtest/gtest.h>

#include "schedule_test_support.hpp"

namespace keel_schedule_test {
namespace {

std::string shape_name(int p, int m, int v) {
  return "p=" + std::to_string(p) + " m=" + std::to_string(m) + " v=" + std::to_string(v);
}

TEST(Bubble, GpipeAndOneFOneBMatchTheory) {
  for (const char* name : {"gpipe", "1f1b"})
    for (int p : {1, 2, 4})
      for (int m = 1; m <= 8; ++m) {
        SCOPED_TRACE(std::string(name) + " " + shape_name(p, m, 1));
        auto report = simulate(name, p, m, 1);
        EXPECT_DOUBLE_EQ(report.makespan, 3.0 * (m + p - 1));
        EXPECT_NEAR(report.bubble_fraction, double(p - 1) / (m + p - 1), 1e-12);
      }
}

TEST(Bubble, InterleavedIsSmallerThanOneFOneBByTheVirtualStages) {
  const int v = 2;
  for (int p : {2, 4})
    for (int m = p; m <= 8; m += p) {
      SCOPED_TRACE(shape_name(p, m, v));
      auto interleaved = simulate("interleaved", p, m, v);
      auto one_f_one_b = simulate("1f1b", p, m, 1);
      EXPECT_NEAR(interleaved.bubble_fraction, double(p - 1) / (v * m + p - 1), 1e-12);
      EXPECT_LT(interleaved.bubble_fraction, one_f_one_b.bubble_fraction);
    }
}

TEST(Bubble, ZeroBubbleIsSmallerThanOneFOneB) {
  for (int p : {2, 4})
    for (int m = p; m <= 8; ++m) {
      SCOPED_TRACE(shape_name(p, m, 1));
      auto zero_bubble = simulate("zero-bubble", p, m, 1);
      auto one_f_one_b = simulate("1f1b", p, m, 1);
      EXPECT_DOUBLE_EQ(zero_bubble.makespan, 3.0 * m + (p - 1));
      EXPECT_NEAR(zero_bubble.bubble_fraction, double(p - 1) / (3 * m + p - 1), 1e-12);
      EXPECT_LT(zero_bubble.bubble_fraction, one_f_one_b.bubble_fraction);
    }
}

TEST(Bubble, OneStageHasNone) {
  for (const char* name : {"gpipe", "1f1b", "zero-bubble"}) EXPECT_EQ(simulate(name, 1, 5, 1).bubble_fraction, 0.0);
}

}  // namespace
}  // namespace keel_schedule_test
