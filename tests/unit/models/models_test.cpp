// The gpt and mlp model plugins, loaded exactly as the core loads them (dlopen, one entry
// symbol) next to the cpu backend, and held to independent oracles: central finite
// differences of the loss for every gradient, the access protocol a strategy relies on
// (acquire/release order, grads_final once per layer, the tied layer final only at its last
// use), ln(V) at init, logits that reproduce the loss, and config errors that name the JSON
// path. This file plays the strategy (a keel_param_access over plain host buffers) and the
// host (error capture, logging, a simple deterministic init).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <keel/keel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace {

// ---------------------------------------------------------------------------------------------
// The host: the last error per thread, logging to stderr, and a deterministic init.

thread_local std::string g_last_error;

keel_status host_set_error(keel_status code, const char* message) {
  g_last_error = message ? message : "";
  return code;
}

std::vector<std::string> g_log;  // every message, for tests of what a model logs

void host_log(int32_t level, const char* source, const char* message) {
  std::fprintf(stderr, "[log %d] %s: %s\n", level, source, message);
  g_log.push_back(std::string(source) + ": " + message);
}

// splitmix64: a hash good enough to make reproducible pseudo-random numbers from an index.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

double uniform01(uint64_t key) { return (static_cast<double>(mix(key) >> 11) + 0.5) / 9007199254740992.0; }

// A standard normal from (seed, name, index) by Box-Muller; not the core's generator, only
// deterministic, which is all these tests need.
float gaussian(uint64_t seed, const std::string& name, int64_t index) {
  uint64_t key = seed;
  for (char c : name) key = mix(key ^ static_cast<uint8_t>(c));
  key = mix(key ^ static_cast<uint64_t>(index));
  double u1 = uniform01(key), u2 = uniform01(key + 1);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

int64_t row_length(const keel_param_spec& spec) {
  int64_t n = 1;
  for (int d = 1; d < spec.ndim; ++d) n *= spec.global_shape[d];
  return n;
}

keel_status host_init_param(const keel_param_spec* spec, uint64_t seed, int64_t begin, int64_t count,
                            float* out_host) {
  const int64_t row = row_length(*spec);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t index = begin + i;
    float v = 0.0f;
    if (spec->init_rows < 0 || index / row < spec->init_rows) {
      if (spec->init == KEEL_INIT_ONES) v = 1.0f;
      if (spec->init == KEEL_INIT_NORMAL) v = spec->init_std * gaussian(seed, spec->name, index);
    }
    out_host[i] = v;
  }
  return KEEL_OK;
}

const keel_host kHost = {sizeof(keel_host), KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR, host_set_error, host_log,
                         host_init_param};

// ---------------------------------------------------------------------------------------------
// Plugins, loaded as the core does.

const keel_plugin_info* load_plugin(const char* path, int32_t kind, const char* name) {
  void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);  // never closed: the tables are static in it
  if (!library) {
    ADD_FAILURE() << "dlopen " << path << ": " << dlerror();
    return nullptr;
  }
  auto entry = reinterpret_cast<keel_plugin_entry_fn>(dlsym(library, KEEL_PLUGIN_ENTRY_SYMBOL));
  if (!entry) {
    ADD_FAILURE() << path << " has no " << KEEL_PLUGIN_ENTRY_SYMBOL;
    return nullptr;
  }
  const keel_plugin_list* list = entry();
  EXPECT_EQ(list->abi_major, static_cast<uint32_t>(KEEL_ABI_VERSION_MAJOR));
  for (size_t i = 0; i < list->count; ++i) {
    const keel_plugin_info& info = list->plugins[i];
    if (info.kind == kind && std::string(info.name) == name) return &info;
  }
  ADD_FAILURE() << path << " holds no plugin named " << name;
  return nullptr;
}

const keel_backend_api* cpu_backend_api() {
  static const keel_plugin_info* info = load_plugin(KEEL_CPU_PLUGIN_PATH, KEEL_KIND_BACKEND, "cpu");
  return info ? static_cast<const keel_backend_api*>(info->api) : nullptr;
}

const keel_model_api* model_api(const std::string& name) {
  static const keel_plugin_info* gpt = load_plugin(KEEL_GPT_PLUGIN_PATH, KEEL_KIND_MODEL, "gpt");
  static const keel_plugin_info* mlp = load_plugin(KEEL_MLP_PLUGIN_PATH, KEEL_KIND_MODEL, "mlp");
  const keel_plugin_info* info = name == "gpt" ? gpt : mlp;
  return info ? static_cast<const keel_model_api*>(info->api) : nullptr;
}

// ---------------------------------------------------------------------------------------------
// The strategy's side: one host buffer per parameter and per gradient, and a log of calls.

struct AccessEvent {
  bool acquire;
  int32_t layer;
  int32_t phase;
  int32_t grads_final;  // release only
  bool operator==(const AccessEvent& o) const {
    return acquire == o.acquire && layer == o.layer && phase == o.phase && grads_final == o.grads_final;
  }
};

std::string describe_event(const AccessEvent& e) {
  return std::string(e.acquire ? "acquire(" : "release(") + std::to_string(e.layer) +
         (e.phase == KEEL_PHASE_FORWARD ? ", fwd" : ", bwd") +
         (e.acquire ? ")" : e.grads_final ? ", final)" : ", not final)");
}

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using HostFloats = std::unique_ptr<float[], FreeDeleter>;

HostFloats alloc_floats(int64_t n) {
  size_t bytes = (static_cast<size_t>(n) * sizeof(float) + 63) / 64 * 64;
  auto* p = static_cast<float*>(std::aligned_alloc(64, bytes));
  std::fill(p, p + n, 0.0f);
  return HostFloats(p);
}

class HostParamStore {
 public:
  explicit HostParamStore(const keel_model_info& info) : info_(info) {
    for (size_t i = 0; i < info.n_params; ++i) {
      const keel_param_spec& s = info.params[i];
      int64_t n = 1;
      for (int d = 0; d < s.ndim; ++d) n *= s.local_shape[d];
      sizes_.push_back(n);
      params_.push_back(alloc_floats(n));
      grads_.push_back(alloc_floats(n));
    }
    access_.struct_size = sizeof access_;
    access_.ctx = this;
    access_.acquire = &HostParamStore::acquire;
    access_.release = &HostParamStore::release;
  }

  const keel_param_access* access() const { return &access_; }
  size_t count() const { return info_.n_params; }
  const keel_param_spec& spec(size_t i) const { return info_.params[i]; }
  int64_t size(size_t i) const { return sizes_[i]; }
  float* param(size_t i) { return params_[i].get(); }
  float* grad(size_t i) { return grads_[i].get(); }
  std::vector<AccessEvent>& events() { return events_; }
  const std::vector<std::string>& violations() const { return violations_; }

