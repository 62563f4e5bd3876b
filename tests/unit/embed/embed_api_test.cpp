// The embedding API through its C functions only, the way every binding uses it: training,
// callbacks, zero-copy parameters, checkpoints, plugin listing, an in-process data plugin, and
// errors that carry the core's message.
#include <keel/keel.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace {

std::string temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("keel-embed-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

// A tiny byte-level GPT on 1 MiB of the embedded text corpus; `data` replaces the data section.
std::string config_json(const std::string& data = R"({"micro_batch": 2, "seq_len": 32, "text_max_bytes": 1048576, "val_batches": 1})") {
  return R"({"model": {"plugin": "gpt", "n_layer": 2, "n_head": 2, "d_model": 32, "vocab_size": 256, "seq_len": 32},
             "optimizer": {"plugin": "adamw", "lr": 3e-3}, "data": )" + data + R"(,
             "train": {"steps": 100, "tensorboard_dir": "none", "metrics_path": ")" + temp_dir("metrics") + R"(/m.jsonl"}})";
}

struct TrainerHandle {
  keel_trainer* t = nullptr;
  explicit TrainerHandle(const std::string& json) {
    keel_status s = keel_trainer_create_from_json(json.c_str(), &t);
    EXPECT_EQ(s, KEEL_OK) << keel_last_error();
  }
  ~TrainerHandle() { keel_trainer_destroy(t); }
};

keel_step_metrics metrics() {
  keel_step_metrics m{};
  m.struct_size = sizeof m;
  return m;
}

TEST(EmbedApi, TrainsWithACallbackThatCanStop) {
  TrainerHandle trainer(config_json());
  struct Seen { std::vector<float> losses; } seen;
  auto callback = [](const keel_step_metrics* m, void* user) -> int32_t {
    static_cast<Seen*>(user)->losses.push_back(m->loss);
    return m->step >= 12 ? 1 : 0;  // stop after step 12 of 100
  };
  ASSERT_EQ(keel_trainer_train(trainer.t, 100, callback, &seen), KEEL_OK) << keel_last_error();
  ASSERT_EQ(seen.losses.size(), 12u);
  EXPECT_LT(seen.losses.back(), seen.losses.front() - 0.5f);
  keel_step_metrics last = metrics();
  ASSERT_EQ(keel_trainer_last_metrics(trainer.t, &last), KEEL_OK);
  EXPECT_EQ(last.step, 12);
  EXPECT_EQ(last.loss, seen.losses.back());
  float val = 0;
  ASSERT_EQ(keel_trainer_evaluate(trainer.t, &val), KEEL_OK);
  EXPECT_TRUE(std::isfinite(val) && val > 0);
}

TEST(EmbedApi, ParamTensorSharesTheStrategysMemory) {
  TrainerHandle trainer(config_json());
  size_t count = 0;
  ASSERT_EQ(keel_trainer_param_count(trainer.t, &count), KEEL_OK);
  ASSERT_GT(count, 4u);
  keel_param_info info{};
  info.struct_size = sizeof info;
  ASSERT_EQ(keel_trainer_param_info(trainer.t, 2, &info), KEEL_OK);
  EXPECT_STREQ(info.name, "h.0.ln_1.weight");
  EXPECT_EQ(info.ndim, 1);
  EXPECT_EQ(info.shape[0], 32);

  keel_tensor view{};
  ASSERT_EQ(keel_trainer_param_tensor(trainer.t, "h.0.ln_1.weight", &view), KEEL_OK) << keel_last_error();
  EXPECT_EQ(view.device.device_type, KEEL_DEVICE_CPU);
  EXPECT_EQ(view.dtype.code, KEEL_DTYPE_FLOAT);
  EXPECT_EQ(view.shape[0], 32);
  float* live = reinterpret_cast<float*>(static_cast<char*>(view.data) + view.byte_offset);
  EXPECT_EQ(live[0], 1.0f);  // LayerNorm gains start at one
  live[3] = 42.0f;           // a write through the view changes the model
  std::vector<float> copy(32);
  ASSERT_EQ(keel_trainer_read_param(trainer.t, "h.0.ln_1.weight", copy.data(), copy.size()), KEEL_OK);
  EXPECT_EQ(copy[3], 42.0f);
  copy[5] = -7.0f;
  ASSERT_EQ(keel_trainer_write_param(trainer.t, "h.0.ln_1.weight", copy.data(), copy.size()), KEEL_OK);
  EXPECT_EQ(live[5], -7.0f);

  EXPECT_EQ(keel_trainer_read_param(trainer.t, "h.0.ln_1.wieght", copy.data(), copy.size()), KEEL_ERR_NOT_FOUND);
  EXPECT_NE(std::string(keel_last_error()).find("did you mean \"h.0.ln_1.weight\""), std::string::npos) << keel_last_error();
  EXPECT_EQ(keel_trainer_read_param(trainer.t, "h.0.ln_1.weight", copy.data(), 31), KEEL_ERR_INVALID_ARGUMENT);
}

