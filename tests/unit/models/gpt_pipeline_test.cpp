// The gpt model cut into pipeline chunks (ABI 0.7), held to the whole model in one process: for
// several cuts (even, interleaved, an explicit uneven list) one model instance per pipeline rank,
// each with its own parameter store filled by name from the whole model's numbers, is chained by
// hand in chunk order (forward: output -> next input; backward: input_grad -> previous
// output_grad), and its loss and every gradient must equal the whole model's, the two wte
// gradients (the first stage's and the last stage's copy) summed. Also: the cut's refusals name
// the numbers and the setting, and the access protocol holds on every rank.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <keel/keel.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace {

thread_local std::string g_last_error;

keel_status host_set_error(keel_status code, const char* message) {
  g_last_error = message ? message : "";
  return code;
}
std::vector<std::string> g_log;  // every message the plugins log, for tests of what the model allocates
void host_log(int32_t, const char* source, const char* message) { g_log.push_back(std::string(source) + ": " + message); }
size_t activation_allocations() {
  return static_cast<size_t>(std::count_if(g_log.begin(), g_log.end(), [](const std::string& line) {
    return line.find("model gpt: activations for micro-batch") == 0;
  }));
}
// The stores below are filled by the test itself; the model never asks the host to init.
keel_status host_init_param(const keel_param_spec*, uint64_t, int64_t, int64_t count, float* out) {
  std::fill(out, out + count, 0.0f);
  return KEEL_OK;
}
const keel_host kHost = {sizeof(keel_host), KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR, host_set_error, host_log,
                         host_init_param};

const void* plugin_api(const char* path, int32_t kind, const char* name) {
  void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);  // never closed: the tables are static in it
  if (!library) return ADD_FAILURE() << "dlopen " << path << ": " << dlerror(), nullptr;
  auto entry = reinterpret_cast<keel_plugin_entry_fn>(dlsym(library, KEEL_PLUGIN_ENTRY_SYMBOL));
  if (!entry) return ADD_FAILURE() << path << " has no " << KEEL_PLUGIN_ENTRY_SYMBOL, nullptr;
  const keel_plugin_list* list = entry();
  for (size_t i = 0; i < list->count; ++i)
    if (list->plugins[i].kind == kind && std::string(list->plugins[i].name) == name) return list->plugins[i].api;
  return ADD_FAILURE() << path << " holds no plugin named " << name, nullptr;
}
const keel_backend_api* cpu_api() {
  static auto* api = static_cast<const keel_backend_api*>(plugin_api(KEEL_CPU_PLUGIN_PATH, KEEL_KIND_BACKEND, "cpu"));
  return api;
}
const keel_model_api* gpt_api() {
  static auto* api = static_cast<const keel_model_api*>(plugin_api(KEEL_GPT_PLUGIN_PATH, KEEL_KIND_MODEL, "gpt"));
  return api;
}
const keel_model_api* mlp_api() {
  static auto* api = static_cast<const keel_model_api*>(plugin_api(KEEL_MLP_PLUGIN_PATH, KEEL_KIND_MODEL, "mlp"));
  return api;
}

uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
float uniform_pm1(uint64_t key) { return static_cast<float>(static_cast<double>(mix(key) >> 11) / 4503599627370496.0 - 1.0); }

// One rank's parameters and gradients in host memory (the cpu backend's memory), by spec, with the
// access protocol's invariants checked: no layer held twice, and in each backward call every layer
// acquired for the backward released with grads_final exactly once.
class ParamStore {
 public:
  explicit ParamStore(const keel_model_info& info) : info_(info) {
    for (size_t i = 0; i < info.n_params; ++i) {
      int64_t n = 1;
      for (int d = 0; d < info.params[i].ndim; ++d) n *= info.params[i].local_shape[d];
      params_.emplace_back(static_cast<size_t>(n), 0.0f);
      grads_.emplace_back(static_cast<size_t>(n), 0.0f);
    }
    access_ = {sizeof access_, this, &ParamStore::acquire, &ParamStore::release};
  }
  const keel_param_access* access() const { return &access_; }
  size_t count() const { return info_.n_params; }
  const keel_param_spec& spec(size_t i) const { return info_.params[i]; }
  std::vector<float>& param(size_t i) { return params_[i]; }
  std::vector<float>& grad(size_t i) { return grads_[i]; }
  const keel_param_spec* find(const std::string& name, size_t* index) const {
    for (size_t i = 0; i < count(); ++i)
      if (name == spec(i).name) return *index = i, &spec(i);
    return nullptr;
  }
  // Called around each backward: every layer acquired in it was released final exactly once.
  void begin_backward() { finals_.clear(), acquired_.clear(); }
  void end_backward(const std::string& what) {
    for (int32_t layer : acquired_)
      if (finals_[layer] != 1)
        violations_.push_back(what + ": layer " + std::to_string(layer) + " released final " +
                              std::to_string(finals_[layer]) + " times");
  }
  const std::vector<std::string>& violations() const { return violations_; }

