// keel_support/model/model_slots.hpp: the C table of a model class. A model that supports neither
// pipelines nor Hugging Face still compiles against it, and each slot it cannot serve refuses
// with a reason naming the model; a model that defines those members has them called.
#include <keel_support/model/model_slots.hpp>
#include <keel_support/common/testing/recording_host.hpp>

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using keel_support::ModelSlots;
using keel_support::testing::last_message;

// The required members only: no external(), stage_io_numel, splits_backward, complete_config.
class BareModel {
 public:
  static constexpr const char* kSource = "model bare";
  static void validate_config(const char*, const char*) {}
  BareModel(const keel_host* host, const keel_model_create_args&) : host_(host) {}
  const keel_host* host() const { return host_; }
  void describe(keel_model_info*) {}
  double flops_per_token(int32_t seq_len) { return 6.0 * seq_len; }
  void forward(keel_forward_args* args) { args->loss = 1.5f; }
  void backward(const keel_backward_args&) {}

 private:
  const keel_host* host_;
};

// Every optional member, each answering something a test can recognise.
class FullModel : public BareModel {
 public:
  static constexpr const char* kSource = "model full";
  using BareModel::BareModel;
  struct Names {
    keel_external_tensor tensor(const char*, size_t index) const {
      keel_external_tensor t{};
      t.struct_size = sizeof t;
      t.name = "h.0.weight";
      t.rows = static_cast<int64_t>(index);
      return t;
    }
    const char* config_json(const char*) const { return "{\"n_layer\": 2}"; }
  };
  Names external() const { return {}; }
  int64_t stage_io_numel(int32_t batch, int32_t seq_len) const { return int64_t{7} * batch * seq_len; }
  bool splits_backward() const { return true; }
  static std::string complete_config(const char*, const char*, const char*, const char*) { return "{\"d\":3}"; }
  std::vector<keel_support::StepMetric> metrics = {{"aux_loss", 0.5, KEEL_METRIC_MEAN}, {"load", 2.0, KEEL_METRIC_MAX}};
  const std::vector<keel_support::StepMetric>& step_metrics() const { return metrics; }
};

struct Created {
  keel_host host = keel_support::testing::recording_host();
  keel_model_create_args args{};
  void* model = nullptr;
};

template <class Model>
keel_status create(Created& c, int32_t pp_size) {
  c.args.struct_size = sizeof(c.args);
  c.args.pp_size = pp_size;
  return ModelSlots<Model>::kApi.create(&c.host, &c.args, &c.model);
}

TEST(ModelSlots, BareModelFillsEveryTableSlotButDecode) {
  const keel_model_api& api = ModelSlots<BareModel>::kApi;
  EXPECT_NE(api.external_name, nullptr);
  EXPECT_NE(api.external_config, nullptr);
  EXPECT_NE(api.stage_io_numel, nullptr);
  EXPECT_NE(api.splits_backward, nullptr);
  EXPECT_NE(api.complete_config, nullptr);
  EXPECT_EQ(api.decode_reset, nullptr);
  EXPECT_EQ(api.decode, nullptr);
  EXPECT_EQ(api.step_metrics, nullptr);  // 0.19: a model without step_metrics() reports nothing
}

TEST(ModelSlots, BareModelRefusesExternalNamesNamingItself) {
  Created c;
  ASSERT_EQ(create<BareModel>(c, 1), KEEL_OK) << last_message();
  const keel_model_api& api = ModelSlots<BareModel>::kApi;
  keel_external_tensor t{};
  t.struct_size = sizeof t;
  EXPECT_EQ(api.external_name(c.model, "huggingface", 0, &t), KEEL_ERR_UNIMPLEMENTED);
  EXPECT_NE(last_message().find("model 'bare' has no Hugging Face names"), std::string::npos) << last_message();
  EXPECT_NE(last_message().find("defines no external()"), std::string::npos) << last_message();
  const char* json = nullptr;
  EXPECT_EQ(api.external_config(c.model, "onnx", &json), KEEL_ERR_UNIMPLEMENTED);
  EXPECT_NE(last_message().find("model 'bare'"), std::string::npos) << last_message();
  EXPECT_NE(last_message().find("\"onnx\""), std::string::npos) << last_message();
  EXPECT_EQ(json, nullptr);
  api.destroy(c.model);
}

TEST(ModelSlots, BareModelRefusesPipelineStagesNamingItself) {
  Created c;
  ASSERT_EQ(create<BareModel>(c, 1), KEEL_OK) << last_message();
  const keel_model_api& api = ModelSlots<BareModel>::kApi;
  int64_t numel = -1;
  EXPECT_EQ(api.stage_io_numel(c.model, 2, 8, &numel), KEEL_ERR_UNIMPLEMENTED);
  EXPECT_NE(last_message().find("model 'bare' does not split into pipeline stages"), std::string::npos)
      << last_message();
  EXPECT_EQ(numel, -1);
  int32_t splits = -1;
  EXPECT_EQ(api.splits_backward(c.model, &splits), KEEL_OK) << last_message();
  EXPECT_EQ(splits, 0);
  api.destroy(c.model);

  Created staged;
  EXPECT_EQ(create<BareModel>(staged, 2), KEEL_ERR_UNIMPLEMENTED);
  EXPECT_EQ(staged.model, nullptr);
  EXPECT_NE(last_message().find("parallel.pp: model 'bare' does not split into pipeline stages"), std::string::npos)
      << last_message();
  EXPECT_NE(last_message().find("found pp_size 2"), std::string::npos) << last_message();
}

