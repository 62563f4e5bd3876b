// sum_squares against a double loop, small and above the threading threshold.
#include "cpu/reduce.h"

#include "reference.h"

using namespace keel_test;

namespace {

TEST(SumSquares, MatchesDoubleLoop) {
  for (int64_t n : {int64_t{0}, int64_t{7}, int64_t{1000003}}) {
    auto x = random_floats(n, 1, -3.0f, 3.0f);
    double want = 0;
    for (float v : x) want += double(v) * v;
    // Both sides add exact float squares in double; only the order differs.
    EXPECT_NEAR(keel::cpu::sum_squares(x.data(), n), want, 1e-12 * std::max(1.0, want)) << "n = " << n;
  }
}

}  // namespace