 private:
  static keel_status acquire(void* ctx, int32_t layer, int32_t phase, keel_tensor* params, keel_tensor* grads,
                             size_t n) {
    auto* self = static_cast<ParamStore*>(ctx);
    if (!self->held_.insert(layer).second) self->violations_.push_back("layer " + std::to_string(layer) + " held twice");
    if (phase == KEEL_PHASE_BACKWARD) self->acquired_.insert(layer);
    size_t k = 0;
    for (size_t i = 0; i < self->count(); ++i) {
      const keel_param_spec& s = self->spec(i);
      if (s.layer != layer) continue;
      if (k == n) return host_set_error(KEEL_ERR_INVALID_ARGUMENT, "acquire: n is smaller than the layer");
      params[k] = self->tensor(self->params_[i].data(), s);
      if (grads) grads[k] = self->tensor(self->grads_[i].data(), s);
      ++k;
    }
    if (k == 0) self->violations_.push_back("layer " + std::to_string(layer) + " acquired, but this rank holds none of it");
    return k == n ? KEEL_OK : host_set_error(KEEL_ERR_INVALID_ARGUMENT, "acquire: n does not match the layer");
  }
  static keel_status release(void* ctx, int32_t layer, int32_t phase, int32_t grads_final) {
    auto* self = static_cast<ParamStore*>(ctx);
    if (!self->held_.erase(layer)) self->violations_.push_back("layer " + std::to_string(layer) + " released, not held");
    if (phase == KEEL_PHASE_BACKWARD && grads_final) ++self->finals_[layer];
    return KEEL_OK;
  }
  static keel_tensor tensor(float* data, const keel_param_spec& s) {
    keel_tensor t{};
    t.data = data;
    t.device = {KEEL_DEVICE_CPU, 0};
    t.ndim = s.ndim;
    t.dtype = {KEEL_DTYPE_FLOAT, 32, 1};
    for (int d = 0; d < s.ndim; ++d) t.shape[d] = s.local_shape[d];
    return t;
  }

  keel_model_info info_;
  keel_param_access access_{};
  std::vector<std::vector<float>> params_, grads_;
  std::set<int32_t> held_, acquired_;
  std::map<int32_t, int> finals_;
  std::vector<std::string> violations_;
};

const char* kModel = R"({"plugin":"gpt","n_layer":4,"n_head":2,"d_model":16,"vocab_size":60,"seq_len":8})";
constexpr int32_t kLayers = 4, kB = 2, kT = 8, kC = 16, kVocab = 60;

struct Cut {
  int32_t pp = 1, virtual_stages = 1;
  std::vector<int32_t> stage_blocks;  // empty: the even split
  std::string text() const {
    std::string t = "pp " + std::to_string(pp) + " v " + std::to_string(virtual_stages);
    if (!stage_blocks.empty()) {
      t += " blocks";
      for (int32_t b : stage_blocks) t += " " + std::to_string(b);
    }
    return t;
  }
};

