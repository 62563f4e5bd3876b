// ddp's gradient buffers: what the model accumulates through acquire is what read_grad and
// grad_sq_norm see, and zero_grads clears all of it.
#include <cmath>

#include "ddp_test_fixture.hpp"

namespace keel_test {
namespace {

// A gradient value per (parameter, element) that no other pair shares.
float test_grad_value(size_t index, int64_t element) {
  return 0.5f * static_cast<float>(index + 1) - 0.01f * static_cast<float>(element);
}

class DdpGradientsTest : public DdpTest {
 public:
  // Adds test_grad_value to every gradient element of `layer`, as a backward op would.
  void accumulate(int32_t layer, size_t first_index, size_t n) {
    std::vector<keel_tensor> grads = acquire_grads(layer, n);
    for (size_t k = 0; k < n; ++k) {
      float* g = static_cast<float*>(grads[k].data);
      for (int64_t e = 0; e < kToyNumel[first_index + k]; ++e) g[e] += test_grad_value(first_index + k, e);
    }
    EXPECT_EQ(access.release(access.ctx, layer, KEEL_PHASE_BACKWARD, 1), KEEL_OK) << last_error();
  }
};

TEST_F(DdpGradientsTest, GradientsStartAtZeroAndAccumulateAcrossAcquires) {
  ASSERT_EQ(create(), KEEL_OK) << last_error();
  for (size_t i = 0; i < specs.size(); ++i)
    for (float g : read_grad(i)) ASSERT_EQ(g, 0.0f) << specs[i].name;
  accumulate(1, 2, 4);
  accumulate(1, 2, 4);  // a second micro-batch adds to the first
  for (size_t i = 2; i < 6; ++i) {
    const std::vector<float> grads = read_grad(i);
    for (int64_t e = 0; e < kToyNumel[i]; ++e)
      EXPECT_FLOAT_EQ(grads[static_cast<size_t>(e)], 2 * test_grad_value(i, e)) << specs[i].name << "[" << e << "]";
  }
  for (size_t i : {0, 1, 6, 7, 8})
    for (float g : read_grad(i)) EXPECT_EQ(g, 0.0f) << specs[i].name << " belongs to another layer";
}

TEST_F(DdpGradientsTest, GradSqNormIsTheSumOfSquaresOfEveryGradient) {
  ASSERT_EQ(create(), KEEL_OK) << last_error();
  accumulate(0, 0, 2);
  accumulate(1, 2, 4);
  accumulate(2, 6, 3);
  double expected = 0;
  for (size_t i = 0; i < specs.size(); ++i)
    for (int64_t e = 0; e < kToyNumel[i]; ++e) expected += std::pow(static_cast<double>(test_grad_value(i, e)), 2);
  double sum_squares = -1;
  ASSERT_EQ(api.grad_sq_norm(strategy, &sum_squares), KEEL_OK) << last_error();
  EXPECT_NEAR(sum_squares, expected, 1e-9 * expected);
  EXPECT_GT(expected, 100.0);  // the check is not satisfied by an all-zero buffer
}

TEST_F(DdpGradientsTest, ZeroGradsClearsEveryGradient) {
  ASSERT_EQ(create(), KEEL_OK) << last_error();
  accumulate(0, 0, 2);
  accumulate(2, 6, 3);
  ASSERT_EQ(api.zero_grads(strategy), KEEL_OK) << last_error();
  for (size_t i = 0; i < specs.size(); ++i)
    for (float g : read_grad(i)) ASSERT_EQ(g, 0.0f) << specs[i].name;
  double sum_squares = -1;
  ASSERT_EQ(api.grad_sq_norm(strategy, &sum_squares), KEEL_OK) << last_error();
  EXPECT_EQ(sum_squares, 0.0);
  // Parameters are not gradients: zero_grads leaves them alone.
  EXPECT_EQ(read_param(8)[11], test_init_value(specs[8], 11));
}

TEST_F(DdpGradientsTest, BeginMicrobatchAcceptsIndicesAndRefusesNegativeOnes) {
  ASSERT_EQ(create(), KEEL_OK) << last_error();
  EXPECT_EQ(api.begin_microbatch(strategy, 0, 0), KEEL_OK) << last_error();
  EXPECT_EQ(api.begin_microbatch(strategy, 1, 1), KEEL_OK) << last_error();
  EXPECT_EQ(api.begin_microbatch(strategy, -1, 0), KEEL_ERR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace keel_test
