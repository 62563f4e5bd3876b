// Every op of the `cuda` backend against the `cpu` backend (the reference), both loaded with
// dlopen as the core loads them, on the same random inputs: once with "precision": "fp32" (the
// *_dt ops at fp32 and the fp32 slots of 0.1/0.6), once with "precision": "bf16" (the *_dt ops at
// bf16; the cpu backend gets the same bf16-rounded inputs as fp32). Ops the cpu backend lacks
// at 0.1 (combine, convert, the optimizer updates) are checked against its 0.8 slots at fp32, or
// against a host loop (convert's rounding).
//
// Bounds, |gpu - cpu| <= atol + rtol·|cpu| per element:
//   fp32 outputs (fp32 run, and the fp32 gradients/statistics of the bf16 run, whose inputs are
//     identical on both sides): 1e-4 + 1e-4 (only the order of fp32 sums differs); the outputs
//     of the fp32 run's ops also within 1e-5 relative in norm;
//   cuBLASLt's GELU epilogue, fp32: 1e-3 + 1e-3 (its GELU need not round as tanhf does);
//   matmuls with "allow_tf32": true: 1e-2 + 1e-2 (TF32 keeps 10 of fp32's 23 mantissa bits);
//   bf16 outputs: 3e-2 + 3e-2 (a bf16 rounding is 2^-8 relative, plus gradients that add a bf16
//     value to a bf16 buffer, plus attention's backward reading its own bf16 output);
//   convert: bit-exact; the optimizer updates: 1e-6 relative (the same fp32 operations in the
//     same order, no fused multiply-add, so they should be bit-exact).
// Determinism: attention backward, embedding backward and sum_squares run twice and must agree
// bit for bit.
// Without a GPU it prints "skipped: no CUDA device (<reason>)" and exits 77 (ctest's skip code).
#include <dlfcn.h>
#include <keel/backend.h>
#include <keel/plugin.h>
#include <keel_support/common/nf4.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace {

std::string g_last_error;
keel_status set_error(keel_status code, const char* message) {
  g_last_error = message;
  return code;
}
void log_line(int32_t, const char* source, const char* message) { std::printf("[%s] %s\n", source, message); }
const keel_host kHost = {
    sizeof(keel_host), KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR, set_error, log_line, nullptr};

int g_checks = 0, g_failures = 0;

#define CALL(expr)                                                                                               \
  do {                                                                                                           \
    const keel_status status_ = (expr);                                                                          \
    if (status_ != KEEL_OK) {                                                                                    \
      std::printf("FAIL %s:%d: %s returned %d: %s\n", __FILE__, __LINE__, #expr, status_, g_last_error.c_str()); \
      ++g_failures;                                                                                              \
    }                                                                                                            \
  } while (0)

const keel_backend_api* load(const char* path) {
  void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    std::printf("dlopen %s: %s\n", path, dlerror());
    return nullptr;
  }
  auto entry = reinterpret_cast<keel_plugin_entry_fn>(dlsym(library, KEEL_PLUGIN_ENTRY_SYMBOL));
  const keel_plugin_list* list = entry ? entry() : nullptr;
  return list && list->count == 1 ? static_cast<const keel_backend_api*>(list->plugins[0].api) : nullptr;
}

enum class Elem { f32, bf16 };
keel_dtype dtype(Elem e) {
  return e == Elem::bf16 ? keel_dtype{KEEL_DTYPE_BFLOAT, 16, 1} : keel_dtype{KEEL_DTYPE_FLOAT, 32, 1};
}
size_t elem_bytes(Elem e) { return e == Elem::bf16 ? 2 : 4; }

uint16_t bf16_bits(float f) {  // round to nearest even
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float from_bf16_bits(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
float round_to(Elem e, float f) { return e == Elem::bf16 ? from_bf16_bits(bf16_bits(f)) : f; }

// Per element |gpu - cpu| <= atol + rtol·|cpu|; and, where norm > 0, the whole output's
// ‖gpu - cpu‖ / ‖cpu‖ <= norm (fp32: 1e-5, sums in another order land near 1e-7).
struct Tolerance {
  double atol, rtol, norm = 0.0;
};
constexpr Tolerance kTight{1e-4, 1e-4}, kFp32{1e-4, 1e-4, 1e-5}, kGeluEpilogue{1e-3, 1e-3}, kBf16{3e-2, 3e-2}, kUpdate{0.0, 1e-6};
constexpr Tolerance kTf32{1e-2, 1e-2};  // TF32 keeps 10 mantissa bits of each operand
Tolerance for_elem(Elem e) { return e == Elem::bf16 ? kBf16 : kFp32; }
bool g_tf32 = false;  // the fp32 run's matmuls may use TF32 ("allow_tf32": true)

void compare(const std::string& what, const std::vector<float>& got, const std::vector<float>& want, Tolerance tol) {
  ++g_checks;
  if (got.size() != want.size()) {
    std::printf("FAIL %s: %zu elements, expected %zu\n", what.c_str(), got.size(), want.size());
    ++g_failures;
    return;
  }
  size_t bad = 0, first = 0;
  double worst = 0.0, diff_sq = 0.0, want_sq = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(diff <= tol.atol + tol.rtol * std::fabs(want[i]))) {
      if (bad++ == 0) first = i;
    }
    if (diff > worst || std::isnan(diff)) worst = diff;
    diff_sq += diff * diff;
    want_sq += static_cast<double>(want[i]) * want[i];
  }
  const double relative = want_sq > 0 ? std::sqrt(diff_sq / want_sq) : std::sqrt(diff_sq);
  const bool norm_ok = tol.norm <= 0 || relative <= tol.norm;
  if (bad || !norm_ok) {
    std::printf("FAIL %s: %zu of %zu elements off (max |diff| %.3g, relative norm %.3g%s)", what.c_str(), bad,
                got.size(), worst, relative, norm_ok ? "" : ", over its bound");
    if (bad) std::printf("; first at %zu: gpu %.8g, cpu %.8g", first, got[first], want[first]);
    std::printf("\n");
    ++g_failures;
  } else {
    std::printf("ok   %s (%zu elements, max |diff| %.3g, relative norm %.3g)\n", what.c_str(), got.size(), worst,
                relative);
  }
}

void compare_bits(const std::string& what, const std::vector<float>& a, const std::vector<float>& b) {
  ++g_checks;
  if (a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0) {
    std::printf("ok   %s (bit-identical)\n", what.c_str());
    return;
  }
  std::printf("FAIL %s: two runs differ\n", what.c_str());
  ++g_failures;
}

std::mt19937 g_rng(20261124);
std::vector<float> random_values(size_t n, Elem e, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = round_to(e, dist(g_rng));
  return v;
}
std::vector<int32_t> random_ids(size_t n, int32_t below) {
  std::uniform_int_distribution<int32_t> dist(0, below - 1);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(g_rng);
  return v;
}

// The cuda backend's memory, freed at scope exit.
struct Gpu {
  const keel_backend_api* api;
  void* h;
  std::vector<void*> owned;
  ~Gpu() {
    for (void* p : owned) api->free_memory(h, p);
  }
  void* alloc(size_t bytes) {
    void* p = nullptr;
    CALL(api->alloc(h, bytes, &p));
    owned.push_back(p);
    return p;
  }
  void* put(const std::vector<float>& v, Elem e) {
    void* p = alloc(v.size() * elem_bytes(e));
    if (e == Elem::f32) {
      CALL(api->copy(h, p, v.data(), v.size() * 4, KEEL_COPY_HOST_TO_DEVICE));
    } else {
      std::vector<uint16_t> bits(v.size());
      for (size_t i = 0; i < v.size(); ++i) bits[i] = bf16_bits(v[i]);
      CALL(api->copy(h, p, bits.data(), bits.size() * 2, KEEL_COPY_HOST_TO_DEVICE));
    }
    return p;
  }
  float* put32(const std::vector<float>& v) { return static_cast<float*>(put(v, Elem::f32)); }
  int32_t* put_ids(const std::vector<int32_t>& v) {
    void* p = alloc(v.size() * 4);
    CALL(api->copy(h, p, v.data(), v.size() * 4, KEEL_COPY_HOST_TO_DEVICE));
    return static_cast<int32_t*>(p);
  }
  std::vector<float> get(const void* p, size_t n, Elem e) {
    std::vector<float> v(n);
    if (e == Elem::f32) {
      CALL(api->copy(h, v.data(), p, n * 4, KEEL_COPY_DEVICE_TO_HOST));
    } else {
      std::vector<uint16_t> bits(n);
      CALL(api->copy(h, bits.data(), p, n * 2, KEEL_COPY_DEVICE_TO_HOST));
      for (size_t i = 0; i < n; ++i) v[i] = from_bf16_bits(bits[i]);
    }
    return v;
  }
  std::vector<float> get32(const void* p, size_t n) { return get(p, n, Elem::f32); }
};

struct Cpu {
  const keel_backend_api* api;
  void* h;
};

std::string tag(const char* op, Elem e) { return std::string(op) + (e == Elem::bf16 ? " [bf16]" : " [fp32]"); }

void test_matmul(Cpu& cpu, Gpu& gpu, Elem e) {
  const keel_dtype dt = dtype(e);
  const Tolerance fp32 = g_tf32 ? kTf32 : kTight, out_tol = e == Elem::bf16 ? kBf16 : fp32;
  // N 600: the bias gradient's column sums span three chunks of rows, the last one partial
  for (int64_t N : {int64_t{70}, int64_t{600}})
  for (int64_t OC : {136, 50}) {  // 136: the fused GELU epilogue (and 8-wide column sums); 50: GELU after
    const int64_t IC = 96;
    const std::string shape = " N=" + std::to_string(N) + " OC=" + std::to_string(OC) + (g_tf32 ? " TF32" : "");
    auto inp = random_values(N * IC, e), weight = random_values(OC * IC, e), bias = random_values(OC, e);
    std::vector<float> out(N * OC), out_nobias(N * OC), gelu(N * OC);
    CALL(cpu.api->matmul_forward(cpu.h, out.data(), inp.data(), weight.data(), bias.data(), N, IC, OC));
    CALL(cpu.api->matmul_forward(cpu.h, out_nobias.data(), inp.data(), weight.data(), nullptr, N, IC, OC));
    CALL(cpu.api->gelu_forward(cpu.h, gelu.data(), out.data(), N * OC));
    void *d_inp = gpu.put(inp, e), *d_w = gpu.put(weight, e), *d_b = gpu.put(bias, e);
    void *d_out = gpu.alloc(N * OC * 4), *d_pre = gpu.alloc(N * OC * 4);
    CALL(gpu.api->matmul_forward_dt(gpu.h, dt, d_out, nullptr, d_inp, d_w, d_b, N, IC, OC));
    compare(tag("matmul_forward", e) + shape, gpu.get(d_out, N * OC, e), out, out_tol);
    CALL(gpu.api->matmul_forward_dt(gpu.h, dt, d_out, nullptr, d_inp, d_w, nullptr, N, IC, OC));
    compare(tag("matmul_forward without bias", e) + shape, gpu.get(d_out, N * OC, e), out_nobias, out_tol);
    CALL(gpu.api->matmul_forward_dt(gpu.h, dt, d_out, d_pre, d_inp, d_w, d_b, N, IC, OC));
    compare(tag("matmul_forward gelu_pre", e) + shape, gpu.get(d_pre, N * OC, e), out, out_tol);
    compare(tag("matmul_forward GELU out", e) + shape, gpu.get(d_out, N * OC, e), gelu,
            e == Elem::bf16 ? kBf16 : (g_tf32 ? kTf32 : kGeluEpilogue));

    auto dout = random_values(N * OC, e), dinp = random_values(N * IC, e);
    auto dweight = random_values(OC * IC, Elem::f32), dbias = random_values(OC, Elem::f32);
    void *d_dout = gpu.put(dout, e), *d_dinp = gpu.put(dinp, e);
    float *d_dw = gpu.put32(dweight), *d_db = gpu.put32(dbias);
    CALL(cpu.api->matmul_backward(cpu.h, dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                                  weight.data(), N, IC, OC));
    CALL(gpu.api->matmul_backward_dt(gpu.h, dt, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, IC, OC));
    compare(tag("matmul_backward dinp", e) + shape, gpu.get(d_dinp, N * IC, e), dinp, out_tol);
    compare(tag("matmul_backward dweight", e) + shape, gpu.get32(d_dw, OC * IC), dweight, fp32);
    compare(tag("matmul_backward dbias", e) + shape, gpu.get32(d_db, OC), dbias, fp32);
  }
}