  // Each parameter from its spec (the host's init), then, if `jitter` > 0, plus N(0, jitter)
  // so norm gains and biases are not exactly 1 and 0 and every path carries gradient.
  void fill(uint64_t seed, float jitter) {
    for (size_t i = 0; i < count(); ++i) {
      host_init_param(&spec(i), seed, 0, size(i), param(i));
      if (jitter > 0)
        for (int64_t k = 0; k < size(i); ++k) param(i)[k] += jitter * gaussian(seed + 1, spec(i).name, k);
    }
  }
  void zero_grads() {
    for (size_t i = 0; i < count(); ++i) std::fill(grad(i), grad(i) + size(i), 0.0f);
  }
  size_t index_of(const std::string& name) const {
    for (size_t i = 0; i < count(); ++i)
      if (name == spec(i).name) return i;
    ADD_FAILURE() << "no parameter named " << name;
    return 0;
  }

 private:
  static keel_tensor describe(float* data, const keel_param_spec& s) {
    keel_tensor t{};
    t.data = data;
    t.device = {KEEL_DEVICE_CPU, 0};
    t.ndim = s.ndim;
    t.dtype = {KEEL_DTYPE_FLOAT, 32, 1};
    for (int d = 0; d < s.ndim; ++d) t.shape[d] = s.local_shape[d];
    return t;
  }

  static keel_status acquire(void* ctx, int32_t layer, int32_t phase, keel_tensor* params, keel_tensor* grads,
                             size_t n) {
    auto* self = static_cast<HostParamStore*>(ctx);
    self->events_.push_back({true, layer, phase, 0});
    if (!self->held_.insert(layer).second)
      self->violations_.push_back("layer " + std::to_string(layer) + " acquired while already held");
    if (phase == KEEL_PHASE_BACKWARD && !grads)
      self->violations_.push_back("backward acquire of layer " + std::to_string(layer) + " without grads");
    size_t k = 0;
    for (size_t i = 0; i < self->count(); ++i) {
      const keel_param_spec& s = self->spec(i);
      if (s.layer != layer) continue;
      if (k == n) return host_set_error(KEEL_ERR_INVALID_ARGUMENT, "acquire: n is smaller than the layer");
      params[k] = describe(self->param(i), s);
      if (grads) grads[k] = describe(self->grad(i), s);
      ++k;
    }
    if (k != n) return host_set_error(KEEL_ERR_INVALID_ARGUMENT, "acquire: n does not match the layer's size");
    return KEEL_OK;
  }

  static keel_status release(void* ctx, int32_t layer, int32_t phase, int32_t grads_final) {
    auto* self = static_cast<HostParamStore*>(ctx);
    self->events_.push_back({false, layer, phase, grads_final});
    if (!self->held_.erase(layer))
      self->violations_.push_back("layer " + std::to_string(layer) + " released but not held");
    return KEEL_OK;
  }

  keel_model_info info_;
  keel_param_access access_{};
  std::vector<int64_t> sizes_;
  std::vector<HostFloats> params_, grads_;
  std::vector<AccessEvent> events_;
  std::set<int32_t> held_;
  std::vector<std::string> violations_;
};

// ---------------------------------------------------------------------------------------------
// One backend + one model + its parameters, driven through the C tables.

class ModelRig {
 public:
  ModelRig(const std::string& model_name, const std::string& model_json) : model_name_(model_name) {
    backend_api_ = cpu_backend_api();
    api_ = model_api(model_name);
    if (!backend_api_ || !api_) return;
    keel_backend_create_args bargs{sizeof bargs, "{\"plugin\":\"cpu\"}", "backend"};
    if (backend_api_->create(&kHost, &bargs, &backend_) != KEEL_OK) {
      ADD_FAILURE() << "cpu backend create: " << g_last_error;
      return;
    }
    keel_model_create_args margs{sizeof margs, model_json.c_str(), "model", backend_api_, backend_, 0, 1};
    if (api_->create(&kHost, &margs, &model_) != KEEL_OK) {
      ADD_FAILURE() << model_name << " create: " << g_last_error;
      return;
    }
    info_.struct_size = sizeof info_;
    if (api_->describe(model_, &info_) != KEEL_OK) {
      ADD_FAILURE() << model_name << " describe: " << g_last_error;
      return;
    }
    store_ = std::make_unique<HostParamStore>(info_);
  }
  ~ModelRig() {
    if (model_) api_->destroy(model_);
    if (backend_) backend_api_->destroy(backend_);
  }
  bool ok() const { return store_ != nullptr; }
  HostParamStore& store() { return *store_; }
  const keel_model_info& info() const { return info_; }
  const keel_model_api* api() const { return api_; }
  void* model() const { return model_; }

  // Mean loss over targets >= 0 (targets non-empty) or, with targets empty, the logits.
  keel_status forward(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets, int32_t B,
                      int32_t T, int32_t microbatch, float* out_loss, std::vector<float>* out_logits = nullptr) {
    keel_forward_args args{};
    args.struct_size = sizeof args;
    args.access = store_->access();
    args.microbatch = microbatch;
    args.batch = B;
    args.seq_len = T;
    args.tokens = tokens.data();
    args.targets = targets.empty() ? nullptr : targets.data();
    keel_status s = api_->forward(model_, &args);
    if (s != KEEL_OK) return s;
    if (out_loss) *out_loss = args.loss;
    if (out_logits) {
      out_logits->resize(static_cast<size_t>(B) * T * info_.padded_vocab_size);
      backend_api_->copy(backend_, out_logits->data(), args.logits, out_logits->size() * sizeof(float),
                         KEEL_COPY_DEVICE_TO_HOST);
    }
    return KEEL_OK;
  }
  keel_status backward(int32_t microbatch, float loss_scale) {
    keel_backward_args args{sizeof args, store_->access(), microbatch, loss_scale};
    return api_->backward(model_, &args);
  }

 private:
  std::string model_name_;
  const keel_backend_api* backend_api_ = nullptr;
  const keel_model_api* api_ = nullptr;
  void* backend_ = nullptr;
  void* model_ = nullptr;
  keel_model_info info_{};
  std::unique_ptr<HostParamStore> store_;
};

std::vector<int32_t> random_ids(int64_t n, int32_t vocab, uint64_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(mix(seed * 1000003 + i) % vocab);
  return ids;
}

const char* kTinyGpt =
    R"({"plugin":"gpt","n_layer":2,"n_head":2,"d_model":8,"vocab_size":37,"seq_len":8})";
const char* kTinyMlp = R"({"plugin":"mlp","n_layer":2,"d_model":8,"vocab_size":37,"seq_len":8})";

