// Megatron's four tensor-parallel mappings (keel_support/model/tp_mappings.hpp) on real ranks:
// each forward and backward against its definition in closed form (every rank contributes
// f(rank, i), so sums and gathered blocks are known without another rank's data), each pair
// checked to be adjoint (<fwd(x), y> = <x, bwd(y)> over the whole group, which is what makes
// the backward the gradient of the forward), a group of one where every mapping is a copy, and a
// row count the group does not divide refused with the numbers.
//   usage: mpirun -np N keel_tp_mappings_test N
#include <cmath>
#include <functional>
#include <vector>

#include <keel_support/common/abi_guard.hpp>
#include <keel_support/common/testing/host_memory_backend.hpp>

#include "comm_test_support.hpp"
#include <keel_support/model/tp_mappings.hpp>

namespace {

using namespace comm_test;
using keel_support::TpGroup;
using Mapping = void (*)(const TpGroup&, const void*, void*, int64_t);

const keel_comm_api* api;

// Exactly representable, distinct per rank and element.
float f(int rank, int64_t i) { return 0.5f * float(rank + 1) + float(i % 89) - 40.0f; }
float h(int rank, int64_t i) { return 0.25f * float((rank * 7 + i) % 13) - 1.0f; }

void expect_values(const char* what, const std::vector<float>& got, const std::function<float(int64_t)>& want) {
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want(int64_t(i)))
      fail(__FILE__, __LINE__, std::string(what) + ": element " + std::to_string(i) + " is " +
                                   std::to_string(got[i]) + ", expected " + std::to_string(want(int64_t(i))));
}

std::vector<float> of(int64_t n, float (*g)(int, int64_t), int rank) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = g(rank, i);
  return v;
}

float sum_over_ranks(float (*g)(int, int64_t), int64_t i, int size) {
  float s = 0;
  for (int r = 0; r < size; ++r) s += g(r, i);
  return s;
}

// rows × C with rows = size·block; the sequence mappings split it into `size` row blocks.
constexpr int64_t kBlockRows = 3, kC = 5;

void test_definitions(const TpGroup& g) {
  const int P = g.size, me = g.rank;
  const int64_t full = P * kBlockRows * kC, block = kBlockRows * kC;
  std::vector<float> out(static_cast<size_t>(full), -7.0f);

  auto x = of(full, f, me);
  keel_support::CopyToTpRegion::forward(g, x.data(), out.data(), full);
  expect_values("copy_to_tp_region forward (identity)", out, [&](int64_t i) { return f(me, i); });
  keel_support::CopyToTpRegion::backward(g, x.data(), out.data(), full);
  expect_values("copy_to_tp_region backward (all-reduce)", out, [&](int64_t i) { return sum_over_ranks(f, i, P); });
  keel_support::ReduceFromTpRegion::forward(g, x.data(), out.data(), full);
  expect_values("reduce_from_tp_region forward (all-reduce)", out, [&](int64_t i) { return sum_over_ranks(f, i, P); });
  keel_support::ReduceFromTpRegion::backward(g, x.data(), out.data(), full);
  expect_values("reduce_from_tp_region backward (identity)", out, [&](int64_t i) { return f(me, i); });
  auto in_place = x;
  keel_support::ReduceFromTpRegion::forward(g, in_place.data(), in_place.data(), full);
  expect_values("reduce_from_tp_region forward in place", in_place, [&](int64_t i) { return sum_over_ranks(f, i, P); });

  // Sequence mappings: the local operand is this rank's block of rows, block r on rank r.
  auto local = of(block, f, me);
  keel_support::GatherFromSequenceRegion::forward(g, local.data(), out.data(), block);
  expect_values("gather_from_sequence_region forward (all-gather)", out,
                [&](int64_t i) { return f(int(i / block), i % block); });
  keel_support::ScatterToSequenceRegion::backward(g, local.data(), out.data(), block);
  expect_values("scatter_to_sequence_region backward (all-gather)", out,
                [&](int64_t i) { return f(int(i / block), i % block); });
  std::vector<float> mine(static_cast<size_t>(block), -7.0f);
  keel_support::ScatterToSequenceRegion::forward(g, x.data(), mine.data(), full);
  expect_values("scatter_to_sequence_region forward (reduce-scatter)", mine,
                [&](int64_t i) { return sum_over_ranks(f, me * block + i, P); });
  std::fill(mine.begin(), mine.end(), -7.0f);
  keel_support::GatherFromSequenceRegion::backward(g, x.data(), mine.data(), full);
  expect_values("gather_from_sequence_region backward (reduce-scatter)", mine,
                [&](int64_t i) { return sum_over_ranks(f, me * block + i, P); });
}