void test_layernorm(Cpu& cpu, Gpu& gpu, Elem e) {
  const keel_dtype dt = dtype(e);
  // bf16 with C % 8 == 0 takes the 8-wide kernels (C = 96, 40, 24), the others the scalar ones;
  // N = 600 sums its rows in three chunks.
  for (auto [C, N] : {std::pair<int64_t, int64_t>{96, 70}, {40, 600}, {24, 33}, {20, 70}}) {
    auto inp = random_values(N * C, e, -2.0f, 3.0f), weight = random_values(C, e), bias = random_values(C, e);
    std::vector<float> out(N * C), mean(N), rstd(N);
    CALL(cpu.api->layernorm_forward(cpu.h, out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(),
                                    N, C));
    void *d_inp = gpu.put(inp, e), *d_w = gpu.put(weight, e), *d_b = gpu.put(bias, e), *d_out = gpu.alloc(N * C * 4);
    float *d_mean = static_cast<float*>(gpu.alloc(N * 4)), *d_rstd = static_cast<float*>(gpu.alloc(N * 4));
    CALL(gpu.api->layernorm_forward_dt(gpu.h, dt, d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C));
    const std::string shape = " C=" + std::to_string(C);
    compare(tag("layernorm_forward out", e) + shape, gpu.get(d_out, N * C, e), out, for_elem(e));
    compare(tag("layernorm_forward mean", e) + shape, gpu.get32(d_mean, N), mean, kTight);
    compare(tag("layernorm_forward rstd", e) + shape, gpu.get32(d_rstd, N), rstd, kTight);

    auto dout = random_values(N * C, e), dinp = random_values(N * C, e);
    auto dweight = random_values(C, Elem::f32), dbias = random_values(C, Elem::f32);
    void *d_dout = gpu.put(dout, e), *d_dinp = gpu.put(dinp, e);
    float *d_dw = gpu.put32(dweight), *d_db = gpu.put32(dbias);
    // Both sides read the cpu's mean and rstd, so only the backward is compared.
    float *d_mean_cpu = gpu.put32(mean), *d_rstd_cpu = gpu.put32(rstd);
    CALL(cpu.api->layernorm_backward(cpu.h, dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                                     weight.data(), mean.data(), rstd.data(), N, C));
    CALL(gpu.api->layernorm_backward_dt(gpu.h, dt, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean_cpu, d_rstd_cpu, N,
                                        C));
    compare(tag("layernorm_backward dinp", e) + shape, gpu.get(d_dinp, N * C, e), dinp, for_elem(e));
    compare(tag("layernorm_backward dweight", e) + shape, gpu.get32(d_dw, C), dweight, kTight);
    compare(tag("layernorm_backward dbias", e) + shape, gpu.get32(d_db, C), dbias, kTight);
  }
}

void test_attention(Cpu& cpu, Gpu& gpu, Elem e) {
  const keel_dtype dt = dtype(e);
  struct Shape {
    int64_t B, T, C, NH;
  };
  // hs 32, 128, 80, and 64 (bf16 takes the tensor-core kernels there; T = 200 ends mid-tile)
  for (const Shape& s : {Shape{2, 67, 96, 3}, Shape{1, 130, 256, 2}, Shape{2, 33, 160, 2}, Shape{2, 200, 128, 2}}) {
    const int64_t B = s.B, T = s.T, C = s.C, NH = s.NH;
    const std::string shape = " B=" + std::to_string(B) + " T=" + std::to_string(T) + " hs=" + std::to_string(C / NH);
    auto qkv = random_values(B * T * 3 * C, e, -2.0f, 2.0f);
    std::vector<float> out(B * T * C), saved(cpu.api->attention_saved_floats(cpu.h, B, T, C, NH));
    CALL(cpu.api->attention_forward(cpu.h, out.data(), saved.data(), qkv.data(), B, T, C, NH));
    auto dout = random_values(B * T * C, e), dqkv0 = random_values(B * T * 3 * C, e);
    std::vector<float> dqkv = dqkv0;
    CALL(cpu.api->attention_backward(cpu.h, dqkv.data(), dout.data(), qkv.data(), saved.data(), B, T, C, NH));

    const int64_t saved_bytes = gpu.api->attention_saved_bytes(gpu.h, dt, B, T, C, NH);
    if (saved_bytes != (B * NH * T * 4 + 15) / 16 * 16) {  // rounded up so layers' statistics stay 16-byte aligned
      std::printf("FAIL attention_saved_bytes%s: %lld, expected B·NH·T·4 rounded up to 16 = %lld\n", shape.c_str(),
                  static_cast<long long>(saved_bytes), static_cast<long long>((B * NH * T * 4 + 15) / 16 * 16));
      ++g_failures;
      continue;
    }
    void *d_qkv = gpu.put(qkv, e), *d_out = gpu.alloc(B * T * C * 4), *d_saved = gpu.alloc(saved_bytes);
    CALL(gpu.api->attention_forward_dt(gpu.h, dt, d_out, d_saved, d_qkv, B, T, C, NH));
    compare(tag("attention_forward", e) + shape, gpu.get(d_out, B * T * C, e), out, for_elem(e));
    void *d_dout = gpu.put(dout, e), *d_dqkv = gpu.put(dqkv0, e), *d_dqkv2 = gpu.put(dqkv0, e);
    CALL(gpu.api->attention_backward_dt(gpu.h, dt, d_dqkv, d_dout, d_qkv, d_out, d_saved, B, T, C, NH));
    CALL(gpu.api->attention_backward_dt(gpu.h, dt, d_dqkv2, d_dout, d_qkv, d_out, d_saved, B, T, C, NH));
    const auto got = gpu.get(d_dqkv, B * T * 3 * C, e);
    compare(tag("attention_backward", e) + shape, got, dqkv, for_elem(e));
    compare_bits(tag("attention_backward twice", e) + shape, got, gpu.get(d_dqkv2, B * T * 3 * C, e));

    if (e == Elem::f32) {  // 0.1's slots: saved holds the log-sum-exps and a copy of out
      const int64_t floats = gpu.api->attention_saved_floats(gpu.h, B, T, C, NH);
      float *d_saved01 = static_cast<float*>(gpu.alloc(floats * 4)),
            *d_out01 = static_cast<float*>(gpu.alloc(B * T * C * 4));
      float* d_dqkv01 = gpu.put32(dqkv0);
      CALL(gpu.api->attention_forward(gpu.h, d_out01, d_saved01, static_cast<float*>(d_qkv), B, T, C, NH));
      CALL(gpu.api->attention_backward(gpu.h, d_dqkv01, static_cast<float*>(d_dout), static_cast<float*>(d_qkv),
                                       d_saved01, B, T, C, NH));
      compare("attention_forward (0.1)" + shape, gpu.get32(d_out01, B * T * C), out, kTight);
      compare("attention_backward (0.1)" + shape, gpu.get32(d_dqkv01, B * T * 3 * C), dqkv, kTight);
    }
  }
}

struct GqaShape {
  int64_t B, T, C, NH, NKV;
};
void test_gqa_attention(Cpu& cpu, Gpu& gpu, Elem e, std::initializer_list<GqaShape> shapes, Gpu* other = nullptr);

// The Llama family's ops (0.9) against the cpu backend's at fp32 on the same (bf16-rounded in the
// bf16 run) inputs: RMSNorm, rope in place on packed q|k|v rows (the turned heads at an offset
// inside a wider row), SwiGLU over gate|up, and grouped-query attention (multi-query, grouped,
// and NKV = NH, which must equal the 0.8 op's layout), at sizes that are no multiple of anything.
void test_llama_ops(Cpu& cpu, Gpu& gpu, Elem e) {
  const keel_dtype dt = dtype(e), f32 = dtype(Elem::f32);
  {
    const int64_t N = 37, C = 200;
    const float eps = 1e-5f;
    auto inp = random_values(N * C, e, -2.0f, 2.0f), w = random_values(C, e);
    std::vector<float> out(N * C), rstd(N);
    CALL(cpu.api->rmsnorm_forward_dt(cpu.h, f32, out.data(), rstd.data(), inp.data(), w.data(), N, C, eps));
    void *d_in = gpu.put(inp, e), *d_w = gpu.put(w, e), *d_out = gpu.alloc(N * C * 4);
    float* d_rstd = static_cast<float*>(gpu.alloc(N * 4));
    CALL(gpu.api->rmsnorm_forward_dt(gpu.h, dt, d_out, d_rstd, d_in, d_w, N, C, eps));
    compare(tag("rmsnorm_forward out", e), gpu.get(d_out, N * C, e), out, for_elem(e));
    compare(tag("rmsnorm_forward rstd", e), gpu.get32(d_rstd, N), rstd, kTight);
    auto dout = random_values(N * C, e), dinp0 = random_values(N * C, e), dw0 = random_values(C, Elem::f32);
    std::vector<float> dinp = dinp0, dw = dw0;
    CALL(cpu.api->rmsnorm_backward_dt(cpu.h, f32, dinp.data(), dw.data(), dout.data(), inp.data(), w.data(),
                                      rstd.data(), N, C));
    void *d_dout = gpu.put(dout, e), *d_dinp = gpu.put(dinp0, e);
    float *d_dw = gpu.put32(dw0), *d_rstd_cpu = gpu.put32(rstd);
    CALL(gpu.api->rmsnorm_backward_dt(gpu.h, dt, d_dinp, d_dw, d_dout, d_in, d_w, d_rstd_cpu, N, C));
    compare(tag("rmsnorm_backward dinp", e), gpu.get(d_dinp, N * C, e), dinp, for_elem(e));
    compare(tag("rmsnorm_backward dweight", e), gpu.get32(d_dw, C), dw, kTight);
  }
  {  // rope: 6 heads of 16 (4 query, 2 key) turned inside rows of q|k|v, 128 wide, from column 0
    const int64_t B = 2, T = 19, heads = 6, D = 16, stride = 128, first = 0, position0 = 3;
    std::vector<float> inv_freq(D / 2);
    for (int64_t i = 0; i < D / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * float(i) / float(D));
    auto x = random_values(B * T * stride, e, -2.0f, 2.0f);
    std::vector<float> turned = x, back = x;
    CALL(cpu.api->rope_forward_dt(cpu.h, f32, turned.data(), inv_freq.data(), B, T, heads, D, stride, first, position0));
    CALL(cpu.api->rope_backward_dt(cpu.h, f32, back.data(), inv_freq.data(), B, T, heads, D, stride, first, position0));
    float* d_freq = gpu.put32(inv_freq);
    void *d_x = gpu.put(x, e), *d_back = gpu.put(x, e);
    CALL(gpu.api->rope_forward_dt(gpu.h, dt, d_x, d_freq, B, T, heads, D, stride, first, position0));
    CALL(gpu.api->rope_backward_dt(gpu.h, dt, d_back, d_freq, B, T, heads, D, stride, first, position0));
    compare(tag("rope_forward (v columns untouched)", e), gpu.get(d_x, B * T * stride, e), turned, for_elem(e));
    compare(tag("rope_backward", e), gpu.get(d_back, B * T * stride, e), back, for_elem(e));
  }
  for (int64_t F : {int64_t{77}, int64_t{80}}) {  // 80: bf16 takes the 8-wide kernels
    const int64_t N = 41;
    const std::string shape = " F=" + std::to_string(F);
    auto gate_up = random_values(N * 2 * F, e, -6.0f, 6.0f), dout = random_values(N * F, e);
    auto dgu0 = random_values(N * 2 * F, e);
    std::vector<float> out(N * F), dgu = dgu0;
    CALL(cpu.api->swiglu_forward_dt(cpu.h, f32, out.data(), gate_up.data(), N, F));
    CALL(cpu.api->swiglu_backward_dt(cpu.h, f32, dgu.data(), dout.data(), gate_up.data(), N, F));
    void *d_gu = gpu.put(gate_up, e), *d_out = gpu.alloc(N * F * 4), *d_dout = gpu.put(dout, e), *d_dgu = gpu.put(dgu0, e);
    CALL(gpu.api->swiglu_forward_dt(gpu.h, dt, d_out, d_gu, N, F));
    CALL(gpu.api->swiglu_backward_dt(gpu.h, dt, d_dgu, d_dout, d_gu, N, F));
    compare(tag("swiglu_forward", e) + shape, gpu.get(d_out, N * F, e), out, for_elem(e));
    compare(tag("swiglu_backward", e) + shape, gpu.get(d_dgu, N * 2 * F, e), dgu, for_elem(e));
  }
  test_gqa_attention(cpu, gpu, e, {GqaShape{2, 67, 96, 3, 1}, GqaShape{1, 130, 256, 4, 2}, GqaShape{2, 33, 160, 2, 2}});
}

