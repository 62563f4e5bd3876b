// The gpt model at tensor-parallel size N (the world) against the same model at tp 1, built
// directly from the plugins (as tests/unit/models does) on every rank: the same loss (rel 1e-5),
// each rank's gradient pieces equal to its piece of the whole-model gradient, replicated
// parameters' gradients bit-identical on every rank, and gathered inference logits equal to the
// whole model's; with and without sequence parallelism. Each rank's parameter pieces are cut out
// of one whole tensor per parameter (PieceBox), so the two models compute the same function.
// Then the same at pipeline size 2 on top (two model instances per rank, one per pipeline stage,
// chained by hand), with the full and the zero-bubble split backward: the boundary activation is
// this rank's rows under sequence parallelism, and wte's two copies sum to the whole gradient.
//   usage: mpirun -np N keel_gpt_tensor_parallel_test N
#include <keel/keel.h>
#include <keel_support/common/piece_box.hpp>

#include <cmath>
#include <map>
#include <memory>
#include <vector>

#include "comm_test_support.hpp"

namespace {

using namespace comm_test;

const char* kModelJson = R"({"plugin":"gpt","n_layer":2,"n_head":4,"d_model":32,"vocab_size":100,"seq_len":8})";
constexpr int32_t kB = 2, kT = 8, kV = 100;

const keel_comm_api* comm;
void* world;
const keel_backend_api* backend_api;
void* backend;
const keel_model_api* model_api;

template <typename Api>
const Api* load(const char* path, int32_t kind, const char* name) {
  void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!library) fail(__FILE__, __LINE__, std::string("dlopen: ") + dlerror());
  auto entry = reinterpret_cast<keel_plugin_entry_fn>(dlsym(library, KEEL_PLUGIN_ENTRY_SYMBOL));
  CHECK(entry != nullptr);
  const keel_plugin_list* list = entry();
  for (size_t i = 0; i < list->count; ++i)
    if (list->plugins[i].kind == kind && std::string(list->plugins[i].name) == name)
      return static_cast<const Api*>(list->plugins[i].api);
  fail(__FILE__, __LINE__, std::string(path) + " holds no plugin " + name);
}

uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
float uniform(uint64_t key) { return float(double(mix(key) >> 11) / 9007199254740992.0) * 2.0f - 1.0f; }

// The whole tensor of every parameter, by name: weights ±0.15, norm gains near 1, biases near 0
// (not exactly 0 and 1, so every path carries gradient). wte's padded rows stay zero.
std::vector<float> whole_tensor(const keel_param_spec& spec) {
  int64_t n = 1;
  for (int d = 0; d < spec.ndim; ++d) n *= spec.global_shape[d];
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t key = 0;
  for (const char* c = spec.name; *c; ++c) key = mix(key ^ uint8_t(*c));
  const float base = spec.init == KEEL_INIT_ONES ? 1.0f : 0.0f;
  const float scale = spec.init == KEEL_INIT_NORMAL ? 0.15f : 0.05f;
  const int64_t row = spec.ndim > 1 ? n / spec.global_shape[0] : 1;
  for (int64_t i = 0; i < n; ++i)
    v[size_t(i)] = spec.init_rows >= 0 && i / row >= spec.init_rows ? 0.0f : base + scale * uniform(key + uint64_t(i));
  return v;
}

// A strategy in miniature: every parameter piece and its gradient resident in host memory.
class PieceStore {
 public:
  explicit PieceStore(const keel_model_info& info) : info_(info) {
    for (size_t i = 0; i < info.n_params; ++i) {
      const keel_param_spec& spec = info.params[i];
      const keel_support::PieceBox box = keel_support::PieceBox::of_spec(spec);
      CHECK(box.fits());
      const std::vector<float> whole = whole_tensor(spec);
      std::vector<float> piece(static_cast<size_t>(box.numel()));
      for (int64_t k = 0; k < box.numel(); ++k) piece[size_t(k)] = whole[size_t(box.global_index(k))];
      params_.push_back(std::move(piece));
      grads_.emplace_back(size_t(box.numel()), 0.0f);
    }
    access_ = {sizeof access_, this, &PieceStore::acquire, &PieceStore::release};
  }
  const keel_param_access* access() const { return &access_; }
  const keel_param_spec& spec(size_t i) const { return info_.params[i]; }
  size_t count() const { return info_.n_params; }
  const std::vector<float>& grad(size_t i) const { return grads_[i]; }