// ---------------------------------------------------------------------------------------------
// (a) Every gradient against central finite differences.
//
// The loss is computed in fp32, so a difference quotient carries rounding noise of about
// |L|·2^-24/eps ≈ 4·6e-8/1e-2 ≈ 2.4e-5, and truncation error eps²·L'''/6. With eps = 1e-2
// (parameters are O(0.3), gradients O(0.1)) an element passes when
// |fd - analytic| <= 2e-4·max|analytic in its tensor| + 2e-3·|analytic| + 5e-5; the printed
// worst error/tolerance ratios show the margin. A wrong gradient (a missing term, a transposed
// product, a lost residual path) is off by O(1) of the tensor's scale and fails by orders of
// magnitude.
void check_gradients_by_finite_differences(const std::string& model_name, const char* config) {
  ModelRig rig(model_name, config);
  ASSERT_TRUE(rig.ok());
  HostParamStore& store = rig.store();
  // Larger than GPT-2's 0.02 init, so logits and attention scores are O(1) and every
  // nonlinearity is exercised away from its linear regime.
  store.fill(/*seed=*/7, /*jitter=*/0.3f);
  const int32_t B = 2, T = 5, V = rig.info().vocab_size;
  std::vector<int32_t> tokens = random_ids(B * T, V, 1);
  std::vector<int32_t> targets = random_ids(B * T, V, 2);
  targets[3] = -1;  // an ignored position: it must contribute neither loss nor gradient

  float loss = 0;
  ASSERT_EQ(rig.forward(tokens, targets, B, T, 0, &loss), KEEL_OK) << g_last_error;
  store.zero_grads();
  ASSERT_EQ(rig.backward(0, 1.0f), KEEL_OK) << g_last_error;

  const float eps = 1e-2f;
  int checked = 0;
  for (size_t p = 0; p < store.count(); ++p) {
    const float* grad = store.grad(p);
    float* param = store.param(p);
    const int64_t n = store.size(p);
    float max_abs_grad = 0;
    for (int64_t k = 0; k < n; ++k) max_abs_grad = std::max(max_abs_grad, std::fabs(grad[k]));
    // Up to 96 elements per tensor, spread over it (so wte's padded rows are sampled too).
    const int64_t stride = std::max<int64_t>(1, n / 96);
    float worst = 0, worst_fd = 0;
    int64_t worst_k = 0;
    int failed = 0;
    for (int64_t k = 0; k < n; k += stride) {
      const float original = param[k];
      float loss_plus = 0, loss_minus = 0;
      param[k] = original + eps;
      ASSERT_EQ(rig.forward(tokens, targets, B, T, 1, &loss_plus), KEEL_OK) << g_last_error;
      param[k] = original - eps;
      ASSERT_EQ(rig.forward(tokens, targets, B, T, 1, &loss_minus), KEEL_OK) << g_last_error;
      param[k] = original;
      const float fd = (loss_plus - loss_minus) / (2 * eps);
      const float error = std::fabs(fd - grad[k]);
      const float tolerance = 2e-4f * max_abs_grad + 2e-3f * std::fabs(grad[k]) + 5e-5f;
      if (error / tolerance > worst) worst = error / tolerance, worst_k = k, worst_fd = fd;
      failed += error > tolerance;
      ++checked;
    }
    std::printf("  %-22s max|g| %.3e  worst error/tolerance %.3f at [%lld]\n", store.spec(p).name, max_abs_grad,
                worst, static_cast<long long>(worst_k));
    EXPECT_EQ(failed, 0) << model_name << " " << store.spec(p).name << ": " << failed
                         << " elements off; worst [" << worst_k << "]: analytic " << grad[worst_k]
                         << ", finite difference " << worst_fd;
  }
  std::printf("%s: %d elements checked, loss %.6f\n", model_name.c_str(), checked, loss);
}

TEST(GptModel, GradientsMatchFiniteDifferences) { check_gradients_by_finite_differences("gpt", kTinyGpt); }
TEST(MlpModel, GradientsMatchFiniteDifferences) { check_gradients_by_finite_differences("mlp", kTinyMlp); }

// ---------------------------------------------------------------------------------------------
// (b) The access protocol, as a strategy (DDP's overlap, ZeRO-3's gathers) relies on it.

std::vector<AccessEvent> layer_visit(int32_t layer, int32_t phase, int32_t final_flag) {
  return {{true, layer, phase, 0}, {false, layer, phase, final_flag}};
}

void expect_events(HostParamStore& store, const std::vector<AccessEvent>& expected, const char* what) {
  const auto& got = store.events();
  std::string got_text, expected_text;
  for (const auto& e : got) got_text += describe_event(e) + " ";
  for (const auto& e : expected) expected_text += describe_event(e) + " ";
  EXPECT_EQ(got_text, expected_text) << what;
  EXPECT_TRUE(store.violations().empty()) << what << ": " << (store.violations().empty() ? "" : store.violations()[0]);
  store.events().clear();
}