// Grouped-query attention (0.9) against the cpu backend. With `other` (a backend on the same GPU
// that takes the other attention path), its backward also runs on this one's saved statistics:
// cuDNN's and Keel's kernels keep the same log-sum-exp, so a layer may mix the two.
void test_gqa_attention(Cpu& cpu, Gpu& gpu, Elem e, std::initializer_list<GqaShape> shapes, Gpu* other) {
  const keel_dtype dt = dtype(e), f32 = dtype(Elem::f32);
  for (const GqaShape& s : shapes) {
    const int64_t B = s.B, T = s.T, C = s.C, NH = s.NH, NKV = s.NKV, W = C + 2 * NKV * (C / NH);
    const std::string shape = " B=" + std::to_string(B) + " T=" + std::to_string(T) + " NH=" + std::to_string(NH) +
                              " NKV=" + std::to_string(NKV);
    auto qkv = random_values(B * T * W, e, -2.0f, 2.0f);
    std::vector<float> out(B * T * C);
    std::vector<char> saved(size_t(cpu.api->attention_gqa_saved_bytes(cpu.h, f32, B, T, C, NH, NKV)));
    CALL(cpu.api->attention_gqa_forward_dt(cpu.h, f32, out.data(), saved.data(), qkv.data(), B, T, C, NH, NKV));
    auto dout = random_values(B * T * C, e), dqkv0 = random_values(B * T * W, e);
    std::vector<float> dqkv = dqkv0;
    CALL(cpu.api->attention_gqa_backward_dt(cpu.h, f32, dqkv.data(), dout.data(), qkv.data(), out.data(), saved.data(),
                                            B, T, C, NH, NKV));
    const int64_t saved_bytes = gpu.api->attention_gqa_saved_bytes(gpu.h, dt, B, T, C, NH, NKV);
    if (saved_bytes != (B * NH * T * 4 + 15) / 16 * 16) {
      std::printf("FAIL attention_gqa_saved_bytes%s: %lld (%s)\n", shape.c_str(), static_cast<long long>(saved_bytes),
                  g_last_error.c_str());
      ++g_failures;
      continue;
    }
    void *d_qkv = gpu.put(qkv, e), *d_out = gpu.alloc(B * T * C * 4), *d_saved = gpu.alloc(size_t(saved_bytes));
    CALL(gpu.api->attention_gqa_forward_dt(gpu.h, dt, d_out, d_saved, d_qkv, B, T, C, NH, NKV));
    compare(tag("attention_gqa_forward", e) + shape, gpu.get(d_out, B * T * C, e), out, for_elem(e));
    void *d_dout = gpu.put(dout, e), *d_dqkv = gpu.put(dqkv0, e), *d_dqkv2 = gpu.put(dqkv0, e);
    CALL(gpu.api->attention_gqa_backward_dt(gpu.h, dt, d_dqkv, d_dout, d_qkv, d_out, d_saved, B, T, C, NH, NKV));
    CALL(gpu.api->attention_gqa_backward_dt(gpu.h, dt, d_dqkv2, d_dout, d_qkv, d_out, d_saved, B, T, C, NH, NKV));
    const auto got = gpu.get(d_dqkv, B * T * W, e);
    compare(tag("attention_gqa_backward", e) + shape, got, dqkv, for_elem(e));
    compare_bits(tag("attention_gqa_backward twice", e) + shape, got, gpu.get(d_dqkv2, B * T * W, e));
    if (other && C / NH <= 128) {  // the forward's statistics read by the other path's backward (its head sizes)
      void* d_dqkv3 = gpu.put(dqkv0, e);
      CALL(gpu.api->synchronize(gpu.h));
      CALL(other->api->attention_gqa_backward_dt(other->h, dt, d_dqkv3, d_dout, d_qkv, d_out, d_saved, B, T, C, NH,
                                                 NKV));
      CALL(other->api->synchronize(other->h));
      compare(tag("attention_gqa_backward, the other path's", e) + shape, gpu.get(d_dqkv3, B * T * W, e), dqkv,
              for_elem(e));
    }
  }
}


void test_elementwise(Cpu& cpu, Gpu& gpu, Elem e) {
  const keel_dtype dt = dtype(e);
  const int64_t n = 1000;
  auto a = random_values(n, e, -4.0f, 4.0f), b = random_values(n, e, -4.0f, 4.0f);
  void *d_a = gpu.put(a, e), *d_b = gpu.put(b, e), *d_out = gpu.alloc(n * 4);
  std::vector<float> want(n);

  CALL(cpu.api->gelu_forward(cpu.h, want.data(), a.data(), n));
  CALL(gpu.api->gelu_forward_dt(gpu.h, dt, d_out, d_a, n));
  compare(tag("gelu_forward", e), gpu.get(d_out, n, e), want, for_elem(e));

  std::vector<float> dinp = random_values(n, e);
  void* d_dinp = gpu.put(dinp, e);
  CALL(cpu.api->gelu_backward(cpu.h, dinp.data(), a.data(), b.data(), n));
  CALL(gpu.api->gelu_backward_dt(gpu.h, dt, d_dinp, d_a, d_b, n));
  compare(tag("gelu_backward", e), gpu.get(d_dinp, n, e), dinp, for_elem(e));
  {  // 1003 elements: bf16 takes the scalar kernels (1000 takes the 8-wide ones)
    const int64_t odd = 1003;
    auto x = random_values(odd, e, -4.0f, 4.0f), g = random_values(odd, e), d = random_values(odd, e);
    std::vector<float> y(odd);
    void *d_x = gpu.put(x, e), *d_g = gpu.put(g, e), *d_d = gpu.put(d, e), *d_y = gpu.alloc(odd * 4);
    CALL(cpu.api->gelu_forward(cpu.h, y.data(), x.data(), odd));
    CALL(gpu.api->gelu_forward_dt(gpu.h, dt, d_y, d_x, odd));
    compare(tag("gelu_forward", e) + " n=1003", gpu.get(d_y, odd, e), y, for_elem(e));
    CALL(cpu.api->gelu_backward(cpu.h, d.data(), x.data(), g.data(), odd));
    CALL(gpu.api->gelu_backward_dt(gpu.h, dt, d_d, d_x, d_g, odd));
    compare(tag("gelu_backward", e) + " n=1003", gpu.get(d_d, odd, e), d, for_elem(e));
    std::vector<float> sum(odd), acc = g;  // add and accumulate off the 8-wide path
    CALL(cpu.api->add(cpu.h, sum.data(), x.data(), g.data(), odd));
    CALL(gpu.api->add_dt(gpu.h, dt, d_y, d_x, d_g, odd));
    compare(tag("add", e) + " n=1003", gpu.get(d_y, odd, e), sum, for_elem(e));
    CALL(cpu.api->accumulate(cpu.h, acc.data(), x.data(), odd));
    CALL(gpu.api->accumulate_dt(gpu.h, dt, d_g, d_x, odd));
    compare(tag("accumulate", e) + " n=1003", gpu.get(d_g, odd, e), acc, for_elem(e));
  }

  CALL(cpu.api->add(cpu.h, want.data(), a.data(), b.data(), n));
  CALL(gpu.api->add_dt(gpu.h, dt, d_out, d_a, d_b, n));
  compare(tag("add", e), gpu.get(d_out, n, e), want, for_elem(e));

  std::vector<float> acc = a;
  CALL(cpu.api->accumulate(cpu.h, acc.data(), b.data(), n));
  CALL(gpu.api->accumulate_dt(gpu.h, dt, d_a, d_b, n));  // d_a now holds a + b
  compare(tag("accumulate", e), gpu.get(d_a, n, e), acc, for_elem(e));

  CALL(cpu.api->scale(cpu.h, b.data(), -0.37f, n));
  CALL(gpu.api->scale_dt(gpu.h, dt, d_b, -0.37f, n));
  compare(tag("scale", e), gpu.get(d_b, n, e), b, for_elem(e));
}

