// The simulator's checks can fail: hand-broken action lists must be reported as deadlocked or
// with the broken rule named, and the in-flight count is exact on known schedules.
#include <gtest/gtest.h>

#include <algorithm>

#include "schedule_test_support.hpp"
#include "schedules.hpp"

namespace keel_schedule_test {
namespace {

using keel_schedule::PipelineShape;
using keel_schedule::simulate_pipeline;
using Lists = std::vector<std::vector<Action>>;

const PipelineShape kTwoStagesOneMicrobatch{2, 1, 0, 1};

// 1F1B p=2 m=1: stage 0 {F, SEND_ACT, RECV_GRAD, B last}, stage 1 {RECV_ACT, F, B last, SEND_GRAD}.
Lists two_stage_lists() { return build_all_ranks("1f1b", 2, 1, 1); }

bool any_violation_contains(const keel_schedule::SimulationReport& report, const std::string& text) {
  return std::any_of(report.violations.begin(), report.violations.end(),
                     [&](const std::string& v) { return v.find(text) != std::string::npos; });
}

std::string all_violations(const keel_schedule::SimulationReport& report) {
  std::string text;
  for (const auto& v : report.violations) text += v + "\n";
  return text;
}

TEST(Simulator, UnbrokenListsPass) {
  auto report = simulate_pipeline(two_stage_lists(), kTwoStagesOneMicrobatch);
  EXPECT_EQ(report.deadlock, "");
  EXPECT_EQ(all_violations(report), "");
}

TEST(Simulator, ReceiveBeforeTheSendItWaitsForDeadlocks) {
  // Stage 0 waits for the gradient before it sends the activation that stage 1 needs to make it.
  Lists lists = {{RecvGrad(0, 0, 1), F(0, 0), SendAct(0, 1, 1), Last(B(0, 0))},
                 {RecvAct(0, 1, 0), F(0, 1), Last(B(0, 1)), SendGrad(0, 0, 0)}};
  auto report = simulate_pipeline(lists, kTwoStagesOneMicrobatch);
  EXPECT_EQ(report.deadlock,
            "stage 0 waits at action 0 RECV_GRAD(mb 0, chunk 0, from 1); "
            "stage 1 waits at action 0 RECV_ACT(mb 0, chunk 1, from 0); ");
}

TEST(Simulator, ReceiveWithoutASendDeadlocks) {
  Lists lists = two_stage_lists();
  lists[1].pop_back();  // stage 1 never sends the gradient
  auto report = simulate_pipeline(lists, kTwoStagesOneMicrobatch);
  EXPECT_EQ(report.deadlock, "stage 0 waits at action 2 RECV_GRAD(mb 0, chunk 0, from 1); ");
}

TEST(Simulator, SendWithoutAReceiveIsReported) {
  Lists lists = two_stage_lists();
  lists[0].erase(lists[0].begin() + 2);  // stage 0 backwards without receiving the gradient
  auto report = simulate_pipeline(lists, kTwoStagesOneMicrobatch);
  EXPECT_EQ(report.deadlock, "");
  EXPECT_TRUE(any_violation_contains(report, "stage 0, action 2 B(mb 0, chunk 0) last: output gradient not received "
                                             "from stage 1 before the backward"))
      << all_violations(report);
  EXPECT_TRUE(any_violation_contains(report, "gradient of micro-batch 0, chunk 0 sent by stage 1 received 0 times"))
      << all_violations(report);
}

TEST(Simulator, BackwardBeforeForwardIsReported) {
  Lists lists = {{F(0, 0), SendAct(0, 1, 1), RecvGrad(0, 0, 1), Last(B(0, 0))},
                 {RecvAct(0, 1, 0), Last(B(0, 1)), F(0, 1), SendGrad(0, 0, 0)}};
  auto report = simulate_pipeline(lists, kTwoStagesOneMicrobatch);
  EXPECT_TRUE(any_violation_contains(report, "stage 1, action 1 B(mb 0, chunk 1) last: backward before the forward"))
      << all_violations(report);
}

TEST(Simulator, WrongPeerAndWrongStageAreReported) {
  Lists lists = two_stage_lists();
  lists[1][0].peer_stage = 1;  // RECV_ACT naming itself as the sender
  auto report = simulate_pipeline(lists, kTwoStagesOneMicrobatch);
  EXPECT_TRUE(any_violation_contains(report, "stage 1, action 0 RECV_ACT(mb 0, chunk 1, from 1): a transfer with its "
                                             "own stage"))
      << all_violations(report);

  Lists three_stages = build_all_ranks("gpipe", 3, 1, 1);
  three_stages[2][0].peer_stage = 0;  // stage 2 names stage 0 where stage 1 sends
  report = simulate_pipeline(three_stages, PipelineShape{3, 1, 0, 1});
  EXPECT_TRUE(any_violation_contains(report, "names stage 0 but the send came from stage 1")) << all_violations(report);

  Lists misplaced = {{F(0, 1)}, {}};  // chunk 1 lives on stage 1
  report = simulate_pipeline(misplaced, kTwoStagesOneMicrobatch);
  EXPECT_TRUE(any_violation_contains(report, "chunk 1 lives on stage 1")) << all_violations(report);
  EXPECT_TRUE(any_violation_contains(report, "micro-batch 0, chunk 0: forwarded 0 times")) << all_violations(report);
}

TEST(Simulator, MissingOrMisplacedLastForChunkIsReported) {
  Lists lists = two_stage_lists();
  lists[0][3].last_for_chunk = false;
  auto report = simulate_pipeline(lists, kTwoStagesOneMicrobatch);
  EXPECT_TRUE(any_violation_contains(report, "stage 0, chunk 0: 0 actions marked last_for_chunk, expected 1"))
      << all_violations(report);

  Lists flagged_send = two_stage_lists();
  flagged_send[0][1].last_for_chunk = true;  // SEND_ACT writes no weights
  report = simulate_pipeline(flagged_send, kTwoStagesOneMicrobatch);
  EXPECT_TRUE(any_violation_contains(report, "stage 0, action 1 SEND_ACT(mb 0, chunk 1, to 1) last: last_for_chunk on "
                                             "an action that writes no weights"))
      << all_violations(report);

  Lists two_microbatches = build_all_ranks("gpipe", 2, 2, 1);
  auto& stage0 = two_microbatches[0];  // ... B(0,0), RECV_GRAD(1,0), B(1,0) last
  stage0[5].last_for_chunk = true;
  stage0[7].last_for_chunk = false;
  report = simulate_pipeline(two_microbatches, PipelineShape{2, 2, 0, 1});
  EXPECT_TRUE(any_violation_contains(report, "stage 0, chunk 0: last_for_chunk is not on the last weight-gradient "
                                             "action (7)"))
      << all_violations(report);
}

TEST(Simulator, InFlightIsExact) {
  // GPipe holds every micro-batch on every stage; 1F1B holds p-s on stage s.
  auto gpipe = simulate("gpipe", 4, 6, 1);
  EXPECT_EQ(gpipe.max_in_flight, (std::vector<int>{6, 6, 6, 6}));
  auto one_f_one_b = simulate("1f1b", 4, 6, 1);
  EXPECT_EQ(one_f_one_b.max_in_flight, (std::vector<int>{4, 3, 2, 1}));
  // Zero-bubble counts an activation until its weight gradient: p-s plus s deferred.
  auto zero_bubble = simulate("zero-bubble", 4, 6, 1);
  EXPECT_EQ(zero_bubble.max_in_flight, (std::vector<int>{4, 4, 4, 4}));
}

}  // namespace
}  // namespace keel_schedule_test
