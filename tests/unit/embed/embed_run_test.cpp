// The embedding API's 0.5 additions and keel_trainer_train as `keel run`: what train writes
// (metrics, validation, checkpoints), names a built-in plugin already has, and inference
// (logits, generate) checked against the training loss and against each other.
#include <keel/keel.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace {

std::string fresh_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("keel-embed-run-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

// A tiny byte-level GPT; `data` and `train` replace those sections.
std::string config_json(const std::string& data, const std::string& train) {
  return R"({"model": {"plugin": "gpt", "n_layer": 2, "n_head": 2, "d_model": 32, "vocab_size": 256, "seq_len": 32},
             "optimizer": {"plugin": "adamw", "lr": 3e-3}, "data": )" + data + R"(, "train": )" + train + "}";
}
const char* kTextData = R"({"micro_batch": 2, "seq_len": 32, "text_max_bytes": 1048576, "val_batches": 1})";

struct TrainerHandle {
  keel_trainer* t = nullptr;
  explicit TrainerHandle(const std::string& json) {
    EXPECT_EQ(keel_trainer_create_from_json(json.c_str(), &t), KEEL_OK) << keel_last_error();
  }
  ~TrainerHandle() { keel_trainer_destroy(t); }
};

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> records;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) records.push_back(nlohmann::json::parse(line));
  return records;
}

