// The "nvme" offload engine: each extent is one file, opened O_DIRECT, under a folder of this
// engine's own (keel-offload-[<owner>-]<pid>-<n>) inside the configured folder; requests are cut into
// block-size pieces as the queue takes them and run through io_uring with up to queue_depth in
// flight.
//
// One file per extent rather than one file with an allocation table: the filesystem already is
// an allocator, so there is no table to keep consistent or to fragment, a file's size is its
// extent's, and a person looking at the folder sees what is there. The cost, one descriptor per
// extent, is small for the tens to thousands of extents (layers, shards) an engine holds.
//
// Extents are fallocate()d when added: the disk space is claimed then, so a full disk fails at
// start-up and not in the middle of a step, and the unwritten blocks read back as zeros.
// The engine's folder and its files are removed when the engine is destroyed; their names hold
// the pid, so they are never mistaken for a checkpoint or for another run's files.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <keel_support/offload/offload_engine.hpp>
#include <keel_support/offload/offload_extents.hpp>
#include <keel_support/offload/offload_tickets.hpp>

namespace keel_offload {

// The io_uring ring is this engine's own asynchrony, so it implements OffloadEngine over the
// shared ticket book and extent table rather than through SyncOffloadEngine's worker threads.
using keel_support::Direction;
using keel_support::ExtentTable;
using keel_support::OffloadCounters;
using keel_support::OffloadEngine;
using keel_support::Ticket;
using keel_support::TicketBook;

class UringPump;

struct NvmeEngineConfig {
  std::string folder;                     // an existing, writable folder on a filesystem with O_DIRECT
  uint64_t capacity_bytes = 0;            // the most bytes all extents together may hold; checked against free space
  uint32_t queue_depth = 16;              // block requests in flight at once, 1..4096
  uint64_t block_bytes = uint64_t(1) << 20;  // requests are cut into pieces of this size, a multiple of 4096
  // Joins the engine's folder name (keel-offload-<owner>-<pid>-<n>) so ranks on several hosts
  // sharing one folder (their pids may coincide) never pick the same name: "rank3". Letters,
  // digits, '-' and '_' only; empty: keel-offload-<pid>-<n>.
  std::string owner;
  // Whether start-up refuses a folder with less free space than capacity_bytes. False when the
  // capacity was itself read from the free space a moment ago: other writers (ranks sharing the
  // disk, reserving their own extents at once) may have taken some since, and refusing then would
  // fail a run at random. A disk that truly fills is still refused at add_extent's fallocate.
  bool check_free_space = true;
};

class NvmeEngine final : public OffloadEngine {
 public:
  // O_DIRECT needs buffers, offsets and sizes aligned to the logical block size; 4096 covers
  // every drive in use (512e and 4Kn).
  static constexpr uint64_t kAlignmentBytes = 4096;

  // Checks the configuration and the folder (path_checks.hpp) and throws their errors.
  explicit NvmeEngine(const NvmeEngineConfig& config);
  ~NvmeEngine() override;  // finishes what is in flight, then removes the files and the folder

  const char* kind() const override { return "nvme"; }
  uint64_t alignment_bytes() const override { return kAlignmentBytes; }
  // A request this large fills every queue slot with one block by itself.
  uint64_t ideal_request_bytes() const override { return config_.block_bytes * config_.queue_depth; }
  uint64_t capacity_bytes() const override { return config_.capacity_bytes; }

  void add_extent(const std::string& name, uint64_t bytes) override;
  uint64_t extent_bytes(const std::string& name) const override;

  Ticket submit_write(const std::string& name, uint64_t offset, const void* src, uint64_t bytes) override;
  Ticket submit_read(const std::string& name, uint64_t offset, void* dst, uint64_t bytes) override;
  void wait(Ticket ticket) override;
  void wait_all() override;
  OffloadCounters counters() const override;

  // The folder this engine made for its files (inside config.folder).
  const std::string& files_folder() const { return files_folder_; }

 private:
  struct ExtentFile {
    int fd;
    std::unique_ptr<std::string> path;  // stable address: pieces in flight point at it
  };
  Ticket submit(Direction direction, const char* verb, const std::string& name, uint64_t offset, char* buffer,
                uint64_t bytes);
  void remove_files() noexcept;

  NvmeEngineConfig config_;
  std::string files_folder_;
  ExtentTable extents_;
  std::vector<ExtentFile> files_;  // by extent index
  TicketBook tickets_;
  std::unique_ptr<UringPump> pump_;
};

}  // namespace keel_offload
