// keel-comm-bandwidth: the mpi comm plugin's all-reduce against a plain MPI_Allreduce loop on
// the same buffers in the same run, for benchmarks/cluster_allreduce.py (not a ctest test).
// Run under mpirun; prints one line per size on rank 0 with both bus bandwidths
// (2 (n-1)/n × bytes / time, nccl-tests' convention) and their ratio.
//   usage: keel-comm-bandwidth PLUGIN_PATH [MIB ...]   (default sizes 1 4 16 64 MiB)
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "comm_test_support.hpp"  // tests/mpi

using namespace comm_test;

namespace {

constexpr int kWarmup = 2;
constexpr int kRepeats = 5;  // the best of these, as osu_allreduce's minimum

template <typename Call>
double best_seconds(int iterations, Call call) {
  double best = 1e30;
  for (int r = 0; r < kRepeats + kWarmup; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) call();
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iterations;
    MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);  // the slowest rank's time
    if (r >= kWarmup) best = std::min(best, seconds);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) fail(__FILE__, __LINE__, "usage: keel-comm-bandwidth PLUGIN_PATH [MIB ...]");
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  std::vector<double> sizes_mib;
  for (int i = 2; i < argc; ++i) sizes_mib.push_back(std::strtod(argv[i], nullptr));
  if (sizes_mib.empty()) sizes_mib = {1, 4, 16, 64};
  const keel_comm_api* api = load_comm_plugin(argv[1]);
  void* world = nullptr;
  CHECK_OK(api->create_world(&kHost, R"({"plugin": "mpi"})", "comm", &world));
  int32_t rank = 0, size = 1;
  CHECK_OK(api->rank(world, &rank));
  CHECK_OK(api->size(world, &size));
  g_rank = rank, g_size = size;
  if (rank == 0) std::printf("%10s %14s %14s %7s\n", "MiB", "plugin GB/s", "MPI GB/s", "ratio");
  for (double mib : sizes_mib) {
    const size_t count = size_t(mib * (1 << 20) / sizeof(float));
    if (count == 0 || mib > 4096) fail(__FILE__, __LINE__, "sizes are from 4 bytes to 4096 MiB");
    std::vector<float> send(count, 1.0f), receive(count);
    const int iterations = std::max(1, int(64 / mib));
    const double plugin = best_seconds(iterations, [&] {
      CHECK_OK(api->all_reduce(world, send.data(), receive.data(), count, fp32(), KEEL_REDUCE_SUM, nullptr));
    });
    CHECK(receive[count / 2] == float(size));  // the sum really happened
    const double plain = best_seconds(iterations, [&] {
      MPI_Allreduce(send.data(), receive.data(), int(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    });
    const double bus_bytes = 2.0 * (size - 1) / size * double(count * sizeof(float));
    if (rank == 0)
      std::printf("%10g %14.3f %14.3f %7.3f\n", mib, bus_bytes / plugin * 1e-9, bus_bytes / plain * 1e-9, plain / plugin);
  }
  api->destroy(world);
  // MPI_Finalize: the plugin's own atexit handler sees MPI finalised by us and leaves it.
  MPI_Finalize();
  return 0;
}
