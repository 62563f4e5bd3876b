// A strategy (ddp, ZeRO-1/2/3) under pipeline parallelism, on 4 ranks as pp 2 × dp 2 (or on 2
// as pp 2 × dp 1) under mpirun with the mpi comm plugin. Stage 0 holds wte (STAGE_TIED) and wpe in layer 0 and a
// block param in layer 1; stage 1 holds a block param in layer 2 and its wte copy
// (STAGE_TIED | STAGE_COPY) alone in layer 0; every other layer id is empty on both. Each step
// runs two micro-batches, stage 0 as GPipe (F F B B), stage 1 as 1F1B (F B F B: a forward
// between backwards, begin_microbatch right before each backward), acquiring one empty layer too.
// Checked after each of two steps, bit for bit against a reference with the same arithmetic:
//   - wte on both stages equals (Σ of the two stages' gradients, averaged over dp) stepped by
//     the optimizer, and the two copies are bit-identical (exchanged and compared);
//   - every other parameter and the optimizer state equal their reference;
//   - grad_sq_norm counts wte on stage 0 and not the copy on stage 1;
//   - forward acquires see the current parameters (ZeRO-3 gathers them), describe answers,
//     and each owned range, the copy's included, can be written and read back.
// usage: pp_strategy_test PLUGIN_PATH ddp|zero1|zero2|zero2-blocking|zero3 N_LAYERS
#include <keel/strategy.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <keel_support/common/testing/host_memory_backend.hpp>

#include "comm_test_support.hpp"