// One model instance (one pipeline rank) on its own cpu backend.
class Rank {
 public:
  Rank(const keel_model_api* api, const char* json, int32_t pp_rank, const Cut& cut, size_t struct_size = 0) : api_(api) {
    keel_backend_create_args bargs{sizeof bargs, "{\"plugin\":\"cpu\"}", "backend"};
    if (cpu_api()->create(&kHost, &bargs, &backend_) != KEEL_OK) {
      ADD_FAILURE() << g_last_error;
      return;
    }
    keel_model_create_args args{};
    args.struct_size = struct_size ? struct_size : sizeof args;
    args.config_json = json;
    args.json_path = "model";
    args.backend = cpu_api();
    args.backend_obj = backend_;
    args.tp_size = 1;
    args.pp_rank = pp_rank;
    args.pp_size = cut.pp;
    args.virtual_stages = cut.virtual_stages;
    args.stage_blocks = cut.stage_blocks.empty() ? nullptr : cut.stage_blocks.data();
    args.n_stage_blocks = static_cast<int32_t>(cut.stage_blocks.size());
    g_last_error.clear();
    status_ = api_->create(&kHost, &args, &model_);
    if (status_ != KEEL_OK) return;
    info_.struct_size = sizeof info_;
    if (api_->describe(model_, &info_) != KEEL_OK) {
      ADD_FAILURE() << g_last_error;
      return;
    }
    store_ = std::make_unique<ParamStore>(info_);
  }
  ~Rank() {
    if (model_) api_->destroy(model_);
    if (backend_) cpu_api()->destroy(backend_);
  }
  keel_status status() const { return status_; }
  const keel_model_info& info() const { return info_; }
  ParamStore& store() { return *store_; }

  // One chunk's training forward; returns the loss on the last chunk.
  float forward(int32_t mb, int32_t chunk, const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets,
                const float* input, float* output) {
    keel_forward_args args{};
    args.struct_size = sizeof args;
    args.access = store_->access();
    args.microbatch = mb;
    args.batch = kB;
    args.seq_len = kT;
    args.tokens = tokens.data();
    args.targets = targets.data();
    args.chunk = chunk;
    args.input = input;
    args.output = output;
    EXPECT_EQ(api_->forward(model_, &args), KEEL_OK) << "forward mb " << mb << " chunk " << chunk << ": " << g_last_error;
    return args.loss;
  }
  keel_status backward(int32_t mb, int32_t chunk, float loss_scale, const float* output_grad, float* input_grad,
                       int32_t part = KEEL_BACKWARD_FULL) {
    keel_backward_args args{};
    args.struct_size = sizeof args;
    args.access = store_->access();
    args.microbatch = mb;
    args.loss_scale = loss_scale;
    args.chunk = chunk;
    args.output_grad = output_grad;
    args.input_grad = input_grad;
    args.part = part;
    const std::string what = "backward mb " + std::to_string(mb) + " chunk " + std::to_string(chunk) + " part " +
                             std::to_string(part);
    store_->begin_backward();
    const keel_status status = api_->backward(model_, &args);
    store_->end_backward(what);
    return status;
  }
  int32_t splits_backward() {
    int32_t splits = -1;
    EXPECT_EQ(api_->splits_backward(model_, &splits), KEEL_OK) << g_last_error;
    return splits;
  }
  int64_t stage_io_numel() {
    int64_t n = -1;
    EXPECT_EQ(api_->stage_io_numel(model_, kB, kT, &n), KEEL_OK) << g_last_error;
    return n;
  }

 private:
  const keel_model_api* api_;
  void* backend_ = nullptr;
  void* model_ = nullptr;
  keel_status status_ = KEEL_ERR_INTERNAL;
  keel_model_info info_{};
  std::unique_ptr<ParamStore> store_;
};

std::vector<int32_t> ids(uint64_t seed) {
  std::vector<int32_t> v(kB * kT);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>(mix(seed * 7919 + i) % kVocab);
  return v;
}

struct MicroBatches {
  std::vector<int32_t> tokens[2] = {ids(1), ids(2)};
  std::vector<int32_t> targets[2] = {ids(3), ids(4)};
};

// The whole model (pp 1) with values of O(0.1) everywhere (norm gains near 1), so every path
// carries gradient.
void fill_whole_model(ParamStore& ws) {
  for (size_t i = 0; i < ws.count(); ++i) {
    const std::string name = ws.spec(i).name;
    const bool gain = name.find("ln_") != std::string::npos && name.find(".weight") != std::string::npos;
    for (size_t k = 0; k < ws.param(i).size(); ++k)
      ws.param(i)[k] = (gain ? 1.0f : 0.0f) + 0.2f * uniform_pm1(mix(i * 1000003 + 17) ^ k);
  }
}

