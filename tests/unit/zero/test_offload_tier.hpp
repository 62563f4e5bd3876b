// A keel_offload_api table for the strategy tests, over the engines' C++ classes (the cpu and
// nvme engines of plugins/offload-engines), before and besides their plugins: one TestTier per
// rank, reporting a small ideal request (the cpu one) so the test model streams in several
// windows, with a switch that makes every request after the first `fail_after` fail with an I/O
// error, as a broken drive would. Errors go to the host each tier is given (the tests': the
// same thread-local message the strategy's errors use). Test and benchmark-tool only.
#pragma once

#include <keel/offload.h>
#include <keel/plugin.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include <keel_support/common/abi_guard.hpp>
#include <keel_support/common/testing/recording_host.hpp>

#include "cpu_engine.hpp"
#include "nvme_engine.hpp"

namespace keel_test {

// A host that only keeps the last error message (per thread): the installed recording host.
inline std::string& tier_last_error() { return keel_support::testing::last_message(); }
inline keel_host plain_tier_host() { return keel_support::testing::recording_host(); }

struct TestTier {
  keel_host host = plain_tier_host();
  std::unique_ptr<keel_support::OffloadEngine> engine;
  int64_t fail_after = -1;  // >= 0: requests beyond this many fail
  int64_t requests = 0;
  int64_t live_buffers = 0;
  uint64_t ideal_bytes = 0;  // > 0: reported instead of the engine's, so a small model streams in many windows

  static std::unique_ptr<TestTier> cpu(uint64_t capacity = uint64_t(64) << 20, keel_host host = plain_tier_host()) {
    auto tier = std::make_unique<TestTier>();
    tier->host = host;
    keel_offload::CpuEngineConfig config;
    config.capacity_bytes = capacity;
    config.alignment_bytes = 64;
    tier->engine = std::make_unique<keel_offload::CpuEngine>(config);
    tier->ideal_bytes = 64;  // windows of 16 elements: the test model's shards span several
    return tier;
  }
  // Small blocks so that even this test model's few elements span several requests.
  static std::unique_ptr<TestTier> nvme(const std::string& folder, uint64_t capacity = uint64_t(64) << 20,
                                        keel_host host = plain_tier_host(), uint32_t queue_depth = 4,
                                        uint64_t block_bytes = 4096) {
    auto tier = std::make_unique<TestTier>();
    tier->host = host;
    keel_offload::NvmeEngineConfig config;
    config.folder = folder;
    config.capacity_bytes = capacity;
    config.queue_depth = queue_depth;
    config.block_bytes = block_bytes;
    tier->engine = std::make_unique<keel_offload::NvmeEngine>(config);
    return tier;
  }
};

inline TestTier& as_tier(void* obj) { return *static_cast<TestTier*>(obj); }

template <typename Body>
keel_status tier_call(void* obj, Body&& body) {
  return keel_support::guard(&as_tier(obj).host, "offload test", body);
}

inline void count_request(TestTier& tier, const char* what, const char* name) {
  if (tier.fail_after >= 0 && tier.requests >= tier.fail_after)
    throw keel_support::StatusError(KEEL_ERR_IO, std::string(what) + " of extent '" + name +
                                                     "' failed: injected I/O error (the test's broken tier)");
  ++tier.requests;
}

inline const keel_offload_api& test_offload_api() {
  static const keel_offload_api api = [] {
    keel_offload_api t{};
    t.struct_size = sizeof(t);
    t.describe = [](void* obj, keel_offload_info* out) {
      return tier_call(obj, [&] {
        out->alignment_bytes = as_tier(obj).engine->alignment_bytes();
        out->ideal_request_bytes = as_tier(obj).ideal_bytes ? as_tier(obj).ideal_bytes
                                                            : as_tier(obj).engine->ideal_request_bytes();
        out->capacity_bytes = as_tier(obj).engine->capacity_bytes();
      });
    };
    t.add_extent = [](void* obj, const char* name, uint64_t bytes) {
      return tier_call(obj, [&] { as_tier(obj).engine->add_extent(name, bytes); });
    };
    t.submit_write = [](void* obj, const char* name, uint64_t offset, const void* src, uint64_t bytes, uint64_t* out) {
      return tier_call(obj, [&] {
        count_request(as_tier(obj), "write", name);
        *out = as_tier(obj).engine->submit_write(name, offset, src, bytes);
      });
    };
    t.submit_read = [](void* obj, const char* name, uint64_t offset, void* dst, uint64_t bytes, uint64_t* out) {
      return tier_call(obj, [&] {
        count_request(as_tier(obj), "read", name);
        *out = as_tier(obj).engine->submit_read(name, offset, dst, bytes);
      });
    };
    t.wait = [](void* obj, uint64_t ticket) { return tier_call(obj, [&] { as_tier(obj).engine->wait(ticket); }); };
    t.wait_all = [](void* obj) { return tier_call(obj, [&] { as_tier(obj).engine->wait_all(); }); };
    t.counters = [](void* obj, keel_offload_counters* out) {
      return tier_call(obj, [&] {
        const keel_support::OffloadCounters c = as_tier(obj).engine->counters();
        out->bytes_read = c.bytes_read;
        out->bytes_written = c.bytes_written;
        out->requests_completed = c.requests_completed;
        out->busy_seconds = c.busy_seconds;
      });
    };
    t.alloc_buffer = [](void* obj, uint64_t bytes, void** out) {
      return tier_call(obj, [&] {
        const uint64_t alignment = as_tier(obj).engine->alignment_bytes();
        *out = std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
        if (!*out) throw std::bad_alloc();
        std::memset(*out, 0, bytes);
        ++as_tier(obj).live_buffers;
      });
    };
    t.free_buffer = [](void* obj, void* buffer) {
      if (buffer) --as_tier(obj).live_buffers;
      std::free(buffer);
    };
    return t;
  }();
  return api;
}

}  // namespace keel_test