// The dwte scatter sums sorted positions in chunks of 64 and chains a token's chunks in order:
// shapes with B·T below, at and off a multiple of 64, C through the 8-wide (bf16), 4-wide (fp32)
// and one-column paths, and a share `hot` of the positions holding token 4 (inside the row block
// [3, 8) below), up to every position (one chain over every chunk).
void test_embedding(Cpu& cpu, Gpu& gpu, Elem e, int64_t B, int64_t T, int64_t C, int32_t V, double hot = 0.0) {
  const keel_dtype dt = dtype(e);
  auto tokens = random_ids(B * T, V);
  std::bernoulli_distribution is_hot(hot);
  for (int32_t& token : tokens)
    if (is_hot(g_rng)) token = 4;
  const std::string shape = " B*T=" + std::to_string(B * T) + " C=" + std::to_string(C) +
                            (hot > 0 ? " hot=" + std::to_string(hot).substr(0, 4) : "");
  auto wte = random_values(V * C, e), wpe = random_values(T * C, e);
  int32_t* d_tokens = gpu.put_ids(tokens);
  void *d_wte = gpu.put(wte, e), *d_wpe = gpu.put(wpe, e), *d_out = gpu.alloc(B * T * C * 4);
  std::vector<float> out(B * T * C);
  CALL(cpu.api->embedding_forward(cpu.h, out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C));
  CALL(gpu.api->embedding_forward_dt(gpu.h, dt, d_out, d_tokens, d_wte, d_wpe, B, T, C));
  compare(tag("embedding_forward", e) + shape, gpu.get(d_out, B * T * C, e), out, for_elem(e));

  auto dout = random_values(B * T * C, e), dwte = random_values(V * C, Elem::f32),
       dwpe = random_values(T * C, Elem::f32);
  void* d_dout = gpu.put(dout, e);
  float *d_dwte = gpu.put32(dwte), *d_dwpe = gpu.put32(dwpe), *d_dwte2 = gpu.put32(dwte);
  CALL(cpu.api->embedding_backward(cpu.h, dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C));
  CALL(gpu.api->embedding_backward_dt(gpu.h, dt, d_dwte, d_dwpe, d_dout, d_tokens, B, T, C));
  CALL(gpu.api->embedding_backward_dt(gpu.h, dt, d_dwte2, nullptr, d_dout, d_tokens, B, T, C));
  const auto got = gpu.get32(d_dwte, V * C);
  compare(tag("embedding_backward dwte", e) + shape, got, dwte, kTight);
  compare(tag("embedding_backward dwpe", e) + shape, gpu.get32(d_dwpe, T * C), dwpe, kTight);
  compare_bits(tag("embedding_backward twice", e) + shape, got, gpu.get32(d_dwte2, V * C));

  // Rows [3, 8) of the table, with and without wpe.
  const int64_t row_begin = 3, rows = 5;
  std::vector<float> wte_rows(wte.begin() + row_begin * C, wte.begin() + (row_begin + rows) * C);
  void* d_rows = gpu.put(wte_rows, e);
  for (bool with_wpe : {true, false}) {
    const std::string which = with_wpe ? " with wpe" : " without wpe";
    CALL(cpu.api->embedding_rows_forward(cpu.h, out.data(), tokens.data(), wte_rows.data(),
                                         with_wpe ? wpe.data() : nullptr, B, T, C, row_begin, rows));
    CALL(gpu.api->embedding_rows_forward_dt(gpu.h, dt, d_out, d_tokens, d_rows, with_wpe ? d_wpe : nullptr, B, T, C,
                                            row_begin, rows));
    compare(tag("embedding_rows_forward", e) + which + shape, gpu.get(d_out, B * T * C, e), out, for_elem(e));
    auto drows = random_values(rows * C, Elem::f32), dpe = random_values(T * C, Elem::f32);
    float *d_drows = gpu.put32(drows), *d_dpe = gpu.put32(dpe);
    CALL(cpu.api->embedding_rows_backward(cpu.h, drows.data(), with_wpe ? dpe.data() : nullptr, dout.data(),
                                          tokens.data(), B, T, C, row_begin, rows));
    CALL(gpu.api->embedding_rows_backward_dt(gpu.h, dt, d_drows, with_wpe ? d_dpe : nullptr, d_dout, d_tokens, B, T, C,
                                             row_begin, rows));
    compare(tag("embedding_rows_backward dwte_rows", e) + which + shape, gpu.get32(d_drows, rows * C), drows, kTight);
    compare(tag("embedding_rows_backward dwpe", e) + which + shape, gpu.get32(d_dpe, T * C), dpe, kTight);
  }
}

// A negative token id adds nothing to dwte: against the cpu backend's rows variant over the whole
// table [0, V), where the same positions hold V (outside the block; the cpu backend refuses
// negative ids).
void test_embedding_negative_ids(Cpu& cpu, Gpu& gpu, Elem e) {
  const int64_t B = 3, T = 90, C = 24;
  const int32_t V = 6;
  auto tokens = random_ids(B * T, V), cpu_tokens = tokens;
  for (int64_t i = 0; i < B * T; i += 7) {
    tokens[i] = i % 2 ? -1 : INT32_MIN;  // INT32_MIN sorts first of all ids
    cpu_tokens[i] = V;
  }
  auto dout = random_values(B * T * C, e), dwte = random_values(V * C, Elem::f32);
  float* d_dwte = gpu.put32(dwte);
  CALL(cpu.api->embedding_rows_backward(cpu.h, dwte.data(), nullptr, dout.data(), cpu_tokens.data(), B, T, C, 0, V));
  CALL(gpu.api->embedding_backward_dt(gpu.h, dtype(e), d_dwte, nullptr, gpu.put(dout, e), gpu.put_ids(tokens), B, T,
                                      C));
  compare(tag("embedding_backward dwte, negative ids", e), gpu.get32(d_dwte, V * C), dwte, kTight);
}

// 0.1's cross-entropy with probabilities (fp32 only).
void test_crossentropy_probs(Cpu& cpu, Gpu& gpu) {
  const int64_t N = 37, V = 300, Vp = 320;
  auto logits = random_values(N * Vp, Elem::f32, -4.0f, 4.0f);
  auto targets = random_ids(N, static_cast<int32_t>(V));
  targets[5] = -1;
  std::vector<float> losses(N), probs(N * Vp);
  CALL(cpu.api->crossentropy_forward(cpu.h, losses.data(), probs.data(), logits.data(), targets.data(), N, V, Vp));
  float *d_logits = gpu.put32(logits), *d_losses = static_cast<float*>(gpu.alloc(N * 4));
  float* d_probs = static_cast<float*>(gpu.alloc(N * Vp * 4));
  int32_t* d_targets = gpu.put_ids(targets);
  CALL(gpu.api->crossentropy_forward(gpu.h, d_losses, d_probs, d_logits, d_targets, N, V, Vp));
  compare("crossentropy_forward losses (0.1)", gpu.get32(d_losses, N), losses, kTight);
  compare("crossentropy_forward probs (0.1)", gpu.get32(d_probs, N * Vp), probs, kTight);
  CALL(gpu.api->crossentropy_forward(gpu.h, d_losses, d_logits, d_logits, d_targets, N, V, Vp));  // in place
  compare("crossentropy_forward probs in place (0.1)", gpu.get32(d_logits, N * Vp), probs, kTight);

  auto dlogits = random_values(N * Vp, Elem::f32);
  float* d_dlogits = gpu.put32(dlogits);
  CALL(cpu.api->crossentropy_backward(cpu.h, dlogits.data(), probs.data(), targets.data(), 0.03f, N, V, Vp));
  CALL(gpu.api->crossentropy_backward(gpu.h, d_dlogits, d_probs, d_targets, 0.03f, N, V, Vp));
  compare("crossentropy_backward (0.1)", gpu.get32(d_dlogits, N * Vp), dlogits, kTight);
}

// A vocabulary split into shards: rows of `cols` logits, shard k holding the next valid[k] columns
// of the vocabulary (from col_begin, the sum of the shards before it), the rest of its row padding.
struct VocabShards {
  int64_t N, cols;
  std::vector<int64_t> valid;
};
// The first three read in 16-byte chunks (cols a multiple of 8): shards that end mid-chunk (odd
// valid), one of a single column, rows long enough that each thread keeps several chunks in flight
// (8200 columns: 1025 chunks of bf16 for 256 threads); the last two element by element (odd cols).
const VocabShards kVocabShards[] = {{37, 160, {160, 140}},
                                    {19, 8200, {8200, 5001, 8191}},
                                    {13, 24, {24, 17, 1}},
                                    {23, 1001, {1001, 999}},
                                    {9, 7, {7, 3}}};

// 0.8's cross-entropy over vocabulary shards: stats, combine, backward (added and in place), against
// the cpu backend's 0.6 shard ops. The same logits one element off 16-byte alignment take the
// element-by-element kernels, which must give the 16-byte kernels' bits.
void test_crossentropy_shards(Cpu& cpu, Gpu& gpu, Elem e, const VocabShards& shape) {
  const keel_dtype dt = dtype(e);
  const int64_t N = shape.N, cols = shape.cols, n_shards = static_cast<int64_t>(shape.valid.size());
  std::vector<int64_t> col_begin(n_shards);
  int64_t V = 0;
  std::string what = " (N " + std::to_string(N) + ", cols " + std::to_string(cols) + ", valid";
  for (int64_t k = 0; k < n_shards; ++k) {
    col_begin[k] = V;
    V += shape.valid[k];
    what += " " + std::to_string(shape.valid[k]);
  }
  what += ")";
  auto targets = random_ids(N, static_cast<int32_t>(V));
  targets[3] = -1;  // no target: no loss, no gradient
  targets[N - 1] = -1;
  targets[1] = static_cast<int32_t>(V - 1);                    // the last column: in the chunk that ends mid-way
  targets[2] = static_cast<int32_t>(col_begin[n_shards - 1]);  // a shard's first column
  int32_t* d_targets = gpu.put_ids(targets);
  std::vector<std::vector<float>> logits(n_shards);
  std::vector<void*> d_logits(n_shards), d_logits_off(n_shards);
  std::vector<float> stats(n_shards * N * 3);
  float* d_stats = static_cast<float*>(gpu.alloc(n_shards * N * 3 * 4));
  float* d_stats_off = static_cast<float*>(gpu.alloc(n_shards * N * 3 * 4));
  for (int64_t k = 0; k < n_shards; ++k) {
    logits[k] = random_values(N * cols, e, -4.0f, 4.0f);
    d_logits[k] = gpu.put(logits[k], e);
    std::vector<float> shifted{0.0f};  // then the logits, from the second element
    shifted.insert(shifted.end(), logits[k].begin(), logits[k].end());
    d_logits_off[k] = static_cast<char*>(gpu.put(shifted, e)) + elem_bytes(e);
    CALL(cpu.api->crossentropy_shard_stats(cpu.h, stats.data() + k * N * 3, logits[k].data(), targets.data(), N,
                                           col_begin[k], shape.valid[k], cols));
    CALL(gpu.api->crossentropy_stats_dt(gpu.h, dt, d_stats + k * N * 3, d_logits[k], d_targets, N, col_begin[k],
                                        shape.valid[k], cols));
    CALL(gpu.api->crossentropy_stats_dt(gpu.h, dt, d_stats_off + k * N * 3, d_logits_off[k], d_targets, N, col_begin[k],
                                        shape.valid[k], cols));
  }
  const auto gpu_stats = gpu.get32(d_stats, n_shards * N * 3);
  compare(tag("crossentropy_stats", e) + what, gpu_stats, stats, kTight);
  compare_bits(tag("crossentropy_stats off alignment", e) + what, gpu.get32(d_stats_off, n_shards * N * 3), gpu_stats);

  // combine, on the same statistics on both sides
  std::vector<float> lse(N), loss_sum{0.5f};
  const float weight = 1.0f / N;
  const auto shards = static_cast<int32_t>(n_shards);
  float* d_stats_cpu = gpu.put32(stats);
  CALL(cpu.api->crossentropy_combine(cpu.h, lse.data(), loss_sum.data(), stats.data(), shards, targets.data(), N,
                                     weight));
  float* d_lse = static_cast<float*>(gpu.alloc(N * 4));
  float* d_loss = gpu.put32({0.5f});
  CALL(gpu.api->crossentropy_combine(gpu.h, d_lse, d_loss, d_stats_cpu, shards, d_targets, N, weight));
  compare(tag("crossentropy_combine lse", e) + what, gpu.get32(d_lse, N), lse, kTight);
  compare(tag("crossentropy_combine loss_sum", e) + what, gpu.get32(d_loss, 1), loss_sum, kTight);

  float* d_lse_cpu = gpu.put32(lse);  // both sides from the same lse
  for (int64_t k = 0; k < n_shards; ++k) {
    const std::string shard = " shard " + std::to_string(k) + what;
    auto dlogits = random_values(N * cols, e);
    void* d_dlogits = gpu.put(dlogits, e);
    std::vector<float> in_place(N * cols, 0.0f);
    CALL(cpu.api->crossentropy_shard_backward(cpu.h, dlogits.data(), logits[k].data(), lse.data(), targets.data(),
                                              0.02f, N, col_begin[k], shape.valid[k], cols));
    CALL(cpu.api->crossentropy_shard_backward(cpu.h, in_place.data(), logits[k].data(), lse.data(), targets.data(),
                                              0.02f, N, col_begin[k], shape.valid[k], cols));
    CALL(gpu.api->crossentropy_backward_dt(gpu.h, dt, d_dlogits, d_logits[k], d_lse_cpu, d_targets, 0.02f, N,
                                           col_begin[k], shape.valid[k], cols));
    compare(tag("crossentropy_backward added", e) + shard, gpu.get(d_dlogits, N * cols, e), dlogits, for_elem(e));
    CALL(gpu.api->crossentropy_backward_dt(gpu.h, dt, d_logits[k], d_logits[k], d_lse_cpu, d_targets, 0.02f, N,
                                           col_begin[k], shape.valid[k], cols));
    const auto gpu_in_place = gpu.get(d_logits[k], N * cols, e);
    compare(tag("crossentropy_backward in place", e) + shard, gpu_in_place, in_place, e == Elem::bf16 ? kBf16 : kTight);
    CALL(gpu.api->crossentropy_backward_dt(gpu.h, dt, d_logits_off[k], d_logits_off[k], d_lse_cpu, d_targets, 0.02f, N,
                                           col_begin[k], shape.valid[k], cols));
    compare_bits(tag("crossentropy_backward in place off alignment", e) + shard, gpu.get(d_logits_off[k], N * cols, e),
                 gpu_in_place);
  }
}