// One Rank per pipeline rank of `cut`, its parameters copied by name from the whole model's.
std::vector<std::unique_ptr<Rank>> make_ranks(const Cut& cut, ParamStore& ws) {
  std::vector<std::unique_ptr<Rank>> ranks;
  for (int32_t r = 0; r < cut.pp; ++r) {
    ranks.push_back(std::make_unique<Rank>(gpt_api(), kModel, r, cut));
    if (ranks.back()->status() != KEEL_OK) {
      ADD_FAILURE() << "rank " << r << ": " << g_last_error;
      return {};
    }
    ParamStore& s = ranks.back()->store();
    for (size_t i = 0; i < s.count(); ++i) {
      size_t w = 0;
      if (ws.find(s.spec(i).name, &w)) s.param(i) = ws.param(w);
    }
  }
  return ranks;
}

enum class Backward { kFull, kSplit };

// Both micro-batches chained by hand through the chunks (chunk c on rank c % pp; activations in
// host buffers): forwards, then backwards (as GPipe orders them), loss_scale 1/2 each. kSplit runs
// every backward as its INPUT part, the chunks in reverse, then all the WEIGHT parts (ZB-H1 defers
// them the same way). Returns each micro-batch's loss.
std::vector<float> run_chain(std::vector<std::unique_ptr<Rank>>& ranks, const Cut& cut, Backward backward) {
  const MicroBatches mbs;
  const int32_t chunks = cut.pp * cut.virtual_stages;
  const size_t io = static_cast<size_t>(kB) * kT * kC;
  std::vector<float> losses;
  std::vector<std::vector<float>> acts[2], grads[2];  // per micro-batch: the output of chunk c / grad of its input
  for (int mb = 0; mb < 2; ++mb) {
    acts[mb].assign(static_cast<size_t>(chunks), std::vector<float>(io, 0.0f));
    grads[mb].assign(static_cast<size_t>(chunks), std::vector<float>(io, 0.0f));
    float loss = 0;
    for (int32_t c = 0; c < chunks; ++c) {
      const float* input = c == 0 ? nullptr : acts[mb][c - 1].data();
      float* output = c == chunks - 1 ? nullptr : acts[mb][c].data();
      loss = ranks[c % cut.pp]->forward(mb, c, mbs.tokens[mb], mbs.targets[mb], input, output);
    }
    losses.push_back(loss);
  }
  const int32_t part = backward == Backward::kFull ? KEEL_BACKWARD_FULL : KEEL_BACKWARD_INPUT;
  for (int mb = 0; mb < 2; ++mb)
    for (int32_t c = chunks - 1; c >= 0; --c) {
      const float* output_grad = c == chunks - 1 ? nullptr : grads[mb][c + 1].data();
      float* input_grad = c == 0 ? nullptr : grads[mb][c].data();
      EXPECT_EQ(ranks[c % cut.pp]->backward(mb, c, 0.5f, output_grad, input_grad, part), KEEL_OK)
          << "backward mb " << mb << " chunk " << c << " part " << part << ": " << g_last_error;
    }
  if (backward == Backward::kSplit)
    for (int mb = 0; mb < 2; ++mb)
      for (int32_t c = chunks - 1; c >= 0; --c)
        EXPECT_EQ(ranks[c % cut.pp]->backward(mb, c, 0.5f, nullptr, nullptr, KEEL_BACKWARD_WEIGHT), KEEL_OK)
            << "weight backward mb " << mb << " chunk " << c << ": " << g_last_error;
  return losses;
}