TEST(ModelSlots, BareModelRefusesCompleteConfigNamingItself) {
  keel_host host = keel_support::testing::recording_host();
  char out[64];
  size_t length = 0;
  EXPECT_EQ(ModelSlots<BareModel>::kApi.complete_config(&host, "huggingface", "{}", "{}", "model", out, sizeof out,
                                                       &length),
            KEEL_ERR_UNIMPLEMENTED);
  EXPECT_NE(last_message().find("model 'bare' cannot take its dimensions"), std::string::npos) << last_message();
}

TEST(ModelSlots, BareModelStillTrains) {
  Created c;
  ASSERT_EQ(create<BareModel>(c, 0), KEEL_OK) << last_message();  // a zero-filled pp_size means pp 1
  const keel_model_api& api = ModelSlots<BareModel>::kApi;
  keel_forward_args forward{};
  forward.struct_size = sizeof forward;
  EXPECT_EQ(api.forward(c.model, &forward), KEEL_OK) << last_message();
  EXPECT_FLOAT_EQ(forward.loss, 1.5f);
  double flops = 0;
  EXPECT_EQ(api.flops_per_token(c.model, 10, &flops), KEEL_OK);
  EXPECT_DOUBLE_EQ(flops, 60.0);
  api.destroy(c.model);
}

TEST(ModelSlots, FullModelHasItsOwnMembersCalled) {
  Created c;
  ASSERT_EQ(create<FullModel>(c, 2), KEEL_OK) << last_message();
  const keel_model_api& api = ModelSlots<FullModel>::kApi;
  int64_t numel = 0;
  EXPECT_EQ(api.stage_io_numel(c.model, 2, 8, &numel), KEEL_OK) << last_message();
  EXPECT_EQ(numel, 7 * 2 * 8);
  int32_t splits = 0;
  EXPECT_EQ(api.splits_backward(c.model, &splits), KEEL_OK);
  EXPECT_EQ(splits, 1);
  keel_external_tensor t{};
  t.struct_size = sizeof t;
  EXPECT_EQ(api.external_name(c.model, "huggingface", 3, &t), KEEL_OK) << last_message();
  EXPECT_STREQ(t.name, "h.0.weight");
  EXPECT_EQ(t.rows, 3);
  const char* json = nullptr;
  EXPECT_EQ(api.external_config(c.model, "huggingface", &json), KEEL_OK);
  EXPECT_STREQ(json, "{\"n_layer\": 2}");
  char out[64];
  size_t length = 0;
  EXPECT_EQ(api.complete_config(&c.host, "huggingface", "{}", "{}", "model", out, sizeof out, &length), KEEL_OK);
  EXPECT_EQ(std::string(out, length), "{\"d\":3}");
  api.destroy(c.model);
}

TEST(ModelSlots, StepMetricsCarryNamesValuesAndRulesAndRefuseBadOnes) {
  Created c;
  ASSERT_EQ(create<FullModel>(c, 1), KEEL_OK) << last_message();
  const keel_model_api& api = ModelSlots<FullModel>::kApi;
  keel_model_metric out[KEEL_MODEL_METRICS_MAX];
  int32_t count = -1;
  ASSERT_EQ(api.step_metrics(c.model, out, KEEL_MODEL_METRICS_MAX, &count), KEEL_OK) << last_message();
  ASSERT_EQ(count, 2);
  EXPECT_STREQ(out[0].name, "aux_loss");
  EXPECT_EQ(out[0].value, 0.5);
  EXPECT_EQ(out[0].combine, KEEL_METRIC_MEAN);
  EXPECT_STREQ(out[1].name, "load");
  EXPECT_EQ(out[1].combine, KEEL_METRIC_MAX);
  EXPECT_EQ(api.step_metrics(c.model, out, 1, &count), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_message().find("reports 2 metrics, more than the 1"), std::string::npos) << last_message();
  static_cast<FullModel*>(c.model)->metrics = {{"has space", 1.0, KEEL_METRIC_MEAN}};
  EXPECT_EQ(api.step_metrics(c.model, out, KEEL_MODEL_METRICS_MAX, &count), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_message().find("metric 0 (\"has space\", combine 0)"), std::string::npos) << last_message();
  static_cast<FullModel*>(c.model)->metrics = {{"ok", 1.0, 7}};
  EXPECT_EQ(api.step_metrics(c.model, out, KEEL_MODEL_METRICS_MAX, &count), KEEL_ERR_INVALID_ARGUMENT);
  api.destroy(c.model);
}

}  // namespace
