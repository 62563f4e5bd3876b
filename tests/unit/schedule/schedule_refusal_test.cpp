// Shapes a schedule cannot run are refused with the offending numbers and what was expected.
#include <gtest/gtest.h>

#include <keel_support/common/abi_guard.hpp>

#include "schedules.hpp"

namespace {

// The message of build_schedule's refusal; fails the test when nothing was thrown.
std::string refusal(const std::string& name, int p, int m, int s, int v) {
  try {
    keel_schedule::build_schedule(name, p, m, s, v);
  } catch (const keel_support::StatusError& e) {
    EXPECT_EQ(e.code, KEEL_ERR_INVALID_ARGUMENT);
    return e.what();
  }
  ADD_FAILURE() << name << " p=" << p << " m=" << m << " s=" << s << " v=" << v << " was accepted";
  return "";
}

TEST(Refusal, InterleavedMicrobatchesNotAMultipleOfStages) {
  EXPECT_EQ(refusal("interleaved", 4, 6, 0, 2),
            "pipeline schedule \"interleaved\": micro-batches 6 must be a multiple of pp 4 (micro-batches run in "
            "groups of pp, as in Megatron)");
}

TEST(Refusal, InterleavedNeedsTwoVirtualStages) {
  EXPECT_EQ(refusal("interleaved", 2, 4, 0, 1),
            "pipeline schedule \"interleaved\": virtual_stages is 1, expected at least 2 (with 1 it is \"1f1b\")");
}

TEST(Refusal, InterleavedNeedsTwoStages) {
  EXPECT_EQ(refusal("interleaved", 1, 4, 0, 2),
            "pipeline schedule \"interleaved\": pp is 1, expected at least 2 (with 1 stage, nothing interleaves)");
}

TEST(Refusal, VirtualStagesOnlyForInterleaved) {
  for (const char* name : {"gpipe", "1f1b", "zero-bubble"})
    EXPECT_EQ(refusal(name, 2, 4, 0, 2), std::string("pipeline schedule \"") + name +
                                             "\": virtual_stages is 2, expected 1 (only \"interleaved\" runs several "
                                             "chunks per stage)");
}

TEST(Refusal, StageOutsideThePipeline) {
  EXPECT_EQ(refusal("1f1b", 2, 4, 2, 1), "pipeline schedule \"1f1b\": stage is 2, expected 0 .. 1 for pp 2");
  EXPECT_EQ(refusal("1f1b", 2, 4, -1, 1), "pipeline schedule \"1f1b\": stage is -1, expected 0 .. 1 for pp 2");
}

TEST(Refusal, EmptyPipelineOrNoMicrobatches) {
  EXPECT_EQ(refusal("gpipe", 0, 4, 0, 1), "pipeline schedule \"gpipe\": pp is 0, expected at least 1");
  EXPECT_EQ(refusal("gpipe", 2, 0, 0, 1), "pipeline schedule \"gpipe\": micro-batches is 0, expected at least 1");
  EXPECT_EQ(refusal("interleaved", 2, 4, 0, 0),
            "pipeline schedule \"interleaved\": virtual_stages is 0, expected at least 1");
}

TEST(Refusal, UnknownScheduleNamesTheKnownOnes) {
  EXPECT_EQ(refusal("1f2b", 2, 4, 0, 1),
            "pipeline schedule \"1f2b\": no such schedule; expected one of \"gpipe\", \"1f1b\", \"interleaved\", "
            "\"zero-bubble\"");
}

}  // namespace