TEST(EmbedRun, TrainReportsEvaluatesAndCheckpointsLikeKeelRun) {
  const std::string dir = fresh_dir("report");
  const std::string train = R"({"steps": 100, "log_every": 100, "eval_every": 4, "tensorboard_dir": "none",
       "metrics_path": ")" + dir + R"(/m.jsonl", "checkpoint": {"every": 5, "dir": ")" + dir + R"(/ckpt"}})";
  TrainerHandle trainer(config_json(kTextData, train));
  // Two calls, as a notebook would make them: one metrics file across both.
  ASSERT_EQ(keel_trainer_train(trainer.t, 6, nullptr, nullptr), KEEL_OK) << keel_last_error();
  ASSERT_EQ(keel_trainer_train(trainer.t, 4, nullptr, nullptr), KEEL_OK) << keel_last_error();

  std::map<int64_t, nlohmann::json> by_step;
  for (const auto& record : read_jsonl(dir + "/m.jsonl")) by_step[record.at("step").get<int64_t>()] = record;
  ASSERT_TRUE(by_step.count(1)) << "the first step of a call is logged";
  ASSERT_TRUE(by_step.count(4) && by_step.count(8)) << "eval_every 4 logs steps 4 and 8";
  EXPECT_TRUE(by_step.at(4).contains("val_loss")) << by_step.at(4).dump();
  EXPECT_TRUE(by_step.at(8).contains("val_loss")) << by_step.at(8).dump();
  EXPECT_TRUE(by_step.count(7)) << "the second call's first step is logged: the file is appended to, not restarted";
  EXPECT_FALSE(by_step.at(1).contains("val_loss"));
  EXPECT_TRUE(std::filesystem::is_directory(dir + "/ckpt/step-00000005"));
  EXPECT_TRUE(std::filesystem::is_directory(dir + "/ckpt/step-00000010"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/ckpt/step-00000006")) << "no checkpoint at the end of a call";
  std::filesystem::remove_all(dir);
}

// A do-nothing optimizer table: enough for the loader to accept it under a taken name.
keel_status inert_validate(const keel_host*, const char*, const char*) { return KEEL_OK; }
keel_status inert_create(const keel_host*, const char*, const char*, void** out) { *out = nullptr; return KEEL_OK; }
void inert_destroy(void*) {}
keel_status inert_describe(void*, keel_optimizer_info*) { return KEEL_OK; }
keel_status inert_step(void*, const keel_optimizer_step_args*) { return KEEL_OK; }
const keel_optimizer_api inert_table = {sizeof(keel_optimizer_api), inert_validate, inert_create, inert_destroy,
                                        inert_describe, inert_step};
const keel_plugin_info inert_sgd = {sizeof(keel_plugin_info), KEEL_KIND_OPTIMIZER, "sgd", "9.9", KEEL_ABI_VERSION_MAJOR,
                                    KEEL_ABI_VERSION_MINOR, &inert_table, "an in-process sgd for tests"};

const keel_plugin_description* find_plugin(int32_t kind, const std::string& name) {
  size_t count = 0;
  if (keel_plugin_count(&count) != KEEL_OK) return nullptr;
  static keel_plugin_description found{};
  for (size_t i = 0; i < count; ++i) {
    keel_plugin_description d{};
    d.struct_size = sizeof d;
    if (keel_plugin_describe(i, &d) == KEEL_OK && d.info->kind == kind && name == d.info->name) return &(found = d);
  }
  return nullptr;
}

// Registered before anything was discovered, the in-process "sgd" used to win quietly over
// the library's; now the library's name is seen and the clash refused, naming the library.
TEST(EmbedRun, RegisteringABuiltInNameIsRefusedUnlessReplaced) {
  EXPECT_EQ(keel_register_plugin(&inert_sgd), KEEL_ERR_ABI_MISMATCH);
  const std::string message = keel_last_error();
  EXPECT_NE(message.find("'sgd'"), std::string::npos) << message;
  EXPECT_NE(message.find("libkeel-sgd.so"), std::string::npos) << message;
  const keel_plugin_description* builtin = find_plugin(KEEL_KIND_OPTIMIZER, "sgd");
  ASSERT_NE(builtin, nullptr);
  EXPECT_NE(std::string(builtin->path).find("libkeel-sgd.so"), std::string::npos) << "the library's stays";

  ASSERT_EQ(keel_register_plugin_replace(&inert_sgd), KEEL_OK) << keel_last_error();
  const keel_plugin_description* replaced = find_plugin(KEEL_KIND_OPTIMIZER, "sgd");
  ASSERT_NE(replaced, nullptr);
  EXPECT_STREQ(replaced->path, "");
  EXPECT_STREQ(replaced->info->description, "an in-process sgd for tests");
}

// Every batch is 0, 1, ..., seq_len-1 with targets one ahead, so a step's loss is the
// cross-entropy of exactly these tokens, which the logits must reproduce.
keel_status counting_validate(const keel_host*, const char*, const char*) { return KEEL_OK; }
keel_status counting_create(const keel_host*, const char*, const char*, void** out) {
  *out = reinterpret_cast<void*>(1);
  return KEEL_OK;
}
void counting_destroy(void*) {}
keel_status counting_next(void*, int32_t, int32_t batch, int32_t seq_len, int32_t* tokens, int32_t* targets) {
  for (int32_t b = 0; b < batch; ++b)
    for (int32_t t = 0; t < seq_len; ++t) tokens[b * seq_len + t] = t + 3 * b, targets[b * seq_len + t] = t + 3 * b + 1;
  return KEEL_OK;
}
const keel_data_api counting_table = {sizeof(keel_data_api), counting_validate, counting_create, counting_destroy,
                                      counting_next, nullptr};
const keel_plugin_info counting_info = {sizeof(keel_plugin_info), KEEL_KIND_DATA, "embed_run_counting", "1.0",
                                        KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR, &counting_table, "for tests"};

TEST(EmbedRun, LogitsGiveTheLossTheNextStepReports) {
  ASSERT_EQ(keel_register_plugin(&counting_info), KEEL_OK) << keel_last_error();
  TrainerHandle trainer(config_json(R"({"plugin": "embed_run_counting", "micro_batch": 2, "seq_len": 32, "val_batches": 1})",
                                    R"({"tensorboard_dir": "none", "metrics_path": "/dev/null"})"));
  int32_t vocab = 0, context = 0;
  ASSERT_EQ(keel_trainer_vocab_size(trainer.t, &vocab), KEEL_OK);
  ASSERT_EQ(keel_trainer_context_length(trainer.t, &context), KEEL_OK);
  EXPECT_EQ(vocab, 256);
  EXPECT_EQ(context, 32);
  // Three rows where training takes two: the rows go through in forwards of micro_batch.
  const int32_t batch = 3, seq_len = 32;
  std::vector<int32_t> tokens(batch * seq_len);
  for (int32_t b = 0; b < batch; ++b)
    for (int32_t t = 0; t < seq_len; ++t) tokens[b * seq_len + t] = t + 3 * b;
  std::vector<float> logits(size_t(batch) * seq_len * vocab);
  ASSERT_EQ(keel_trainer_logits(trainer.t, tokens.data(), batch, seq_len, logits.data(), logits.size()), KEEL_OK)
      << keel_last_error();
  double loss_rows01 = 0;
  for (int32_t b = 0; b < 2; ++b)
    for (int32_t t = 0; t < seq_len; ++t) {
      const float* row = logits.data() + (size_t(b) * seq_len + t) * vocab;
      double max_logit = row[0], total = 0;
      for (int32_t v = 1; v < vocab; ++v) max_logit = std::max<double>(max_logit, row[v]);
      for (int32_t v = 0; v < vocab; ++v) total += std::exp(row[v] - max_logit);
      loss_rows01 += std::log(total) + max_logit - row[tokens[b * seq_len + t] + 1];
    }
  loss_rows01 /= 2 * seq_len;
  keel_step_metrics m{};
  m.struct_size = sizeof m;
  ASSERT_EQ(keel_trainer_step(trainer.t, &m), KEEL_OK) << keel_last_error();
  EXPECT_NEAR(m.loss, loss_rows01, 1e-4);
  // The third row's logits are its own: a shorter prefix of it gives the same values (causal).
  std::vector<float> after_step(size_t(seq_len) * vocab), prefix(size_t(5) * vocab);
  ASSERT_EQ(keel_trainer_logits(trainer.t, tokens.data() + 2 * seq_len, 1, seq_len, after_step.data(), after_step.size()), KEEL_OK);
  ASSERT_EQ(keel_trainer_logits(trainer.t, tokens.data() + 2 * seq_len, 1, 5, prefix.data(), prefix.size()), KEEL_OK);
  for (size_t i = 0; i < prefix.size(); ++i) ASSERT_NEAR(prefix[i], after_step[i], 1e-5) << i;

  EXPECT_EQ(keel_trainer_logits(trainer.t, tokens.data(), 1, 33, logits.data(), 33 * 256), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(keel_last_error()).find("1 to 32 tokens"), std::string::npos) << keel_last_error();
  tokens[4] = 256;
  EXPECT_EQ(keel_trainer_logits(trainer.t, tokens.data(), 1, 32, logits.data(), 32 * 256), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(keel_last_error()).find("token 256 at flat index 4"), std::string::npos) << keel_last_error();
}

TEST(EmbedRun, GenerateIsDeterministicPerSeedAndGreedyAtTemperatureZero) {
  TrainerHandle trainer(config_json(kTextData, R"({"tensorboard_dir": "none", "metrics_path": "/dev/null"})"));
  ASSERT_EQ(keel_trainer_train(trainer.t, 5, nullptr, nullptr), KEEL_OK) << keel_last_error();
  const std::vector<int32_t> prompt = {'T', 'h', 'e', ' '};
  std::vector<int32_t> a(20, -1), b(20, -1), c(20, -1);
  ASSERT_EQ(keel_trainer_generate(trainer.t, prompt.data(), prompt.size(), 20, 1.0, 7, a.data()), KEEL_OK) << keel_last_error();
  ASSERT_EQ(keel_trainer_generate(trainer.t, prompt.data(), prompt.size(), 20, 1.0, 7, b.data()), KEEL_OK);
  ASSERT_EQ(keel_trainer_generate(trainer.t, prompt.data(), prompt.size(), 20, 1.0, 8, c.data()), KEEL_OK);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  for (int32_t token : a) EXPECT_TRUE(token >= 0 && token < 256) << token;

  // Temperature 0 picks the most likely token: the argmax of the logits at the prompt's end.
  int32_t greedy = -1;
  ASSERT_EQ(keel_trainer_generate(trainer.t, prompt.data(), prompt.size(), 1, 0.0, 1, &greedy), KEEL_OK);
  std::vector<float> logits(prompt.size() * 256);
  ASSERT_EQ(keel_trainer_logits(trainer.t, prompt.data(), 1, int32_t(prompt.size()), logits.data(), logits.size()), KEEL_OK);
  const float* last = logits.data() + (prompt.size() - 1) * 256;
  EXPECT_EQ(greedy, int32_t(std::max_element(last, last + 256) - last));
}

}  // namespace