// The backward must be the adjoint of the forward: <fwd(x), y> = <x, bwd(y)>, where an operand
// that is replicated (one logical tensor held by every rank: the input of copy_to, the output of
// reduce_from) counts once and per-rank operands (partial sums, row blocks, each rank's copy a
// different layer reads) count once per rank.
void check_adjoint(const TpGroup& g, const char* name, Mapping fwd, Mapping bwd, int64_t n_in, int64_t n_out,
                   bool in_replicated, bool out_replicated) {
  auto x = of(n_in, f, in_replicated ? 0 : g.rank), y = of(n_out, h, out_replicated ? 0 : g.rank);
  std::vector<float> fx(static_cast<size_t>(n_out)), by(static_cast<size_t>(n_in));
  fwd(g, x.data(), fx.data(), n_in);
  bwd(g, y.data(), by.data(), n_out);
  double sides[2] = {0, 0};
  for (int64_t i = 0; i < n_out; ++i) sides[0] += double(fx[size_t(i)]) * y[size_t(i)];
  for (int64_t i = 0; i < n_in; ++i) sides[1] += double(x[size_t(i)]) * by[size_t(i)];
  if (g.active()) {
    for (int k = 0; k < 2; ++k) {
      std::vector<double> all(static_cast<size_t>(g.size));
      CHECK_OK(api->all_gather(g.obj, &sides[k], all.data(), 1, fp64(), nullptr));
      sides[k] = 0;
      for (double v : all) sides[k] += v;
    }
    if (out_replicated) sides[0] /= g.size;  // every rank holds the same product: count it once
    if (in_replicated) sides[1] /= g.size;
  }
  if (std::fabs(sides[0] - sides[1]) > 1e-9 * (1 + std::fabs(sides[0])))
    fail(__FILE__, __LINE__, std::string(name) + ": backward is not the adjoint of forward: <fwd(x),y> = " +
                                 std::to_string(sides[0]) + ", <x,bwd(y)> = " + std::to_string(sides[1]));
}

void test_adjoints(const TpGroup& g) {
  const int64_t full = g.size * kBlockRows * kC, block = kBlockRows * kC;
  check_adjoint(g, "copy_to_tp_region", keel_support::CopyToTpRegion::forward, keel_support::CopyToTpRegion::backward, full,
                full, true, false);
  check_adjoint(g, "reduce_from_tp_region", keel_support::ReduceFromTpRegion::forward,
                keel_support::ReduceFromTpRegion::backward, full, full, false, true);
  check_adjoint(g, "gather_from_sequence_region", keel_support::GatherFromSequenceRegion::forward,
                keel_support::GatherFromSequenceRegion::backward, block, full, false, false);
  check_adjoint(g, "scatter_to_sequence_region", keel_support::ScatterToSequenceRegion::forward,
                keel_support::ScatterToSequenceRegion::backward, full, block, false, false);
}

void test_uneven_rows_refused(const TpGroup& g) {
  if (!g.active()) return;
  const int64_t n = g.size * 4 + 1;
  std::vector<float> in(static_cast<size_t>(n)), out(static_cast<size_t>(n));
  try {
    keel_support::ScatterToSequenceRegion::forward(g, in.data(), out.data(), n);
  } catch (const keel_support::StatusError& e) {
    const std::string message = e.what();
    CHECK(message.find("scatter_to_sequence_region forward") != std::string::npos);
    CHECK(message.find(std::to_string(n) + " elements do not split into " + std::to_string(g.size)) != std::string::npos);
    return;
  }
  fail(__FILE__, __LINE__, "an uneven reduce-scatter was not refused");
}

}  // namespace

int main(int argc, char** argv) {
  api = load_comm_plugin(KEEL_MPI_PLUGIN_PATH);
  void* world = nullptr;
  CHECK_OK(api->create_world(&kHost, R"({"plugin": "mpi", "timeout_s": 60})", "comm", &world));
  int32_t r = -1, s = -1;
  CHECK_OK(api->rank(world, &r));
  CHECK_OK(api->size(world, &s));
  g_rank = r, g_size = s;
  if (argc > 1 && s != std::atoi(argv[1]))
    fail(__FILE__, __LINE__, "world size " + std::to_string(s) + ", expected " + argv[1]);
  keel_support::testing::HostMemoryBackend memory;
  const keel_backend_api memory_table = keel_support::testing::HostMemoryBackend::table();
  const keel_support::BackendOps host_backend{&memory_table, &memory};
  const TpGroup group{api, world, s, r, keel_support::ComputeOps(host_backend)};
  test_definitions(group);
  test_adjoints(group);
  test_uneven_rows_refused(group);

  void* alone = nullptr;  // a group of one: every mapping is a copy
  CHECK_OK(api->split(world, r, 0, &alone));
  const TpGroup single{api, alone, 1, 0, keel_support::ComputeOps(host_backend)};
  test_definitions(single);
  test_adjoints(single);
  api->destroy(alone);

  CHECK_OK(api->barrier(world));
  api->destroy(world);
  std::printf("rank %d of %d: all tp mapping checks passed\n", r, s);
  return 0;
}
