// add, accumulate, scale and zero_fill, at a size inside one thread and one above the
// threading threshold, including add writing over one of its inputs.
#include "cpu/elementwise.h"

#include "reference.h"

using namespace keel_test;

namespace {

class Elementwise : public ::testing::TestWithParam<int64_t> {};

TEST_P(Elementwise, AddAccumulateScale) {
  const int64_t n = GetParam();
  auto a = random_floats(n, 1), b = random_floats(n, 2);
  std::vector<double> sum(n), scaled(n);
  for (int64_t i = 0; i < n; ++i) sum[i] = double(a[i]) + b[i], scaled[i] = double(a[i]) * -0.25;

  std::vector<float> out(n, 3.0f);
  keel::cpu::add(out.data(), a.data(), b.data(), n);
  expect_close(out, sum, 0, 1e-7, "add");
  auto aliased = a;
  keel::cpu::add(aliased.data(), aliased.data(), b.data(), n);  // out aliases a
  expect_close(aliased, sum, 0, 1e-7, "add in place");

  auto dst = a;
  keel::cpu::accumulate(dst.data(), b.data(), n);
  expect_close(dst, sum, 0, 1e-7, "accumulate");

  auto x = a;
  keel::cpu::scale(x.data(), -0.25f, n);  // exact in float: a power of two
  expect_close(x, scaled, 0, 0, "scale");
}

INSTANTIATE_TEST_SUITE_P(Sizes, Elementwise, ::testing::Values(int64_t{13}, int64_t{100003}));

TEST(ZeroFill, ClearsEveryByteAndNothingElse) {
  const size_t bytes = (size_t{3} << 20) + 5;  // several 1 MiB chunks and a ragged end
  std::vector<unsigned char> buffer(bytes + 16, 0xAB);
  keel::cpu::zero_fill(buffer.data() + 8, bytes);
  for (size_t i = 0; i < buffer.size(); ++i) {
    const bool inside = i >= 8 && i < 8 + bytes;
    ASSERT_EQ(buffer[i], inside ? 0 : 0xAB) << "byte " << i;
  }
}

}  // namespace