void expect_cut_matches_whole_model(const Cut& cut, Backward backward = Backward::kFull) {
  SCOPED_TRACE(cut.text());
  Rank whole(gpt_api(), kModel, 0, Cut{});
  ASSERT_EQ(whole.status(), KEEL_OK) << g_last_error;
  ParamStore& ws = whole.store();
  fill_whole_model(ws);
  std::vector<std::unique_ptr<Rank>> ranks = make_ranks(cut, ws);
  ASSERT_EQ(ranks.size(), static_cast<size_t>(cut.pp));
  std::vector<std::unique_ptr<Rank>> whole_ranks;
  whole_ranks.push_back(std::make_unique<Rank>(gpt_api(), kModel, 0, Cut{}));
  ASSERT_EQ(whole_ranks[0]->status(), KEEL_OK) << g_last_error;
  for (size_t i = 0; i < ws.count(); ++i) whole_ranks[0]->store().param(i) = ws.param(i);
  ParamStore& wg = whole_ranks[0]->store();  // the whole model's gradients

  // The ranks' parameters: every name of the whole model exactly once, wte twice (the copy on the
  // last chunk's rank), all with the whole model's layer ids and flags (wte's stage flags added).
  const int32_t chunks = cut.pp * cut.virtual_stages, last_rank = (chunks - 1) % cut.pp;
  std::map<std::string, int> holders;
  for (int32_t r = 0; r < cut.pp; ++r) {
    ParamStore& s = ranks[r]->store();
    EXPECT_EQ(ranks[r]->info().n_layers, kLayers + 2);
    EXPECT_EQ(ranks[r]->info().n_blocks, kLayers);
    EXPECT_EQ(ranks[r]->stage_io_numel(), int64_t{kB} * kT * kC);
    for (size_t i = 0; i < s.count(); ++i) {
      const keel_param_spec& spec = s.spec(i);
      size_t w = 0;
      const keel_param_spec* ref = ws.find(spec.name, &w);
      ASSERT_NE(ref, nullptr) << "rank " << r << " declares " << spec.name << ", which the whole model lacks";
      EXPECT_EQ(spec.layer, ref->layer) << spec.name;
      ++holders[spec.name];
      const bool is_copy = std::string(spec.name) == "wte" && r == last_rank && r != 0;
      uint32_t expected_flags = ref->flags;
      if (std::string(spec.name) == "wte" && cut.pp > 1)
        expected_flags |= KEEL_PARAM_STAGE_TIED | (is_copy ? KEEL_PARAM_STAGE_COPY : 0u);
      EXPECT_EQ(spec.flags, expected_flags) << spec.name << " on rank " << r;
    }
  }
  for (size_t i = 0; i < ws.count(); ++i) {
    const std::string name = ws.spec(i).name;
    EXPECT_EQ(holders[name], name == "wte" && cut.pp > 1 ? 2 : 1) << name << ": ranks declaring it";
  }

  const std::vector<float> whole_loss = run_chain(whole_ranks, Cut{}, Backward::kFull);
  const std::vector<float> loss = run_chain(ranks, cut, backward);
  for (int mb = 0; mb < 2; ++mb)
    EXPECT_NEAR(loss[mb], whole_loss[mb], 1e-6 * std::fabs(whole_loss[mb])) << "micro-batch " << mb;

  // Every gradient against the whole model's, summed over the ranks that hold the name.
  for (size_t w = 0; w < wg.count(); ++w) {
    const std::string name = wg.spec(w).name;
    std::vector<float> sum(wg.grad(w).size(), 0.0f);
    for (auto& rank : ranks) {
      size_t i = 0;
      if (!rank->store().find(name, &i)) continue;
      for (size_t k = 0; k < sum.size(); ++k) sum[k] += rank->store().grad(i)[k];
    }
    float max_abs = 0;
    for (float g : wg.grad(w)) max_abs = std::max(max_abs, std::fabs(g));
    EXPECT_GT(max_abs, 0.0f) << name << ": the whole model's gradient is zero, so it proves nothing";
    size_t off = 0;
    float worst = 0;
    for (size_t k = 0; k < sum.size(); ++k)
      if (std::fabs(sum[k] - wg.grad(w)[k]) > worst) worst = std::fabs(sum[k] - wg.grad(w)[k]), off = k;
    EXPECT_LE(worst, 1e-6f * max_abs) << name << "[" << off << "]: pipeline " << sum[off] << ", whole model "
                                      << wg.grad(w)[off] << " (max |g| " << max_abs << ")";
  }
  for (int32_t r = 0; r < cut.pp; ++r) {
    const auto& v = ranks[r]->store().violations();
    EXPECT_TRUE(v.empty()) << "rank " << r << ": " << (v.empty() ? "" : v.front());
  }
}