TEST(GptModel, AccessProtocolVisitsEachLayerAndReleasesTiedLayerFinalLast) {
  ModelRig rig("gpt", kTinyGpt);
  ASSERT_TRUE(rig.ok());
  rig.store().fill(3, 0);
  const int32_t B = 2, T = 4, L = 2, F = KEEL_PHASE_FORWARD, W = KEEL_PHASE_BACKWARD;
  auto tokens = random_ids(B * T, 37, 5), targets = random_ids(B * T, 37, 6);
  ASSERT_EQ(rig.info().n_layers, L + 2);

  float loss = 0;
  ASSERT_EQ(rig.forward(tokens, targets, B, T, 0, &loss), KEEL_OK) << g_last_error;
  std::vector<AccessEvent> expected;
  for (int32_t layer = 0; layer <= L + 1; ++layer) {
    auto v = layer_visit(layer, F, 0);
    expected.insert(expected.end(), v.begin(), v.end());
  }
  auto head = layer_visit(0, F, 0);  // the tied lm_head
  expected.insert(expected.end(), head.begin(), head.end());
  expect_events(rig.store(), expected, "forward");

  ASSERT_EQ(rig.backward(0, 1.0f), KEEL_OK) << g_last_error;
  expected = layer_visit(0, W, 0);  // lm_head first: wte's gradient is not final yet
  for (int32_t layer = L + 1; layer >= 0; --layer) {
    auto v = layer_visit(layer, W, 1);
    expected.insert(expected.end(), v.begin(), v.end());
  }
  expect_events(rig.store(), expected, "backward");
  // A second backward of the same forward is a caller's bug, reported as such.
  EXPECT_EQ(rig.backward(0, 1.0f), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(g_last_error.find("micro-batch 0"), std::string::npos) << g_last_error;
}

TEST(MlpModel, AccessProtocolVisitsEachLayerOnce) {
  ModelRig rig("mlp", kTinyMlp);
  ASSERT_TRUE(rig.ok());
  rig.store().fill(3, 0);
  const int32_t B = 2, T = 4, L = 2;
  auto tokens = random_ids(B * T, 37, 5), targets = random_ids(B * T, 37, 6);
  float loss = 0;
  ASSERT_EQ(rig.forward(tokens, targets, B, T, 0, &loss), KEEL_OK) << g_last_error;
  std::vector<AccessEvent> expected;
  for (int32_t layer = 0; layer <= L + 1; ++layer) {
    auto v = layer_visit(layer, KEEL_PHASE_FORWARD, 0);
    expected.insert(expected.end(), v.begin(), v.end());
  }
  expect_events(rig.store(), expected, "forward");
  ASSERT_EQ(rig.backward(0, 1.0f), KEEL_OK) << g_last_error;
  expected.clear();
  for (int32_t layer = L + 1; layer >= 0; --layer) {
    auto v = layer_visit(layer, KEEL_PHASE_BACKWARD, 1);
    expected.insert(expected.end(), v.begin(), v.end());
  }
  expect_events(rig.store(), expected, "backward");
}

// Activations are kept per micro-batch id: two forwards in flight, then their backwards in
// the other order, accumulate exactly the gradients of the two run one after the other, and
// loss_scale multiplies the gradient.
void check_microbatches_are_independent(const std::string& model_name, const char* config) {
  ModelRig rig(model_name, config);
  ASSERT_TRUE(rig.ok());
  HostParamStore& store = rig.store();
  store.fill(11, 0.1f);
  const int32_t B = 2, T = 6, V = rig.info().vocab_size;
  auto tokens_a = random_ids(B * T, V, 21), targets_a = random_ids(B * T, V, 22);
  auto tokens_b = random_ids(B * T, V, 23), targets_b = random_ids(B * T, V, 24);
  float loss = 0;

  std::vector<std::vector<float>> expected(store.count());
  store.zero_grads();
  for (int pass = 0; pass < 2; ++pass) {
    ASSERT_EQ(rig.forward(pass ? tokens_b : tokens_a, pass ? targets_b : targets_a, B, T, 5, &loss), KEEL_OK);
    ASSERT_EQ(rig.backward(5, 0.25f), KEEL_OK) << g_last_error;
  }
  for (size_t p = 0; p < store.count(); ++p) expected[p].assign(store.grad(p), store.grad(p) + store.size(p));

  store.zero_grads();
  ASSERT_EQ(rig.forward(tokens_a, targets_a, B, T, 0, &loss), KEEL_OK);
  ASSERT_EQ(rig.forward(tokens_b, targets_b, B, T, 1, &loss), KEEL_OK);
  ASSERT_EQ(rig.backward(1, 0.5f), KEEL_OK) << g_last_error;
  ASSERT_EQ(rig.backward(0, 0.5f), KEEL_OK) << g_last_error;
  for (size_t p = 0; p < store.count(); ++p) {
    float max_abs = 0;
    for (float g : expected[p]) max_abs = std::max(max_abs, std::fabs(g));
    for (int64_t k = 0; k < store.size(p); ++k) {
      // 2x the gradients of the same sums (scale 0.5 vs 0.25), up to fp32 rounding of sums
      // taken in another order.
      ASSERT_NEAR(store.grad(p)[k], 2 * expected[p][k], 1e-5f * max_abs + 1e-9f)
          << model_name << " " << store.spec(p).name << "[" << k << "]";
    }
  }
}

TEST(GptModel, MicrobatchesKeepSeparateActivations) { check_microbatches_are_independent("gpt", kTinyGpt); }

// Activation recomputation: "selective" and "full" give "none"'s loss and gradients bit for bit,
// with two micro-batches in flight, so the second forward overwrites the one-block recompute
// buffer before the first one's backward recomputes into it.
TEST(GptModel, RecomputeGivesTheSameBitsAsKeepingEverything) {
  const int32_t B = 2, T = 4;
  const auto tokens_a = random_ids(B * T, 37, 1), targets_a = random_ids(B * T, 37, 2);
  const auto tokens_b = random_ids(B * T, 37, 3), targets_b = random_ids(B * T, 37, 4);
  auto run = [&](const char* mode, std::vector<float>* losses) {
    const std::string json = R"({"plugin":"gpt","n_layer":2,"n_head":2,"d_model":8,"vocab_size":37,"seq_len":8,)"
                             R"("recompute":")" + std::string(mode) + R"("})";
    ModelRig rig("gpt", json);
    std::vector<std::vector<float>> grads;
    if (!rig.ok()) return grads;
    rig.store().fill(3, 0);
    rig.store().zero_grads();
    float loss_a = 0, loss_b = 0;
    EXPECT_EQ(rig.forward(tokens_a, targets_a, B, T, 0, &loss_a), KEEL_OK) << g_last_error;
    EXPECT_EQ(rig.forward(tokens_b, targets_b, B, T, 1, &loss_b), KEEL_OK) << g_last_error;
    EXPECT_EQ(rig.backward(0, 0.5f), KEEL_OK) << g_last_error;
    EXPECT_EQ(rig.backward(1, 0.5f), KEEL_OK) << g_last_error;
    *losses = {loss_a, loss_b};
    for (size_t p = 0; p < rig.store().count(); ++p)
      grads.emplace_back(rig.store().grad(p), rig.store().grad(p) + rig.store().size(p));
    return grads;
  };
  std::vector<float> none_losses, losses;
  const auto none = run("none", &none_losses);
  ASSERT_FALSE(none.empty());
  for (const char* mode : {"selective", "full"}) {
    const auto grads = run(mode, &losses);
    ASSERT_EQ(grads.size(), none.size()) << mode;
    EXPECT_EQ(losses, none_losses) << mode;
    size_t nonzero = 0;
    for (size_t p = 0; p < none.size(); ++p) {
      EXPECT_EQ(0, std::memcmp(grads[p].data(), none[p].data(), none[p].size() * sizeof(float)))
          << mode << ": gradient of parameter " << p << " differs from recompute none's";
      for (float g : none[p]) nonzero += g != 0.0f;
    }
    EXPECT_GT(nonzero, 0u);  // the comparison compared something
  }
}
TEST(MlpModel, MicrobatchesKeepSeparateActivations) { check_microbatches_are_independent("mlp", kTinyMlp); }

// ---------------------------------------------------------------------------------------------
// (c) The loss at GPT-2's init is ln(V), and the inference logits reproduce the loss.

void check_loss_at_init_and_logits(const std::string& model_name, const char* config) {
  ModelRig rig(model_name, config);
  ASSERT_TRUE(rig.ok());
  rig.store().fill(1337, 0);  // the specs' own init: N(0, 0.02), ones, zeros
  const int32_t B = 8, T = 32, V = rig.info().vocab_size, Vp = rig.info().padded_vocab_size;
  auto tokens = random_ids(B * T, V, 31), targets = random_ids(B * T, V, 32);
  float loss = 0;
  ASSERT_EQ(rig.forward(tokens, targets, B, T, 0, &loss), KEEL_OK) << g_last_error;
  // With std-0.02 weights the logits have std ~0.02·sqrt(C) ≈ 0.16, which raises the expected
  // loss above ln(V) by about var/2 ≈ 0.013 (a little more for gpt, whose tied wte favours the
  // input token), and 256 positions leave a sampling spread of a few 0.01. 0.1 still tells
  // ln(V) = 5.30 from ln(Vp) = 5.55, a softmax over the padded columns too.
  EXPECT_NEAR(loss, std::log(static_cast<double>(V)), 0.1) << model_name;
  std::printf("%s: loss at init %.5f, ln(V) %.5f\n", model_name.c_str(), loss, std::log(static_cast<double>(V)));

  std::vector<float> logits;
  ASSERT_EQ(rig.forward(tokens, {}, B, T, 1, nullptr, &logits), KEEL_OK) << g_last_error;
  double sum = 0;
  for (int64_t row = 0; row < static_cast<int64_t>(B) * T; ++row) {
    const float* z = logits.data() + row * Vp;
    double max_z = z[0], sum_exp = 0;
    for (int32_t v = 0; v < V; ++v) max_z = std::max(max_z, static_cast<double>(z[v]));
    for (int32_t v = 0; v < V; ++v) sum_exp += std::exp(z[v] - max_z);
    sum += std::log(sum_exp) + max_z - z[targets[static_cast<size_t>(row)]];
    for (int32_t v = V; v < Vp; ++v) ASSERT_EQ(z[v], 0.0f) << "padded column " << v << ": its weight row is zero";
  }
  // Both are the same fp32 logits; only the log-sum-exp differs (fp32 in the backend, double
  // here), so 1e-5 relative is ample.
  EXPECT_NEAR(loss, sum / (B * T), 1e-5 * loss) << model_name;
}

TEST(GptModel, LossAtInitIsLnVAndLogitsReproduceIt) {
  check_loss_at_init_and_logits(
      "gpt", R"({"plugin":"gpt","n_layer":2,"n_head":4,"d_model":64,"vocab_size":200,"seq_len":32})");
}
TEST(MlpModel, LossAtInitIsLnVAndLogitsReproduceIt) {
  check_loss_at_init_and_logits("mlp", R"({"plugin":"mlp","n_layer":2,"d_model":64,"vocab_size":200,"seq_len":32})");
}

// ---------------------------------------------------------------------------------------------
// Param specs and FLOPs against published GPT-2 numbers.

TEST(GptModel, Gpt2SmallHasPublishedParameterCountAndFlops) {
  ModelRig rig("gpt", R"({"plugin":"gpt"})");  // defaults: GPT-2 small; creating allocates no parameters
  ASSERT_TRUE(rig.ok());
  const keel_model_info& info = rig.info();
  EXPECT_EQ(info.vocab_size, 50257);
  EXPECT_EQ(info.padded_vocab_size, 50304);
  EXPECT_EQ(info.n_layers, 14);
  int64_t total_unpadded = 0;
  for (size_t i = 0; i < info.n_params; ++i) {
    const keel_param_spec& s = info.params[i];
    int64_t n = 1;
    for (int d = 0; d < s.ndim; ++d) n *= s.global_shape[d];
    if (std::string(s.name) == "wte") {
      EXPECT_EQ(s.init_rows, 50257);
      EXPECT_TRUE(s.flags & KEEL_PARAM_TIED);
      n = 50257 * 768;
    }
    total_unpadded += n;
  }
  EXPECT_EQ(total_unpadded, 124439808);  // Hugging Face's count for "gpt2"
  EXPECT_EQ(info.n_params, 2u + 12u * 12u + 2u);
  EXPECT_STREQ(info.params[2].name, "h.0.ln_1.weight");
  EXPECT_STREQ(info.params[4].name, "h.0.attn.qkv.weight");
  EXPECT_STREQ(info.params[info.n_params - 1].name, "ln_f.bias");
  double flops = 0;
  ASSERT_EQ(rig.api()->flops_per_token(rig.model(), 1024, &flops), KEEL_OK);
  // 6·(124439808 - 1024·768 wpe) + 12·12·768·1024 (PaLM appendix B)
  EXPECT_DOUBLE_EQ(flops, 6.0 * (124439808.0 - 786432.0) + 12.0 * 12 * 768 * 1024);
}

// ---------------------------------------------------------------------------------------------
// (d) Config errors: the status, and a message naming the JSON path.

struct BadConfig {
  const char* json;
  std::vector<std::string> message_parts;
};

void expect_config_rejected(const std::string& model_name, const BadConfig& bad) {
  const keel_model_api* api = model_api(model_name);
  ASSERT_NE(api, nullptr);
  g_last_error.clear();
  EXPECT_EQ(api->validate_config(&kHost, bad.json, "model"), KEEL_ERR_INVALID_CONFIG) << bad.json;
  for (const auto& part : bad.message_parts)
    EXPECT_NE(g_last_error.find(part), std::string::npos) << "message \"" << g_last_error << "\" lacks \"" << part << "\"";
  // create reports the same error without touching the backend
  void* model = nullptr;
  keel_model_create_args args{sizeof args, bad.json, "model", cpu_backend_api(), nullptr, 0, 1};
  g_last_error.clear();
  EXPECT_EQ(api->create(&kHost, &args, &model), KEEL_ERR_INVALID_CONFIG) << bad.json;
  EXPECT_EQ(model, nullptr);
  EXPECT_NE(g_last_error.find(bad.message_parts[0]), std::string::npos) << g_last_error;
}

TEST(GptModel, BadConfigsNameTheJsonPath) {
  expect_config_rejected("gpt", {R"({"plugin":"gpt","n_layers":2})", {"model.n_layers", "did you mean \"n_layer\"", "model gpt"}});
  expect_config_rejected("gpt", {R"({"n_head":3,"d_model":8})", {"model.n_head", "must divide", "model.d_model"}});
  expect_config_rejected("gpt", {R"({"n_layer":"two"})", {"model.n_layer", "expected an integer", "\"two\""}});
  expect_config_rejected("gpt", {R"({"vocab_size":0})", {"model.vocab_size", "expected a value in"}});
  expect_config_rejected("gpt", {R"([1,2])", {"model", "expected an object"}});
  expect_config_rejected("gpt", {R"({"recompute":"some"})",
                                 {"model.recompute", "expected one of \"none\", \"selective\", \"full\"", "\"some\""}});
  expect_config_rejected("gpt", {R"({"recompute":true})", {"model.recompute", "expected a string"}});
  EXPECT_EQ(model_api("gpt")->validate_config(&kHost, kTinyGpt, "model"), KEEL_OK) << g_last_error;
}

TEST(MlpModel, BadConfigsNameTheJsonPath) {
  expect_config_rejected("mlp", {R"({"d_modle":8})", {"model.d_modle", "did you mean \"d_model\""}});
  expect_config_rejected("mlp", {R"({"n_layer":1.5})", {"model.n_layer", "expected an integer"}});
  // nothing to recompute: the key is the gpt model's, refused rather than ignored
  expect_config_rejected("mlp", {R"({"recompute":"full"})", {"model.recompute", "unknown key"}});
  EXPECT_EQ(model_api("mlp")->validate_config(&kHost, kTinyMlp, "model"), KEEL_OK) << g_last_error;
}

// Tensor parallelism's preconditions, each refused with the numbers and the config path (the
// arithmetic itself is checked on real ranks by tests/mpi/gpt_tensor_parallel_test.cpp).
struct TpCase {
  const char* model_json;
  int32_t tp_rank, tp_size, sequence_parallel;
  keel_status status;
  std::vector<std::string> parts;
};

void expect_tp_refused(const std::string& model_name, const TpCase& c) {
  const keel_backend_api* backend_api = cpu_backend_api();
  ASSERT_NE(backend_api, nullptr);
  void* backend = nullptr;
  keel_backend_create_args bargs{sizeof bargs, "{\"plugin\":\"cpu\"}", "backend"};
  ASSERT_EQ(backend_api->create(&kHost, &bargs, &backend), KEEL_OK) << g_last_error;
  void* model = nullptr;
  keel_model_create_args args{sizeof args, c.model_json, "model", backend_api, backend, c.tp_rank, c.tp_size};
  args.sequence_parallel = c.sequence_parallel;  // no tp communicator: the checks before it must speak first
  g_last_error.clear();
  EXPECT_EQ(model_api(model_name)->create(&kHost, &args, &model), c.status) << c.model_json;
  EXPECT_EQ(model, nullptr);
  for (const auto& part : c.parts) EXPECT_NE(g_last_error.find(part), std::string::npos) << g_last_error;
  backend_api->destroy(backend);
}

TEST(GptModel, TensorParallelPreconditionsAreRefusedWithNumbers) {
  const char* heads3 = R"({"plugin":"gpt","n_layer":1,"n_head":3,"d_model":12,"vocab_size":37,"seq_len":8})";
  const char* seq7 = R"({"plugin":"gpt","n_layer":1,"n_head":2,"d_model":8,"vocab_size":37,"seq_len":7})";
  expect_tp_refused("gpt", {kTinyGpt, 1, 2, 0, KEEL_ERR_INVALID_ARGUMENT, {"tp_size 2", "tp communicator"}});
  expect_tp_refused("gpt", {kTinyGpt, 0, 4, 0, KEEL_ERR_INVALID_CONFIG, {"model.n_head (2)", "parallel.tp = 4"}});
  expect_tp_refused("gpt", {heads3, 0, 3, 0, KEEL_ERR_INVALID_CONFIG, {"padded vocabulary (128", "parallel.tp = 3"}});
  expect_tp_refused("gpt", {seq7, 0, 2, 1, KEEL_ERR_INVALID_CONFIG, {"model.seq_len (7)", "sequence_parallel"}});
  expect_tp_refused("gpt", {kTinyGpt, 0, 1, 1, KEEL_ERR_INVALID_CONFIG, {"parallel.sequence_parallel", "tp > 1"}});
  expect_tp_refused("gpt", {kTinyGpt, 2, 2, 0, KEEL_ERR_INVALID_ARGUMENT, {"tp_rank 2", "tp_size 2"}});
}

// A stand-in tp communicator that only answers size and rank: creating a model communicates
// nothing, so create's checks and the specs it describes can be tested in one process.
int32_t g_fake_rank = 0;
keel_status fake_size(void*, int32_t* out) { return *out = 2, KEEL_OK; }
keel_status fake_rank(void*, int32_t* out) { return *out = g_fake_rank, KEEL_OK; }

TEST(GptModel, TensorParallelCreateChecksItsGroupAndBackendAndDescribesPieces) {
  const keel_backend_api* backend_api = cpu_backend_api();
  ASSERT_NE(backend_api, nullptr);
  void* backend = nullptr;
  keel_backend_create_args bargs{sizeof bargs, "{\"plugin\":\"cpu\"}", "backend"};
  ASSERT_EQ(backend_api->create(&kHost, &bargs, &backend), KEEL_OK) << g_last_error;
  keel_comm_api comm{};
  comm.struct_size = sizeof comm;
  comm.size = fake_size;
  comm.rank = fake_rank;
  int comm_obj = 0;
  keel_model_create_args args{sizeof args, kTinyGpt, "model", backend_api, backend, 1, 2};
  args.tp_comm = &comm;
  args.tp_comm_obj = &comm_obj;
  void* model = nullptr;

  g_fake_rank = 0;  // the group disagrees with tp_rank
  EXPECT_EQ(model_api("gpt")->create(&kHost, &args, &model), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(g_last_error.find("the tp communicator is rank 0 of 2, but tp_rank 1 of tp_size 2"), std::string::npos)
      << g_last_error;

  g_fake_rank = 1;  // a backend from before ABI 0.8 lacks the cross-entropy combine the model needs at any tp
  keel_backend_api old_backend = *backend_api;
  old_backend.struct_size = offsetof(keel_backend_api, probe);
  args.backend = &old_backend;
  EXPECT_EQ(model_api("gpt")->create(&kHost, &args, &model), KEEL_ERR_UNIMPLEMENTED);
  EXPECT_NE(g_last_error.find("crossentropy_combine"), std::string::npos) << g_last_error;
  old_backend = *backend_api;  // one without the vocabulary-row embedding, which tp > 1 needs
  old_backend.embedding_rows_forward = nullptr;
  EXPECT_EQ(model_api("gpt")->create(&kHost, &args, &model), KEEL_ERR_UNIMPLEMENTED);
  EXPECT_NE(g_last_error.find("embedding_rows_forward (ABI 0.6)"), std::string::npos) << g_last_error;

  args.backend = backend_api;
  ASSERT_EQ(model_api("gpt")->create(&kHost, &args, &model), KEEL_OK) << g_last_error;
  keel_model_info info{};
  info.struct_size = sizeof info;
  ASSERT_EQ(model_api("gpt")->describe(model, &info), KEEL_OK) << g_last_error;
  auto find = [&](const std::string& name) -> const keel_param_spec& {
    for (size_t i = 0; i < info.n_params; ++i)
      if (name == info.params[i].name) return info.params[i];
    ADD_FAILURE() << "no " << name;
    return info.params[0];
  };
  struct Piece {
    const char* name;
    std::vector<int64_t> offset, shape;
  };
  // C 8, 4C 32, Vp 128 over tp 2, rank 1: the second half along each tensor's tp_dim.
  for (const Piece& want : std::vector<Piece>{{"wte", {64, 0}, {64, 8}},
                                              {"wpe", {0, 0}, {8, 8}},
                                              {"h.0.attn.qkv.weight", {0, 4, 0}, {3, 4, 8}},
                                              {"h.0.attn.qkv.bias", {0, 4}, {3, 4}},
                                              {"h.0.attn.proj.weight", {0, 4}, {8, 4}},
                                              {"h.0.attn.proj.bias", {0}, {8}},
                                              {"h.1.mlp.fc.weight", {16, 0}, {16, 8}},
                                              {"h.1.mlp.fc.bias", {16}, {16}},
                                              {"h.1.mlp.proj.weight", {0, 16}, {8, 16}},
                                              {"ln_f.weight", {0}, {8}}}) {
    const keel_param_spec& spec = find(want.name);
    ASSERT_EQ(size_t(spec.ndim), want.shape.size()) << want.name;
    for (int d = 0; d < spec.ndim; ++d) {
      EXPECT_EQ(spec.local_offset[d], want.offset[size_t(d)]) << want.name << " dim " << d;
      EXPECT_EQ(spec.local_shape[d], want.shape[size_t(d)]) << want.name << " dim " << d;
    }
  }
  model_api("gpt")->destroy(model);
  backend_api->destroy(backend);
}

TEST(MlpModel, TensorParallelismIsRefusedNamingTheSetting) {
  expect_tp_refused("mlp", {kTinyMlp, 1, 2, 0, KEEL_ERR_UNIMPLEMENTED, {"parallel.tp", "tp_size 2"}});
}

// The qkv projection is declared (3, C, C), split along dim 1 (heads); the others as Megatron.
TEST(GptModel, ParameterSpecsDeclareTheirTensorParallelSplit) {
  ModelRig rig("gpt", kTinyGpt);
  ASSERT_TRUE(rig.ok());
  HostParamStore& store = rig.store();
  auto spec = [&](const char* name) { return store.spec(store.index_of(name)); };
  const keel_param_spec qkv = spec("h.0.attn.qkv.weight");
  EXPECT_EQ(qkv.ndim, 3);
  EXPECT_EQ(qkv.global_shape[0], 3);
  EXPECT_EQ(qkv.global_shape[1], 8);
  EXPECT_EQ(qkv.global_shape[2], 8);
  EXPECT_EQ(qkv.tp_dim, 1);
  EXPECT_EQ(spec("h.0.attn.qkv.bias").tp_dim, 1);
  EXPECT_EQ(spec("h.0.attn.proj.weight").tp_dim, 1);
  EXPECT_EQ(spec("h.0.attn.proj.bias").tp_dim, -1);
  EXPECT_EQ(spec("h.0.mlp.fc.weight").tp_dim, 0);
  EXPECT_EQ(spec("h.0.mlp.fc.bias").tp_dim, 0);
  EXPECT_EQ(spec("h.0.mlp.proj.weight").tp_dim, 1);
  EXPECT_EQ(spec("h.0.mlp.proj.bias").tp_dim, -1);
  EXPECT_EQ(spec("wte").tp_dim, 0);
  EXPECT_EQ(spec("wpe").tp_dim, -1);
  EXPECT_EQ(spec("h.1.ln_2.weight").tp_dim, -1);
  for (size_t i = 0; i < store.count(); ++i)  // at tp 1 every piece is the whole tensor
    for (int d = 0; d < store.spec(i).ndim; ++d) {
      EXPECT_EQ(store.spec(i).local_offset[d], 0) << store.spec(i).name;
      EXPECT_EQ(store.spec(i).local_shape[d], store.spec(i).global_shape[d]) << store.spec(i).name;
    }
}

// benchmarks/tensor_parallel.py reads this debug line: the allocation for one micro-batch and its
// token-row regions (embedding output, residual stream, norm statistics): at B 2, T 4, C 8, L 2,
// N·C + 2·L·N·C + 4·L·N + 2·N = 64 + 256 + 64 + 16 floats.
TEST(GptModel, LogsItsActivationBytesByRegion) {
  ModelRig rig("gpt", kTinyGpt);
  ASSERT_TRUE(rig.ok());
  rig.store().fill(3, 0);
  g_log.clear();
  float loss = 0;
  ASSERT_EQ(rig.forward(random_ids(8, 37, 1), random_ids(8, 37, 2), 2, 4, 0, &loss), KEEL_OK) << g_last_error;
  bool found = false;
  for (const auto& line : g_log)
    found = found || (line.find("model gpt: activations for micro-batch 0 (2 x 4 tokens, tp 1, recompute none): ") == 0 &&
                      line.find(" bytes, of which token-row regions 1600 bytes") != std::string::npos);
  EXPECT_TRUE(found) << "no activation line among " << g_log.size() << " messages";
}

// Under recompute "full" the block keeps only its output: N·C + L·N·C + 2·N = 64 + 128 + 16 floats of
// token-row regions, and one block's recompute buffer is logged once.
TEST(GptModel, LogsItsActivationBytesUnderFullRecompute) {
  ModelRig rig("gpt", R"({"plugin":"gpt","n_layer":2,"n_head":2,"d_model":8,"vocab_size":37,"seq_len":8,"recompute":"full"})");
  ASSERT_TRUE(rig.ok());
  rig.store().fill(3, 0);
  g_log.clear();
  float loss = 0;
  ASSERT_EQ(rig.forward(random_ids(8, 37, 1), random_ids(8, 37, 2), 2, 4, 0, &loss), KEEL_OK) << g_last_error;
  bool activations = false, buffer = false;
  for (const auto& line : g_log) {
    activations = activations || (line.find("activations for micro-batch 0 (2 x 4 tokens, tp 1, recompute full): ") !=
                                      std::string::npos &&
                                  line.find(" bytes, of which token-row regions 832 bytes") != std::string::npos);
    buffer = buffer || line.find("recompute buffer (full, one block, 8 tokens): ") != std::string::npos;
  }
  EXPECT_TRUE(activations && buffer) << "no activation or recompute buffer line among " << g_log.size() << " messages";
}

TEST(GptModel, OutOfRangeTokensAreRejectedNotRead) {
  ModelRig rig("gpt", kTinyGpt);
  ASSERT_TRUE(rig.ok());
  rig.store().fill(3, 0);
  auto tokens = random_ids(8, 37, 1), targets = random_ids(8, 37, 2);
  tokens[6] = 37;
  float loss = 0;
  EXPECT_EQ(rig.forward(tokens, targets, 2, 4, 0, &loss), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(g_last_error.find("tokens[6] = 37"), std::string::npos) << g_last_error;
  tokens[6] = 0;
  EXPECT_EQ(rig.forward(tokens, targets, 2, 9, 0, &loss), KEEL_ERR_INVALID_ARGUMENT);  // T > seq_len 8
  EXPECT_TRUE(rig.store().events().empty()) << "no layer may be acquired for a rejected call";
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The "huggingface" external format (ABI 0.2): transformers' GPT2LMHeadModel names and layouts.

TEST(GptModel, HuggingFaceNamesAndLayoutsOfGpt2Small) {
  ModelRig rig("gpt", R"({"plugin":"gpt"})");
  ASSERT_TRUE(rig.ok());
  const keel_model_api* api = rig.api();
  ASSERT_NE(api->external_name, nullptr);
  ASSERT_NE(api->external_config, nullptr);
  const keel_model_info& info = rig.info();
  std::set<std::string> names;
  auto external = [&](size_t index) {
    keel_external_tensor t{};
    t.struct_size = sizeof t;
    EXPECT_EQ(api->external_name(rig.model(), "huggingface", index, &t), KEEL_OK) << g_last_error;
    return t;
  };
  for (size_t i = 0; i < info.n_params; ++i) {
    const keel_external_tensor t = external(i);
    ASSERT_NE(t.name, nullptr) << info.params[i].name;
    names.insert(t.name);
    const std::string keel = info.params[i].name;
    const bool conv1d_weight = info.params[i].ndim >= 2 && keel != "wte" && keel != "wpe" &&
                               keel.compare(keel.size() - 7, 7, ".weight") == 0;
    EXPECT_EQ(t.transpose, conv1d_weight ? 1 : 0) << keel;  // HF's Conv1D stores (in, out)
    EXPECT_EQ(t.rows, keel == "wte" ? 50257 : -1) << keel;   // the padded vocabulary rows are cut
  }
  EXPECT_EQ(names.size(), info.n_params) << "two parameters share an external name";
  EXPECT_STREQ(external(0).name, "transformer.wte.weight");
  EXPECT_STREQ(external(1).name, "transformer.wpe.weight");
  EXPECT_STREQ(external(4).name, "transformer.h.0.attn.c_attn.weight");
  EXPECT_STREQ(external(info.n_params - 3).name, "transformer.h.11.mlp.c_proj.bias");
  EXPECT_STREQ(external(info.n_params - 1).name, "transformer.ln_f.bias");

  const char* config = nullptr;
  ASSERT_EQ(api->external_config(rig.model(), "huggingface", &config), KEEL_OK) << g_last_error;
  const std::string text = config;
  for (const char* part : {"\"model_type\": \"gpt2\"", "\"n_layer\": 12", "\"n_embd\": 768", "\"vocab_size\": 50257",
                           "\"n_positions\": 1024", "\"eos_token_id\": 50256", "\"activation_function\": \"gelu_new\""})
    EXPECT_NE(text.find(part), std::string::npos) << "config.json lacks " << part << ":\n" << text;
}

TEST(GptModel, ExternalNamesRefuseUnknownFormatsAndIndices) {
  ModelRig rig("gpt", kTinyGpt);
  ASSERT_TRUE(rig.ok());
  keel_external_tensor t{};
  t.struct_size = sizeof t;
  g_last_error.clear();
  EXPECT_EQ(rig.api()->external_name(rig.model(), "onnx", 0, &t), KEEL_ERR_UNIMPLEMENTED);
  EXPECT_NE(g_last_error.find("'onnx'"), std::string::npos) << g_last_error;
  EXPECT_NE(g_last_error.find("huggingface"), std::string::npos) << g_last_error;  // lists the known ones
  const char* config = nullptr;
  EXPECT_EQ(rig.api()->external_config(rig.model(), "onnx", &config), KEEL_ERR_UNIMPLEMENTED);
  EXPECT_EQ(config, nullptr);
  EXPECT_EQ(rig.api()->external_name(rig.model(), "huggingface", rig.info().n_params, &t), KEEL_ERR_INVALID_ARGUMENT);
  // A caller built before `rows` existed gets only the fields that fit in its struct.
  keel_external_tensor old{};
  old.struct_size = offsetof(keel_external_tensor, rows);
  old.rows = 12345;
  ASSERT_EQ(rig.api()->external_name(rig.model(), "huggingface", 0, &old), KEEL_OK) << g_last_error;
  EXPECT_STREQ(old.name, "transformer.wte.weight");
  EXPECT_EQ(old.rows, 12345);
  EXPECT_EQ(old.struct_size, offsetof(keel_external_tensor, rows));
}

// describe writes only the prefix the caller declared in struct_size (docs/architecture.md §8, rule 3): a
// caller too old for every field is refused and nothing past its struct is touched; a caller
// newer than the plugin gets the plugin's size back and its extra bytes left alone.
void check_describe_honours_struct_size(const char* model_name, const std::string& config) {
  ModelRig rig(model_name, config);
  ASSERT_TRUE(rig.ok());
  struct Padded {
    keel_model_info info;
    unsigned char canary[32];
  };
  Padded small;
  std::memset(&small, 0xAB, sizeof small);
  small.info.struct_size = 16;  // struct_size and params only
  EXPECT_EQ(rig.api()->describe(rig.model(), &small.info), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(g_last_error.find("struct_size is 16"), std::string::npos) << g_last_error;
  const unsigned char* after = reinterpret_cast<const unsigned char*>(&small.info) + 16;
  for (size_t i = 0; i < sizeof(Padded) - 16; ++i) ASSERT_EQ(after[i], 0xAB) << "byte " << 16 + i << " was written";

  Padded large;
  std::memset(&large, 0xCD, sizeof large);
  large.info.struct_size = sizeof large;
  ASSERT_EQ(rig.api()->describe(rig.model(), &large.info), KEEL_OK) << g_last_error;
  EXPECT_EQ(large.info.struct_size, sizeof(keel_model_info));
  EXPECT_EQ(large.info.n_params, rig.info().n_params);
  for (unsigned char c : large.canary) ASSERT_EQ(c, 0xCD);
}

TEST(GptModel, DescribeHonoursStructSize) { check_describe_honours_struct_size("gpt", kTinyGpt); }
TEST(MlpModel, DescribeHonoursStructSize) { check_describe_honours_struct_size("mlp", kTinyMlp); }
