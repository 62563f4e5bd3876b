// keel-optimizer-bandwidth: how close the adamw plugin's step comes to the memory bandwidth this
// machine sustains, both measured in one process with the same OpenMP threads (Keel issue 11).
//   triad: a[i] = b[i] + s * c[i] on doubles, STREAM's kernel and byte count (24 bytes per
//          element: two reads, one write; the write-allocate read is not counted, as in STREAM).
//   adamw: the plugin loaded with dlopen and its step called through the ABI table over one
//          contiguous range, as a strategy calls it; 28 bytes per element (reads p, g, m, v and
//          writes p, m, v).
// Both report the best of --repeats runs. Prints one JSON object; benchmarks/
// cpu_optimizer_bandwidth.py runs it next to PyTorch and prints the table.
#include <keel/optimizer.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "plugin_test_support.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Arrays allocated but not touched, so each thread's first touch places its own pages.
template <typename T>
std::unique_ptr<T[]> untouched_array(int64_t n) {
  return std::unique_ptr<T[]>(new T[static_cast<size_t>(n)]);
}

double best_triad_seconds(int64_t n, int repeats) {
  auto a = untouched_array<double>(n), b = untouched_array<double>(n), c = untouched_array<double>(n);
  double* __restrict pa = a.get();
  const double* __restrict pb = b.get();
  const double* __restrict pc = c.get();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) a[i] = 0.0, b[i] = 1.0, c[i] = 2.0;
  const double scalar = 3.0;
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + scalar * pc[i];
    best = std::min(best, seconds_since(start));
  }
  if (pa[n / 2] != 7.0) throw std::runtime_error("triad computed " + std::to_string(pa[n / 2]) + ", expected 7");
  return best;
}

double best_adamw_seconds(const char* plugin_path, int64_t n, int repeats) {
  keel_test::LoadedPlugin plugin(plugin_path, KEEL_KIND_OPTIMIZER, "adamw");
  const auto& api = plugin.api<keel_optimizer_api>();
  keel_host host = keel_test::make_test_host();
  void* optimizer = nullptr;
  const char* config = R"({"plugin": "adamw", "lr": 1e-3, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1})";
  if (api.create(&host, config, "optimizer", &optimizer) != KEEL_OK)
    throw std::runtime_error("adamw create failed: " + keel_test::last_error());
  auto params = untouched_array<float>(n), grads = untouched_array<float>(n);
  auto m = untouched_array<float>(n), v = untouched_array<float>(n);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    params[i] = 0.01f * static_cast<float>(i % 97);
    grads[i] = 0.001f * static_cast<float>(i % 89) - 0.04f;
    m[i] = 0.0f, v[i] = 0.0f;
  }
  float* state[2] = {m.get(), v.get()};
  keel_optimizer_step_args args{};
  args.struct_size = sizeof(args);
  args.device = keel_device{KEEL_DEVICE_CPU, 0};
  args.params = params.get();
  args.grads = grads.get();
  args.state = state;
  args.n = n;
  args.lr = 1e-3f;
  args.grad_scale = 1.0f;
  args.apply_weight_decay = 1;
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    args.step = r + 1;
    const auto start = Clock::now();
    const keel_status status = api.step(optimizer, &args);
    const double elapsed = seconds_since(start);
    if (status != KEEL_OK) throw std::runtime_error("adamw step failed: " + keel_test::last_error());
    best = std::min(best, elapsed);
  }
  api.destroy(optimizer);
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::string plugin_path;
  int64_t n = int64_t(1) << 24;
  int repeats = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--plugin")) plugin_path = argv[i + 1];
    else if (!std::strcmp(argv[i], "--n")) n = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--repeats")) repeats = std::atoi(argv[i + 1]);
  }
  if (plugin_path.empty() || n < 1 || repeats < 1) {
    std::cerr << "usage: keel-optimizer-bandwidth --plugin libkeel-adamw.so [--n ELEMENTS] [--repeats R]\n";
    return 2;
  }
  try {
    const double triad_s = best_triad_seconds(n, repeats);
    const double adamw_s = best_adamw_seconds(plugin_path.c_str(), n, repeats);
    std::cout << "{\"threads\": " << omp_get_max_threads() << ", \"n\": " << n << ", \"repeats\": " << repeats
              << ", \"triad_gbs\": " << 24.0 * n / triad_s / 1e9 << ", \"adamw_gbs\": " << 28.0 * n / adamw_s / 1e9
              << ", \"adamw_s\": " << adamw_s << "}\n";
  } catch (const std::exception& e) {
    std::cerr << "keel-optimizer-bandwidth: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
