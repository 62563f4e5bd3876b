// A conformance check for offload engines, through their C table alone: what keel/offload.h
// promises and a strategy relies on, run against one engine and reported as sentences. Keel's
// tests run it on the built-in cpu and nvme engines and on the example engine; an engine's
// author calls it from any test framework:
//
//   for (const std::string& broken : keel_support::testing::check_offload_engine(api, R"({"path": "/tmp"})"))
//     ADD_FAILURE() << broken;
//
// What it checks: the table's slots and describe's numbers; extents refused for a repeated name
// or a size off the alignment; zeros for bytes never written; read-after-write equality, also
// with several requests in flight; that no ticket is 0, that wait(0) and a wait on a ticket never
// issued are refused, that a second wait on a ticket, and a wait after the wait_all that covered
// it, return KEEL_OK; that a refused call returns an error with a message on the calling thread;
// the counters against the bytes moved; alloc_buffer's alignment and zeros; and a destroy with
// requests still in flight.
#pragma once

#include <keel/host.h>
#include <keel/offload.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "keel_support/common/testing/recording_host.hpp"

namespace keel_support::testing {

namespace offload_conformance_detail {

// Collects broken promises; `check` returns whether the promise held.
struct Findings {
  std::vector<std::string> broken;
  bool check(bool held, const std::string& promise) {
    if (!held) broken.push_back(promise);
    return held;
  }
  bool ok(keel_status status, const std::string& call) {
    return check(status == KEEL_OK, call + " returned status " + std::to_string(status) + ": " + last_message());
  }
  // A refusal: an error status, and a message on this thread saying why (cleared first, so a
  // message left by an earlier call does not count).
  template <typename Call>
  void refused(Call&& call_engine, const std::string& call) {
    last_message().clear();
    const keel_status status = call_engine();
    if (status == KEEL_OK) {
      broken.push_back(call + " returned KEEL_OK; expected a refusal");
    } else {
      check(!last_message().empty(), call + " returned status " + std::to_string(status) +
                                         " but set no message on the calling thread (set_error is per thread: a "
                                         "worker's message must reach the thread that called)");
    }
  }
};

inline void fill_pattern(unsigned char* bytes, uint64_t count, unsigned seed) {
  for (uint64_t i = 0; i < count; ++i) bytes[i] = static_cast<unsigned char>((i * 131 + seed * 17 + (i >> 9)) & 0xff);
}

inline bool all_zero(const unsigned char* bytes, uint64_t count) {
  for (uint64_t i = 0; i < count; ++i)
    if (bytes[i] != 0) return false;
  return true;
}

}  // namespace offload_conformance_detail

// Creates an engine from `config_json` (the "offload" section less the core's keys, as the core
// passes it), runs the checks, destroys it, and returns what broke; empty: conformant.
inline std::vector<std::string> check_offload_engine(const keel_offload_api& api, const char* config_json,
                                                     const char* json_path = "offload") {
  using namespace offload_conformance_detail;
  Findings findings;
  const keel_host host = recording_host();
  if (!findings.check(api.struct_size >= sizeof(keel_offload_api), "the table's struct_size is below ABI 0.7's") ||
      !findings.check(api.validate_config && api.create && api.destroy && api.describe && api.add_extent &&
                          api.submit_write && api.submit_read && api.wait && api.wait_all && api.counters &&
                          api.alloc_buffer && api.free_buffer,
                      "the table leaves a slot NULL; every slot of keel_offload_api is required"))
    return findings.broken;
  if (!findings.ok(api.validate_config(&host, config_json, json_path), "validate_config")) return findings.broken;

  keel_offload_create_args args{};
  args.struct_size = sizeof(args);
  args.config_json = config_json;
  args.json_path = json_path;
  void* engine = nullptr;
  if (!findings.ok(api.create(&host, &args, &engine), "create")) return findings.broken;

  keel_offload_info info{};
  info.struct_size = sizeof(info);
  findings.ok(api.describe(engine, &info), "describe");
  const uint64_t align = info.alignment_bytes;
  if (!findings.check(align > 0 && align % 4 == 0, "describe: alignment_bytes " + std::to_string(align) +
                                                        " is not a positive multiple of 4") ||
      !findings.check(info.capacity_bytes >= 8 * align, "describe: capacity_bytes below the 8 alignments this check "
                                                        "needs; configure a larger capacity")) {
    api.destroy(engine);
    return findings.broken;
  }
  findings.check(info.ideal_request_bytes > 0, "describe: ideal_request_bytes is 0");

  // Extents: "a" of 4 alignments, "b" of 2; refusals for a repeated name and an unaligned size.
  const uint64_t a_bytes = 4 * align, b_bytes = 2 * align;
  findings.ok(api.add_extent(engine, "a", a_bytes), "add_extent(\"a\")");
  findings.ok(api.add_extent(engine, "b", b_bytes), "add_extent(\"b\")");
  findings.refused([&] { return api.add_extent(engine, "a", align); }, "add_extent of a name already added");
  findings.refused([&] { return api.add_extent(engine, "c", align + 1); }, "add_extent of a size off the alignment");

  // Buffers from the engine: aligned and zero-filled.
  void* source = nullptr;
  void* back = nullptr;
  findings.ok(api.alloc_buffer(engine, a_bytes, &source), "alloc_buffer");
  findings.ok(api.alloc_buffer(engine, a_bytes, &back), "alloc_buffer");
  if (!source || !back) {
    api.destroy(engine);
    return findings.broken;
  }
  auto* src = static_cast<unsigned char*>(source);
  auto* dst = static_cast<unsigned char*>(back);
  findings.check(reinterpret_cast<uintptr_t>(source) % align == 0, "alloc_buffer: the buffer is not aligned");
  findings.check(all_zero(src, a_bytes), "alloc_buffer: the buffer is not zero-filled");
  uint64_t written = 0, read = 0, completed = 0;

  // Bytes never written read as zeros.
  std::memset(dst, 0xAB, a_bytes);
  uint64_t ticket = 0;
  if (findings.ok(api.submit_read(engine, "a", 0, dst, a_bytes, &ticket), "submit_read of a fresh extent") &&
      findings.ok(api.wait(engine, ticket), "wait")) {
    findings.check(all_zero(dst, a_bytes), "a read of bytes never written did not return zeros");
    read += a_bytes, completed++;
  }

  // Read after write; the ticket is never 0; a second wait returns KEEL_OK at once.
  fill_pattern(src, a_bytes, 1);
  if (findings.ok(api.submit_write(engine, "a", 0, src, a_bytes, &ticket), "submit_write")) {
    findings.check(ticket != 0, "submit_write returned ticket 0, which means \"no request\"");
    findings.ok(api.wait(engine, ticket), "wait");
    findings.ok(api.wait(engine, ticket), "a second wait on the same ticket");
    written += a_bytes, completed++;
  }
  if (findings.ok(api.submit_read(engine, "a", align, dst, 2 * align, &ticket), "submit_read at an offset") &&
      findings.ok(api.wait(engine, ticket), "wait")) {
    findings.check(std::memcmp(dst, src + align, 2 * align) == 0,
                   "a read of [1, 3) alignments of \"a\" differs from what was written there");
    read += 2 * align, completed++;
  }

  // Several requests in flight, then wait_all; a wait on a ticket wait_all covered returns KEEL_OK.
  fill_pattern(src, a_bytes, 2);
  uint64_t first = 0, second = 0;
  bool both = findings.ok(api.submit_write(engine, "b", 0, src, align, &first), "submit_write");
  both = findings.ok(api.submit_write(engine, "b", align, src + align, align, &second), "submit_write") && both;
  findings.check(first != second, "two requests in flight got the same ticket");
  findings.ok(api.wait_all(engine), "wait_all");
  if (both) {
    written += 2 * align, completed += 2;
    findings.ok(api.wait(engine, first), "wait on a ticket after the wait_all that covered it");
  }
  if (findings.ok(api.submit_read(engine, "b", 0, dst, b_bytes, &ticket), "submit_read") &&
      findings.ok(api.wait(engine, ticket), "wait")) {
    findings.check(std::memcmp(dst, src, b_bytes) == 0, "\"b\" read back differs from its two writes");
    read += b_bytes, completed++;
  }

  // Refusals, each with a message on this thread.
  findings.refused([&] { return api.wait(engine, 0); }, "wait(0)");
  findings.refused([&] { return api.wait(engine, ticket + 1000); }, "wait on a ticket never issued");
  findings.refused([&] { return api.submit_write(engine, "a", 1, src, align, &ticket); },
                   "submit_write at an unaligned offset");
  findings.refused([&] { return api.submit_write(engine, "a", a_bytes, src, align, &ticket); },
                   "submit_write past the extent's end");
  findings.refused([&] { return api.submit_read(engine, "missing", 0, dst, align, &ticket); },
                   "submit_read of an unknown extent");

  keel_offload_counters counters{};
  counters.struct_size = sizeof(counters);
  if (findings.ok(api.counters(engine, &counters), "counters")) {
    findings.check(counters.bytes_written == written, "counters: bytes_written is " +
                                                          std::to_string(counters.bytes_written) + "; " +
                                                          std::to_string(written) + " bytes were written");
    findings.check(counters.bytes_read == read, "counters: bytes_read is " + std::to_string(counters.bytes_read) +
                                                    "; " + std::to_string(read) + " bytes were read");
    findings.check(counters.requests_completed == completed,
                   "counters: requests_completed is " + std::to_string(counters.requests_completed) + "; " +
                       std::to_string(completed) + " requests completed");
    findings.check(counters.busy_seconds >= 0 && counters.busy_seconds < 1e9, "counters: busy_seconds is not a time");
  }

  // destroy with a request in flight: it finishes before the buffers go (the buffers are the
  // engine's own, freed by destroy after it waited).
  api.free_buffer(engine, back);
  api.submit_write(engine, "a", 0, src, a_bytes, &ticket);
  api.destroy(engine);
  return findings.broken;
}

}  // namespace keel_support::testing
