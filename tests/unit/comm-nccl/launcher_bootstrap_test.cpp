// The nccl plugin's bootstrap without NCCL: under mpirun every rank opens libmpi at run time
// (launcher_mpi.cpp, compiled in from the plugin), joins the launcher's world and receives rank
// 0's bytes, as the NCCL unique id travels. Without a launcher there is no world to join.
// Usage: launcher_bootstrap_test NP (under mpirun -np NP, or NP 1 without a launcher)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <keel_support/common/abi_guard.hpp>
#include <keel_support/common/launcher_env.hpp>  // defines: mpi_launcher_variable

#include "launcher_mpi.hpp"

namespace {

[[noreturn]] void fail(int rank, const std::string& what) {
  std::fprintf(stderr, "FAILED rank %d: %s\n", rank, what.c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  const int expected_size = argc == 2 ? std::atoi(argv[1]) : 0;
  if (expected_size < 1) fail(-1, "usage: launcher_bootstrap_test NP");
  if (keel_support::mpi_launcher_variable().empty()) {
    if (expected_size != 1) fail(-1, "no launcher found, expected a world of " + std::to_string(expected_size));
    if (keel_nccl::launcher_world_joined()) fail(-1, "joined a world without a launcher");
    std::printf("launcher_bootstrap_test: no launcher, nothing to join: ok\n");
    return 0;
  }
  keel_nccl::LauncherWorld world{};
  try {
    world = keel_nccl::join_launcher_world(nullptr);
  } catch (const keel_support::StatusError& e) {
    fail(-1, e.what());
  }
  if (world.size != expected_size) fail(world.rank, "world of " + std::to_string(world.size));
  unsigned char id[128];
  for (int i = 0; i < 128; ++i) id[i] = static_cast<unsigned char>(world.rank == 0 ? 3 * i + 1 : 0);
  keel_nccl::broadcast_from_rank0(id, sizeof id);
  for (int i = 0; i < 128; ++i)
    if (id[i] != static_cast<unsigned char>(3 * i + 1)) fail(world.rank, "byte " + std::to_string(i) + " differs");
  if (world.rank == 0) std::printf("launcher_bootstrap_test: %d ranks got rank 0's id: ok\n", world.size);
  return 0;
}
