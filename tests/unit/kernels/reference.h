// Helpers shared by the kernel tests: seeded random data, element-by-element comparison that
// names the first bad index, and central finite differences in double.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace keel_test {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// |got - want| <= atol + rtol·|want| everywhere; on failure says which tensor, index and values.
inline void expect_close(const std::vector<float>& got, const std::vector<double>& want, double atol,
                         double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok = std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]);  // false for NaN
    if (!ok && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements off; first at [" << first
                     << "]: got " << got[first] << ", want " << want[first];
}

// ∂loss/∂x by central differences, (loss(x+h) − loss(x−h)) / 2h, evaluated in double: the
// truncation error is O(h²) and the rounding error O(1e-16/h), both far below the float
// tolerances the kernels are held to for h = 1e-5 and the smooth, O(1) functions tested here.
inline std::vector<double> numerical_gradient(std::vector<double>& x, const std::function<double()>& loss,
                                              double h = 1e-5) {
  std::vector<double> grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = loss();
    x[i] = saved - h;
    const double down = loss();
    x[i] = saved;
    grad[i] = (up - down) / (2 * h);
  }
  return grad;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// want = initial + delta: what an accumulating (+=) backward op must produce.
inline std::vector<double> plus(const std::vector<float>& initial, const std::vector<double>& delta) {
  std::vector<double> r(delta);
  for (size_t i = 0; i < r.size(); ++i) r[i] += initial[i];
  return r;
}

}  // namespace keel_test
