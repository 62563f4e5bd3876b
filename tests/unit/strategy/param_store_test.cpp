// keel_support's parameter store used directly, as a third-party strategy would: every array
// comes from the HomeFactory (the seam an offload tier plugs into) and describe reports what
// the homes keep in backend memory; a sharded store initialises and serves only the owned part.
#include <keel_support/strategy/param_store.hpp>

#include <memory>
#include <utility>
#include <vector>

#include "ddp_test_fixture.hpp"

namespace keel_test {
namespace {

using keel_support::ParamStore;
using keel_support::ShardHome;
using keel_support::StoreArray;
using keel_support::StoreOptions;

// A home in backend memory that says it keeps state elsewhere (0 backend bytes), the way an
// offload tier would.
class TierHome final : public ShardHome {
 public:
  TierHome(const keel_support::BackendOps& backend, StoreArray array, int64_t elements)
      : array_(array), elements_(elements), buffer_(backend.alloc_floats(elements)) {}
  int64_t elements() const override { return elements_; }
  float* data() override { return buffer_.floats(); }
  uint64_t backend_bytes() const override { return array_ == StoreArray::kState ? 0 : buffer_.bytes(); }

 private:
  StoreArray array_;
  int64_t elements_;
  keel_support::BackendBuffer buffer_;
};

class ParamStoreTest : public ::testing::Test {
 protected:
  ParamStoreTest() {
    init_calls().clear();
    backend.host = &host;
  }

  keel_strategy_create_args args() {
    keel_strategy_create_args a{};
    a.struct_size = sizeof(a);
    a.backend = &backend_api;
    a.backend_obj = &backend;
    a.optimizer = &optimizer_api;
    a.optimizer_obj = &optimizer;
    a.params = specs.data();
    a.n_params = specs.size();
    a.n_layers = kToyLayers;
    a.seed = kSeed;
    a.dp_size = 1;
    return a;
  }

  keel_host host = make_test_host(pattern_init_param);
  HostMemoryBackend backend;
  keel_backend_api backend_api = HostMemoryBackend::table();
  RecordingOptimizer optimizer;
  keel_optimizer_api optimizer_api = RecordingOptimizer::table();
  std::vector<keel_param_spec> specs = toy_model_specs();
};

TEST_F(ParamStoreTest, EveryArrayComesFromTheHomeFactory) {
  std::vector<std::pair<StoreArray, int64_t>> made;
  StoreOptions options;
  const keel_support::BackendOps ops{&backend_api, &backend};
  options.homes = [&](StoreArray array, int64_t elements) -> std::unique_ptr<ShardHome> {
    made.emplace_back(array, elements);
    return std::make_unique<TierHome>(ops, array, elements);
  };
  {
    const keel_strategy_create_args a = args();
    ParamStore store(&host, a, options);  // the recording optimizer has 2 state slots
    const std::vector<std::pair<StoreArray, int64_t>> expected = {
        {StoreArray::kParams, kToyTotal}, {StoreArray::kGrads, kToyTotal},
        {StoreArray::kState, kToyTotal}, {StoreArray::kState, kToyTotal}};
    EXPECT_EQ(made, expected);
    const keel_strategy_info info = store.describe(1);
    EXPECT_EQ(info.param_bytes, kToyTotal * sizeof(float));
    EXPECT_EQ(info.grad_bytes, kToyTotal * sizeof(float));
    EXPECT_EQ(info.state_bytes, 0u) << "the tier's own figure, not the array size";
    // The parameters the store initialised live in the home it was given.
    float value = 0;
    store.read_param(8, 11, 1, &value);
    EXPECT_EQ(value, test_init_value(specs[8], 11));
    EXPECT_EQ(backend.live_allocations, 4);
  }
  EXPECT_EQ(backend.live_allocations, 0);
}

// Layer 0 (wte 40 + wpe 32 = 72 elements) cut in two chunks of 36: rank 1 owns wte [36, 40)
// and all of wpe.
TEST_F(ParamStoreTest, ShardedStoreInitialisesAndServesOnlyTheOwnedPart) {
  StoreOptions options;
  options.shard_rank = 1;
  options.shards = 2;
  options.params_sharded = true;
  options.grads_sharded = true;
  const keel_strategy_create_args a = args();
  ParamStore store(&host, a, options);
  int64_t begin = -1, end = -1;
  store.owned_range(-1, 0, &begin, &end);
  EXPECT_EQ(begin, 36);
  EXPECT_EQ(end, 40);
  std::vector<float> wte(4);
  store.read_param(0, 36, 4, wte.data());
  for (int64_t e = 0; e < 4; ++e) EXPECT_EQ(wte[size_t(e)], test_init_value(specs[0], 36 + e));
  // Only the owned part was initialised.
  ASSERT_EQ(init_calls().size() > 0, true);
  EXPECT_EQ(init_calls().front().begin, 36);
  EXPECT_EQ(init_calls().front().count, 4);
  float value = 0;
  try {
    store.read_param(0, 0, 1, &value);
    FAIL() << "read outside the owned part was accepted";
  } catch (const keel_support::StatusError& e) {
    EXPECT_EQ(e.code, KEEL_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("read_param: parameter 0 (\"wte\")'s parameter is sharded (rank 1 of 2): "
                                         "this rank holds elements [36, 40), not [0, 1)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(store.describe(0).param_bytes, uint64_t(store.layout().shard_elements) * sizeof(float));
}

// A strategy that has not said it can stream an array (localsgd, a third-party one reaching
// the arrays directly), or that places the arrays itself, is refused at create when the config
// puts arrays in the offload tier, naming the key: its memory would silently stay resident or
// be read where it is not. (The refusal comes before the tier is called at all.)
TEST_F(ParamStoreTest, AnOffloadRequestTheStrategyDidNotOptIntoIsRefusedNamingTheKey) {
  static const keel_offload_api never_called{};
  keel_strategy_create_args a = args();
  a.offload = &never_called;
  a.offload_arrays = KEEL_OFFLOAD_OPTIMIZER_STATE;
  auto message_of = [&](StoreOptions options) -> std::string {
    try {
      ParamStore store(&host, a, std::move(options));
    } catch (const keel_support::StatusError& e) {
      EXPECT_EQ(e.code, KEEL_ERR_INVALID_CONFIG);
      return e.what();
    }
    ADD_FAILURE() << "the store accepted an offload request";
    return "";
  };
  const std::string plain = message_of(StoreOptions{});
  EXPECT_NE(plain.find("offload.optimizer_state: this strategy cannot keep that array in the offload tier"),
            std::string::npos)
      << plain;
  StoreOptions placed;
  placed.offload_supported = KEEL_OFFLOAD_OPTIMIZER_STATE;
  placed.homes = [&](StoreArray, int64_t elements) -> std::unique_ptr<ShardHome> {
    return std::make_unique<keel_support::ResidentHome>(keel_support::BackendOps{&backend_api, &backend}, elements);
  };
  const std::string own_homes = message_of(placed);
  EXPECT_NE(own_homes.find("offload: this strategy places the store's arrays itself"), std::string::npos) << own_homes;
}

}  // namespace
}  // namespace keel_test
