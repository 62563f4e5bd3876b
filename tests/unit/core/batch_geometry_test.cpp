// The batch arithmetic shared by keel validate and a run's start-up (train/batch_geometry.h):
// products of config numbers past int32, formed in 64 bits and refused with the JSON paths, the
// numbers and the bound; sequence parallelism's seq_len; and the micro-steps a good batch gives.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/run_config.h"
#include "host/errors.h"
#include "train/batch_geometry.h"

namespace {

keel::RunConfig config_with(const std::vector<std::string>& overrides) {
  return keel::RunConfig::from_json_text(R"({"model": {"plugin": "gpt"}})", "tiny.json", overrides);
}

std::string refusal(const keel::RunConfig& config, int64_t dp, int32_t tp, int32_t max_seq_len) {
  try {
    keel::check_batch_geometry(config, dp, tp, max_seq_len);
  } catch (const keel::KeelError& e) {
    EXPECT_EQ(e.code, KEEL_ERR_INVALID_CONFIG);
    return e.what();
  }
  return "";
}

TEST(BatchGeometry, MicroStepProductPastInt32IsRefusedNotWrapped) {
  // 2^20 × 4096 = 2^32 was 0 in int32 (SIGFPE); 1024 × 3145728 was negative ("-1 micro-batches").
  const auto big = config_with({"data.micro_batch=1048576", "data.global_batch=1048576"});
  EXPECT_EQ(refusal(big, 4096, 1, 1024).rfind("tiny.json: data.global_batch: 1048576 sequences per step are fewer than "
                                              "data.micro_batch 1048576 × dp 4096 = 4294967296 sequences per micro-step",
                                              0),
            0u)
      << refusal(big, 4096, 1, 1024);
  const auto wide = config_with({"data.micro_batch=1024", "data.global_batch=1073741824"});
  EXPECT_NE(refusal(wide, 3145728, 1, 1024).find("data.micro_batch 1024 × dp 3145728 = 3221225472"), std::string::npos);
}

TEST(BatchGeometry, TokensPerMicroBatchAreBounded) {
  const auto config = config_with({"data.micro_batch=1048576", "data.global_batch=1048576", "data.seq_len=4096"});
  EXPECT_NE(refusal(config, 1, 1, 4096).find("data.micro_batch 1048576 × data.seq_len 4096 = 4294967296 tokens per "
                                             "micro-batch, more than 2147483647"),
            std::string::npos)
      << refusal(config, 1, 1, 4096);
  // seq_len 0 takes the model's, and the message says so.
  const auto from_model = config_with({"data.micro_batch=1048576", "data.global_batch=1048576"});
  EXPECT_NE(refusal(from_model, 1, 1, 4096).find("× model.seq_len 4096 = 4294967296"), std::string::npos);
}

TEST(BatchGeometry, SequenceParallelNeedsSeqLenThatTpDivides) {
  const auto config = config_with({"data.seq_len=31", "parallel.tp=2", "parallel.sequence_parallel=true"});
  EXPECT_NE(refusal(config, 1, 2, 64).find("tiny.json: data.seq_len (31) must be a multiple of parallel.tp (2) with "
                                           "parallel.sequence_parallel"),
            std::string::npos)
      << refusal(config, 1, 2, 64);
  const auto plain = config_with({"data.seq_len=31", "parallel.tp=2"});
  EXPECT_EQ(refusal(plain, 1, 2, 64), "");  // without sequence parallelism every rank holds every row
}

TEST(BatchGeometry, AGoodBatchGivesItsMicroSteps) {
  const auto config = config_with({"data.micro_batch=4", "data.global_batch=48"});
  const keel::BatchGeometry geometry = keel::check_batch_geometry(config, 3, 1, 128);
  EXPECT_EQ(geometry.micro_steps, 4);  // 48 / (4 × 3)
  EXPECT_EQ(geometry.seq_len, 128);    // data.seq_len 0: the model's
  EXPECT_NE(refusal(config_with({"data.micro_batch=4", "data.global_batch=40"}), 3, 1, 128)
                .find("data.global_batch: 40 sequences per step do not divide into data.micro_batch 4 × dp 3 (= 12 per "
                      "micro-step)"),
            std::string::npos);
}

}  // namespace