 private:
  static keel_tensor describe(std::vector<float>& data, const keel_param_spec& s) {
    keel_tensor t{};
    t.data = data.data();
    t.device = {KEEL_DEVICE_CPU, 0};
    t.ndim = s.ndim;
    t.dtype = {KEEL_DTYPE_FLOAT, 32, 1};
    for (int d = 0; d < s.ndim; ++d) t.shape[d] = s.local_shape[d];
    return t;
  }
  static keel_status acquire(void* ctx, int32_t layer, int32_t, keel_tensor* params, keel_tensor* grads, size_t n) {
    auto* self = static_cast<PieceStore*>(ctx);
    size_t k = 0;
    for (size_t i = 0; i < self->count(); ++i) {
      if (self->spec(i).layer != layer) continue;
      if (k == n) return KEEL_ERR_INVALID_ARGUMENT;
      params[k] = describe(self->params_[i], self->spec(i));
      if (grads) grads[k] = describe(self->grads_[i], self->spec(i));
      ++k;
    }
    return k == n ? KEEL_OK : KEEL_ERR_INVALID_ARGUMENT;
  }
  static keel_status release(void*, int32_t, int32_t, int32_t) { return KEEL_OK; }

  keel_model_info info_;
  keel_param_access access_{};
  std::vector<std::vector<float>> params_, grads_;
};

struct Run {
  void* model = nullptr;  // kept alive while its specs (and their names) are read
  float loss = 0;
  std::vector<float> logits;  // (B,T,Vp), from a forward without targets
  std::unique_ptr<PieceStore> store;
  keel_model_info info{};
};

std::vector<int32_t> ids(uint64_t seed) {
  std::vector<int32_t> v(size_t(kB) * kT);
  for (size_t i = 0; i < v.size(); ++i) v[i] = int32_t(mix(seed * 1000 + i) % kV);
  return v;
}

// One model at (tp_rank, tp_size), two micro-batches accumulated (loss_scale 1/2 each), and the
// logits of a forward without targets.
Run run_model(int32_t tp_rank, int32_t tp_size, int32_t sequence_parallel) {
  keel_model_create_args args{sizeof args, kModelJson, "model", backend_api, backend, tp_rank, tp_size};
  args.tp_comm = tp_size > 1 ? comm : nullptr;
  args.tp_comm_obj = tp_size > 1 ? world : nullptr;
  args.sequence_parallel = sequence_parallel;
  void* model = nullptr;
  CHECK_OK(model_api->create(&kHost, &args, &model));
  Run run;
  run.info.struct_size = sizeof run.info;
  CHECK_OK(model_api->describe(model, &run.info));
  run.store = std::make_unique<PieceStore>(run.info);
  auto tokens = ids(1), targets = ids(2), tokens2 = ids(3), targets2 = ids(4);
  targets[5] = -1;  // an ignored position
  double loss_sum = 0;
  for (int mb = 0; mb < 2; ++mb) {
    keel_forward_args f{};
    f.struct_size = sizeof f;
    f.access = run.store->access();
    f.microbatch = mb;
    f.batch = kB;
    f.seq_len = kT;
    f.tokens = mb ? tokens2.data() : tokens.data();
    f.targets = mb ? targets2.data() : targets.data();
    CHECK_OK(model_api->forward(model, &f));
    loss_sum += f.loss;
  }
  for (int mb = 1; mb >= 0; --mb) {
    keel_backward_args b{sizeof b, run.store->access(), mb, 0.5f};
    CHECK_OK(model_api->backward(model, &b));
  }
  run.loss = float(loss_sum / 2);
  keel_forward_args f{};
  f.struct_size = sizeof f;
  f.access = run.store->access();
  f.microbatch = 7;
  f.batch = kB;
  f.seq_len = kT;
  f.tokens = tokens.data();
  CHECK_OK(model_api->forward(model, &f));
  run.logits.assign(f.logits, f.logits + size_t(kB) * kT * run.info.padded_vocab_size);
  run.model = model;
  return run;
}

void expect_close(const std::string& what, float got, float want, double atol, double rtol) {
  if (!(std::fabs(double(got) - want) <= atol + rtol * std::fabs(double(want))))
    fail(__FILE__, __LINE__, what + ": " + std::to_string(got) + ", expected " + std::to_string(want));
}