void test_sum_squares(Cpu& cpu, Gpu& gpu, Elem e) {
  const int64_t n = 100003;
  auto x = random_values(n, e, -3.0f, 3.0f);
  void* d_x = gpu.put(x, e);
  double want = 0.0;
  for (float v : x) want += static_cast<double>(v) * v;
  float *d_acc = gpu.put32({2.0f}), *d_acc2 = gpu.put32({2.0f});
  CALL(gpu.api->sum_squares_dt(gpu.h, dtype(e), d_x, n, d_acc));
  CALL(gpu.api->sum_squares_dt(gpu.h, dtype(e), d_x, n, d_acc2));
  const auto got = gpu.get32(d_acc, 1);
  compare(tag("sum_squares_dt", e), got, {static_cast<float>(want + 2.0)}, kTight);
  compare_bits(tag("sum_squares_dt twice", e), got, gpu.get32(d_acc2, 1));
  if (e == Elem::f32) {
    double cpu_sum = 0.0, gpu_sum = 0.0, gpu_sum2 = 0.0;
    CALL(cpu.api->sum_squares(cpu.h, x.data(), n, &cpu_sum));
    CALL(gpu.api->sum_squares(gpu.h, static_cast<float*>(d_x), n, &gpu_sum));
    CALL(gpu.api->sum_squares(gpu.h, static_cast<float*>(d_x), n, &gpu_sum2));
    ++g_checks;
    if (std::fabs(gpu_sum - cpu_sum) > 1e-10 * cpu_sum || gpu_sum != gpu_sum2) {
      std::printf("FAIL sum_squares (0.1): gpu %.17g and %.17g, cpu %.17g\n", gpu_sum, gpu_sum2, cpu_sum);
      ++g_failures;
    } else {
      std::printf("ok   sum_squares (0.1): %.17g\n", gpu_sum);
    }
  }
}

void test_convert(Gpu& gpu) {
  std::vector<float> x = random_values(1000, Elem::f32, -100.0f, 100.0f);
  x[0] = 1.00390625f;  // halfway between two bf16 values, even below: rounds down
  x[1] = 1.01171875f;  // halfway, even above: rounds up
  x[2] = 3.0e38f;      // large but finite in bf16, which has fp32's exponent range
  x[3] = -0.0f;
  x[4] = 1e-40f;  // subnormal
  float* d_x = gpu.put32(x);
  void* d_bf16 = gpu.alloc(x.size() * 2);
  float* d_back = static_cast<float*>(gpu.alloc(x.size() * 4));
  CALL(gpu.api->convert(gpu.h, d_bf16, dtype(Elem::bf16), d_x, dtype(Elem::f32), x.size()));
  CALL(gpu.api->convert(gpu.h, d_back, dtype(Elem::f32), d_bf16, dtype(Elem::bf16), x.size()));
  std::vector<uint16_t> bits(x.size());
  CALL(gpu.api->copy(gpu.h, bits.data(), d_bf16, bits.size() * 2, KEEL_COPY_DEVICE_TO_HOST));
  size_t bad = 0;
  for (size_t i = 0; i < x.size(); ++i) bad += bits[i] != bf16_bits(x[i]);
  ++g_checks;
  if (bad) {
    std::printf("FAIL convert fp32 -> bf16: %zu of %zu not rounded to nearest even\n", bad, x.size());
    ++g_failures;
  } else {
    std::printf("ok   convert fp32 -> bf16 (bit-exact)\n");
  }
  std::vector<float> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = from_bf16_bits(bf16_bits(x[i]));
  compare("convert bf16 -> fp32", gpu.get32(d_back, x.size()), want, Tolerance{0.0, 0.0});
  float* d_copy = static_cast<float*>(gpu.alloc(x.size() * 4));
  CALL(gpu.api->convert(gpu.h, d_copy, dtype(Elem::f32), d_x, dtype(Elem::f32), x.size()));
  compare("convert fp32 -> fp32", gpu.get32(d_copy, x.size()), x, Tolerance{0.0, 0.0});
}

// The fused updates against the cpu backend's, which run the adamw and sgd plugins' own rule
// (kernels/cpu/optimizer_update.h).
void test_optimizer_updates(Cpu& cpu, Gpu& gpu) {
  const int64_t n = 1000;
  const float lr = 1e-3f, grad_scale = 0.5f;
  for (int64_t step : {1, 3}) {
    auto params = random_values(n, Elem::f32), grads = random_values(n, Elem::f32);
    auto m = random_values(n, Elem::f32), v = random_values(n, Elem::f32, 0.0f, 0.01f);
    float *d_p = gpu.put32(params), *d_g = gpu.put32(grads), *d_m = gpu.put32(m), *d_v = gpu.put32(v);
    CALL(cpu.api->adamw_update(cpu.h, params.data(), grads.data(), m.data(), v.data(), n, lr, 0.9, 0.95, 1e-8, 0.1,
                               grad_scale, step));
    CALL(gpu.api->adamw_update(gpu.h, d_p, d_g, d_m, d_v, n, lr, 0.9, 0.95, 1e-8, 0.1, grad_scale, step));
    const std::string s = " step " + std::to_string(step);
    compare("adamw_update params" + s, gpu.get32(d_p, n), params, kUpdate);
    compare("adamw_update m" + s, gpu.get32(d_m, n), m, kUpdate);
    compare("adamw_update v" + s, gpu.get32(d_v, n), v, kUpdate);
  }
  for (int32_t nesterov : {0, 1}) {
    auto params = random_values(n, Elem::f32), buf = random_values(n, Elem::f32);
    float *d_p = gpu.put32(params), *d_buf = gpu.put32(buf);
    for (int64_t step : {1, 2}) {
      auto grads = random_values(n, Elem::f32);
      float* d_g = gpu.put32(grads);
      CALL(cpu.api->sgd_update(cpu.h, params.data(), grads.data(), buf.data(), n, lr, 0.9, 0.1, nesterov, 0.01,
                               grad_scale, step));
      CALL(gpu.api->sgd_update(gpu.h, d_p, d_g, d_buf, n, lr, 0.9, 0.1, nesterov, 0.01, grad_scale, step));
      const std::string s = std::string(nesterov ? " nesterov" : "") + " step " + std::to_string(step);
      compare("sgd_update params" + s, gpu.get32(d_p, n), params, kUpdate);
      compare("sgd_update momentum_buffer" + s, gpu.get32(d_buf, n), buf, kUpdate);
    }
  }
}

// The fp32 slots of 0.1 and 0.6 not covered above, against the cpu backend's same slots.
void test_fp32_slots(Cpu& cpu, Gpu& gpu) {
  const int64_t N = 20, IC = 24, OC = 16, C = 24, n = N * IC;
  auto inp = random_values(N * IC, Elem::f32), weight = random_values(OC * IC, Elem::f32);
  auto bias = random_values(OC, Elem::f32), dout = random_values(N * OC, Elem::f32);
  float *d_inp = gpu.put32(inp), *d_w = gpu.put32(weight), *d_b = gpu.put32(bias), *d_dout = gpu.put32(dout);
  std::vector<float> out(N * OC);
  float* d_out = gpu.put32(out);
  CALL(cpu.api->matmul_forward(cpu.h, out.data(), inp.data(), weight.data(), bias.data(), N, IC, OC));
  CALL(gpu.api->matmul_forward(gpu.h, d_out, d_inp, d_w, d_b, N, IC, OC));
  compare("matmul_forward (0.1)", gpu.get32(d_out, N * OC), out, kTight);
  std::vector<float> dinp(N * IC, 0.5f), dweight(OC * IC, 0.25f), dbias(OC, 1.0f);
  float *d_dinp = gpu.put32(dinp), *d_dw = gpu.put32(dweight), *d_db = gpu.put32(dbias);
  CALL(cpu.api->matmul_backward(cpu.h, dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                                weight.data(), N, IC, OC));
  CALL(gpu.api->matmul_backward(gpu.h, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, IC, OC));
  compare("matmul_backward dinp (0.1)", gpu.get32(d_dinp, N * IC), dinp, kTight);
  compare("matmul_backward dweight (0.1)", gpu.get32(d_dw, OC * IC), dweight, kTight);
  compare("matmul_backward dbias (0.1)", gpu.get32(d_db, OC), dbias, kTight);

  auto lw = random_values(C, Elem::f32), lb = random_values(C, Elem::f32), g = random_values(N * C, Elem::f32);
  float *d_lw = gpu.put32(lw), *d_lb = gpu.put32(lb), *d_g = gpu.put32(g);
  std::vector<float> ln(N * C), mean(N), rstd(N), ldx(N * C, 0.0f), ldw(C, 0.0f), ldb(C, 0.0f);
  float *d_ln = gpu.put32(ln), *d_mean = gpu.put32(mean), *d_rstd = gpu.put32(rstd);
  float *d_ldx = gpu.put32(ldx), *d_ldw = gpu.put32(ldw), *d_ldb = gpu.put32(ldb);
  CALL(cpu.api->layernorm_forward(cpu.h, ln.data(), mean.data(), rstd.data(), inp.data(), lw.data(), lb.data(), N, C));
  CALL(gpu.api->layernorm_forward(gpu.h, d_ln, d_mean, d_rstd, d_inp, d_lw, d_lb, N, C));
  compare("layernorm_forward (0.1)", gpu.get32(d_ln, N * C), ln, kTight);
  CALL(cpu.api->layernorm_backward(cpu.h, ldx.data(), ldw.data(), ldb.data(), g.data(), inp.data(), lw.data(),
                                   mean.data(), rstd.data(), N, C));
  CALL(gpu.api->layernorm_backward(gpu.h, d_ldx, d_ldw, d_ldb, d_g, d_inp, d_lw, d_mean, d_rstd, N, C));
  compare("layernorm_backward dinp (0.1)", gpu.get32(d_ldx, N * C), ldx, kTight);
  compare("layernorm_backward dweight (0.1)", gpu.get32(d_ldw, C), ldw, kTight);

  std::vector<float> y(n), dy(n, 0.1f), a = inp;
  float *d_y = gpu.put32(y), *d_dy = gpu.put32(dy), *d_a = gpu.put32(a);
  CALL(cpu.api->gelu_forward(cpu.h, y.data(), inp.data(), n));
  CALL(gpu.api->gelu_forward(gpu.h, d_y, d_inp, n));
  compare("gelu_forward (0.1)", gpu.get32(d_y, n), y, kTight);
  CALL(cpu.api->gelu_backward(cpu.h, dy.data(), inp.data(), g.data(), n));
  CALL(gpu.api->gelu_backward(gpu.h, d_dy, d_inp, d_g, n));
  compare("gelu_backward (0.1)", gpu.get32(d_dy, n), dy, kTight);
  CALL(cpu.api->add(cpu.h, y.data(), inp.data(), g.data(), n));
  CALL(gpu.api->add(gpu.h, d_y, d_inp, d_g, n));
  compare("add (0.1)", gpu.get32(d_y, n), y, kTight);
  CALL(cpu.api->accumulate(cpu.h, a.data(), g.data(), n));
  CALL(gpu.api->accumulate(gpu.h, d_a, d_g, n));
  compare("accumulate (0.1)", gpu.get32(d_a, n), a, kTight);
  CALL(cpu.api->scale(cpu.h, a.data(), 3.0f, n));
  CALL(gpu.api->scale(gpu.h, d_a, 3.0f, n));
  compare("scale (0.1)", gpu.get32(d_a, n), a, kTight);

  const int64_t B = 2, T = 5, V = 7;
  auto tokens = random_ids(B * T, V);
  auto wte = random_values(V * C, Elem::f32), wpe = random_values(T * C, Elem::f32);
  auto eg = random_values(B * T * C, Elem::f32);
  int32_t* d_tokens = gpu.put_ids(tokens);
  float *d_wte = gpu.put32(wte), *d_wpe = gpu.put32(wpe), *d_eg = gpu.put32(eg);
  std::vector<float> emb(B * T * C), dwte(V * C, 0.0f), dwpe(T * C, 0.0f);
  float *d_emb = gpu.put32(emb), *d_dwte = gpu.put32(dwte), *d_dwpe = gpu.put32(dwpe);
  CALL(cpu.api->embedding_forward(cpu.h, emb.data(), tokens.data(), wte.data(), wpe.data(), B, T, C));
  CALL(gpu.api->embedding_forward(gpu.h, d_emb, d_tokens, d_wte, d_wpe, B, T, C));
  compare("embedding_forward (0.1)", gpu.get32(d_emb, B * T * C), emb, kTight);
  CALL(cpu.api->embedding_backward(cpu.h, dwte.data(), dwpe.data(), eg.data(), tokens.data(), B, T, C));
  CALL(gpu.api->embedding_backward(gpu.h, d_dwte, d_dwpe, d_eg, d_tokens, B, T, C));
  compare("embedding_backward dwte (0.1)", gpu.get32(d_dwte, V * C), dwte, kTight);
  compare("embedding_backward dwpe (0.1)", gpu.get32(d_dwpe, T * C), dwpe, kTight);
  CALL(
      cpu.api->embedding_rows_forward(cpu.h, emb.data(), tokens.data(), wte.data() + 2 * C, wpe.data(), B, T, C, 2, 3));
  CALL(gpu.api->embedding_rows_forward(gpu.h, d_emb, d_tokens, d_wte + 2 * C, d_wpe, B, T, C, 2, 3));
  compare("embedding_rows_forward (0.6)", gpu.get32(d_emb, B * T * C), emb, kTight);
  CALL(cpu.api->embedding_rows_backward(cpu.h, dwte.data() + 2 * C, dwpe.data(), eg.data(), tokens.data(), B, T, C, 2,
                                        3));
  CALL(gpu.api->embedding_rows_backward(gpu.h, d_dwte + 2 * C, d_dwpe, d_eg, d_tokens, B, T, C, 2, 3));
  compare("embedding_rows_backward dwte (0.6)", gpu.get32(d_dwte, V * C), dwte, kTight);

  const int64_t cols = 12, valid = 10;
  auto logits = random_values(N * cols, Elem::f32, -3.0f, 3.0f);
  auto targets = random_ids(N, 30);
  targets[0] = -1;
  std::vector<float> stats(N * 3), lse(N), dlogits(N * cols, 0.0f);
  for (int64_t i = 0; i < N; ++i) lse[i] = 2.0f + 0.1f * i;
  float *d_logits = gpu.put32(logits), *d_stats = gpu.put32(stats), *d_lse = gpu.put32(lse);
  float* d_dlogits = gpu.put32(dlogits);
  int32_t* d_targets = gpu.put_ids(targets);
  CALL(cpu.api->crossentropy_shard_stats(cpu.h, stats.data(), logits.data(), targets.data(), N, 10, valid, cols));
  CALL(gpu.api->crossentropy_shard_stats(gpu.h, d_stats, d_logits, d_targets, N, 10, valid, cols));
  compare("crossentropy_shard_stats (0.6)", gpu.get32(d_stats, N * 3), stats, kTight);
  CALL(cpu.api->crossentropy_shard_backward(cpu.h, dlogits.data(), logits.data(), lse.data(), targets.data(), 0.5f, N,
                                            10, valid, cols));
  CALL(gpu.api->crossentropy_shard_backward(gpu.h, d_dlogits, d_logits, d_lse, d_targets, 0.5f, N, 10, valid, cols));
  compare("crossentropy_shard_backward (0.6)", gpu.get32(d_dlogits, N * cols), dlogits, kTight);
}