namespace {

using namespace comm_test;

// As comm_test::fail, but ends the process at once: std::exit would run destructors while the
// strategy's communication thread still sits in a collective, and the rank would hang instead of
// ending (mpirun then ends the other ranks).
[[noreturn]] void fail_now(const char* file, int line, const std::string& what) {
  std::fprintf(stderr, "FAILED rank %d of %d at %s:%d: %s\n", g_rank, g_size, file, line, what.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  _exit(1);
}
#undef CHECK
#undef CHECK_OK
#define CHECK(cond) \
  do { if (!(cond)) fail_now(__FILE__, __LINE__, "CHECK(" #cond ")"); } while (0)
#define CHECK_OK(call)                                                                                    \
  do {                                                                                                    \
    keel_status status_ = (call);                                                                         \
    if (status_ != KEEL_OK)                                                                               \
      fail_now(__FILE__, __LINE__, std::string(#call) + " returned " + std::to_string(status_) + ": " + g_last_error); \
  } while (0)

const keel_comm_api* comm = nullptr;
const keel_strategy_api* strategy_api = nullptr;
int32_t pp_rank = 0, dp_rank = 0, dp_size = 2;
std::string plugin_name, config_json;
int zero_stage = 0;  // 0: ddp

// --- the host: values that depend on the name and element only, as the core's do ---

const char* read_last_error() { return g_last_error.c_str(); }

uint32_t name_hash(const char* name) {
  uint32_t h = 2166136261u;
  for (const char* c = name; *c; ++c) h = (h ^ uint8_t(*c)) * 16777619u;
  return h;
}

float init_value(const char* name, int64_t element) { return float(name_hash(name) % 1000) * 0.001f + 0.01f * float(element); }

keel_status init_param(const keel_param_spec* spec, uint64_t, int64_t begin, int64_t count, float* out_host) {
  for (int64_t i = 0; i < count; ++i) out_host[i] = init_value(spec->name, begin + i);
  return KEEL_OK;
}

const keel_host kTestHost = {sizeof(keel_host), KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR, record_error,
                             print_log,         init_param,             read_last_error,        init_param};

// --- the optimizer: momentum with one state slot; the reference calls the same function ---

__attribute__((noinline)) void update_element(float* p, float* m, float g, float lr, float grad_scale) {
  *m = 0.5f * *m + grad_scale * g;
  *p = *p - lr * *m;
}

keel_status optimizer_describe(void*, keel_optimizer_info* out) {
  *out = keel_optimizer_info{sizeof(keel_optimizer_info), 1, 0.1f, KEEL_PARAM_NO_WEIGHT_DECAY};
  return KEEL_OK;
}
keel_status optimizer_step(void*, const keel_optimizer_step_args* args) {
  for (int64_t i = 0; i < args->n; ++i)
    update_element(&args->params[i], &args->state[0][i], args->grads[i], args->lr, args->grad_scale);
  return KEEL_OK;
}

// --- the model ---

struct Param {
  const char* name;
  int32_t layer;
  int64_t numel;
  uint32_t flags;
};

// Stage 1 lists its wte copy after its block param, though it lives in layer 0.
std::vector<Param> stage_params(int32_t stage) {
  if (stage == 0)
    return {{"wte", 0, 15, KEEL_PARAM_STAGE_TIED}, {"wpe", 0, 4, KEEL_PARAM_NO_WEIGHT_DECAY}, {"h.0.w", 1, 9, 0}};
  return {{"h.1.w", 2, 7, 0}, {"wte", 0, 15, KEEL_PARAM_STAGE_TIED | KEEL_PARAM_STAGE_COPY}};
}

keel_param_spec make_spec(const Param& p) {
  keel_param_spec spec{};
  spec.struct_size = sizeof(spec);
  spec.name = p.name;
  spec.layer = p.layer;
  spec.ndim = 1;
  spec.global_shape[0] = spec.local_shape[0] = p.numel;
  spec.tp_dim = -1;
  spec.flags = p.flags;
  spec.init = KEEL_INIT_NORMAL;
  spec.init_std = 0.02f;
  spec.init_rows = -1;
  return spec;
}

// Layers in forward order: stage 0's chunk is layers 0, 1 and (empty here) 2; stage 1's is 2,
// the empty 3, and the head (layer 0, the wte copy).
std::vector<int32_t> forward_layers(int32_t stage) { return stage == 0 ? std::vector<int32_t>{0, 1, 2} : std::vector<int32_t>{2, 3, 0}; }

// The gradient the model adds for element e of `name` on (stage, dp rank) in micro-batch mb of
// step `step`; inexact in fp32 on purpose, so the order of sums shows.
float grad_value(int32_t stage, int32_t dp, int mb, int step, const char* name, int64_t e) {
  return 0.1f * float(dp + 1) * (1.0f + 0.37f * float(mb)) + 0.013f * float(stage + 1) + 0.007f * float(e) +
         0.05f * float(step) + float(name_hash(name) % 97) * 0.0031f;
}

// The data-parallel mean gradient of element e as the strategy forms it. Tied: each dp rank's
// accumulation summed over the two stages, then over dp, then halved. Otherwise ddp and ZeRO-1
// reduce the accumulation; ZeRO-2/3 reduce each micro-batch and add the halves, but for a
// layer holding a tied param (stage 0's wpe), which waits for the tied sum and reduces once.
float reference_mean(const Param& p, int32_t stage, int step, int64_t e) {
  const bool tied = p.flags & KEEL_PARAM_STAGE_TIED;
  bool layer_waits = false;
  for (const Param& q : stage_params(stage)) layer_waits |= q.layer == p.layer && (q.flags & KEEL_PARAM_STAGE_TIED);
  auto local = [&](int32_t s, int32_t d) {
    float acc = 0.0f;
    for (int mb = 0; mb < 2; ++mb) acc += grad_value(s, d, mb, step, p.name, e);
    return acc;
  };
  // The mean over dp of f(d): at dp 1 the value itself, at dp 2 the sum (either order) halved.
  auto dp_mean = [](auto f) { return dp_size == 1 ? f(0) : (f(0) + f(1)) * 0.5f; };
  if (tied) return dp_mean([&](int32_t d) { return local(0, d) + local(1, d); });
  if (zero_stage < 2 || layer_waits) return dp_mean([&](int32_t d) { return local(stage, d); });
  float acc = 0.0f;
  for (int mb = 0; mb < 2; ++mb) acc += dp_mean([&](int32_t d) { return grad_value(stage, d, mb, step, p.name, e); });
  return acc;
}

struct StepSettings {
  float lr, grad_scale;
};
const StepSettings kSteps[2] = {{0.1f, 1.0f}, {0.05f, 0.75f}};

std::string bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.9g (0x%08x)", double(x), u);
  return buffer;
}

std::string bits_d(double x) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.17g", x);
  return buffer;
}

struct Rank {
  std::vector<Param> params;
  std::vector<keel_param_spec> specs;
  keel_support::testing::HostMemoryBackend backend;
  keel_backend_api backend_api = keel_support::testing::HostMemoryBackend::table();
  keel_optimizer_api optimizer_api{};
  void* strategy = nullptr;
  keel_param_access access{};
  // reference state per param
  std::vector<std::vector<float>> ref_params, ref_state;
};

// --- the run ---

void run_layer(Rank& rank, int32_t layer, int32_t phase, int mb, int step) {
  std::vector<size_t> here;
  for (size_t i = 0; i < rank.params.size(); ++i)
    if (rank.params[i].layer == layer) here.push_back(i);
  std::vector<keel_tensor> params(here.size() + 1), grads(here.size() + 1);
  CHECK_OK(rank.access.acquire(rank.access.ctx, layer, phase, params.data(), phase == KEEL_PHASE_BACKWARD ? grads.data() : nullptr,
                               here.size()));
  for (size_t k = 0; k < here.size(); ++k) {
    const Param& p = rank.params[here[k]];
    CHECK(params[k].data != nullptr && params[k].shape[0] == p.numel);
    const float* values = static_cast<const float*>(params[k].data);
    for (int64_t e = 0; e < p.numel; ++e)
      if (values[e] != rank.ref_params[here[k]][size_t(e)])
        fail_now(__FILE__, __LINE__, std::string("acquire of layer ") + std::to_string(layer) + " shows " + p.name + "[" +
                                     std::to_string(e) + "] = " + bits(values[e]) + ", expected " +
                                     bits(rank.ref_params[here[k]][size_t(e)]));
    if (phase != KEEL_PHASE_BACKWARD) continue;
    float* g = static_cast<float*>(grads[k].data);
    for (int64_t e = 0; e < p.numel; ++e) g[e] += grad_value(pp_rank, dp_rank, mb, step, p.name, e);
  }
  CHECK_OK(rank.access.release(rank.access.ctx, layer, phase, phase == KEEL_PHASE_BACKWARD ? 1 : 0));
}

void forward(Rank& rank, int mb, int step) {
  for (int32_t layer : forward_layers(pp_rank)) run_layer(rank, layer, KEEL_PHASE_FORWARD, mb, step);
}
void backward(Rank& rank, int mb, int step) {
  CHECK_OK(strategy_api->begin_microbatch(rank.strategy, mb, mb == 1 ? 1 : 0));
  const std::vector<int32_t> order = forward_layers(pp_rank);
  for (auto it = order.rbegin(); it != order.rend(); ++it) run_layer(rank, *it, KEEL_PHASE_BACKWARD, mb, step);
}

// wte as this stage holds it, whole: each dp rank's owned part, the rest filled in by a MAX
// all_reduce over the test's own dp communicator (the strategy's communicators are its own).
std::vector<float> whole_wte(Rank& rank, void* test_dp) {
  size_t index = 0;
  while (std::strcmp(rank.params[index].name, "wte") != 0) ++index;
  std::vector<float> whole(15, -std::numeric_limits<float>::infinity());
  // (at dp 1 the MAX over one rank leaves the whole tensor as read)
  int64_t begin = 0, end = 0;
  CHECK_OK(strategy_api->owned_range(rank.strategy, -1, index, &begin, &end));
  CHECK(0 <= begin && begin <= end && end <= 15);
  CHECK_OK(strategy_api->read_param(rank.strategy, index, begin, end - begin, whole.data() + begin));
  CHECK_OK(comm->all_reduce(test_dp, whole.data(), whole.data(), 15, fp32(), KEEL_REDUCE_MAX, nullptr));
  return whole;
}

void check_against_reference(Rank& rank, int step) {
  for (size_t i = 0; i < rank.params.size(); ++i) {
    const Param& p = rank.params[i];
    for (int32_t kind = -1; kind <= 0; ++kind) {
      int64_t begin = 0, end = 0;
      CHECK_OK(strategy_api->owned_range(rank.strategy, kind, i, &begin, &end));
      std::vector<float> got(size_t(end - begin));
      if (kind == -1)
        CHECK_OK(strategy_api->read_param(rank.strategy, i, begin, end - begin, got.data()));
      else
        CHECK_OK(strategy_api->read_state(rank.strategy, 0, i, begin, end - begin, got.data()));
      const std::vector<float>& want = kind == -1 ? rank.ref_params[i] : rank.ref_state[i];
      for (int64_t e = begin; e < end; ++e)
        if (got[size_t(e - begin)] != want[size_t(e)])
          fail_now(__FILE__, __LINE__, "after step " + std::to_string(step) + ": " + p.name + (kind == -1 ? "" : " state") +
                                       "[" + std::to_string(e) + "] = " + bits(got[size_t(e - begin)]) + ", expected " +
                                       bits(want[size_t(e)]) + " (the sum of both stages' gradients averaged over dp)");
    }
  }
}

void run(int32_t n_layers) {
  void* world = nullptr;
  CHECK_OK(comm->create_world(&kTestHost, R"({"plugin": "mpi", "timeout_s": 20})", "comm", &world));
  int32_t r = -1, s = -1;
  CHECK_OK(comm->rank(world, &r));
  CHECK_OK(comm->size(world, &s));
  g_rank = r, g_size = s;
  if (s != 2 && s != 4)
    fail_now(__FILE__, __LINE__, "world size " + std::to_string(s) + ", expected 2 or 4 (pp 2 x dp 1 or 2)");
  dp_size = s / 2;
  pp_rank = r / dp_size;
  dp_rank = r % dp_size;
  // The strategy's communicators, and the test's own over the same ranks.
  void *dp = nullptr, *embedding = nullptr, *test_dp = nullptr, *test_embedding = nullptr;
  CHECK_OK(comm->split(world, pp_rank, dp_rank, &dp));
  CHECK_OK(comm->split(world, dp_rank, pp_rank, &embedding));
  CHECK_OK(comm->split(world, pp_rank, dp_rank, &test_dp));
  CHECK_OK(comm->split(world, dp_rank, pp_rank, &test_embedding));

  Rank rank;
  rank.params = stage_params(pp_rank);
  for (const Param& p : rank.params) {
    rank.specs.push_back(make_spec(p));
    std::vector<float> values(size_t(p.numel));
    for (int64_t e = 0; e < p.numel; ++e) values[size_t(e)] = init_value(p.name, e);
    rank.ref_params.push_back(values);
    rank.ref_state.push_back(std::vector<float>(size_t(p.numel), 0.0f));
  }
  rank.backend.host = &kTestHost;
  rank.optimizer_api.struct_size = sizeof(keel_optimizer_api);
  rank.optimizer_api.describe = optimizer_describe;
  rank.optimizer_api.step = optimizer_step;

  keel_strategy_create_args args{};
  args.struct_size = sizeof(args);
  args.config_json = config_json.c_str();
  args.json_path = "parallel.strategy";
  args.backend = &rank.backend_api;
  args.backend_obj = &rank.backend;
  args.optimizer = &rank.optimizer_api;
  args.optimizer_obj = nullptr;
  args.params = rank.specs.data();
  args.n_params = rank.specs.size();
  args.n_layers = n_layers;
  args.seed = 7;
  args.dp_comm = comm;
  args.dp_comm_obj = dp;
  args.dp_rank = dp_rank;
  args.dp_size = dp_size;
  args.tp_rank = 0;
  args.tp_size = 1;
  args.pp_rank = pp_rank;
  args.pp_size = 2;
  args.embedding_comm = comm;
  args.embedding_comm_obj = embedding;
  CHECK_OK(strategy_api->create(&kTestHost, &args, &rank.strategy));
  CHECK_OK(strategy_api->param_access(rank.strategy, &rank.access));
  keel_strategy_info info{};
  info.struct_size = sizeof(info);
  CHECK_OK(strategy_api->describe(rank.strategy, &info));
  CHECK(info.param_bytes > 0 && info.grad_bytes > 0 && info.state_bytes > 0);

  for (int step = 1; step <= 2; ++step) {
    CHECK_OK(strategy_api->zero_grads(rank.strategy));
    if (pp_rank == 0) {  // GPipe: both forwards, then both backwards
      forward(rank, 0, step);
      forward(rank, 1, step);
      backward(rank, 0, step);
      backward(rank, 1, step);
    } else {  // 1F1B: the second forward comes between the backwards
      forward(rank, 0, step);
      backward(rank, 0, step);
      forward(rank, 1, step);
      backward(rank, 1, step);
    }
    double norm = -1.0;
    CHECK_OK(strategy_api->grad_sq_norm(rank.strategy, &norm));
    const StepSettings& settings = kSteps[step - 1];
    keel_strategy_step_args step_args{sizeof(step_args), settings.lr, settings.grad_scale, step};
    CHECK_OK(strategy_api->step(rank.strategy, &step_args));

    // The reference: the counted gradients' Σ g² (the copy left out), then the update.
    double want_norm = 0.0, copy_part = 0.0;
    for (size_t i = 0; i < rank.params.size(); ++i) {
      const Param& p = rank.params[i];
      for (int64_t e = 0; e < p.numel; ++e) {
        const float mean = reference_mean(p, pp_rank, step, e);
        (p.flags & KEEL_PARAM_STAGE_COPY ? copy_part : want_norm) += double(mean) * double(mean);
        update_element(&rank.ref_params[i][size_t(e)], &rank.ref_state[i][size_t(e)], mean, settings.lr,
                       settings.grad_scale);
      }
    }
    if (std::fabs(norm - want_norm) > 1e-9 * want_norm)
      fail_now(__FILE__, __LINE__, "step " + std::to_string(step) + ": grad_sq_norm is " + bits_d(norm) +
                                   ", expected " + bits_d(want_norm) + " (without the STAGE_COPY, whose part is " +
                                   std::to_string(copy_part) + ")");
    check_against_reference(rank, step);

    // The two wte copies, exchanged over the test's embedding communicator: bit-identical.
    std::vector<float> mine = whole_wte(rank, test_dp), both(30, 0.0f);
    CHECK_OK(comm->all_gather(test_embedding, mine.data(), both.data(), 15, fp32(), nullptr));
    if (std::memcmp(both.data(), both.data() + 15, 15 * sizeof(float)) != 0)
      for (int e = 0; e < 15; ++e)
        if (both[size_t(e)] != both[size_t(15 + e)])
          fail_now(__FILE__, __LINE__, "after step " + std::to_string(step) + ": wte[" + std::to_string(e) +
                                       "] is " + bits(both[size_t(e)]) + " on stage 0 but " + bits(both[size_t(15 + e)]) +
                                       " on stage 1; the STAGE_TIED copies must stay bit-identical");
  }

  // A checkpoint load writes every tensor a rank holds, the STAGE_COPY included: its owned
  // range is writable and reads back.
  for (size_t i = 0; i < rank.params.size(); ++i) {
    int64_t begin = 0, end = 0;
    CHECK_OK(strategy_api->owned_range(rank.strategy, -1, i, &begin, &end));
    std::vector<float> written(size_t(end - begin)), read(size_t(end - begin));
    for (int64_t e = begin; e < end; ++e) written[size_t(e - begin)] = 0.5f * float(e) - float(i);
    CHECK_OK(strategy_api->write_param(rank.strategy, i, begin, end - begin, written.data()));
    CHECK_OK(strategy_api->read_param(rank.strategy, i, begin, end - begin, read.data()));
    CHECK(read == written);
  }

  strategy_api->destroy(rank.strategy);
  for (void* c : {dp, embedding, test_dp, test_embedding}) comm->destroy(c);
  CHECK_OK(comm->barrier(world));
  comm->destroy(world);
  std::printf("rank %d (pp %d, dp %d): %s %s with %d layers: tied copies identical and equal to the reference\n", r,
              pp_rank, dp_rank, plugin_name.c_str(), config_json.c_str(), n_layers);
}

const keel_strategy_api* load_strategy(const std::string& path, const std::string& name) {
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library) fail(__FILE__, __LINE__, std::string("dlopen: ") + dlerror());
  auto entry = reinterpret_cast<keel_plugin_entry_fn>(dlsym(library, KEEL_PLUGIN_ENTRY_SYMBOL));
  if (!entry) fail(__FILE__, __LINE__, "no plugin entry in " + path);
  // A library may hold several strategies (ddp's also holds topk and powersgd): the one named.
  const keel_plugin_list* list = entry();
  CHECK(list != nullptr);
  for (size_t i = 0; i < list->count; ++i)
    if (list->plugins[i].kind == KEEL_KIND_STRATEGY && name == list->plugins[i].name)
      return static_cast<const keel_strategy_api*>(list->plugins[i].api);
  fail(__FILE__, __LINE__, path + " holds no strategy named " + name);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) fail(__FILE__, __LINE__, "usage: pp_strategy_test PLUGIN_PATH ddp|zero1|zero2|zero2-blocking|zero3 N_LAYERS");
  comm = load_comm_plugin(KEEL_MPI_PLUGIN_PATH);
  const std::string which = argv[2];
  if (which == "ddp") {
    plugin_name = "ddp";
    config_json = R"({"plugin": "ddp", "bucket_mb": 1e-6})";  // a bucket per layer: most start at release
  } else if (which.rfind("zero", 0) == 0 && which.size() >= 5) {
    plugin_name = "zero";
    zero_stage = which[4] - '0';
    config_json = "{\"plugin\": \"zero\", \"stage\": " + std::to_string(zero_stage) +
                  (which.find("-blocking") != std::string::npos ? ", \"overlap_comm\": false" : "") + "}";
  } else {
    fail(__FILE__, __LINE__, "unknown strategy " + which);
  }
  strategy_api = load_strategy(argv[1], plugin_name);
  run(std::atoi(argv[3]));
  return 0;
}
