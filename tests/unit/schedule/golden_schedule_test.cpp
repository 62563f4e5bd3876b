// Golden action lists for small cases, written out by hand from each schedule's definition
// (the derivation is in the comment above each), compared action by action.
#include <gtest/gtest.h>

#include "schedule_test_support.hpp"
#include "schedules.hpp"

namespace keel_schedule_test {
namespace {

using keel_schedule::build_schedule;
using List = std::vector<Action>;

Action BI(int mb, int chunk) { return {ActionKind::BACKWARD_INPUT, mb, chunk}; }
Action BW(int mb, int chunk) { return {ActionKind::BACKWARD_WEIGHT, mb, chunk}; }

void expect_list(const List& actual, const List& expected) {
  EXPECT_EQ(actual, expected) << "actual:\n" << listing(actual) << "expected:\n" << listing(expected);
}

// GPipe, p=2 m=2: all forwards in micro-batch order, then all backwards in the same order. Stage 0
// sends each activation to stage 1 and receives each gradient from it; the last backward of the
// only chunk is flagged.
TEST(Golden, GpipeTwoStagesTwoMicrobatches) {
  expect_list(build_schedule("gpipe", 2, 2, 0, 1),
              List{F(0, 0), SendAct(0, 1, 1), F(1, 0), SendAct(1, 1, 1),  //
                   RecvGrad(0, 0, 1), B(0, 0), RecvGrad(1, 0, 1), Last(B(1, 0))});
  expect_list(build_schedule("gpipe", 2, 2, 1, 1),
              List{RecvAct(0, 1, 0), F(0, 1), RecvAct(1, 1, 0), F(1, 1),  //
                   B(0, 1), SendGrad(0, 0, 0), Last(B(1, 1)), SendGrad(1, 0, 0)});
}

// 1F1B, p=2 m=3. Stage 0: warm-up p-s-1 = 1 forward (mb 0); steady state pairs F(mb 1) B(mb 0)
// and F(mb 2) B(mb 1); cool-down B(mb 2). Stage 1: no warm-up, F B for each micro-batch.
TEST(Golden, OneFOneBTwoStagesThreeMicrobatches) {
  expect_list(build_schedule("1f1b", 2, 3, 0, 1),
              List{F(0, 0), SendAct(0, 1, 1),                                           // warm-up
                   F(1, 0), SendAct(1, 1, 1), RecvGrad(0, 0, 1), B(0, 0),               // steady
                   F(2, 0), SendAct(2, 1, 1), RecvGrad(1, 0, 1), B(1, 0),               // steady
                   RecvGrad(2, 0, 1), Last(B(2, 0))});                                  // cool-down
  expect_list(build_schedule("1f1b", 2, 3, 1, 1),
              List{RecvAct(0, 1, 0), F(0, 1), B(0, 1), SendGrad(0, 0, 0),  //
                   RecvAct(1, 1, 0), F(1, 1), B(1, 1), SendGrad(1, 0, 0),  //
                   RecvAct(2, 1, 0), F(2, 1), Last(B(2, 1)), SendGrad(2, 0, 0)});
}

// Interleaved, p=2 m=4 v=2, stage 0 holds chunks 0 and 2 (chunks 1 and 3 are on stage 1).
// Megatron's warm-up for stage 0: (p-s-1)*2 + (v-1)*p = 2 + 2 = 4 of the m*v = 8 virtual steps.
// Forward step k: chunk (k mod 4)/2 local, micro-batch (k/4)*2 + k mod 2, so forwards run
// (0,c0) (1,c0) (0,c2) (1,c2) | (2,c0) (3,c0) (2,c2) (3,c2); backward step k takes the local
// chunks from the last: (0,c2) (1,c2) (0,c0) (1,c0) | (2,c2) (3,c2) (2,c0) (3,c0).
// Steady state pairs forward 4+k with backward k; the last four backwards are the cool-down.
TEST(Golden, InterleavedTwoStagesFourMicrobatchesStageZero) {
  auto forward_c0 = [](int mb) { return List{F(mb, 0), SendAct(mb, 1, 1)}; };
  auto forward_c2 = [](int mb) { return List{RecvAct(mb, 2, 1), F(mb, 2), SendAct(mb, 3, 1)}; };
  auto backward_c2 = [](int mb, bool last) {
    return List{RecvGrad(mb, 2, 1), last ? Last(B(mb, 2)) : B(mb, 2), SendGrad(mb, 1, 1)};
  };
  auto backward_c0 = [](int mb, bool last) { return List{RecvGrad(mb, 0, 1), last ? Last(B(mb, 0)) : B(mb, 0)}; };
  List expected;
  auto add = [&](const List& part) { expected.insert(expected.end(), part.begin(), part.end()); };
  add(forward_c0(0)), add(forward_c0(1)), add(forward_c2(0)), add(forward_c2(1));  // warm-up
  add(forward_c0(2)), add(backward_c2(0, false));                                 // steady
  add(forward_c0(3)), add(backward_c2(1, false));
  add(forward_c2(2)), add(backward_c0(0, false));
  add(forward_c2(3)), add(backward_c0(1, false));
  add(backward_c2(2, false)), add(backward_c2(3, true));  // cool-down
  add(backward_c0(2, false)), add(backward_c0(3, true));
  expect_list(build_schedule("interleaved", 2, 4, 0, 2), expected);
}

// Zero-bubble, p=2 m=2: 1F1B's order with each backward split. Stage 0 defers s = 0 weight
// gradients, so each BW follows its BI. Stage 1 defers up to 1: BW(mb 0) waits until BI(mb 1)
// has sent its gradient upstream, and BW(mb 1) ends the list, flagged last.
TEST(Golden, ZeroBubbleTwoStagesTwoMicrobatches) {
  expect_list(build_schedule("zero-bubble", 2, 2, 0, 1),
              List{F(0, 0), SendAct(0, 1, 1),                                              // warm-up
                   F(1, 0), SendAct(1, 1, 1), RecvGrad(0, 0, 1), BI(0, 0), BW(0, 0),       // steady
                   RecvGrad(1, 0, 1), BI(1, 0), Last(BW(1, 0))});                          // cool-down
  expect_list(build_schedule("zero-bubble", 2, 2, 1, 1),
              List{RecvAct(0, 1, 0), F(0, 1), BI(0, 1), SendGrad(0, 0, 0),            //
                   RecvAct(1, 1, 0), F(1, 1), BI(1, 1), SendGrad(1, 0, 0), BW(0, 1),  //
                   Last(BW(1, 1))});
}

// One stage: no transfers at all, 1F1B degenerates to F B per micro-batch.
TEST(Golden, OneFOneBSingleStage) {
  expect_list(build_schedule("1f1b", 1, 2, 0, 1), List{F(0, 0), B(0, 0), F(1, 0), Last(B(1, 0))});
}

}  // namespace
}  // namespace keel_schedule_test
