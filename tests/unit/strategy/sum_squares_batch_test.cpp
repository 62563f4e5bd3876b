// SumSquaresBatch, the gradient norm's one read-back per step: on a backend with sum_squares_dt
// every run's sum is queued into a backend slot and the host reads the slots back with one copy
// per 256 runs, never through the blocking 0.1 sum_squares; the total equals Σ x² in double
// over every element to within fp32 rounding of each run's sum. A backend without
// sum_squares_dt (before 0.8) is read run by run and gives the double sum exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include <keel_support/common/backend_ops.hpp>
#include <keel_support/strategy/sum_squares_batch.hpp>
#include <keel_support/common/testing/host_memory_backend.hpp>

namespace {

using keel_support::testing::HostMemoryBackend;

// The host-memory backend with sum_squares_dt (fp32 only here) and counts of the calls that
// make the host wait: copies back to the host and the 0.1 sum_squares.
struct CountingBackend : HostMemoryBackend {
  int copies_to_host = 0;
  int blocking_sums = 0;
  int queued_sums = 0;

  static CountingBackend& self(void* obj) { return *static_cast<CountingBackend*>(obj); }
  static keel_backend_api table(bool with_dt) {
    keel_backend_api api = HostMemoryBackend::table();
    api.copy = [](void* obj, void* dst, const void* src, size_t bytes, int32_t direction) {
      if (direction == KEEL_COPY_DEVICE_TO_HOST) ++self(obj).copies_to_host;
      return HostMemoryBackend::copy(obj, dst, src, bytes, direction);
    };
    api.sum_squares = [](void* obj, const float* x, int64_t n, double* out) {
      ++self(obj).blocking_sums;
      return HostMemoryBackend::sum_squares(obj, x, n, out);
    };
    if (with_dt)
      api.sum_squares_dt = [](void* obj, keel_dtype dt, const void* x, int64_t n, float* acc) -> keel_status {
        if (dt.code != KEEL_DTYPE_FLOAT || dt.bits != 32) return KEEL_ERR_UNIMPLEMENTED;
        ++self(obj).queued_sums;
        double sum = 0;
        for (int64_t i = 0; i < n; ++i) sum += double(static_cast<const float*>(x)[i]) * static_cast<const float*>(x)[i];
        *acc = float(double(*acc) + sum);
        return KEEL_OK;
      };
    return api;
  }
};

// `runs` runs of varied lengths and values, back to back in one array.
struct Runs {
  std::vector<float> data;
  std::vector<std::pair<int64_t, int64_t>> spans;  // begin, count
  double exact = 0;
};
Runs make_runs(int runs) {
  Runs r;
  for (int k = 0; k < runs; ++k) {
    const int64_t count = 1 + (k * 7) % 13;
    r.spans.push_back({int64_t(r.data.size()), count});
    for (int64_t i = 0; i < count; ++i) {
      const float x = 0.01f * float((k * 31 + i * 17) % 97) - 0.4f;
      r.data.push_back(x);
      r.exact += double(x) * x;
    }
  }
  return r;
}

TEST(SumSquaresBatch, ReadsEveryRunBackWithOneCopyPerBlockAndNeverBlocksPerRun) {
  for (int runs : {1, 255, 256, 257, 600}) {
    SCOPED_TRACE(std::to_string(runs) + " runs");
    CountingBackend backend;
    const keel_backend_api api = CountingBackend::table(true);
    const Runs r = make_runs(runs);
    double total = 0;
    {
      keel_support::SumSquaresBatch batch(keel_support::BackendOps{&api, &backend});
      for (const auto& [begin, count] : r.spans) batch.add(r.data.data() + begin, count);
      batch.add(r.data.data(), 0);  // an empty run adds nothing and takes no slot
      EXPECT_EQ(backend.copies_to_host, 0) << "nothing is read before total()";
      total = batch.total();
    }
    EXPECT_EQ(backend.queued_sums, runs);
    EXPECT_EQ(backend.blocking_sums, 0);
    EXPECT_EQ(backend.copies_to_host, (runs + 255) / 256) << "one copy per block of 256 slots";
    // Each run's sum is rounded to fp32 once: relative error at most 2^-24 per run.
    EXPECT_NEAR(total, r.exact, r.exact * std::ldexp(1.0, -23));
    EXPECT_EQ(backend.live_allocations, 0) << "the slots went back to the backend";
  }
}

TEST(SumSquaresBatch, ABackendBefore08IsReadRunByRunInDouble) {
  CountingBackend backend;
  const keel_backend_api api = CountingBackend::table(false);
  const Runs r = make_runs(40);
  keel_support::SumSquaresBatch batch(keel_support::BackendOps{&api, &backend});
  double expected = 0;
  for (const auto& [begin, count] : r.spans) {
    batch.add(r.data.data() + begin, count);
    double run = 0;
    for (int64_t i = 0; i < count; ++i) run += double(r.data[size_t(begin + i)]) * r.data[size_t(begin + i)];
    expected += run;
  }
  EXPECT_EQ(batch.total(), expected);
  EXPECT_EQ(backend.blocking_sums, 40);
  EXPECT_EQ(backend.copies_to_host, 0);
}

TEST(SumSquaresBatch, NothingAddedIsZeroWithoutTouchingTheBackend) {
  CountingBackend backend;
  const keel_backend_api api = CountingBackend::table(true);
  keel_support::SumSquaresBatch batch(keel_support::BackendOps{&api, &backend});
  EXPECT_EQ(batch.total(), 0.0);
  EXPECT_EQ(backend.copies_to_host + backend.queued_sums + backend.live_allocations, 0);
}

}  // namespace
