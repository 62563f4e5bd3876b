// ZeRO-Offload and ZeRO-Infinity at the strategy level: a zero run whose optimizer state (and,
// where the stage shards them, parameters and gradients) live in an offload tier — the cpu
// engine, or the nvme engine on files in a folder under /tmp — gives the SAME BITS as the
// resident run: gradient norms, what every forward saw, the parameters and momentum read back
// (read_param/read_state straight from the tier), for stages 1-3 and ddp (stage 0 below), on
// one rank and on two.
// Around it: describe reports no backend bytes for an offloaded array, write_state/read_state
// of unaligned ranges round-trip through the tier, a full tier fails at create, a failing tier
// fails the step with the tier's message (not a hang), and arrays a stage cannot stream are
// refused naming offload.<key>.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "test_offload_tier.hpp"
#include "zero_rank_driver.hpp"

namespace keel_test {
namespace {

// The test tier over the engines' classes (small windows, fault injection), or the real
// offload plugins ("cpu", "nvme") loaded as the core loads them.
enum class Engine { kCpu, kNvme, kCpuPlugin, kNvmePlugin };
const char* engine_label(Engine e) {
  switch (e) {
    case Engine::kCpu: return "_cpu_";
    case Engine::kNvme: return "_nvme_";
    case Engine::kCpuPlugin: return "_cpuplugin_";
    case Engine::kNvmePlugin: return "_nvmeplugin_";
  }
  return "_";
}

struct OffloadScenario {
  int32_t ranks;  // 1: no communicator
  int32_t stage;  // 0: the ddp strategy
  Engine engine;
  uint32_t arrays;
  bool device = false;  // the backend pretends its memory is a device's (staging copies)
  bool prefetch = true;  // stage 3: gather the next layer ahead (else only its tier read goes ahead)
};

std::string arrays_label(uint32_t arrays) {
  std::string label;
  if (arrays & KEEL_OFFLOAD_OPTIMIZER_STATE) label += "state";
  if (arrays & KEEL_OFFLOAD_PARAMS) label += "_params";
  if (arrays & KEEL_OFFLOAD_GRADIENTS) label += "_grads";
  return label;
}
std::string describe_offload(const OffloadScenario& s) {
  return "ranks" + std::to_string(s.ranks) + (s.stage == 0 ? std::string("_ddp") : "_stage" + std::to_string(s.stage)) +
         engine_label(s.engine) + arrays_label(s.arrays) + (s.device ? "_device" : "") + (s.prefetch ? "" : "_noprefetch");
}
void PrintTo(const OffloadScenario& s, std::ostream* os) { *os << describe_offload(s); }

// A fresh folder under /tmp (a real disk here, as O_DIRECT needs; the engine makes its own
// folder inside and removes it), removed with the fixture.
class TempFolder {
 public:
  TempFolder() {
    char pattern[] = "/tmp/keel-zero-offload-XXXXXX";
    if (!mkdtemp(pattern)) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempFolder() { rmdir(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::unique_ptr<TestTier> make_tier(Engine engine, const TempFolder& folder) {
  return engine == Engine::kCpu ? TestTier::cpu(uint64_t(64) << 20, zero_test_host())
                                : TestTier::nvme(folder.path(), uint64_t(64) << 20, zero_test_host());
}

const keel_strategy_api& ddp_api() {
  static LoadedPlugin ddp{KEEL_DDP_PLUGIN_PATH, KEEL_KIND_STRATEGY, "ddp"};
  return ddp.api<keel_strategy_api>();
}

// The scenario's strategy for rank r: zero at its stage, or ddp.
// sgd's table with a step that tells sgd the memory is the host's (it is: the "device" backend
// only pretends), for the device scenarios.
const keel_optimizer_api* host_sgd_for_device(const keel_optimizer_api& sgd) {
  static const keel_optimizer_api* real = nullptr;
  static keel_optimizer_api shim{};
  real = &sgd;
  shim = sgd;
  shim.step = [](void* optimizer, const keel_optimizer_step_args* args) {
    EXPECT_EQ(args->device.device_type, KEEL_DEVICE_CUDA) << "the strategy handed the backend's device over";
    keel_optimizer_step_args host_args = *args;
    host_args.device = keel_device{KEEL_DEVICE_CPU, 0};
    return real->step(optimizer, &host_args);
  };
  return &shim;
}

std::unique_ptr<ZeroRank> make_strategy_rank(ZeroPlugins& plugins, const OffloadScenario& s, ThreadWorld* world,
                                             int32_t r) {
  if (s.device) {
    auto rank = std::make_unique<ZeroRank>(plugins.zero_api(), host_sgd_for_device(plugins.sgd_api()), plugins.sgd_obj,
                                           world ? world->api() : nullptr, world ? world->comm(r) : nullptr, r,
                                           world ? world->size() : 1);
    rank->pretend_device_memory();
    return rank;
  }
  if (s.stage > 0) return plugins.make_rank(world, r);
  return std::make_unique<ZeroRank>(ddp_api(), &plugins.sgd_api(), plugins.sgd_obj, world ? world->api() : nullptr,
                                    world ? world->comm(r) : nullptr, r, world ? world->size() : 1);
}
std::string strategy_config(const OffloadScenario& s) {
  return s.stage > 0 ? stage_config(s.stage, s.prefetch) : std::string(R"({"plugin": "ddp"})");
}

// One rank's tier from the offload plugin (keel-offload), destroyed after the strategy.
class PluginTier {
 public:
  PluginTier(Engine engine, const std::string& folder, int32_t rank) {
    static LoadedPlugin nvme{KEEL_OFFLOAD_PLUGIN_PATH, KEEL_KIND_OFFLOAD, "nvme"};
    static LoadedPlugin cpu{KEEL_OFFLOAD_PLUGIN_PATH, KEEL_KIND_OFFLOAD, "cpu"};
    api_ = &(engine == Engine::kNvmePlugin ? nvme : cpu).api<keel_offload_api>();
    const std::string config = engine == Engine::kNvmePlugin
                                   ? R"({"path": ")" + folder + R"(", "capacity_bytes": 67108864, "queue_depth": 4, "block_bytes": 4096})"
                                   : std::string(R"({"capacity_bytes": 67108864})");
    keel_offload_create_args args{};
    args.struct_size = sizeof(args);
    args.config_json = config.c_str();
    args.json_path = "offload";
    args.world_rank = rank;
    args.device_backend = 0;
    if (api_->create(&host_, &args, &obj_) != KEEL_OK) throw std::runtime_error("offload create: " + zero_last_error());
  }
  ~PluginTier() {
    if (obj_) api_->destroy(obj_);
  }
  const keel_offload_api* api() const { return api_; }
  void* obj() const { return obj_; }

 private:
  keel_host host_ = zero_test_host();
  const keel_offload_api* api_ = nullptr;
  void* obj_ = nullptr;
};

// Runs every rank through the driver, each with its own tier when `arrays` is not 0.
std::vector<RankRecord> run_ranks(ZeroPlugins& plugins, const OffloadScenario& s, uint32_t arrays,
                                  const DriverOptions& options, std::vector<keel_strategy_info>* infos = nullptr) {
  TempFolder folder;
  std::vector<RankRecord> records(size_t(s.ranks));
  std::vector<keel_strategy_info> described(size_t(s.ranks));
  std::unique_ptr<ThreadWorld> world;
  if (s.ranks > 1) world = std::make_unique<ThreadWorld>(s.ranks);
  auto body = [&](int32_t r) {
    std::unique_ptr<TestTier> tier;
    std::unique_ptr<PluginTier> plugin_tier;
    auto rank = make_strategy_rank(plugins, s, world.get(), r);
    if (arrays != 0 && (s.engine == Engine::kCpu || s.engine == Engine::kNvme)) {
      tier = make_tier(s.engine, folder);
      rank->offload = &test_offload_api();
      rank->offload_obj = tier.get();
    } else if (arrays != 0) {
      plugin_tier = std::make_unique<PluginTier>(s.engine, folder.path(), r);
      rank->offload = plugin_tier->api();
      rank->offload_obj = plugin_tier->obj();
    }
    rank->offload_arrays = arrays;
    if (rank->create(strategy_config(s)) != KEEL_OK) throw std::runtime_error("create failed: " + zero_last_error());
    described[size_t(r)] = rank->describe();
    RankDriver driver(rank->api(), *rank, world ? world->api() : nullptr, world ? world->comm(r) : nullptr);
    records[size_t(r)] = driver.run(options);
    // A device backend pins the buffers tier transfers pass through (alloc_host, aligned to the
    // tier's 64 or 4096 bytes, which the engines check at submit); a host backend needs none.
    if (arrays != 0 && s.device)
      EXPECT_GT(rank->backend().host_allocations, 0) << "the staging buffers came from the backend's alloc_host";
    if (!s.device) EXPECT_EQ(rank->backend().host_allocations, 0) << "a host backend's staging is not pinned";
    rank.reset();  // the strategy goes before its tier, as in the core
    if (tier) EXPECT_EQ(tier->live_buffers, 0) << "every staging buffer went back to the tier";
    // The cpu tier's 16-element windows: each step reads and writes at least two of them.
    if (tier && s.engine == Engine::kCpu)
      EXPECT_GE(tier->requests, int64_t(options.steps) * 2 * 2) << "the step streamed the state in several windows";
  };
  if (world) world->run(body);
  else body(0);
  if (infos) *infos = described;
  return records;
}

// Same bits: the floats compared as their bit patterns, so -0 vs 0 or a NaN would show.
void expect_same_bits(const std::vector<float>& actual, const std::vector<float>& expected, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t k = 0; k < actual.size(); ++k) {
    uint32_t a = 0, e = 0;
    std::memcpy(&a, &actual[k], 4);
    std::memcpy(&e, &expected[k], 4);
    ASSERT_EQ(a, e) << what << "[" << k << "]: " << actual[k] << " vs resident " << expected[k];
  }
}

class ZeroOffloadTest : public ::testing::TestWithParam<OffloadScenario> {
 protected:
  ZeroPlugins plugins;
};

TEST_P(ZeroOffloadTest, TheOffloadedRunIsBitIdenticalToTheResidentOne) {
  const OffloadScenario& s = GetParam();
  DriverOptions options;
  options.steps = 3;
  options.micro_batches = 2;
  std::vector<keel_strategy_info> resident_info, offloaded_info;
  const std::vector<RankRecord> resident = run_ranks(plugins, s, 0, options, &resident_info);
  const std::vector<RankRecord> offloaded = run_ranks(plugins, s, s.arrays, options, &offloaded_info);
  const std::vector<keel_param_spec> specs = zero_model_specs();
  for (size_t r = 0; r < resident.size(); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(offloaded[r].norms, resident[r].norms) << "grad_sq_norm per step";
    ASSERT_EQ(offloaded[r].seen.size(), resident[r].seen.size());
    for (size_t step = 0; step < resident[r].seen.size(); ++step)
      for (size_t i = 0; i < specs.size(); ++i)
        expect_same_bits(offloaded[r].seen[step][i], resident[r].seen[step][i],
                         std::string(specs[i].name) + " seen by forward " + std::to_string(step + 1));
    for (size_t i = 0; i < specs.size(); ++i) {
      EXPECT_EQ(offloaded[r].owned[i], resident[r].owned[i]);
      expect_same_bits(offloaded[r].params[i], resident[r].params[i], std::string(specs[i].name) + " read_param");
      expect_same_bits(offloaded[r].momentum[i], resident[r].momentum[i], std::string(specs[i].name) + " read_state");
    }
    // describe: an offloaded array keeps no backend bytes, the others are as resident.
    const bool state = s.arrays & KEEL_OFFLOAD_OPTIMIZER_STATE, params = s.arrays & KEEL_OFFLOAD_PARAMS,
               grads = s.arrays & KEEL_OFFLOAD_GRADIENTS;
    EXPECT_GT(resident_info[r].state_bytes, 0u);
    EXPECT_EQ(offloaded_info[r].state_bytes, state ? 0u : resident_info[r].state_bytes);
    EXPECT_EQ(offloaded_info[r].param_bytes, params ? 0u : resident_info[r].param_bytes);
    EXPECT_EQ(offloaded_info[r].grad_bytes, grads ? 0u : resident_info[r].grad_bytes);
  }
}

std::vector<OffloadScenario> offload_scenarios() {
  std::vector<OffloadScenario> all;
  for (int32_t ranks : {1, 2})
    for (int32_t stage : {0, 1, 2, 3})
      for (Engine engine : {Engine::kCpu, Engine::kNvme}) {
        const uint32_t state = KEEL_OFFLOAD_OPTIMIZER_STATE;
        all.push_back({ranks, stage, engine, state});
        if (stage >= 2) all.push_back({ranks, stage, engine, state | KEEL_OFFLOAD_GRADIENTS});
        if (stage == 3) {
          all.push_back({ranks, stage, engine, state | KEEL_OFFLOAD_PARAMS});
          all.push_back({ranks, stage, engine, state | KEEL_OFFLOAD_PARAMS | KEEL_OFFLOAD_GRADIENTS});
          all.push_back({ranks, stage, engine, KEEL_OFFLOAD_PARAMS});  // state resident, params streamed
        }
      }
  // The real plugins, as the core will hand them over: every array a stage can offload.
  const uint32_t every = KEEL_OFFLOAD_OPTIMIZER_STATE | KEEL_OFFLOAD_PARAMS | KEEL_OFFLOAD_GRADIENTS;
  // A device backend (pretended): every window, chunk and reduced layer staged through backend
  // memory.
  for (int32_t ranks : {1, 2}) {
    all.push_back({ranks, 2, Engine::kCpu, KEEL_OFFLOAD_OPTIMIZER_STATE | KEEL_OFFLOAD_GRADIENTS, true});
    all.push_back({ranks, 3, Engine::kCpu, every, true});
    all.push_back({ranks, 3, Engine::kNvme, every, true});
    all.push_back({ranks, 3, Engine::kCpu, every, false, false});
    all.push_back({ranks, 3, Engine::kNvme, every, false, false});
  }
  for (int32_t ranks : {1, 2})
    for (Engine engine : {Engine::kCpuPlugin, Engine::kNvmePlugin}) {
      all.push_back({ranks, 0, engine, KEEL_OFFLOAD_OPTIMIZER_STATE});
      all.push_back({ranks, 1, engine, KEEL_OFFLOAD_OPTIMIZER_STATE});
      all.push_back({ranks, 2, engine, KEEL_OFFLOAD_OPTIMIZER_STATE | KEEL_OFFLOAD_GRADIENTS});
      all.push_back({ranks, 3, engine, every});
    }
  return all;
}

INSTANTIATE_TEST_SUITE_P(Offload, ZeroOffloadTest, ::testing::ValuesIn(offload_scenarios()),
                         [](const ::testing::TestParamInfo<OffloadScenario>& info) { return describe_offload(info.param); });

// One lone rank's strategy over a tier, for the tests below.
struct LoneRank {
  LoneRank(ZeroPlugins& plugins, std::unique_ptr<TestTier> tier_in, uint32_t arrays)
      : tier(std::move(tier_in)), rank(plugins.make_rank(nullptr, 0)) {
    rank->offload = &test_offload_api();
    rank->offload_obj = tier.get();
    rank->offload_arrays = arrays;
  }
  std::unique_ptr<TestTier> tier;
  std::unique_ptr<ZeroRank> rank;  // declared after the tier: destroyed first
};

TEST(ZeroOffload, UnalignedStateRangesRoundTripThroughTheNvmeTier) {
  ZeroPlugins plugins;
  TempFolder folder;
  LoneRank lone(plugins, TestTier::nvme(folder.path(), uint64_t(64) << 20, zero_test_host()), KEEL_OFFLOAD_OPTIMIZER_STATE);
  ASSERT_EQ(lone.rank->create(stage_config(3)), KEEL_OK) << zero_last_error();
  const keel_strategy_api& api = plugins.zero_api();
  // head.w (index 5) holds elements 0..23; write 3..16, then read 0..23: zeros around it.
  std::vector<float> written(14);
  for (size_t k = 0; k < written.size(); ++k) written[k] = 0.25f * float(k) - 1.0f;
  ASSERT_EQ(api.write_state(lone.rank->strategy, 0, 5, 3, 14, written.data()), KEEL_OK) << zero_last_error();
  std::vector<float> back(24, -7.0f);
  ASSERT_EQ(api.read_state(lone.rank->strategy, 0, 5, 0, 24, back.data()), KEEL_OK) << zero_last_error();
  for (int64_t e = 0; e < 24; ++e)
    EXPECT_EQ(back[size_t(e)], (e >= 3 && e < 17) ? written[size_t(e - 3)] : 0.0f) << "head.w momentum[" << e << "]";
  // The neighbours in the same block (head.b, h.gain) stay zero.
  std::vector<float> neighbour(5, -7.0f);
  ASSERT_EQ(api.read_state(lone.rank->strategy, 0, 6, 0, 5, neighbour.data()), KEEL_OK) << zero_last_error();
  EXPECT_EQ(neighbour, std::vector<float>(5, 0.0f));
}

// A chunk read ahead from the tier before write_param must not reach a later forward: layer 0's
// acquire gathers layer 1 ahead and reads layer 2's chunk ahead; h.gain (layer 2) is then written.
TEST(ZeroOffload, AParameterWrittenAfterItsReadAheadIsWhatTheForwardSees) {
  ZeroPlugins plugins;
  LoneRank lone(plugins, TestTier::cpu(uint64_t(64) << 20, zero_test_host()), KEEL_OFFLOAD_PARAMS);
  ASSERT_EQ(lone.rank->create(stage_config(3)), KEEL_OK) << zero_last_error();
  const keel_param_access& access = lone.rank->access;
  std::vector<keel_tensor> params(2);
  ASSERT_EQ(access.acquire(access.ctx, 0, KEEL_PHASE_FORWARD, params.data(), nullptr, 2), KEEL_OK) << zero_last_error();
  ASSERT_EQ(access.release(access.ctx, 0, KEEL_PHASE_FORWARD, 0), KEEL_OK) << zero_last_error();
  const float gain = 42.5f;
  ASSERT_EQ(plugins.zero_api().write_param(lone.rank->strategy, 4, 0, 1, &gain), KEEL_OK) << zero_last_error();
  ASSERT_EQ(access.acquire(access.ctx, 1, KEEL_PHASE_FORWARD, params.data(), nullptr, 2), KEEL_OK) << zero_last_error();
  ASSERT_EQ(access.release(access.ctx, 1, KEEL_PHASE_FORWARD, 0), KEEL_OK) << zero_last_error();
  ASSERT_EQ(access.acquire(access.ctx, 2, KEEL_PHASE_FORWARD, params.data(), nullptr, 1), KEEL_OK) << zero_last_error();
  EXPECT_EQ(*static_cast<const float*>(params[0].data), gain) << "the forward saw a stale chunk read ahead";
  ASSERT_EQ(access.release(access.ctx, 2, KEEL_PHASE_FORWARD, 0), KEEL_OK) << zero_last_error();
  float back = 0.0f;
  ASSERT_EQ(plugins.zero_api().read_param(lone.rank->strategy, 4, 0, 1, &back), KEEL_OK) << zero_last_error();
  EXPECT_EQ(back, gain) << "read_param from the tier";
}

TEST(ZeroOffload, AFullTierFailsAtCreateNamingTheCapacity) {
  ZeroPlugins plugins;
  // 64 bytes: less than the state shard's extents (the model has 50 elements, 200 bytes).
  LoneRank lone(plugins, TestTier::cpu(64, zero_test_host()), KEEL_OFFLOAD_OPTIMIZER_STATE);
  EXPECT_EQ(lone.rank->create(stage_config(2)), KEEL_ERR_OUT_OF_MEMORY);
  EXPECT_NE(zero_last_error().find("add_extent \"state0\""), std::string::npos) << zero_last_error();
  EXPECT_NE(zero_last_error().find("capacity_bytes 64"), std::string::npos) << zero_last_error();
}

TEST(ZeroOffload, AFailingTierFailsTheStepWithItsMessage) {
  ZeroPlugins plugins;
  LoneRank lone(plugins, TestTier::cpu(uint64_t(64) << 20, zero_test_host()), KEEL_OFFLOAD_OPTIMIZER_STATE);
  ASSERT_EQ(lone.rank->create(stage_config(1)), KEEL_OK) << zero_last_error();
  lone.tier->fail_after = lone.tier->requests;  // every request from now on fails
  DriverOptions options;
  options.steps = 1;
  RankDriver driver(plugins.zero_api(), *lone.rank, nullptr, nullptr);
  try {
    driver.run(options);
    FAIL() << "the step succeeded over a failing tier";
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("step failed (5)"), std::string::npos) << message;  // KEEL_ERR_IO
    EXPECT_NE(message.find("read of extent 'state0' failed: injected I/O error"), std::string::npos) << message;
  }
  lone.rank.reset();
  EXPECT_EQ(lone.tier->live_buffers, 0) << "the failed step returned its staging buffers";
}

// ZeRO-Infinity on two ranks: rank 0's tier breaks right after create, so its first acquire
// (reading layer 0's chunk) fails; the error that comes out is the tier's, and rank 1, waiting
// in that layer's all_gather, is released instead of hanging.
TEST(ZeroOffload, ATierFailingOnOneRankFailsTheAcquireWithItsMessageAndReleasesThePeer) {
  ZeroPlugins plugins;
  ThreadWorld world(2);
  std::vector<std::unique_ptr<TestTier>> tiers;
  for (int r = 0; r < 2; ++r) tiers.push_back(TestTier::cpu(uint64_t(64) << 20, zero_test_host()));
  std::vector<std::unique_ptr<ZeroRank>> ranks;
  for (int32_t r = 0; r < 2; ++r) {
    ranks.push_back(plugins.make_rank(&world, r));
    ranks[size_t(r)]->offload = &test_offload_api();
    ranks[size_t(r)]->offload_obj = tiers[size_t(r)].get();
    ranks[size_t(r)]->offload_arrays = KEEL_OFFLOAD_OPTIMIZER_STATE | KEEL_OFFLOAD_PARAMS;  // zero_grads: no I/O
    ASSERT_EQ(ranks[size_t(r)]->create(stage_config(3)), KEEL_OK) << zero_last_error();
  }
  tiers[0]->fail_after = tiers[0]->requests;
  try {
    world.run([&](int32_t r) {
      RankDriver driver(plugins.zero_api(), *ranks[size_t(r)], world.api(), world.comm(r));
      driver.run(DriverOptions{});
    });
    FAIL() << "the run succeeded over a failing tier";
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("rank 0: acquire failed (5)"), std::string::npos) << message;
    EXPECT_NE(message.find("read of extent 'params' failed: injected I/O error"), std::string::npos) << message;
  }
  ranks.clear();  // the strategies before their tiers
  for (const auto& tier : tiers) EXPECT_EQ(tier->live_buffers, 0);
}

TEST(ZeroOffload, ArraysAStageCannotStreamAreRefusedNamingTheKey) {
  ZeroPlugins plugins;
  struct Case {
    int32_t stage;
    uint32_t arrays;
    const char* key;
  };
  for (const Case& c : {Case{1, KEEL_OFFLOAD_PARAMS, "offload.params: ZeRO stage 1"},
                        Case{2, KEEL_OFFLOAD_PARAMS, "offload.params: ZeRO stage 2"},
                        Case{1, KEEL_OFFLOAD_GRADIENTS, "offload.gradients: ZeRO stage 1"},
                        Case{0, KEEL_OFFLOAD_PARAMS, "offload.params: strategy ddp keeps every parameter"},
                        Case{0, KEEL_OFFLOAD_GRADIENTS, "offload.gradients: strategy ddp keeps every parameter"}}) {
    LoneRank lone(plugins, TestTier::cpu(uint64_t(64) << 20, zero_test_host()), c.arrays | KEEL_OFFLOAD_OPTIMIZER_STATE);
    if (c.stage == 0) {
      lone.rank = make_strategy_rank(plugins, {1, 0, Engine::kCpu, 0}, nullptr, 0);
      lone.rank->offload = &test_offload_api();
      lone.rank->offload_obj = lone.tier.get();
      lone.rank->offload_arrays = c.arrays | KEEL_OFFLOAD_OPTIMIZER_STATE;
    }
    EXPECT_EQ(lone.rank->create(c.stage > 0 ? stage_config(c.stage) : R"({"plugin": "ddp"})"), KEEL_ERR_INVALID_CONFIG)
        << c.key;
    EXPECT_NE(zero_last_error().find(c.key), std::string::npos) << zero_last_error();
  }
}

}  // namespace
}  // namespace keel_test