// A split backward (INPUT parts, then WEIGHT parts) gives the very bits of the full backward: each
// gradient buffer sums the same products in the same order.
void expect_split_backward_equals_full(const Cut& cut) {
  SCOPED_TRACE(cut.text());
  Rank whole(gpt_api(), kModel, 0, Cut{});
  ASSERT_EQ(whole.status(), KEEL_OK) << g_last_error;
  fill_whole_model(whole.store());
  auto full = make_ranks(cut, whole.store()), split = make_ranks(cut, whole.store());
  ASSERT_EQ(full.size(), static_cast<size_t>(cut.pp));
  ASSERT_EQ(split.size(), static_cast<size_t>(cut.pp));
  EXPECT_EQ(split[0]->splits_backward(), 1);
  const std::vector<float> full_loss = run_chain(full, cut, Backward::kFull);
  const std::vector<float> split_loss = run_chain(split, cut, Backward::kSplit);
  EXPECT_EQ(full_loss, split_loss);
  for (int32_t r = 0; r < cut.pp; ++r) {
    ParamStore& f = full[r]->store();
    ParamStore& s = split[r]->store();
    for (size_t i = 0; i < f.count(); ++i) {
      size_t differing = 0, first = 0;
      for (size_t k = f.grad(i).size(); k-- > 0;)
        if (f.grad(i)[k] != s.grad(i)[k]) ++differing, first = k;
      EXPECT_EQ(differing, 0u) << "rank " << r << " " << f.spec(i).name << ": " << differing << " elements differ; ["
                               << first << "] full " << f.grad(i)[first] << ", split " << s.grad(i)[first];
    }
    EXPECT_TRUE(s.violations().empty()) << "rank " << r << ": " << (s.violations().empty() ? "" : s.violations().front());
  }
}

TEST(GptPipelineChunks, TwoStagesMatchTheWholeModel) { expect_cut_matches_whole_model({2, 1, {}}); }
TEST(GptPipelineChunks, FourStagesMatchTheWholeModel) { expect_cut_matches_whole_model({4, 1, {}}); }
TEST(GptPipelineChunks, InterleavedChunksMatchTheWholeModel) { expect_cut_matches_whole_model({2, 2, {}}); }
TEST(GptPipelineChunks, UnevenStageBlocksMatchTheWholeModel) {
  expect_cut_matches_whole_model({2, 1, {3, 1}});
  expect_cut_matches_whole_model({3, 1, {1, 2, 1}});
}

TEST(GptPipelineChunks, SplitBackwardGivesTheFullBackwardsBits) {
  expect_split_backward_equals_full({1, 1, {}});
  expect_split_backward_equals_full({2, 1, {}});
  expect_split_backward_equals_full({2, 2, {}});
  expect_split_backward_equals_full({3, 1, {1, 2, 1}});
}
TEST(GptPipelineChunks, SplitBackwardMatchesTheWholeModel) {
  expect_cut_matches_whole_model({2, 2, {}}, Backward::kSplit);
}