void compare(const Run& whole, const Run& split, const std::string& mode) {
  expect_close(mode + ": loss", split.loss, whole.loss, 0, 1e-5);
  CHECK(split.info.n_params == whole.info.n_params);
  for (size_t i = 0; i < split.store->count(); ++i) {
    const keel_param_spec& spec = split.store->spec(i);
    const keel_support::PieceBox box = keel_support::PieceBox::of_spec(spec);
    CHECK(std::string(spec.name) == whole.store->spec(i).name);
    if (spec.tp_dim < 0 && box.numel() != whole.store->grad(i).size())
      fail(__FILE__, __LINE__, mode + ": replicated " + spec.name + " is not whole on this rank");
    double scale = 0;
    for (float g : whole.store->grad(i)) scale = std::max(scale, std::fabs(double(g)));
    for (int64_t k = 0; k < box.numel(); ++k)
      expect_close(mode + ": gradient of " + spec.name + " at piece element " + std::to_string(k) + " (global " +
                       std::to_string(box.global_index(k)) + ")",
                   split.store->grad(i)[size_t(k)], whole.store->grad(i)[size_t(box.global_index(k))],
                   1e-5 * (1 + scale), 1e-4);
    if (spec.tp_dim >= 0) continue;
    // Replicated parameters: bit-identical gradients on every tp rank.
    std::vector<float> g = split.store->grad(i), hi(g.size()), neg(g.size()), lo(g.size());
    for (size_t k = 0; k < g.size(); ++k) neg[k] = -g[k];
    CHECK_OK(comm->all_reduce(world, g.data(), hi.data(), g.size(), fp32(), KEEL_REDUCE_MAX, nullptr));
    CHECK_OK(comm->all_reduce(world, neg.data(), lo.data(), g.size(), fp32(), KEEL_REDUCE_MAX, nullptr));
    for (size_t k = 0; k < g.size(); ++k)
      if (hi[k] != g[k] || -lo[k] != g[k])
        fail(__FILE__, __LINE__, mode + ": replicated " + spec.name + " element " + std::to_string(k) +
                                     " has different gradients on different tp ranks");
  }
  for (size_t k = 0; k < whole.logits.size(); ++k)
    expect_close(mode + ": logit " + std::to_string(k), split.logits[k], whole.logits[k], 1e-5, 1e-4);
  std::printf("rank %d of %d: %s: loss %.7f (tp 1: %.7f), gradients and logits match\n", g_rank, g_size,
              mode.c_str(), split.loss, whole.loss);
  model_api->destroy(split.model);
}

