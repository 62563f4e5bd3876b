// The core's expert split (core/src/train/expert_split_strategy.h) over a recording strategy: each
// layer's tensors come back in the model's order from the half that holds them, indices reach the
// right half, the norm adds both halves, the expert half's own arrays are named apart, and what
// cannot be split is refused by name.
#include "train/expert_split_strategy.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "host/errors.h"

namespace keel {
namespace {

// One creation of the recording strategy: the parameters it was handed and the calls it saw.
struct RecordingHalf {
  std::vector<std::string> names;
  std::vector<float> storage;  // one float per parameter: its "memory"
  int32_t dp_size = 0;
  bool embedding_comm = false;
  std::vector<std::string> calls;
  double sum_squares = 0.0;
  int32_t independent = 0;
};

std::vector<RecordingHalf*> created;
int32_t next_independent = 0;

RecordingHalf& half_of(void* s) { return *static_cast<RecordingHalf*>(s); }

keel_status create(const keel_host*, const keel_strategy_create_args* args, void** out) {
  auto* half = new RecordingHalf;
  for (size_t i = 0; i < args->n_params; ++i) half->names.push_back(args->params[i].name);
  half->storage.assign(args->n_params, 0.0f);
  half->dp_size = args->dp_size;
  half->embedding_comm = args->embedding_comm_obj != nullptr;
  half->sum_squares = args->dp_size == 4 ? 3.0 : 0.5;  // the dense half's, then the experts'
  half->independent = next_independent;
  created.push_back(half);
  *out = half;
  return KEEL_OK;
}
void destroy(void* s) { delete &half_of(s); }

keel_status acquire(void* ctx, int32_t layer, int32_t, keel_tensor* params, keel_tensor* grads, size_t n) {
  RecordingHalf& half = half_of(ctx);
  half.calls.push_back("acquire " + std::to_string(layer) + " x" + std::to_string(n));
  size_t k = 0;
  for (size_t i = 0; i < half.names.size() && k < n; ++i)
    if (half.names[i].find(".l" + std::to_string(layer)) != std::string::npos) {
      params[k].data = &half.storage[i];
      if (grads) grads[k].data = &half.storage[i];
      ++k;
    }
  return KEEL_OK;
}
keel_status release(void* ctx, int32_t layer, int32_t, int32_t final) {
  half_of(ctx).calls.push_back("release " + std::to_string(layer) + (final ? " final" : ""));
  return KEEL_OK;
}
keel_status param_access(void* s, keel_param_access* out) {
  out->ctx = s;
  out->acquire = &acquire;
  out->release = &release;
  return KEEL_OK;
}
keel_status grad_sq_norm(void* s, double* out) {
  *out = half_of(s).sum_squares;
  return KEEL_OK;
}
keel_status read_param(void* s, size_t index, int64_t, int64_t, float* dst) {
  half_of(s).calls.push_back("read " + half_of(s).names.at(index));
  *dst = half_of(s).storage.at(index);
  return KEEL_OK;
}
keel_status own_state_count(void*, int32_t* out) {
  *out = 1;
  return KEEL_OK;
}
keel_status own_state_info(void*, int32_t, const char** name, int64_t* count) {
  *name = "residual";
  *count = 1;
  return KEEL_OK;
}
keel_status independent_replicas(void* s, int32_t* out) {
  *out = half_of(s).independent;
  return KEEL_OK;
}

keel_strategy_api recording_table() {
  keel_strategy_api t{};
  t.struct_size = sizeof(t);
  t.create = &create;
  t.destroy = &destroy;
  t.param_access = &param_access;
  t.grad_sq_norm = &grad_sq_norm;
  t.read_param = &read_param;
  t.own_state_count = &own_state_count;
  t.own_state_info = &own_state_info;
  t.independent_replicas = &independent_replicas;
  return t;
}

keel_param_spec spec(const char* name, int32_t layer, uint32_t flags) {
  keel_param_spec s{};
  s.struct_size = sizeof(s);
  s.name = name;
  s.layer = layer;
  s.ndim = 1;
  s.global_shape[0] = s.local_shape[0] = 1;
  s.tp_dim = -1;
  s.flags = flags;
  return s;
}

class ExpertSplitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    created.clear();
    next_independent = 0;
    // Layer 0 dense only; layer 1 interleaves dense and expert tensors, as a model may.
    specs_ = {spec("embed.l0", 0, 0), spec("router.l1", 1, 0), spec("experts.0.l1", 1, KEEL_PARAM_EXPERT),
              spec("norm.l1", 1, KEEL_PARAM_NO_WEIGHT_DECAY), spec("experts.1.l1", 1, KEEL_PARAM_EXPERT),
              spec("experts.2.l1", 1, KEEL_PARAM_EXPERT)};
    args_.struct_size = sizeof(args_);
    args_.params = specs_.data();
    args_.n_params = specs_.size();
    args_.n_layers = 2;
    args_.dp_size = 4;
    args_.pp_size = 1;
    args_.embedding_comm_obj = this;  // any non-NULL: the dense half keeps it, the expert half must not
    // The expert-data-parallel group of dp 4 at ep 4: this rank alone, so the expert half gets no comm.
    table_ = recording_table();
  }
  std::vector<keel_param_spec> specs_;
  keel_strategy_create_args args_{};
  keel_strategy_api table_{};
  CommGroup expert_dp_, core_ep_;
};

