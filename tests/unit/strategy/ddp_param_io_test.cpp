// ddp's read_param / write_param / read_grad: host copies of a flat element range of one
// parameter, bounds-checked with a message naming the parameter, outputs untouched on error.
#include "ddp_test_fixture.hpp"

namespace keel_test {
namespace {

TEST_F(DdpTest, WriteThenReadRoundTripsASubrangeAndTouchesNothingElse) {
  ASSERT_EQ(create(), KEEL_OK) << last_error();
  const float written[3] = {-1.5f, 2.25f, 7.0f};
  ASSERT_EQ(api.write_param(strategy, 4, 10, 3, written), KEEL_OK) << last_error();
  const std::vector<float> fc = read_param(4);
  for (int64_t e = 0; e < kToyNumel[4]; ++e) {
    const float expected = (e >= 10 && e < 13) ? written[e - 10] : test_init_value(specs[4], e);
    EXPECT_EQ(fc[static_cast<size_t>(e)], expected) << "h.0.fc.weight[" << e << "]";
  }
  float middle[2] = {};
  ASSERT_EQ(api.read_param(strategy, 4, 11, 2, middle), KEEL_OK) << last_error();
  EXPECT_EQ(middle[0], 2.25f);
  EXPECT_EQ(middle[1], 7.0f);
  // The neighbours in the flat buffer are intact.
  EXPECT_EQ(read_param(3).back(), test_init_value(specs[3], 3));
  EXPECT_EQ(read_param(5).front(), test_init_value(specs[5], 0));
  // Gradients are a separate buffer.
  for (float g : read_grad(4)) EXPECT_EQ(g, 0.0f);
}

TEST_F(DdpTest, OutOfRangeAccessIsRefusedByNameAndLeavesTheOutputAlone) {
  ASSERT_EQ(create(), KEEL_OK) << last_error();
  float out[8] = {42, 42, 42, 42, 42, 42, 42, 42};
  EXPECT_EQ(api.read_param(strategy, 9, 0, 1, out), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("read_param: parameter index 9 is outside [0, 9)"), std::string::npos) << last_error();
  EXPECT_EQ(api.read_param(strategy, 3, 3, 2, out), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("parameter 3 (\"h.0.ln.bias\") has 4 elements"), std::string::npos) << last_error();
  EXPECT_EQ(api.read_grad(strategy, 3, -1, 1, out), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("read_grad: parameter 3"), std::string::npos) << last_error();
  EXPECT_EQ(api.read_param(strategy, 3, 0, -1, out), KEEL_ERR_INVALID_ARGUMENT);
  for (float v : out) EXPECT_EQ(v, 42.0f);

  EXPECT_EQ(api.write_param(strategy, 2, 0, 5, out), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("write_param: parameter 2 (\"h.0.ln.weight\")"), std::string::npos) << last_error();
  EXPECT_EQ(read_param(2)[0], test_init_value(specs[2], 0)) << "a refused write changed nothing";
  EXPECT_EQ(api.write_param(strategy, 2, 0, 1, nullptr), KEEL_ERR_INVALID_ARGUMENT);
}

TEST_F(DdpTest, EmptyRangeAtTheEndIsAllowed) {
  ASSERT_EQ(create(), KEEL_OK) << last_error();
  EXPECT_EQ(api.read_param(strategy, 8, kToyNumel[8], 0, nullptr), KEEL_OK) << last_error();
  EXPECT_EQ(api.write_param(strategy, 8, 0, 0, nullptr), KEEL_OK) << last_error();
}

}  // namespace
}  // namespace keel_test
