// keel-offload-bench: sequential write, then read, of one extent through the nvme engine, the
// way a caller streams shards: a few ideal-size requests outstanding, each into its own buffer.
// Prints one JSON line; benchmarks/offload_bandwidth.py runs it beside fio.
//
//   keel-offload-bench --folder DIR [--bytes N] [--queue-depth 16] [--block-bytes 1048576]
//                      [--buffers 4]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include <keel_support/offload/aligned_buffer.hpp>

#include "nvme_engine.hpp"

namespace {

struct Options {
  std::string folder;
  uint64_t bytes = uint64_t(2) << 30;
  uint32_t queue_depth = 16;
  uint64_t block_bytes = uint64_t(1) << 20;
  uint64_t buffers = 4;
};

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string key = argv[i];
    const char* value = argv[i + 1];
    if (key == "--folder") options.folder = value;
    else if (key == "--bytes") options.bytes = std::strtoull(value, nullptr, 10);
    else if (key == "--queue-depth") options.queue_depth = static_cast<uint32_t>(std::strtoul(value, nullptr, 10));
    else if (key == "--block-bytes") options.block_bytes = std::strtoull(value, nullptr, 10);
    else if (key == "--buffers") options.buffers = std::strtoull(value, nullptr, 10);
    else throw std::runtime_error("unknown option " + key);
  }
  if (options.folder.empty() || argc % 2 == 0) {
    throw std::runtime_error("usage: keel-offload-bench --folder DIR [--bytes N] [--queue-depth Q] "
                             "[--block-bytes B] [--buffers K]");
  }
  return options;
}

// Streams the whole extent in requests of `request_bytes`, at most buffers.size() outstanding.
double stream(keel_offload::NvmeEngine& engine, bool write, uint64_t extent_bytes, uint64_t request_bytes,
              std::vector<keel_support::AlignedBuffer>& buffers) {
  auto start = std::chrono::steady_clock::now();
  std::deque<keel_support::Ticket> outstanding;
  size_t next_buffer = 0;
  for (uint64_t offset = 0; offset < extent_bytes; offset += request_bytes) {
    if (outstanding.size() == buffers.size()) {
      engine.wait(outstanding.front());
      outstanding.pop_front();
    }
    uint64_t bytes = std::min(request_bytes, extent_bytes - offset);
    char* buffer = buffers[next_buffer++ % buffers.size()].data();
    outstanding.push_back(write ? engine.submit_write("bench", offset, buffer, bytes)
                                : engine.submit_read("bench", offset, buffer, bytes));
  }
  engine.wait_all();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options options = parse(argc, argv);
    keel_offload::NvmeEngineConfig config;
    config.folder = options.folder;
    config.capacity_bytes = options.bytes;
    config.queue_depth = options.queue_depth;
    config.block_bytes = options.block_bytes;
    keel_offload::NvmeEngine engine(config);
    engine.add_extent("bench", options.bytes);
    uint64_t request_bytes = engine.ideal_request_bytes();
    std::vector<keel_support::AlignedBuffer> buffers;
    for (uint64_t i = 0; i < options.buffers; ++i) {
      buffers.emplace_back(request_bytes, engine.alignment_bytes());
      std::memset(buffers.back().data(), static_cast<int>(0x5a + i), request_bytes);
    }
    double write_seconds = stream(engine, true, options.bytes, request_bytes, buffers);
    for (auto& buffer : buffers) std::memset(buffer.data(), 0, request_bytes);
    double read_seconds = stream(engine, false, options.bytes, request_bytes, buffers);
    // Request k goes through buffer k % buffers both ways, so each buffer reads back its fill.
    bool verified = true;
    for (uint64_t i = 0; i < buffers.size() && i * request_bytes < options.bytes; ++i) {
      for (uint64_t b = 0; b < request_bytes; ++b) verified = verified && buffers[i].data()[b] == char(0x5a + i);
    }
    auto counters = engine.counters();
    std::printf("{\"bytes\": %llu, \"request_bytes\": %llu, \"queue_depth\": %u, \"block_bytes\": %llu, "
                "\"write_seconds\": %.6f, \"read_seconds\": %.6f, \"bytes_written\": %llu, \"bytes_read\": %llu, "
                "\"busy_seconds\": %.6f, \"read_back_verified\": %s}\n",
                static_cast<unsigned long long>(options.bytes), static_cast<unsigned long long>(request_bytes),
                options.queue_depth, static_cast<unsigned long long>(options.block_bytes), write_seconds,
                read_seconds, static_cast<unsigned long long>(counters.bytes_written),
                static_cast<unsigned long long>(counters.bytes_read), counters.busy_seconds,
                verified ? "true" : "false");
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "keel-offload-bench: %s\n", error.what());
    return 1;
  }
}