TEST_F(ExpertSplitTest, EachLayersTensorsComeBackInTheModelsOrderFromTheirHalf) {
  auto* split = new ExpertSplitStrategy(&table_, args_, expert_dp_, core_ep_, "run.json", "recording");
  const keel_strategy_api* api = ExpertSplitStrategy::table();
  ASSERT_EQ(created.size(), 2u);
  RecordingHalf& dense = *created[0];
  RecordingHalf& experts = *created[1];
  EXPECT_EQ(dense.names, (std::vector<std::string>{"embed.l0", "router.l1", "norm.l1"}));
  EXPECT_EQ(experts.names, (std::vector<std::string>{"experts.0.l1", "experts.1.l1", "experts.2.l1"}));
  EXPECT_EQ(dense.dp_size, 4);
  EXPECT_EQ(experts.dp_size, 1);  // the expert-data-parallel group's, not the data-parallel group's 4
  EXPECT_TRUE(dense.embedding_comm);
  EXPECT_FALSE(experts.embedding_comm);

  keel_param_access access{};
  access.struct_size = sizeof(access);
  ASSERT_EQ(api->param_access(split, &access), KEEL_OK);
  keel_tensor params[5]{}, grads[5]{};
  ASSERT_EQ(access.acquire(access.ctx, 1, KEEL_PHASE_BACKWARD, params, grads, 5), KEEL_OK);
  const float* want[5] = {&dense.storage[1], &experts.storage[0], &dense.storage[2], &experts.storage[1],
                          &experts.storage[2]};
  for (int t = 0; t < 5; ++t) {
    EXPECT_EQ(params[t].data, want[t]) << "tensor " << t;
    EXPECT_EQ(grads[t].data, want[t]) << "gradient " << t;
  }
  ASSERT_EQ(access.release(access.ctx, 1, KEEL_PHASE_BACKWARD, 1), KEEL_OK);
  // Layer 0 holds no expert: the expert half is neither asked nor released.
  keel_tensor embed{};
  ASSERT_EQ(access.acquire(access.ctx, 0, KEEL_PHASE_FORWARD, &embed, nullptr, 1), KEEL_OK);
  ASSERT_EQ(access.release(access.ctx, 0, KEEL_PHASE_FORWARD, 0), KEEL_OK);
  EXPECT_EQ(dense.calls, (std::vector<std::string>{"acquire 1 x2", "release 1 final", "acquire 0 x1", "release 0"}));
  EXPECT_EQ(experts.calls, (std::vector<std::string>{"acquire 1 x3", "release 1 final"}));
  // A count that is not the layer's is refused, not passed on.
  EXPECT_NE(access.acquire(access.ctx, 1, KEEL_PHASE_FORWARD, params, nullptr, 4), KEEL_OK);

  // Indices map to the half and its own index; the norm adds both halves.
  experts.storage[1] = 7.0f;
  float value = 0.0f;
  ASSERT_EQ(api->read_param(split, 4, 0, 1, &value), KEEL_OK);
  EXPECT_EQ(value, 7.0f);
  EXPECT_EQ(experts.calls.back(), "read experts.1.l1");
  double sum = 0.0;
  ASSERT_EQ(api->grad_sq_norm(split, &sum), KEEL_OK);
  EXPECT_EQ(sum, dense.sum_squares + experts.sum_squares);
  EXPECT_NE(api->read_param(split, 6, 0, 1, &value), KEEL_OK);

  // Own arrays: the dense half's, then the expert half's under "experts.".
  int32_t count = 0;
  ASSERT_EQ(api->own_state_count(split, &count), KEEL_OK);
  ASSERT_EQ(count, 2);
  const char* name = nullptr;
  int64_t elements = 0;
  ASSERT_EQ(api->own_state_info(split, 0, &name, &elements), KEEL_OK);
  EXPECT_STREQ(name, "residual");
  ASSERT_EQ(api->own_state_info(split, 1, &name, &elements), KEEL_OK);
  EXPECT_STREQ(name, "experts.residual");
  api->destroy(split);
}

TEST_F(ExpertSplitTest, RefusesAModelWithoutExpertsAndReplicasThatStepAlone) {
  std::vector<keel_param_spec> dense_only = {spec("embed.l0", 0, 0), spec("router.l1", 1, 0)};
  keel_strategy_create_args args = args_;
  args.params = dense_only.data();
  args.n_params = dense_only.size();
  core_ep_.size = 2;
  // The core checks the whole model (plugin_instances.cpp, model_probe.cpp)...
  try {
    require_expert_tensors("run.json", 2, 1, dense_only.data(), dense_only.size());
    FAIL() << "a model without experts was split";
  } catch (const KeelError& e) {
    EXPECT_NE(std::string(e.what()).find("run.json: parallel.ep 2: the model declares no expert tensor"),
              std::string::npos)
        << e.what();
  }
  // ...so the split itself takes a trainable part whose experts are all frozen (a LoRA run's):
  // an empty expert half.
  {
    ExpertSplitStrategy split(&table_, args, expert_dp_, core_ep_, "run.json", "recording");
  }
  next_independent = 1;
  try {
    ExpertSplitStrategy split(&table_, args_, expert_dp_, core_ep_, "run.json", "recording");
    FAIL() << "replicas that step alone were split";
  } catch (const KeelError& e) {
    EXPECT_NE(std::string(e.what()).find("strategy 'recording' lets each replica step on its own"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace keel