// Memory, copies, the queue and events.
void test_memory(Gpu& gpu, Elem e) {
  keel_device device{};
  CALL(gpu.api->device(gpu.h, &device));
  ++g_checks;
  if (device.device_type != KEEL_DEVICE_CUDA) {
    std::printf("FAIL device: type %d, expected KEEL_DEVICE_CUDA\n", device.device_type);
    ++g_failures;
  }
  keel_dtype compute{};
  CALL(gpu.api->compute_dtype(gpu.h, &compute));
  ++g_checks;
  if (compute.code != dtype(e).code || compute.bits != dtype(e).bits) {
    std::printf("FAIL compute_dtype: code %d bits %d\n", compute.code, compute.bits);
    ++g_failures;
  }
  double flops = 0.0;
  void* queue = nullptr;
  CALL(gpu.api->peak_flops(gpu.h, &flops));
  CALL(gpu.api->queue(gpu.h, &queue));
  ++g_checks;
  if (!(flops > 1e12) || !queue) {
    std::printf("FAIL peak_flops %.3g or queue %p\n", flops, queue);
    ++g_failures;
  }

  const size_t n = 5000;
  void* d = gpu.alloc(n * 4);
  compare("alloc is zero-filled", gpu.get32(d, n), std::vector<float>(n, 0.0f), Tolerance{0, 0});
  auto x = random_values(n, Elem::f32);
  float* d_x = gpu.put32(x);
  CALL(gpu.api->copy(gpu.h, d, d_x, n * 4, KEEL_COPY_DEVICE_TO_DEVICE));
  compare("copy device to device", gpu.get32(d, n), x, Tolerance{0, 0});
  CALL(gpu.api->fill_zero(gpu.h, d, n * 4));
  compare("fill_zero", gpu.get32(d, n), std::vector<float>(n, 0.0f), Tolerance{0, 0});

  void *pinned_in = nullptr, *pinned_out = nullptr, *event = nullptr;
  CALL(gpu.api->alloc_host(gpu.h, n * 4, &pinned_in));
  CALL(gpu.api->alloc_host(gpu.h, n * 4, &pinned_out));
  CALL(gpu.api->event_create(gpu.h, &event));
  if (!pinned_in || !pinned_out || !event) return;
  CALL(gpu.api->event_synchronize(gpu.h, event));  // never recorded: has passed
  std::memcpy(pinned_in, x.data(), n * 4);
  CALL(gpu.api->copy_async(gpu.h, d, pinned_in, n * 4, KEEL_COPY_HOST_TO_DEVICE));
  CALL(gpu.api->scale_dt(gpu.h, dtype(Elem::f32), d, 2.0f, n));
  CALL(gpu.api->copy_async(gpu.h, pinned_out, d, n * 4, KEEL_COPY_DEVICE_TO_HOST));
  CALL(gpu.api->event_record(gpu.h, event));
  CALL(gpu.api->event_wait(gpu.h, event));
  CALL(gpu.api->event_synchronize(gpu.h, event));
  std::vector<float> got(n), want(n);
  std::memcpy(got.data(), pinned_out, n * 4);
  for (size_t i = 0; i < n; ++i) want[i] = 2.0f * x[i];
  compare("copy_async in, scale, copy_async out, event", got, want, Tolerance{0, 0});
  gpu.api->event_destroy(gpu.h, event);
  gpu.api->free_host(gpu.h, pinned_in);
  gpu.api->free_host(gpu.h, pinned_out);
}

}  // namespace

// Usage: keel_backend_cuda_vs_cpu LIBKEEL-CUDA.SO LIBKEEL-CPU.SO
// The mixture-of-experts ops (0.19) against the cpu's: routing (fp32 at either compute type; the
// experts chosen must be the same), its backward on the cpu's scores and choices, the plan (bit for
// bit: integers, with an expert that gets no token) and its refusal of a bad expert, the moves and
// the grouped matmul at the compute type, on the cpu's plan.
std::vector<int32_t> get_ids(Gpu& gpu, const int32_t* p, size_t n) {
  std::vector<int32_t> v(n);
  CALL(gpu.api->copy(gpu.h, v.data(), p, n * 4, KEEL_COPY_DEVICE_TO_HOST));
  return v;
}
void compare_ids(const std::string& what, const std::vector<int32_t>& got, const std::vector<int32_t>& want) {
  compare(what, std::vector<float>(got.begin(), got.end()), std::vector<float>(want.begin(), want.end()), {0.0, 0.0});
}

