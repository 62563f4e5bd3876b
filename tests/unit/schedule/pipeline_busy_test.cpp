// The benchmark helper: busy fractions from measured per-action durations, the same replayed
// through the simulator, and the closed-form bubbles a benchmark compares them with.
#include <gtest/gtest.h>

#include <keel_support/common/abi_guard.hpp>

#include <cmath>
#include <limits>

#include "pipeline_busy.hpp"
#include "schedule_test_support.hpp"
#include "schedules.hpp"

namespace keel_schedule_test {
namespace {

using keel_schedule::measured_busy;
using keel_schedule::PipelineShape;
using keel_schedule::replayed_busy;
using keel_schedule::theoretical_bubble_fraction;

// 1F1B, p=2, m=1: stage 0 runs F, SEND_ACT, RECV_GRAD, B; stage 1 RECV_ACT, F, B, SEND_GRAD.
// With forward 1 s and backward 2 s, stage 0 waits 3 s for the gradient and stage 1 1 s for
// the activation: spans 6 and 4, busy 3 each, so each stage is busy half the makespan and the
// bubble is (p-1)/(m+p-1) = 1/2.
const std::vector<std::vector<double>> kIdealDurations = {{1, 0, 3, 2}, {1, 1, 2, 0}};

std::vector<std::vector<Action>> one_microbatch_lists() { return build_all_ranks("1f1b", 2, 1, 1); }

std::string refusal_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const keel_support::StatusError& e) {
    EXPECT_EQ(e.code, KEEL_ERR_INVALID_ARGUMENT);
    return e.what();
  }
  ADD_FAILURE() << "nothing was refused";
  return "";
}

TEST(PipelineBusy, MeasuredSpansAreTheSumsAndBusyTheComputeActions) {
  const auto lists = one_microbatch_lists();
  ASSERT_EQ(lists[0], (std::vector<Action>{F(0, 0), SendAct(0, 1, 1), RecvGrad(0, 0, 1), Last(B(0, 0))}));
  const auto busy = measured_busy(lists, kIdealDurations);
  ASSERT_EQ(busy.stages.size(), 2u);
  EXPECT_DOUBLE_EQ(busy.stages[0].span_seconds, 6);
  EXPECT_DOUBLE_EQ(busy.stages[1].span_seconds, 4);
  EXPECT_DOUBLE_EQ(busy.stages[0].busy_seconds, 3);
  EXPECT_DOUBLE_EQ(busy.stages[1].busy_seconds, 3);
  EXPECT_DOUBLE_EQ(busy.makespan_seconds, 6);
  EXPECT_DOUBLE_EQ(busy.stages[0].busy_fraction, 0.5);
  EXPECT_DOUBLE_EQ(busy.stages[1].busy_fraction, 0.5);
  EXPECT_DOUBLE_EQ(busy.bubble_fraction, 0.5);
  EXPECT_DOUBLE_EQ(busy.bubble_fraction, theoretical_bubble_fraction("1f1b", PipelineShape{2, 1, 0, 1}));
}

// Transfers that cost time (0.25 s to send, 0.25 s more latency on each receive) lengthen the
// measured step; the replay, which keeps only the compute durations, still shows the schedule's
// own bubble.
TEST(PipelineBusy, ReplayLeavesOutWhatCommunicationAdded) {
  const auto lists = one_microbatch_lists();
  const std::vector<std::vector<double>> measured = {{1, 0.25, 3.5, 2}, {1.25, 1, 2, 0.25}};
  const auto with_communication = measured_busy(lists, measured);
  EXPECT_DOUBLE_EQ(with_communication.makespan_seconds, 6.75);
  EXPECT_DOUBLE_EQ(with_communication.bubble_fraction, 1 - 6 / (2 * 6.75));
  const auto replayed = replayed_busy(lists, PipelineShape{2, 1, 0, 1}, measured);
  EXPECT_DOUBLE_EQ(replayed.makespan_seconds, 6);
  EXPECT_DOUBLE_EQ(replayed.stages[0].span_seconds, 6);
  EXPECT_DOUBLE_EQ(replayed.stages[1].span_seconds, 4);
  EXPECT_DOUBLE_EQ(replayed.bubble_fraction, 0.5);
}