// The model at (tp_rank, tp_size) cut into pp 2 stages, both held here; the same two micro-batches
// as run_model, backward in full or split into its INPUT and WEIGHT parts.
void check_pipeline(const Run& whole, int32_t tp_rank, int32_t tp_size, int32_t sequence_parallel, bool split) {
  const std::string mode = "tp " + std::to_string(tp_size) + (sequence_parallel ? " + sequence parallel" : "") +
                           " x pp 2" + (split ? ", split backward" : "");
  void* models[2] = {};
  std::unique_ptr<PieceStore> stores[2];
  for (int32_t stage = 0; stage < 2; ++stage) {
    keel_model_create_args args{sizeof args, kModelJson, "model", backend_api, backend, tp_rank, tp_size};
    args.tp_comm = tp_size > 1 ? comm : nullptr;
    args.tp_comm_obj = tp_size > 1 ? world : nullptr;
    args.sequence_parallel = sequence_parallel;
    args.pp_rank = stage;
    args.pp_size = 2;
    args.virtual_stages = 1;
    CHECK_OK(model_api->create(&kHost, &args, &models[stage]));
    keel_model_info info{};
    info.struct_size = sizeof info;
    CHECK_OK(model_api->describe(models[stage], &info));
    stores[stage] = std::make_unique<PieceStore>(info);
  }
  int64_t io = 0;
  CHECK_OK(model_api->stage_io_numel(models[0], kB, kT, &io));
  CHECK(io == int64_t{kB} * kT / (sequence_parallel ? tp_size : 1) * 32);  // d_model 32
  auto tokens = ids(1), targets = ids(2), tokens2 = ids(3), targets2 = ids(4);
  targets[5] = -1;
  std::vector<float> acts[2], grads[2];
  double loss_sum = 0;
  for (int mb = 0; mb < 2; ++mb) {
    acts[mb].assign(size_t(io), 0.0f);
    grads[mb].assign(size_t(io), 0.0f);
    for (int32_t chunk = 0; chunk < 2; ++chunk) {
      keel_forward_args f{};
      f.struct_size = sizeof f;
      f.access = stores[chunk]->access();
      f.microbatch = mb;
      f.batch = kB;
      f.seq_len = kT;
      f.tokens = mb ? tokens2.data() : tokens.data();
      f.targets = mb ? targets2.data() : targets.data();
      f.chunk = chunk;
      f.input = chunk == 1 ? acts[mb].data() : nullptr;
      f.output = chunk == 0 ? acts[mb].data() : nullptr;
      CHECK_OK(model_api->forward(models[chunk], &f));
      if (chunk == 1) loss_sum += f.loss;
    }
  }
  const int32_t parts[2] = {split ? KEEL_BACKWARD_INPUT : KEEL_BACKWARD_FULL, KEEL_BACKWARD_WEIGHT};
  for (int pass = 0; pass < (split ? 2 : 1); ++pass)
    for (int mb = 1; mb >= 0; --mb)
      for (int32_t chunk = 1; chunk >= 0; --chunk) {
        keel_backward_args b{sizeof b, stores[chunk]->access(), mb, 0.5f};
        b.chunk = chunk;
        b.output_grad = chunk == 0 && pass == 0 ? grads[mb].data() : nullptr;
        b.input_grad = chunk == 1 && pass == 0 ? grads[mb].data() : nullptr;
        b.part = parts[pass];
        CHECK_OK(model_api->backward(models[chunk], &b));
      }
  expect_close(mode + ": loss", float(loss_sum / 2), whole.loss, 0, 1e-5);
  size_t compared = 0;
  for (size_t w = 0; w < whole.store->count(); ++w) {
    const std::string name = whole.store->spec(w).name;
    std::vector<float> sum;
    const keel_param_spec* piece = nullptr;
    for (auto& store : stores)
      for (size_t i = 0; i < store->count(); ++i) {
        if (name != store->spec(i).name) continue;
        piece = &store->spec(i);
        sum.resize(store->grad(i).size(), 0.0f);
        for (size_t k = 0; k < sum.size(); ++k) sum[k] += store->grad(i)[k];
      }
    if (!piece) fail(__FILE__, __LINE__, mode + ": no pipeline stage holds " + name);
    const keel_support::PieceBox box = keel_support::PieceBox::of_spec(*piece);
    double scale = 0;
    for (float g : whole.store->grad(w)) scale = std::max(scale, std::fabs(double(g)));
    for (int64_t k = 0; k < box.numel(); ++k)
      expect_close(mode + ": gradient of " + name + " at piece element " + std::to_string(k), sum[size_t(k)],
                   whole.store->grad(w)[size_t(box.global_index(k))], 1e-5 * (1 + scale), 1e-4);
    ++compared;
  }
  std::printf("rank %d of %d: %s: loss %.7f (tp 1, pp 1: %.7f), %zu gradients match\n", g_rank, g_size,
              mode.c_str(), loss_sum / 2, whole.loss, compared);
  for (void* model : models) model_api->destroy(model);
}

}  // namespace

int main(int argc, char** argv) {
  comm = load_comm_plugin(KEEL_MPI_PLUGIN_PATH);
  backend_api = load<keel_backend_api>(KEEL_CPU_PLUGIN_PATH, KEEL_KIND_BACKEND, "cpu");
  model_api = load<keel_model_api>(KEEL_GPT_PLUGIN_PATH, KEEL_KIND_MODEL, "gpt");
  CHECK_OK(comm->create_world(&kHost, R"({"plugin": "mpi", "timeout_s": 60})", "comm", &world));
  int32_t r = -1, s = -1;
  CHECK_OK(comm->rank(world, &r));
  CHECK_OK(comm->size(world, &s));
  g_rank = r, g_size = s;
  if (argc > 1 && s != std::atoi(argv[1]))
    fail(__FILE__, __LINE__, "world size " + std::to_string(s) + ", expected " + argv[1]);
  keel_backend_create_args bargs{sizeof bargs, R"({"plugin":"cpu","threads":1,"peak_tflops":1})", "backend"};
  CHECK_OK(backend_api->create(&kHost, &bargs, &backend));

  const Run whole = run_model(0, 1, 0);
  compare(whole, run_model(r, s, 0), "tp " + std::to_string(s));
  compare(whole, run_model(r, s, 1), "tp " + std::to_string(s) + " + sequence parallel");
  for (int32_t sequence_parallel : {0, 1})
    for (bool split : {false, true}) check_pipeline(whole, r, s, sequence_parallel, split);

  CHECK_OK(comm->barrier(world));
  model_api->destroy(whole.model);
  backend_api->destroy(backend);
  comm->destroy(world);
  return 0;
}
