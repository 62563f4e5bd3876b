// keel's own threading of sgemm (GemmThreading::kPartition): the grids it picks cover the output
// exactly, and a product split over 2, 3 or 4 threads gives the same bits as one single-threaded
// call, as OpenBLAS's own threading does, for every transpose and for odd sizes; both against a
// triple loop in double.
#include <omp.h>

#include <cstring>
#include <stdexcept>
#include <tuple>

#include "cpu/blas.h"
#include "cpu/gemm_partition.h"
#include "reference.h"

using namespace keel_test;
using keel::cpu::GemmGrid;
using keel::cpu::GemmThreading;

namespace {

// Restores one thread and the default threading, whatever a test changed.
class GemmThreads : public ::testing::Test {
 protected:
  void TearDown() override {
    keel::cpu::set_gemm_threading(GemmThreading::kPartition);
    keel::cpu::set_num_threads(0);
  }
};

TEST(GemmGridChoice, PacksTheLeastInputPerThread) {
  // GPT-2 124M at 4 × 64 tokens: the forward qkv product (wide C) splits its columns, the fc
  // weight gradient (tall C, K = 256 tokens) its rows; four threads on a wide product take a 2 × 2
  // grid only when that packs less than 1 × 4.
  const GemmGrid qkv = keel::cpu::choose_gemm_grid(256, 2304, 768, 2);
  EXPECT_EQ(qkv.row_blocks, 1);
  EXPECT_EQ(qkv.col_blocks, 2);
  const GemmGrid dweight = keel::cpu::choose_gemm_grid(3072, 768, 256, 2);
  EXPECT_EQ(dweight.row_blocks, 2);
  EXPECT_EQ(dweight.col_blocks, 1);
  const GemmGrid square = keel::cpu::choose_gemm_grid(2048, 2048, 2048, 4);
  EXPECT_EQ(square.row_blocks, 2);
  EXPECT_EQ(square.col_blocks, 2);
  const GemmGrid wide = keel::cpu::choose_gemm_grid(64, 50304, 768, 4);
  EXPECT_EQ(wide.row_blocks, 1);
  EXPECT_EQ(wide.col_blocks, 4);
}

TEST(GemmGridChoice, SmallOrThinProductsTakeFewerBlocks) {
  EXPECT_EQ(keel::cpu::choose_gemm_grid(16, 16, 16, 2).blocks(), 1);  // 4096 multiply-adds
  // 97 × 131 × 203: two blocks of 2^20 multiply-adds fit, three do not.
  EXPECT_EQ(keel::cpu::choose_gemm_grid(97, 131, 203, 4).blocks(), 2);
  EXPECT_EQ(keel::cpu::choose_gemm_grid(1000, 1000, 1000, 1).blocks(), 1);
  // One unit of columns and two of rows: at most two blocks, however many threads.
  const GemmGrid thin = keel::cpu::choose_gemm_grid(32, 8, 1 << 14, 8);
  EXPECT_EQ(thin.row_blocks, 2);
  EXPECT_EQ(thin.col_blocks, 1);
  EXPECT_EQ(keel::cpu::choose_gemm_grid(0, 100, 100, 2).blocks(), 1);
}

TEST(GemmGridChoice, SpansCoverTheExtentOnUnitBoundaries) {
  for (int64_t extent : {1, 15, 16, 17, 100, 768, 50257})
    for (int parts = 1; parts <= 7; ++parts) {
      int64_t next = 0;
      for (int i = 0; i < parts; ++i) {
        const auto span = keel::cpu::gemm_block_span(extent, i, parts);
        EXPECT_EQ(span.begin, next) << extent << " in " << parts << ", part " << i;
        EXPECT_LE(span.begin, span.end);
        if (span.end < extent) EXPECT_EQ(span.end % keel::cpu::kGemmBlockUnit, 0);
        next = span.end;
      }
      EXPECT_EQ(next, extent) << extent << " in " << parts;
    }
}

// C(M,N) = alpha·op(A)·op(B) + beta·C in double, row-major, as cblas_sgemm.
std::vector<double> gemm_ref(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const std::vector<float>& A,
                             const std::vector<float>& B, float beta, const std::vector<float>& C) {
  std::vector<double> out(M * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0.0;
      for (int64_t k = 0; k < K; ++k)
        s += double(ta ? A[k * M + i] : A[i * K + k]) * double(tb ? B[j * K + k] : B[k * N + j]);
      out[i * N + j] = alpha * s + beta * C[i * N + j];
    }
  return out;
}

struct Product {
  int64_t M, N, K;
};

using Case = std::tuple<Product, bool, bool>;

class GemmSplit : public GemmThreads, public ::testing::WithParamInterface<Case> {};

std::vector<float> product(bool ta, bool tb, const Product& p, const std::vector<float>& A, const std::vector<float>& B,
                           const std::vector<float>& C, float beta = 1.0f) {
  std::vector<float> out = C;
  keel::cpu::sgemm(ta, tb, p.M, p.N, p.K, 1.0f, A.data(), ta ? p.M : p.K, B.data(), tb ? p.K : p.N, beta,
                   out.data(), p.N);
  return out;
}

// beta 1 is how the backward accumulates; beta 0 (a fresh output) with two untransposed
// operands is what OpenBLAS's "direct" kernels take on one thread.
TEST_P(GemmSplit, SameBitsAtEveryThreadCountAndEitherThreading) {
  const auto [p, ta, tb] = GetParam();
  const auto A = random_floats(p.M * p.K, 11), B = random_floats(p.K * p.N, 12), C = random_floats(p.M * p.N, 13);
  for (float beta : {1.0f, 0.0f}) {
    SCOPED_TRACE("beta " + std::to_string(beta));
    keel::cpu::set_gemm_threading(GemmThreading::kPartition);
    keel::cpu::set_num_threads(1);
    const std::vector<float> one_call = product(ta, tb, p, A, B, C, beta);
    expect_close(one_call, gemm_ref(ta, tb, p.M, p.N, p.K, 1.0f, A, B, beta, C), 1e-4, 1e-5, "one call");
    for (int threads : {2, 3, 4}) {
      keel::cpu::set_num_threads(threads);
      const GemmGrid grid = keel::cpu::choose_gemm_grid(p.M, p.N, p.K, threads);
      const std::vector<float> split = product(ta, tb, p, A, B, C, beta);
      EXPECT_EQ(std::memcmp(split.data(), one_call.data(), split.size() * sizeof(float)), 0)
          << threads << " threads as a " << grid.row_blocks << " x " << grid.col_blocks << " grid";
    }
    keel::cpu::set_gemm_threading(GemmThreading::kLibrary);
    keel::cpu::set_num_threads(2);
    const std::vector<float> library = product(ta, tb, p, A, B, C, beta);
    EXPECT_EQ(std::memcmp(library.data(), one_call.data(), library.size() * sizeof(float)), 0) << "OpenBLAS's threads";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GemmSplit,
    ::testing::Combine(::testing::Values(Product{256, 576, 192}, Product{768, 256, 64}, Product{97, 131, 203},
                                         Product{33, 1000, 17}),
                       ::testing::Bool(), ::testing::Bool()));

// OpenMP may give a team smaller than the grid (OMP_THREAD_LIMIT, OMP_DYNAMIC, or here parallel
// regions switched off): the threads it gives compute every block.
TEST_F(GemmThreads, ASmallerTeamThanTheGridStillComputesEveryBlock) {
  const Product p{256, 576, 192};
  const auto A = random_floats(p.M * p.K, 31), B = random_floats(p.K * p.N, 32), C = random_floats(p.M * p.N, 33);
  keel::cpu::set_num_threads(1);
  const std::vector<float> want = product(false, true, p, A, B, C);
  keel::cpu::set_num_threads(4);
  ASSERT_EQ(keel::cpu::choose_gemm_grid(p.M, p.N, p.K, 4).blocks(), 4);
  const int levels = omp_get_max_active_levels();
  omp_set_max_active_levels(0);  // every parallel region runs with a team of one
  const std::vector<float> got = product(false, true, p, A, B, C);
  omp_set_max_active_levels(levels);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
}

TEST_F(GemmThreads, LeadingDimensionsShorterThanARowAreRefused) {
  std::vector<float> A(64 * 64, 1.0f), B(64 * 64, 1.0f), C(64 * 64);
  EXPECT_THROW(keel::cpu::sgemm(false, false, 64, 64, 64, 1.0f, A.data(), 63, B.data(), 64, 0.0f, C.data(), 64),
               std::invalid_argument);
  EXPECT_THROW(keel::cpu::sgemm(false, true, 64, 64, 32, 1.0f, A.data(), 32, B.data(), 31, 0.0f, C.data(), 64),
               std::invalid_argument);
  EXPECT_THROW(keel::cpu::sgemm(true, false, 48, 64, 64, 1.0f, A.data(), 47, B.data(), 64, 0.0f, C.data(), 64),
               std::invalid_argument);
  EXPECT_THROW(keel::cpu::sgemm(false, false, 64, 64, 64, 1.0f, A.data(), 64, B.data(), 64, 0.0f, C.data(), 60),
               std::invalid_argument);
  EXPECT_NO_THROW(keel::cpu::sgemm(true, true, 48, 32, 64, 1.0f, A.data(), 48, B.data(), 64, 0.0f, C.data(), 32));
}

// Inside a parallel region (attention's per-head products) a product runs on its own thread.
TEST_F(GemmThreads, InsideAParallelRegionEachThreadRunsItsOwnProduct) {
  const Product p{128, 192, 160};
  const auto A = random_floats(p.M * p.K, 21), B = random_floats(p.K * p.N, 22), C = random_floats(p.M * p.N, 23);
  keel::cpu::set_num_threads(1);
  const std::vector<float> want = product(false, true, p, A, B, C);
  keel::cpu::set_num_threads(2);
  std::vector<float> got[2];
#pragma omp parallel num_threads(2)
  {
    const int t = omp_get_thread_num();
    if (t < 2) got[t] = product(false, true, p, A, B, C);
  }
  for (const auto& g : got) {
    ASSERT_EQ(g.size(), want.size());
    EXPECT_EQ(std::memcmp(g.data(), want.data(), g.size() * sizeof(float)), 0);
  }
}

}  // namespace