// Forward 1 ms, backward 2 ms (input and weight gradient 1 ms each), transfers measured at 7 ms
// (ignored by the replay): every schedule's replayed bubble is its closed form.
TEST(PipelineBusy, ReplayedBubbleMatchesTheoryOverTheSweep) {
  int compared = 0;
  for (const auto& name : keel_schedule::schedule_names())
    for (int p : {1, 2, 4})
      for (int m = 1; m <= 8; ++m)
        for (int v : {1, 2}) {
          const PipelineShape shape{p, m, 0, v};
          if (!keel_schedule::shape_problem(name, shape).empty() || (name == "zero-bubble" && m < p)) continue;
          SCOPED_TRACE(name + " p=" + std::to_string(p) + " m=" + std::to_string(m) + " v=" + std::to_string(v));
          const auto lists = build_all_ranks(name, p, m, v);
          std::vector<std::vector<double>> durations(p);
          for (int s = 0; s < p; ++s)
            for (const auto& action : lists[s])
              durations[s].push_back(action.kind == ActionKind::FORWARD                ? 1e-3
                                     : action.kind == ActionKind::BACKWARD             ? 2e-3
                                     : action.kind == ActionKind::BACKWARD_INPUT ||
                                               action.kind == ActionKind::BACKWARD_WEIGHT ? 1e-3
                                                                                           : 7e-3);
          const auto busy = replayed_busy(lists, shape, durations);
          EXPECT_NEAR(busy.bubble_fraction, theoretical_bubble_fraction(name, shape), 1e-12);
          if (name == "gpipe" || name == "1f1b") {  // every stage computes 3m of 3(m+p-1)
            for (const auto& stage : busy.stages) EXPECT_NEAR(stage.busy_fraction, double(m) / (m + p - 1), 1e-12);
          }
          ++compared;
        }
  EXPECT_GT(compared, 50);
}

TEST(PipelineBusy, RefusesDurationsThatDoNotFitTheLists) {
  const auto lists = one_microbatch_lists();
  EXPECT_EQ(refusal_of([&] { measured_busy(lists, {{1, 0, 3, 2}}); }),
            "measured durations: 1 stages of durations for 2 action lists");
  EXPECT_EQ(refusal_of([&] { measured_busy(lists, {{1, 0, 3, 2}, {1, 1, 2}}); }),
            "measured durations: stage 1 has 3 durations for 4 actions");
  EXPECT_EQ(refusal_of([&] { replayed_busy(lists, PipelineShape{2, 1, 0, 1}, {{1, 0, -3, 2}, {1, 1, 2, 0}}); }),
            "measured durations: stage 0, action 2 RECV_GRAD(mb 0, chunk 0, from 1) took -3.000000 s, expected a "
            "finite number of seconds >= 0");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_NE(refusal_of([&] { measured_busy(lists, {{1, 0, 3, 2}, {1, nan, 2, 0}}); })
                .find("stage 1, action 1 F(mb 0, chunk 1)"),
            std::string::npos);
  EXPECT_EQ(refusal_of([&] { measured_busy({}, {}); }), "measured durations: no stages");
}

TEST(PipelineBusy, ReplayRefusesListsThatDeadlock) {
  auto lists = one_microbatch_lists();
  lists[1].erase(lists[1].begin() + 3);  // stage 1 never sends the gradient stage 0 waits for
  const std::string message =
      refusal_of([&] { replayed_busy(lists, PipelineShape{2, 1, 0, 1}, {{1, 0, 3, 2}, {1, 1, 2}}); });
  EXPECT_EQ(message.rfind("replaying measured durations: the lists deadlock: stage 0 waits at action 2 "
                          "RECV_GRAD(mb 0, chunk 0, from 1)",
                          0),
            0u)
      << message;
}

TEST(PipelineBusy, TheoryPerSchedule) {
  EXPECT_DOUBLE_EQ(theoretical_bubble_fraction("gpipe", PipelineShape{4, 8, 0, 1}), 3.0 / 11);
  EXPECT_DOUBLE_EQ(theoretical_bubble_fraction("1f1b", PipelineShape{2, 3, 0, 1}), 1.0 / 4);
  EXPECT_DOUBLE_EQ(theoretical_bubble_fraction("interleaved", PipelineShape{4, 8, 0, 2}), 3.0 / 19);
  EXPECT_DOUBLE_EQ(theoretical_bubble_fraction("zero-bubble", PipelineShape{4, 4, 0, 1}), 3.0 / 15);
  EXPECT_EQ(refusal_of([] { theoretical_bubble_fraction("zero-bubble", PipelineShape{4, 2, 0, 1}); }),
            "bubble of \"zero-bubble\": micro-batches 2 below pp 4 has no closed form (expected micro-batches >= "
            "pp; simulate_pipeline gives it)");
  EXPECT_EQ(refusal_of([] { theoretical_bubble_fraction("interleaved", PipelineShape{4, 6, 0, 2}); }),
            "bubble of \"interleaved\": micro-batches 6 must be a multiple of pp 4 (micro-batches run in groups of "
            "pp, as in Megatron)");
  EXPECT_EQ(refusal_of([] { theoretical_bubble_fraction("1f2b", PipelineShape{2, 2, 0, 1}); }),
            "bubble of \"1f2b\": no such schedule");
}

}  // namespace
}  // namespace keel_schedule_test