// ZeRO-3 gathers a layer on acquire and frees it on release: a zero-copy view would dangle,
// so it is refused with the reason, while a copy still reads the right values.
TEST(EmbedApi, ParamTensorIsRefusedWhereParametersAreNotResident) {
  std::string json = config_json();
  json.insert(json.rfind('}'), R"(, "parallel": {"strategy": {"plugin": "zero", "stage": 3}})");
  TrainerHandle zero3(json), ddp(config_json());
  ASSERT_NE(zero3.t, nullptr);
  keel_tensor view{};
  EXPECT_EQ(keel_trainer_param_tensor(zero3.t, "h.0.ln_1.weight", &view), KEEL_ERR_UNIMPLEMENTED);
  EXPECT_NE(std::string(keel_last_error()).find("does not keep parameters resident"), std::string::npos)
      << keel_last_error();
  EXPECT_EQ(view.data, nullptr);  // outputs untouched on error
  std::vector<float> a(32 * 32 * 3), b(a.size());
  ASSERT_EQ(keel_trainer_read_param(zero3.t, "h.0.attn.qkv.weight", a.data(), a.size()), KEEL_OK) << keel_last_error();
  ASSERT_EQ(keel_trainer_read_param(ddp.t, "h.0.attn.qkv.weight", b.data(), b.size()), KEEL_OK) << keel_last_error();
  EXPECT_EQ(a, b);  // the same initialisation whatever the strategy
}

TEST(EmbedApi, SaveThenLoadRestoresParametersAndContinuesIdentically) {
  const std::string root = temp_dir("ckpt");
  TrainerHandle a(config_json()), b(config_json());
  ASSERT_EQ(keel_trainer_train(a.t, 3, nullptr, nullptr), KEEL_OK);
  ASSERT_EQ(keel_trainer_save(a.t, root.c_str(), 2), KEEL_OK) << keel_last_error();
  ASSERT_EQ(keel_trainer_load(b.t, root.c_str()), KEEL_OK) << keel_last_error();
  keel_step_metrics ma = metrics(), mb = metrics();
  ASSERT_EQ(keel_trainer_step(a.t, &ma), KEEL_OK);
  ASSERT_EQ(keel_trainer_step(b.t, &mb), KEEL_OK);
  EXPECT_EQ(ma.step, 4);
  EXPECT_EQ(mb.step, 4);
  EXPECT_EQ(ma.loss, mb.loss);  // bit for bit
  std::vector<float> pa(32), pb(32);
  keel_trainer_read_param(a.t, "ln_f.weight", pa.data(), 32);
  keel_trainer_read_param(b.t, "ln_f.weight", pb.data(), 32);
  EXPECT_EQ(pa, pb);
  std::filesystem::remove_all(root);
}

TEST(EmbedApi, ListsPlugins) {
  size_t count = 0;
  ASSERT_EQ(keel_plugin_count(&count), KEEL_OK);
  bool found_gpt = false;
  for (size_t i = 0; i < count; ++i) {
    keel_plugin_description d{};
    d.struct_size = sizeof d;
    ASSERT_EQ(keel_plugin_describe(i, &d), KEEL_OK);
    if (std::string(d.info->name) == "gpt") {
      found_gpt = true;
      EXPECT_STREQ(d.kind_name, "model");
      EXPECT_NE(std::string(d.path).find("libkeel-gpt.so"), std::string::npos);
    }
  }
  EXPECT_TRUE(found_gpt);
  keel_plugin_description d{};
  d.struct_size = sizeof d;
  EXPECT_EQ(keel_plugin_describe(count, &d), KEEL_ERR_INVALID_ARGUMENT);
}

