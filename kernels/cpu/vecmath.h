// exp and tanh on 8 floats at a time. glibc's expf/tanhf are scalar calls unless -ffast-math,
// and GCC 12 will not auto-vectorise a clamped polynomial exp (its jump threading turns the
// clamps into branches), yet softmax over a 50257-word vocabulary, attention's softmax and
// GELU evaluate them hundreds of millions of times per step. So they are written on GCC/Clang
// vector types, which compile to AVX2 under the default -march=x86-64-v3 (to SSE otherwise).
#pragma once

#include <cstdint>
#include <cstring>

namespace keel::cpu {

using f32x8 = float __attribute__((vector_size(32)));
using i32x8 = int32_t __attribute__((vector_size(32)));

inline f32x8 load8(const float* p) {
  f32x8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store8(float* p, f32x8 v) { std::memcpy(p, &v, sizeof v); }
// The first `count` (< 8) floats from p, the other lanes `fill`: the tail of a loop.
inline f32x8 load_partial8(const float* p, int64_t count, float fill) {
  f32x8 v = f32x8{} + fill;
  std::memcpy(&v, p, count * sizeof(float));
  return v;
}
inline void store_partial8(float* p, f32x8 v, int64_t count) { std::memcpy(p, &v, count * sizeof(float)); }
inline float sum8(f32x8 v) { return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7])); }

// e^x, relative error below 2e-7 over the float range (Cephes' expf polynomial with
// Cody-Waite range reduction). Results below ~1.2e-38 come out as ~1.2e-38, not denormals;
// above 88.3 as ~2.2e38, finite; NaN stays NaN.
inline f32x8 exp8(f32x8 x) {
  const f32x8 lo = f32x8{} - 87.3f, hi = f32x8{} + 88.3f;
  x = x < lo ? lo : x;  // a NaN compares false and stays
  x = x > hi ? hi : x;
  const f32x8 n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  f32x8 r = x - n * 0.693359375f;  // ln 2 split in two so the reduction is exact
  r = r - n * -2.12194440e-4f;
  f32x8 p = f32x8{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const f32x8 y = p * r * r + r + 1.0f;
  const i32x8 bits = (__builtin_convertvector(n, i32x8) + 127) << 23;  // 2^n
  return y * (f32x8)bits;  // a vector cast reinterprets the bits
}

// tanh through e^{2x}; absolute error below ~2e-7, which is all GELU needs.
inline f32x8 tanh8(f32x8 x) { return 1.0f - 2.0f / (exp8(2.0f * x) + 1.0f); }

// Scalar forms, for tests and odd elements: the same arithmetic as the vector lanes.
inline float exp_approx(float x) { return exp8(f32x8{} + x)[0]; }
inline float tanh_approx(float x) { return tanh8(f32x8{} + x)[0]; }

// out[i] = e^(in[i] - shift) for i < n, returning Σ out[i]: the body of every softmax here.
// out may alias in.
inline float exp_shifted_sum(float* out, const float* in, float shift, int64_t n) {
  f32x8 acc{};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const f32x8 e = exp8(load8(in + i) - shift);
    store8(out + i, e);
    acc += e;
  }
  float sum = sum8(acc);
  if (i < n) {
    const f32x8 e = exp8(load_partial8(in + i, n - i, shift) - shift);
    store_partial8(out + i, e, n - i);
    for (int64_t j = 0; j < n - i; ++j) sum += e[j];
  }
  return sum;
}

// Σ e^(in[i] - shift) for i < n, nothing stored: a softmax's denominator read once.
inline float exp_shifted_total(const float* in, float shift, int64_t n) {
  f32x8 acc{};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc += exp8(load8(in + i) - shift);
  float sum = sum8(acc);
  if (i < n) {
    const f32x8 e = exp8(load_partial8(in + i, n - i, shift) - shift);
    for (int64_t j = 0; j < n - i; ++j) sum += e[j];
  }
  return sum;
}

// out[i] = base[i] + e^(in[i] - shift) * scale for i < n, where base is out itself or, when
// `from_zero`, 0 (out may alias in): a softmax's gradient from the logits and their logsumexp.
inline void exp_shifted_scaled(float* out, const float* in, float shift, float scale, int64_t n, bool from_zero) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const f32x8 base = from_zero ? f32x8{} : load8(out + i);
    store8(out + i, base + exp8(load8(in + i) - shift) * scale);
  }
  if (i < n) {
    const f32x8 base = from_zero ? f32x8{} : load_partial8(out + i, n - i, 0.0f);
    store_partial8(out + i, base + exp8(load_partial8(in + i, n - i, shift) - shift) * scale, n - i);
  }
}

}  // namespace keel::cpu