void test_moe(Cpu& cpu, Gpu& gpu, Elem e) {
  const keel_dtype dt = dtype(e), f32 = dtype(Elem::f32);
  const int64_t N = 300, C = 72, OC = 40;
  const int32_t E = 8, K = 2;
  for (int32_t flags : {0, KEEL_ROUTE_NORMALIZE, KEEL_ROUTE_SIGMOID | KEEL_ROUTE_NORMALIZE}) {
    const std::string how = " flags=" + std::to_string(flags);
    auto logits = random_values(N * E, Elem::f32, -3.0f, 3.0f), bias = random_values(E, Elem::f32, -0.2f, 0.2f);
    // Row 0's logits are -100: sigmoid scores underflow to 0, so its normalised weights stay 0 (no NaN).
    std::fill(logits.begin(), logits.begin() + E, -100.0f);
    std::vector<float> weights(N * K), scores(N * E);
    std::vector<int32_t> experts(N * K);
    CALL(cpu.api->moe_route(cpu.h, weights.data(), experts.data(), scores.data(), logits.data(), bias.data(), N, E, K,
                            flags));
    float *d_logits = gpu.put32(logits), *d_w = static_cast<float*>(gpu.alloc(N * K * 4)),
          *d_s = static_cast<float*>(gpu.alloc(N * E * 4));
    int32_t* d_ex = static_cast<int32_t*>(gpu.alloc(N * K * 4));
    CALL(gpu.api->moe_route(gpu.h, d_w, d_ex, d_s, d_logits, gpu.put32(bias), N, E, K, flags));
    compare_ids(tag("moe_route experts", e) + how, get_ids(gpu, d_ex, N * K), experts);
    compare(tag("moe_route scores", e) + how, gpu.get32(d_s, N * E), scores, kTight);
    compare(tag("moe_route weights", e) + how, gpu.get32(d_w, N * K), weights, kTight);
    auto dweights = random_values(N * K, Elem::f32), expert_dscores = random_values(E, Elem::f32);
    std::vector<float> dlogits(N * E);
    CALL(cpu.api->moe_route_backward(cpu.h, dlogits.data(), dweights.data(), logits.data(), scores.data(),
                                     experts.data(), expert_dscores.data(), 0.01f, N, E, K, flags));
    float* d_dl = gpu.put32(random_values(N * E, Elem::f32));  // overwritten
    CALL(gpu.api->moe_route_backward(gpu.h, d_dl, gpu.put32(dweights), d_logits, gpu.put32(scores),
                                     gpu.put_ids(experts), gpu.put32(expert_dscores), 0.01f, N, E, K, flags));
    compare(tag("moe_route_backward", e) + how, gpu.get32(d_dl, N * E), dlogits, kTight);
  }
  auto experts = random_ids(N * K, E);
  for (int32_t& x : experts) x = x == 3 ? 4 : x;  // expert 3 gets no token
  std::vector<int32_t> positions(N * K);
  std::vector<int64_t> counts(E), gpu_counts(E, -1);
  CALL(cpu.api->moe_permute_plan(cpu.h, positions.data(), counts.data(), experts.data(), N, E, K));
  int32_t *d_experts = gpu.put_ids(experts), *d_pos = static_cast<int32_t*>(gpu.alloc(N * K * 4));
  CALL(gpu.api->moe_permute_plan(gpu.h, d_pos, gpu_counts.data(), d_experts, N, E, K));
  compare_ids(tag("moe_permute_plan positions", e), get_ids(gpu, d_pos, N * K), positions);
  compare(tag("moe_permute_plan counts", e), std::vector<float>(gpu_counts.begin(), gpu_counts.end()),
          std::vector<float>(counts.begin(), counts.end()), {0.0, 0.0});
  auto bad = experts;
  bad[7] = E;
  ++g_checks;
  if (gpu.api->moe_permute_plan(gpu.h, d_pos, gpu_counts.data(), gpu.put_ids(bad), N, E, K) != KEEL_ERR_INVALID_ARGUMENT ||
      g_last_error.find("experts[3,1] = 8 is outside [0, E = 8)") == std::string::npos) {
    std::printf("FAIL moe_permute_plan with a bad expert: %s\n", g_last_error.c_str());
    ++g_failures;
  }
  CALL(gpu.api->moe_permute_plan(gpu.h, d_pos, gpu_counts.data(), d_experts, N, E, K));  // the good plan again

  auto x = random_values(N * C, e), scale = random_values(N * K, Elem::f32);
  std::vector<float> rows(N * K * C), back(N * C);
  CALL(cpu.api->moe_permute_dt(cpu.h, f32, rows.data(), x.data(), scale.data(), positions.data(), N, K, C));
  float* d_scale = gpu.put32(scale);
  void *d_x = gpu.put(x, e), *d_rows = gpu.alloc(N * K * C * 4), *d_back = gpu.alloc(N * C * 4);
  CALL(gpu.api->moe_permute_dt(gpu.h, dt, d_rows, d_x, d_scale, d_pos, N, K, C));
  compare(tag("moe_permute_dt", e), gpu.get(d_rows, N * K * C, e), rows, for_elem(e));
  auto z = random_values(N * K * C, e), dout = random_values(N * C, e), dscale = random_values(N * K, Elem::f32);
  void *d_z = gpu.put(z, e), *d_dout = gpu.put(dout, e);
  float* d_dscale = gpu.put32(dscale);
  CALL(cpu.api->moe_unpermute_dt(cpu.h, f32, back.data(), z.data(), scale.data(), positions.data(), N, K, C));
  CALL(gpu.api->moe_unpermute_dt(gpu.h, dt, d_back, d_z, d_scale, d_pos, N, K, C));
  compare(tag("moe_unpermute_dt", e), gpu.get(d_back, N * C, e), back, for_elem(e));
  CALL(cpu.api->moe_unpermute_scale_backward_dt(cpu.h, f32, dscale.data(), dout.data(), z.data(), positions.data(), N,
                                                K, C));
  CALL(gpu.api->moe_unpermute_scale_backward_dt(gpu.h, dt, d_dscale, d_dout, d_z, d_pos, N, K, C));
  compare(tag("moe_unpermute_scale_backward_dt", e), gpu.get32(d_dscale, N * K), dscale, kTight);

  // The grouped matmul over the plan's groups: expert 3 has no rows and no weight.
  const int64_t M = N * K;
  std::vector<std::vector<float>> w(E), dw(E);
  std::vector<const void*> cpu_w(E, nullptr), gpu_w(E, nullptr);
  std::vector<float*> cpu_dw(E, nullptr), gpu_dw(E, nullptr);
  for (int32_t g = 0; g < E; ++g) {
    if (counts[g] == 0) continue;
    w[g] = random_values(OC * C, e);
    dw[g] = random_values(OC * C, Elem::f32);
    cpu_w[g] = w[g].data();
    gpu_w[g] = gpu.put(w[g], e);
    gpu_dw[g] = gpu.put32(dw[g]);
    cpu_dw[g] = dw[g].data();
  }
  std::vector<float> out(M * OC), dinp = random_values(M * C, e);
  auto dgrouped = random_values(M * OC, e);
  void *d_out = gpu.alloc(M * OC * 4), *d_dinp = gpu.put(dinp, e), *d_dgrouped = gpu.put(dgrouped, e);
  CALL(cpu.api->grouped_matmul_forward_dt(cpu.h, f32, out.data(), z.data(), cpu_w.data(), counts.data(), E, C, OC));
  CALL(gpu.api->grouped_matmul_forward_dt(gpu.h, dt, d_out, d_z, gpu_w.data(), counts.data(), E, C, OC));
  compare(tag("grouped_matmul_forward_dt", e), gpu.get(d_out, M * OC, e), out, for_elem(e));
  CALL(cpu.api->grouped_matmul_backward_dt(cpu.h, f32, dinp.data(), cpu_dw.data(), dgrouped.data(), z.data(),
                                           cpu_w.data(), counts.data(), E, C, OC));
  CALL(gpu.api->grouped_matmul_backward_dt(gpu.h, dt, d_dinp, gpu_dw.data(), d_dgrouped, d_z, gpu_w.data(),
                                           counts.data(), E, C, OC));
  compare(tag("grouped_matmul_backward_dt dinp", e), gpu.get(d_dinp, M * C, e), dinp, for_elem(e));
  for (int32_t g = 0; g < E; ++g)
    if (counts[g] > 0)
      compare(tag("grouped_matmul_backward_dt dweights", e) + " expert " + std::to_string(g), gpu.get32(gpu_dw[g], OC * C),
              dw[g], kTight);
}

// Attention over blocks (0.19) against the cpu backend's: packed rows (positions restarting per
// document, each row's documents cut differently) over fused q|k|v rows, grouped-query heads at
// head sizes 64 and 80 and lengths that end mid-tile; then a key/value block offset (the second
// half's queries over the first half's keys, all visible), and rope at those positions.
void test_block_attention(Cpu& cpu, Gpu& gpu, Elem e) {
  const keel_dtype dt = dtype(e), f32 = dtype(Elem::f32);
  struct Shape {
    int64_t B, T, NH, NKV, hs, q_index0, kv_index0, Tq_from;
  };
  for (const Shape& s : {Shape{2, 75, 4, 2, 64, 0, 0, 0}, Shape{1, 130, 2, 1, 80, 0, 0, 0},
                         Shape{2, 96, 4, 4, 64, 48, 0, 48}}) {
    const int64_t C = s.NH * s.hs, W = C + 2 * s.NKV * s.hs, Tq = s.T - s.Tq_from, Tkv = s.Tq_from ? s.Tq_from : s.T;
    const std::string shape = " B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " hs=" +
                              std::to_string(s.hs) + (s.Tq_from ? " (kv block offset)" : " (packed)");
    std::vector<int32_t> positions(size_t(s.B * Tq));
    for (int64_t b = 0; b < s.B; ++b) {
      int64_t p = 0;
      for (int64_t t = 0; t < Tq; ++t, ++p) {
        if (s.Tq_from == 0 && t > 0 && (t * (b + 3)) % 23 == 0) p = 0;  // a document starts here
        positions[size_t(b * Tq + t)] = int32_t(s.Tq_from ? s.q_index0 + t : p);
      }
    }
    // q rows: the block's own fused rows (from Tq_from on); kv rows: the first Tkv rows.
    auto rows = random_values(s.B * s.T * W, e, -2.0f, 2.0f);
    std::vector<float> q(s.B * Tq * W), kv(s.B * Tkv * W);
    for (int64_t b = 0; b < s.B; ++b) {
      std::copy(rows.begin() + (b * s.T + s.Tq_from) * W, rows.begin() + (b * s.T + s.T) * W, q.begin() + b * Tq * W);
      std::copy(rows.begin() + b * s.T * W, rows.begin() + (b * s.T + Tkv) * W, kv.begin() + b * Tkv * W);
    }
    auto args_for = [&](keel_dtype type, const void* qp, const void* kvp, void* out, float* lse, const int32_t* pos) {
      keel_attention_args a{};
      a.struct_size = sizeof(a);
      a.dt = type;
      a.B = s.B, a.Tq = Tq, a.Tkv = Tkv, a.NH = s.NH, a.NKV = s.NKV, a.hs = s.hs;
      a.q = qp, a.q_stride = W, a.kv = kvp, a.kv_stride = W, a.out = out, a.out_stride = C, a.lse = lse;
      a.positions = pos, a.q_index0 = s.q_index0, a.kv_index0 = s.kv_index0;
      return a;
    };
    const size_t elem = e == Elem::bf16 ? 2 : 4;
    std::vector<float> out(s.B * Tq * C), lse(s.B * s.NH * Tq);
    keel_attention_args c = args_for(f32, q.data(), kv.data() + C, out.data(), lse.data(), positions.data());
    CALL(cpu.api->attention_block_forward(cpu.h, &c));
    void *d_q = gpu.put(q, e), *d_kv = gpu.put(kv, e), *d_out = gpu.alloc(s.B * Tq * C * 4);
    float* d_lse = static_cast<float*>(gpu.alloc(lse.size() * 4));
    int32_t* d_pos = gpu.put_ids(positions);
    keel_attention_args g = args_for(dt, d_q, static_cast<char*>(d_kv) + C * elem, d_out, d_lse, d_pos);
    CALL(gpu.api->attention_block_forward(gpu.h, &g));
    compare(tag("attention_block_forward", e) + shape, gpu.get(d_out, out.size(), e), out, for_elem(e));
    compare(tag("attention_block_forward lse", e) + shape, gpu.get32(d_lse, lse.size()), lse, kFp32);

    auto dout = random_values(out.size(), e), dq0 = random_values(q.size(), e), dkv0 = random_values(kv.size(), e);
    std::vector<float> dq = dq0, dkv = dkv0;
    c.dout = dout.data(), c.dq = dq.data(), c.dkv = dkv.data() + C;
    CALL(cpu.api->attention_block_backward(cpu.h, &c));
    void *d_dout = gpu.put(dout, e), *d_dq = gpu.put(dq0, e), *d_dkv = gpu.put(dkv0, e);
    g.dout = d_dout, g.dq = d_dq, g.dkv = static_cast<char*>(d_dkv) + C * elem;
    CALL(gpu.api->attention_block_backward(gpu.h, &g));
    compare(tag("attention_block_backward dq", e) + shape, gpu.get(d_dq, dq.size(), e), dq, for_elem(e));
    compare(tag("attention_block_backward dkv", e) + shape, gpu.get(d_dkv, dkv.size(), e), dkv, for_elem(e));

    std::vector<float> inv_freq(size_t(s.hs / 2));
    for (int64_t i = 0; i < s.hs / 2; ++i) inv_freq[size_t(i)] = std::pow(10000.0f, -2.0f * float(i) / float(s.hs));
    std::vector<float> turned = q;
    CALL(cpu.api->rope_at_forward_dt(cpu.h, f32, turned.data(), inv_freq.data(), positions.data(), s.B, Tq,
                                     s.NH + s.NKV, s.hs, W, 0));
    void* d_x = gpu.put(q, e);
    CALL(gpu.api->rope_at_forward_dt(gpu.h, dt, d_x, gpu.put32(inv_freq), d_pos, s.B, Tq, s.NH + s.NKV, s.hs, W, 0));
    compare(tag("rope_at_forward", e) + shape, gpu.get(d_x, q.size(), e), turned, for_elem(e));
  }
}

