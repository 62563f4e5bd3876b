// ddp's keel_param_access: acquire hands out each layer's parameters and gradient buffers in
// spec order, with local shapes, fp32, CPU, pointing into one flat buffer each; wrong calls are
// refused with a message and leave the caller's descriptors untouched.
#include "ddp_test_fixture.hpp"

namespace keel_test {
namespace {

constexpr size_t kLayerSizes[kToyLayers] = {2, 4, 3, 0};
constexpr size_t kFirstParamOfLayer[kToyLayers] = {0, 2, 6, 9};

TEST_F(DdpTest, AcquireDescribesEachLayersParametersInSpecOrder) {
  ASSERT_EQ(create(), KEEL_OK) << last_error();
  float* param_base = nullptr;
  float* grad_base = nullptr;
  for (int32_t layer = 0; layer < kToyLayers; ++layer) {
    const size_t n = kLayerSizes[layer];
    std::vector<keel_tensor> params(n), grads(n);
    ASSERT_EQ(access.acquire(access.ctx, layer, KEEL_PHASE_BACKWARD, params.data(), grads.data(), n), KEEL_OK)
        << last_error();
    for (size_t k = 0; k < n; ++k) {
      const size_t index = kFirstParamOfLayer[layer] + k;
      const keel_param_spec& spec = specs[index];
      SCOPED_TRACE(spec.name);
      if (!param_base) {  // parameter 0 fixes where the flat buffers start
        param_base = static_cast<float*>(params[k].data) - kToyOffsets[index];
        grad_base = static_cast<float*>(grads[k].data) - kToyOffsets[index];
      }
      EXPECT_EQ(params[k].data, param_base + kToyOffsets[index]);
      EXPECT_EQ(grads[k].data, grad_base + kToyOffsets[index]);
      for (const keel_tensor* t : {&params[k], &grads[k]}) {
        EXPECT_EQ(t->device.device_type, KEEL_DEVICE_CPU);
        EXPECT_EQ(t->dtype.code, KEEL_DTYPE_FLOAT);
        EXPECT_EQ(t->dtype.bits, 32);
        EXPECT_EQ(t->dtype.lanes, 1);
        EXPECT_EQ(t->byte_offset, 0u);
        ASSERT_EQ(t->ndim, spec.ndim);
        for (int d = 0; d < KEEL_MAX_DIMS; ++d) EXPECT_EQ(t->shape[d], d < spec.ndim ? spec.local_shape[d] : 0);
      }
      // Resident memory: the model reads the initialised values straight through the pointer.
      const float* values = static_cast<const float*>(params[k].data);
      EXPECT_EQ(values[kToyNumel[index] - 1], test_init_value(spec, kToyNumel[index] - 1));
    }
    EXPECT_EQ(access.release(access.ctx, layer, KEEL_PHASE_BACKWARD, 1), KEEL_OK) << last_error();
  }
  // The two buffers do not overlap.
  EXPECT_TRUE(grad_base >= param_base + kToyTotal || param_base >= grad_base + kToyTotal);
}

TEST_F(DdpTest, ForwardMayPassNullGradsBackwardMayNot) {
  ASSERT_EQ(create(), KEEL_OK) << last_error();
  std::vector<keel_tensor> params(4);
  EXPECT_EQ(access.acquire(access.ctx, 1, KEEL_PHASE_FORWARD, params.data(), nullptr, 4), KEEL_OK) << last_error();
  EXPECT_EQ(access.release(access.ctx, 1, KEEL_PHASE_FORWARD, 0), KEEL_OK) << last_error();
  EXPECT_EQ(access.acquire(access.ctx, 1, KEEL_PHASE_BACKWARD, params.data(), nullptr, 4), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("grads is NULL in the backward phase"), std::string::npos) << last_error();
}

TEST_F(DdpTest, WrongCountIsRefusedAndDescriptorsAreUntouched) {
  ASSERT_EQ(create(), KEEL_OK) << last_error();
  keel_tensor sentinel{};
  sentinel.ndim = 99;
  std::vector<keel_tensor> params(3, sentinel), grads(3, sentinel);
  EXPECT_EQ(access.acquire(access.ctx, 1, KEEL_PHASE_BACKWARD, params.data(), grads.data(), 3),
            KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("strategy ddp: acquire: layer 1 has 4 parameters, the caller asked for 3"),
            std::string::npos)
      << last_error();
  for (size_t k = 0; k < 3; ++k) EXPECT_EQ(params[k].ndim, 99) << k;
}

TEST_F(DdpTest, LayerAndPhaseOutOfRangeAreRefused) {
  ASSERT_EQ(create(), KEEL_OK) << last_error();
  EXPECT_EQ(access.acquire(access.ctx, 4, KEEL_PHASE_FORWARD, nullptr, nullptr, 0), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("layer 4 is outside [0, 4)"), std::string::npos) << last_error();
  EXPECT_EQ(access.release(access.ctx, -1, KEEL_PHASE_BACKWARD, 1), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(access.acquire(access.ctx, 3, 2, nullptr, nullptr, 0), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("phase 2"), std::string::npos) << last_error();
}

TEST_F(DdpTest, LayerWithoutParametersAcquiresNothing) {
  ASSERT_EQ(create(), KEEL_OK) << last_error();
  EXPECT_EQ(access.acquire(access.ctx, 3, KEEL_PHASE_BACKWARD, nullptr, nullptr, 0), KEEL_OK) << last_error();
  EXPECT_EQ(access.release(access.ctx, 3, KEEL_PHASE_BACKWARD, 1), KEEL_OK) << last_error();
}

}  // namespace
}  // namespace keel_test
