// The cpu backend's ABI 0.8 plumbing through its table: probe, the configured compute type, the
// absent queue, events (trivial, but a NULL handle is refused), host staging memory (aligned,
// zeroed, usable from several threads at once), copy_async, and convert's rounding against an
// independent oracle (bf16_reference.h) on hand-picked halfway cases and random bit patterns.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "backend_plugin.h"
#include "bf16_reference.h"

using namespace keel_test;

namespace {

constexpr keel_dtype kFp32{KEEL_DTYPE_FLOAT, 32, 1};
constexpr keel_dtype kBf16{KEEL_DTYPE_BFLOAT, 16, 1};

bool same(keel_dtype a, keel_dtype b) { return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes; }

TEST(BackendCpuQueue, ProbeComputeTypeAndQueue) {
  EXPECT_EQ(api()->probe(&kHost), KEEL_OK);
  {
    Backend backend(R"({"peak_tflops": 1})");
    ASSERT_EQ(backend.status, KEEL_OK) << g_last_error;
    keel_dtype dt{};
    ASSERT_EQ(api()->compute_dtype(backend.handle, &dt), KEEL_OK);
    EXPECT_TRUE(same(dt, kFp32)) << "default precision is fp32";
    void* queue = reinterpret_cast<void*>(1);
    ASSERT_EQ(api()->queue(backend.handle, &queue), KEEL_OK);
    EXPECT_EQ(queue, nullptr) << "the cpu runs ops as they are called: no queue";
  }
  Backend bf16(R"({"peak_tflops": 1, "precision": "bf16"})");
  ASSERT_EQ(bf16.status, KEEL_OK) << g_last_error;
  keel_dtype dt{};
  ASSERT_EQ(api()->compute_dtype(bf16.handle, &dt), KEEL_OK);
  EXPECT_TRUE(same(dt, kBf16));
}

TEST(BackendCpuQueue, EventsPassAtOnceAndRefuseANullHandle) {
  Backend backend(R"({"peak_tflops": 1})");
  ASSERT_EQ(backend.status, KEEL_OK) << g_last_error;
  void* event = nullptr;
  ASSERT_EQ(api()->event_create(backend.handle, &event), KEEL_OK);
  ASSERT_NE(event, nullptr);
  EXPECT_EQ(api()->event_synchronize(backend.handle, event), KEEL_OK) << "an event never recorded has passed";
  EXPECT_EQ(api()->event_record(backend.handle, event), KEEL_OK);
  EXPECT_EQ(api()->event_wait(backend.handle, event), KEEL_OK);
  EXPECT_EQ(api()->event_synchronize(backend.handle, event), KEEL_OK);
  api()->event_destroy(backend.handle, event);

  EXPECT_EQ(api()->event_record(backend.handle, nullptr), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(g_last_error.find("event_record: event is NULL"), std::string::npos) << g_last_error;
  EXPECT_EQ(api()->event_wait(backend.handle, nullptr), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(api()->event_synchronize(backend.handle, nullptr), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(api()->event_create(backend.handle, nullptr), KEEL_ERR_INVALID_ARGUMENT);
}

TEST(BackendCpuQueue, HostMemoryIsAlignedZeroedAndThreadSafeAndCopyAsyncCopies) {
  Backend backend(R"({"peak_tflops": 1})");
  ASSERT_EQ(backend.status, KEEL_OK) << g_last_error;
  // Four threads allocate, fill, check and free at once, as communication threads would.
  std::vector<int> failures(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (size_t bytes : {size_t{0}, size_t{1}, size_t{100}, size_t{3} << 20}) {
        void* ptr = nullptr;
        if (api()->alloc_host(backend.handle, bytes, &ptr) != KEEL_OK || !ptr) {
          ++failures[t];
          continue;
        }
        auto* p = static_cast<unsigned char*>(ptr);
        if (reinterpret_cast<uintptr_t>(ptr) % 64 != 0) ++failures[t];
        for (size_t i = 0; i < bytes; ++i) failures[t] += p[i] != 0;
        std::memset(p, 0xAB, bytes);  // dirty it, so a reuse that skipped zeroing would show
        api()->free_host(backend.handle, ptr);
      }
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures, std::vector<int>(4, 0)) << "alloc_host failures (status, alignment or non-zero bytes) per thread";

  void* staging = nullptr;
  void* device = nullptr;
  ASSERT_EQ(api()->alloc_host(backend.handle, 64, &staging), KEEL_OK);
  ASSERT_EQ(api()->alloc(backend.handle, 64, &device), KEEL_OK);
  for (int i = 0; i < 16; ++i) static_cast<float*>(staging)[i] = 0.5f * i;
  void* event = nullptr;
  ASSERT_EQ(api()->event_create(backend.handle, &event), KEEL_OK);
  ASSERT_EQ(api()->copy_async(backend.handle, device, staging, 64, KEEL_COPY_HOST_TO_DEVICE), KEEL_OK);
  ASSERT_EQ(api()->event_record(backend.handle, event), KEEL_OK);
  ASSERT_EQ(api()->event_synchronize(backend.handle, event), KEEL_OK);
  std::vector<float> back(16, -1.0f);
  ASSERT_EQ(api()->copy(backend.handle, back.data(), device, 64, KEEL_COPY_DEVICE_TO_HOST), KEEL_OK);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(back[i], static_cast<float*>(staging)[i]) << "element " << i;
  EXPECT_EQ(api()->copy_async(backend.handle, device, staging, 64, 9), KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(g_last_error.find("copy_async: unknown direction 9"), std::string::npos) << g_last_error;
  api()->event_destroy(backend.handle, event);
  api()->free_memory(backend.handle, device);
  api()->free_host(backend.handle, staging);
}

// fp32 → bf16 through convert, one value.
uint16_t convert_one(void* backend, float x) {
  uint16_t h = 0x1234;
  EXPECT_EQ(api()->convert(backend, &h, kBf16, &x, kFp32, 1), KEEL_OK) << g_last_error;
  return h;
}

float from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

TEST(BackendCpuQueue, ConvertRoundsToNearestEvenOnHalfwayCases) {
  Backend backend(R"({"peak_tflops": 1})");
  ASSERT_EQ(backend.status, KEEL_OK) << g_last_error;
  struct Case {
    const char* what;
    uint32_t bits;
    bool tie;  // exactly halfway between two bf16 values
  };
  const Case cases[] = {
      {"1 + 2^-8: tie, the even neighbour is below (1.0)", 0x3F808000u, true},
      {"1 + 3·2^-8: tie, the even neighbour is above", 0x3F818000u, true},
      {"-(1 + 3·2^-8): tie, even neighbour further from zero", 0xBF818000u, true},
      {"just above halfway goes up", 0x3F808001u, false},
      {"just below halfway goes down", 0x3F807FFFu, false},
      {"smallest subnormal tie: to 0", 0x00008000u, true},
      {"subnormal tie: up to the even one", 0x00018000u, true},
      {"largest finite bf16 stays", 0x7F7F0000u, false},
      {"largest finite fp32: past the last halfway point, so infinity", 0x7F7FFFFFu, false},
      {"infinity", 0x7F800000u, false},
      {"-infinity", 0xFF800000u, false},
  };
  for (const Case& c : cases) {
    const float x = from_bits(c.bits);
    const Bf16Neighbours n = bf16_neighbours(x);
    if (!std::isinf(x))
      EXPECT_EQ(n.distance_toward_zero == n.distance_away, c.tie) << c.what << ": the case is not what it says";
    EXPECT_EQ(convert_one(backend.handle, x), nearest_bf16(x)) << c.what;
  }
  EXPECT_EQ(convert_one(backend.handle, from_bits(0x7F7FFFFFu)), 0x7F80u) << "the oracle agrees: infinity";

  // NaNs stay NaN, including one whose payload is only in the dropped bits (rounding it as a
  // number would carry into the exponent and give infinity) and a negative one.
  for (uint32_t nan_bits : {0x7FC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu}) {
    const uint16_t h = convert_one(backend.handle, from_bits(nan_bits));
    EXPECT_TRUE(std::isnan(bf16_bits_to_float(h))) << std::hex << "NaN 0x" << nan_bits << " became 0x" << h;
  }
}

TEST(BackendCpuQueue, ConvertMatchesTheOracleOnRandomBitsAndWidensExactly) {
  Backend backend(R"({"peak_tflops": 1})");
  ASSERT_EQ(backend.status, KEEL_OK) << g_last_error;
  const int64_t n = 100000;  // above the kernels' threading threshold
  std::mt19937 rng(7);
  std::vector<float> x(n);
  for (auto& v : x) {
    do v = from_bits(rng());
    while (std::isnan(v));
  }
  std::vector<uint16_t> h(n);
  ASSERT_EQ(api()->convert(backend.handle, h.data(), kBf16, x.data(), kFp32, n), KEEL_OK) << g_last_error;
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < n; ++i)
    if (h[i] != nearest_bf16(x[i]) && bad++ == 0) first = i;
  EXPECT_EQ(bad, 0) << "first at " << first << ": " << x[first];

  std::vector<float> wide(n);
  ASSERT_EQ(api()->convert(backend.handle, wide.data(), kFp32, h.data(), kBf16, n), KEEL_OK);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(float_bits(wide[i]), uint32_t{h[i]} << 16) << "element " << i;

  std::vector<float> copy(n);
  ASSERT_EQ(api()->convert(backend.handle, copy.data(), kFp32, x.data(), kFp32, n), KEEL_OK);
  EXPECT_EQ(std::memcmp(copy.data(), x.data(), n * sizeof(float)), 0) << "same type: a copy";
  std::vector<uint16_t> copy16(n);
  ASSERT_EQ(api()->convert(backend.handle, copy16.data(), kBf16, h.data(), kBf16, n), KEEL_OK);
  EXPECT_EQ(copy16, h);

  const keel_dtype fp16{KEEL_DTYPE_FLOAT, 16, 1};
  EXPECT_EQ(api()->convert(backend.handle, h.data(), fp16, x.data(), kFp32, 1), KEEL_ERR_UNIMPLEMENTED);
  EXPECT_NE(g_last_error.find("convert: the cpu backend converts between fp32 and bf16"), std::string::npos)
      << g_last_error;
}

}  // namespace