TEST(GptPipelineChunks, WeightPartWithoutItsInputPartIsRefused) {
  Rank whole(gpt_api(), kModel, 0, Cut{});
  ASSERT_EQ(whole.status(), KEEL_OK) << g_last_error;
  const MicroBatches mbs;
  whole.forward(3, 0, mbs.tokens[0], mbs.targets[0], nullptr, nullptr);
  g_last_error.clear();
  EXPECT_EQ(whole.backward(3, 0, 1.0f, nullptr, nullptr, KEEL_BACKWARD_WEIGHT), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(g_last_error.find("micro-batch 3, chunk 0: KEEL_BACKWARD_WEIGHT without its KEEL_BACKWARD_INPUT"),
            std::string::npos) << g_last_error;
  EXPECT_EQ(whole.backward(3, 0, 1.0f, nullptr, nullptr, KEEL_BACKWARD_INPUT), KEEL_OK) << g_last_error;
  EXPECT_EQ(whole.backward(3, 0, 1.0f, nullptr, nullptr, KEEL_BACKWARD_WEIGHT), KEEL_OK) << g_last_error;
  EXPECT_EQ(whole.backward(3, 0, 1.0f, nullptr, nullptr, KEEL_BACKWARD_WEIGHT), KEEL_ERR_INVALID_ARGUMENT);
}

// Memory follows the micro-batches in flight (1F1B's bound), not the ids ever seen: a finished
// backward's activations serve the next forward of the same chunk.
TEST(GptPipelineChunks, ActivationsOfAFinishedBackwardAreReused) {
  Rank whole(gpt_api(), kModel, 0, Cut{});
  ASSERT_EQ(whole.status(), KEEL_OK) << g_last_error;
  const MicroBatches mbs;
  g_log.clear();
  for (int32_t mb = 0; mb < 4; ++mb) {  // one in flight at a time, distinct ids
    whole.forward(mb, 0, mbs.tokens[0], mbs.targets[0], nullptr, nullptr);
    ASSERT_EQ(whole.backward(mb, 0, 1.0f, nullptr, nullptr), KEEL_OK) << g_last_error;
  }
  EXPECT_EQ(activation_allocations(), 1u);
  for (int32_t mb = 4; mb < 8; mb += 2) {  // two in flight, the second split into INPUT and WEIGHT
    whole.forward(mb, 0, mbs.tokens[0], mbs.targets[0], nullptr, nullptr);
    whole.forward(mb + 1, 0, mbs.tokens[1], mbs.targets[1], nullptr, nullptr);
    ASSERT_EQ(whole.backward(mb, 0, 1.0f, nullptr, nullptr), KEEL_OK) << g_last_error;
    ASSERT_EQ(whole.backward(mb + 1, 0, 1.0f, nullptr, nullptr, KEEL_BACKWARD_INPUT), KEEL_OK) << g_last_error;
    ASSERT_EQ(whole.backward(mb + 1, 0, 1.0f, nullptr, nullptr, KEEL_BACKWARD_WEIGHT), KEEL_OK) << g_last_error;
  }
  EXPECT_EQ(activation_allocations(), 2u);
}

void expect_cut_refused(const Cut& cut, const std::vector<std::string>& parts) {
  SCOPED_TRACE(cut.text());
  Rank rank(gpt_api(), kModel, 0, cut);
  EXPECT_EQ(rank.status(), KEEL_ERR_INVALID_CONFIG);
  for (const auto& part : parts)
    EXPECT_NE(g_last_error.find(part), std::string::npos) << "message \"" << g_last_error << "\" lacks \"" << part << "\"";
}

TEST(GptPipelineChunks, BadCutsAreRefusedWithTheNumbers) {
  expect_cut_refused({3, 1, {}}, {"parallel.pp 3", "3 chunks", "model.n_layer 4", "parallel.layers_per_stage"});
  expect_cut_refused({2, 3, {}}, {"parallel.virtual_stages 3", "6 chunks", "model.n_layer 4"});
  expect_cut_refused({2, 1, {1, 2, 1}}, {"parallel.layers_per_stage [1, 2, 1]", "3 entries", "need 2"});
  expect_cut_refused({2, 1, {1, 2}}, {"parallel.layers_per_stage [1, 2]", "sums to 3", "model.n_layer is 4"});
  expect_cut_refused({2, 1, {4, 0}}, {"parallel.layers_per_stage [4, 0]", "entry 1 is 0", "at least 1"});
  expect_cut_refused({2, -1, {}}, {"parallel.virtual_stages", "at least 1", "-1"});
}

// A core before 0.7 passes a shorter create struct: the model is whole, whatever lies beyond it.
TEST(GptPipelineChunks, AnOlderCreateStructMeansTheWholeModel) {
  Rank full(gpt_api(), kModel, 0, Cut{});
  Rank old(gpt_api(), kModel, 1, Cut{2, 1, {}}, offsetof(keel_model_create_args, pp_rank));
  ASSERT_EQ(old.status(), KEEL_OK) << g_last_error;
  EXPECT_EQ(old.info().n_params, full.info().n_params);
}

TEST(GptPipelineChunks, MlpModelRefusesPipelineNamingTheSetting) {
  Rank rank(mlp_api(), R"({"plugin":"mlp","n_layer":2,"d_model":8,"vocab_size":37,"seq_len":8})", 0, Cut{2, 1, {}});
  EXPECT_EQ(rank.status(), KEEL_ERR_UNIMPLEMENTED);
  EXPECT_NE(g_last_error.find("parallel.pp"), std::string::npos) << g_last_error;
  EXPECT_NE(g_last_error.find("pp_size 2"), std::string::npos) << g_last_error;
}

}  // namespace