// NF4 dequantization (0.19) against the cpu backend's, on codes and scales from the shared
// quantizer: three scale groups, the last block partial.
void test_nf4(Cpu& cpu, Gpu& gpu, Elem e) {
  const int64_t n = 600 * 64 + 37;
  auto w = random_values(n, Elem::f32, -0.1f, 0.1f);
  const keel_support::Nf4Tensor q = keel_support::nf4_quantize(w.data(), n);
  std::vector<float> want(n);
  CALL(cpu.api->nf4_dequantize_dt(cpu.h, dtype(Elem::f32), want.data(), q.codes.data(), q.block_scales.data(),
                                  q.scale_factors.data(), q.scale_mean, n));
  auto bytes = [&](const void* data, size_t size) {
    void* p = gpu.alloc(size);
    CALL(gpu.api->copy(gpu.h, p, data, size, KEEL_COPY_HOST_TO_DEVICE));
    return p;
  };
  void* codes = bytes(q.codes.data(), q.codes.size());
  void* scales = bytes(q.block_scales.data(), q.block_scales.size());
  void* factors = bytes(q.scale_factors.data(), q.scale_factors.size() * 4);
  void* out = gpu.alloc(n * 4);
  CALL(gpu.api->nf4_dequantize_dt(gpu.h, dtype(e), out, static_cast<const uint8_t*>(codes),
                                  static_cast<const int8_t*>(scales), static_cast<const float*>(factors), q.scale_mean,
                                  n));
  compare(tag("nf4_dequantize", e), gpu.get(out, n, e), want, for_elem(e));

  // QAT's fake quantization: int8 per row of 200, int4 in groups of 32 (one group all zero).
  for (auto [group, bits] : {std::pair<int64_t, int32_t>{200, 8}, {40, 4}}) {
    const int64_t rows = 9, cols = 200;
    auto x = random_values(rows * cols, e, -0.5f, 0.5f);
    std::fill(x.begin(), x.begin() + group, 0.0f);
    std::vector<float> fq(x.size());
    CALL(cpu.api->fake_quantize_dt(cpu.h, dtype(Elem::f32), fq.data(), x.data(), rows, cols, group, bits));
    void* d_x = gpu.put(x, e);
    CALL(gpu.api->fake_quantize_dt(gpu.h, dtype(e), d_x, d_x, rows, cols, group, bits));
    compare(tag("fake_quantize", e) + " bits " + std::to_string(bits), gpu.get(d_x, x.size(), e), fq, for_elem(e));
  }
  // Activations, per token and asymmetric: rows of mixed sign, one all positive, one all zero.
  {
    const int64_t rows = 9, cols = 200;
    auto x = random_values(rows * cols, e, -0.5f, 1.5f);
    for (int64_t i = 0; i < cols; ++i) x[size_t(i)] = 0.0f, x[size_t(cols + i)] = std::fabs(x[size_t(cols + i)]);
    std::vector<float> fq(x.size());
    CALL(cpu.api->fake_quantize_tokens_dt(cpu.h, dtype(Elem::f32), fq.data(), x.data(), rows, cols, 8));
    void* d_x = gpu.put(x, e);
    CALL(gpu.api->fake_quantize_tokens_dt(gpu.h, dtype(e), d_x, d_x, rows, cols, 8));
    compare(tag("fake_quantize_tokens", e), gpu.get(d_x, x.size(), e), fq, for_elem(e));
  }
  // Context parallelism's merge of two blocks' attention by their statistics, one side empty for
  // some rows.
  {
    const int64_t B = 2, T = 7, NH = 3, hs = 16, C = NH * hs;
    auto out = random_values(B * T * C, e, -1.0f, 1.0f), out_b = random_values(B * T * C, e, -1.0f, 1.0f);
    std::vector<float> lse = random_values(B * NH * T, Elem::f32, -2.0f, 2.0f);
    std::vector<float> lse_b = random_values(B * NH * T, Elem::f32, -2.0f, 2.0f);
    lse_b[3] = -std::numeric_limits<float>::infinity();
    std::vector<float> merged(out), merged_lse(lse);
    CALL(cpu.api->attention_merge_dt(cpu.h, dtype(Elem::f32), merged.data(), C, merged_lse.data(), out_b.data(), C,
                                     lse_b.data(), B, T, NH, hs));
    void* d_out = gpu.put(out, e);
    void* d_out_b = gpu.put(out_b, e);
    void* d_lse = gpu.put(lse, Elem::f32);
    void* d_lse_b = gpu.put(lse_b, Elem::f32);
    CALL(gpu.api->attention_merge_dt(gpu.h, dtype(e), d_out, C, static_cast<float*>(d_lse), d_out_b, C,
                                     static_cast<const float*>(d_lse_b), B, T, NH, hs));
    compare(tag("attention_merge", e), gpu.get(d_out, out.size(), e), merged, for_elem(e));
    compare(tag("attention_merge lse", e), gpu.get(d_lse, lse.size(), Elem::f32), merged_lse, for_elem(Elem::f32));
  }
  // Context parallelism's strided rows: key/value heads out of fused rows, and added back.
  {
    const int64_t rows = 19, width = 24, wide = 72, offset = 24;
    auto fused = random_values(rows * wide, e, -1.0f, 1.0f), compact = random_values(rows * width, e, -1.0f, 1.0f);
    std::vector<float> added(fused);
    CALL(cpu.api->copy_rows_dt(cpu.h, dtype(Elem::f32), added.data() + offset, wide, compact.data(), width, rows, width,
                               1));
    void* d_fused = gpu.put(fused, e);
    void* d_compact = gpu.put(compact, e);
    CALL(gpu.api->copy_rows_dt(gpu.h, dtype(e), static_cast<char*>(d_fused) + offset * elem_bytes(e), wide, d_compact,
                               width, rows, width, 1));
    compare(tag("copy_rows", e), gpu.get(d_fused, fused.size(), e), added, for_elem(e));
  }
  // LoRA's adapter dropout: the same hashed mask element for element, a piece at a column offset.
  {
    const int64_t rows = 33, cols = 130;
    auto x = random_values(rows * cols, e, -1.0f, 1.0f);
    std::vector<float> dropped(x.size());
    CALL(cpu.api->dropout_dt(cpu.h, dtype(Elem::f32), dropped.data(), x.data(), rows, cols, 64, 0xC0FFEEull, 0.25f));
    void* d_x = gpu.put(x, e);
    CALL(gpu.api->dropout_dt(gpu.h, dtype(e), d_x, d_x, rows, cols, 64, 0xC0FFEEull, 0.25f));
    compare(tag("dropout", e), gpu.get(d_x, x.size(), e), dropped, for_elem(e));
  }
}

int main(int argc, char** argv) {
  if (argc != 3) {
    std::printf("usage: %s LIBKEEL-CUDA.SO LIBKEEL-CPU.SO\n", argv[0]);
    return 2;
  }
  const keel_backend_api* cuda = load(argv[1]);
  const keel_backend_api* cpu_api = load(argv[2]);
  if (!cuda || !cpu_api) {
    std::printf("FAIL: cannot load the plugins\n");
    return 1;
  }
  if (cuda->probe(&kHost) != KEEL_OK) {
    std::printf("skipped: no CUDA device (%s)\n", g_last_error.c_str());
    return 77;
  }
  Cpu cpu{cpu_api, nullptr};
  keel_backend_create_args cpu_args{sizeof(cpu_args), R"({"plugin": "cpu", "peak_tflops": 1})", "backend"};
  if (cpu_api->create(&kHost, &cpu_args, &cpu.h) != KEEL_OK) {
    std::printf("FAIL: cpu backend: %s\n", g_last_error.c_str());
    return 1;
  }
  // fp32, then bf16 on Keel's own attention kernels, then bf16 with every attention through cuDNN
  // ("attention": "cudnn" fails where cuDNN does not take a shape, so these checks cannot pass
  // without it): head sizes 64, 80, 128 and 256 (past Keel's kernels' 128), multi-head, grouped
  // and multi-query, at lengths that end mid-tile; its statistics also feed Keel's backward.
  void* kernels_bf16 = nullptr;
  for (const char* mode : {"fp32", "bf16-kernels", "bf16-cudnn"}) {
    const Elem e = std::string(mode) == "fp32" ? Elem::f32 : Elem::bf16;
    const bool cudnn = std::string(mode) == "bf16-cudnn";
    const std::string config = std::string(R"({"plugin": "cuda", "precision": ")") +
                               (e == Elem::bf16 ? "bf16" : "fp32") + R"(", "allow_tf32": false, "attention": ")" +
                               (cudnn ? "cudnn" : e == Elem::bf16 ? "kernels" : "auto") + R"("})";
    keel_backend_create_args args{sizeof(args), config.c_str(), "backend"};
    void* handle = nullptr;
    if (cuda->create(&kHost, &args, &handle) != KEEL_OK) {
      std::printf("FAIL: cuda backend %s: %s\n", config.c_str(), g_last_error.c_str());
      return 1;
    }
    if (cudnn) {
      {  // the buffers go back to their backends before these are destroyed
        Gpu gpu{cuda, handle, {}};
        Gpu kernels{cuda, kernels_bf16, {}};
        test_attention(cpu, gpu, e);
        test_gqa_attention(cpu, gpu, e,
                           {GqaShape{2, 67, 256, 4, 2}, GqaShape{1, 130, 160, 2, 1}, GqaShape{2, 200, 512, 4, 1},
                            GqaShape{1, 97, 512, 2, 2}, GqaShape{2, 64, 1024, 16, 4}},
                           &kernels);
        CALL(cuda->synchronize(handle));
      }
      cuda->destroy(handle);
      cuda->destroy(kernels_bf16);
      continue;
    }
    {
      Gpu gpu{cuda, handle, {}};
      test_memory(gpu, e);
      test_matmul(cpu, gpu, e);
      test_layernorm(cpu, gpu, e);
      test_attention(cpu, gpu, e);
      test_llama_ops(cpu, gpu, e);
      test_block_attention(cpu, gpu, e);
      test_nf4(cpu, gpu, e);
      test_moe(cpu, gpu, e);
      test_elementwise(cpu, gpu, e);
      test_embedding(cpu, gpu, e, 2, 9, 40, 11);
      test_embedding(cpu, gpu, e, 4, 200, 72, 50);
      test_embedding(cpu, gpu, e, 2, 700, 36, 9, 1.0);     // one token: a chain of 22 chunks
      test_embedding(cpu, gpu, e, 3, 701, 37, 60, 0.5);    // one column a thread, B·T = 2103
      test_embedding(cpu, gpu, e, 4, 512, 768, 300, 0.3);  // GPT-2's width, B·T = 2048 = 32 chunks
      test_embedding_negative_ids(cpu, gpu, e);
      for (const VocabShards& shape : kVocabShards) test_crossentropy_shards(cpu, gpu, e, shape);
      test_sum_squares(cpu, gpu, e);
      if (e == Elem::f32) {
        test_crossentropy_probs(cpu, gpu);
        test_convert(gpu);
        test_optimizer_updates(cpu, gpu);
        test_fp32_slots(cpu, gpu);
      }
      CALL(cuda->synchronize(handle));
    }
    if (e == Elem::bf16)
      kernels_bf16 = handle;  // kept for the cuDNN run's mixed check
    else
      cuda->destroy(handle);
  }
  // "allow_tf32": true: the fp32 matmuls on TF32 tensor cores, within TF32's bounds.
  keel_backend_create_args tf32_args{sizeof(tf32_args), R"({"plugin": "cuda", "allow_tf32": true})", "backend"};
  void* tf32 = nullptr;
  if (cuda->create(&kHost, &tf32_args, &tf32) != KEEL_OK) {
    std::printf("FAIL: cuda backend with allow_tf32: %s\n", g_last_error.c_str());
    return 1;
  }
  {
    Gpu gpu{cuda, tf32, {}};
    g_tf32 = true;
    test_matmul(cpu, gpu, Elem::f32);
  }
  cuda->destroy(tf32);
  cpu_api->destroy(cpu.h);
  std::printf("%d checks, %d failed\n", g_checks, g_failures);
  return g_failures ? 1 : 0;
}