// An in-process data plugin, as a binding registers one: every batch is the sequence
// 0, 1, 2, ... so the model can learn it perfectly.
struct CountingSource {
  int32_t calls = 0;
};
keel_status counting_validate(const keel_host*, const char*, const char*) { return KEEL_OK; }
keel_status counting_create(const keel_host*, const char*, const char*, void** out) {
  *out = new CountingSource;
  return KEEL_OK;
}
void counting_destroy(void* s) { delete static_cast<CountingSource*>(s); }
keel_status counting_next(void* s, int32_t, int32_t batch, int32_t seq_len, int32_t* tokens, int32_t* targets) {
  static_cast<CountingSource*>(s)->calls++;
  for (int32_t b = 0; b < batch; ++b)
    for (int32_t t = 0; t < seq_len; ++t) tokens[b * seq_len + t] = t, targets[b * seq_len + t] = t + 1;
  return KEEL_OK;
}
const keel_data_api counting_table = {sizeof(keel_data_api), counting_validate, counting_create, counting_destroy,
                                      counting_next, nullptr};
const keel_plugin_info counting_info = {sizeof(keel_plugin_info), KEEL_KIND_DATA, "counting", "1.0", KEEL_ABI_VERSION_MAJOR,
                                        KEEL_ABI_VERSION_MINOR, &counting_table, "0,1,2,... for tests"};

TEST(EmbedApi, InProcessDataPluginFeedsTraining) {
  static bool registered = false;
  if (!registered) ASSERT_EQ(keel_register_plugin(&counting_info), KEEL_OK) << keel_last_error();
  registered = true;
  EXPECT_EQ(keel_register_plugin(&counting_info), KEEL_ERR_ABI_MISMATCH);  // a duplicate name is refused
  EXPECT_NE(std::string(keel_last_error()).find("already provided by this process"), std::string::npos);

  TrainerHandle trainer(config_json(R"({"plugin": "counting", "micro_batch": 2, "seq_len": 32, "val_batches": 1})"));
  keel_step_metrics first = metrics(), m = metrics();
  ASSERT_EQ(keel_trainer_step(trainer.t, &first), KEEL_OK) << keel_last_error();
  ASSERT_EQ(keel_trainer_train(trainer.t, 40, nullptr, nullptr), KEEL_OK);
  ASSERT_EQ(keel_trainer_last_metrics(trainer.t, &m), KEEL_OK);
  // A fixed, fully predictable sequence: the loss must fall far below ln 256 = 5.5.
  EXPECT_LT(m.loss, first.loss * 0.5f) << first.loss << " -> " << m.loss;
}

TEST(EmbedApi, ErrorsCarryTheCoresMessage) {
  keel_trainer* t = nullptr;
  EXPECT_EQ(keel_trainer_create_from_json(R"({"model": {"plugin": "gpt", "n_heads": 2}})", &t), KEEL_ERR_INVALID_CONFIG);
  EXPECT_EQ(t, nullptr);  // outputs untouched on error
  EXPECT_NE(std::string(keel_last_error()).find("model.n_heads: unknown key (did you mean \"n_head\"?)"), std::string::npos)
      << keel_last_error();
  EXPECT_EQ(keel_trainer_create_from_json("{not json", &t), KEEL_ERR_INVALID_CONFIG);
  EXPECT_NE(std::string(keel_last_error()).find("not valid JSON"), std::string::npos);
  EXPECT_EQ(keel_trainer_create_from_file("/nonexistent/keel.json", &t), KEEL_ERR_MISSING_FILE);  // 0.19: its own status
  EXPECT_EQ(keel_trainer_step(nullptr, nullptr), KEEL_ERR_INVALID_ARGUMENT);
}

}  // namespace
