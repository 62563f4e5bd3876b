// What every communicator keeps and checks besides moving bytes, written once for the comm
// plugins (mpi, nccl) and installed for third-party ones: its host, rank and size, its counters
// (comm.h: a communicator split from another also counts for it), the rule of one thread per
// communicator at a time, and the checks of a call's peer, buffers and all_to_all_v counts, with the messages
// comm.h's callers read. A plugin's communicator class derives from CommState.
#pragma once

#include <keel/comm.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "keel_support/common/abi_guard.hpp"  // defines: StatusError

namespace keel_support {

// Calls and bytes per operation (keel_comm_counters) of one communicator and of every one split
// from it. Thread-safe: a strategy's worker thread may count on a child while the owner reads.
class CommCounters {
 public:
  CommCounters() : counted_in_{std::make_shared<Block>()} {}

  // The counters of a communicator split from this one: its own block, then this one's list
  // (shared, so the parent may be destroyed first).
  CommCounters for_split() const {
    CommCounters child;
    child.counted_in_.insert(child.counted_in_.end(), counted_in_.begin(), counted_in_.end());
    return child;
  }

  // op is a KEEL_COMM_* index, KEEL_COMM_ALL_TO_ALL included.
  void count(int op, uint64_t bytes) {
    for (const auto& block : counted_in_) block->calls[op] += 1, block->bytes[op] += bytes;
  }

  keel_comm_counters read() const {
    const Block& mine = *counted_in_.front();
    keel_comm_counters out{};
    out.struct_size = sizeof(out);
    for (int op = 0; op < KEEL_COMM_OP_COUNT; ++op) {
      out.calls[op] = mine.calls[op].load();
      out.bytes[op] = mine.bytes[op].load();
    }
    out.all_to_all_calls = mine.calls[KEEL_COMM_ALL_TO_ALL].load();  // appended in 0.19, after the arrays
    out.all_to_all_bytes = mine.bytes[KEEL_COMM_ALL_TO_ALL].load();
    return out;
  }

 private:
  static constexpr int kOpsCounted = KEEL_COMM_ALL_TO_ALL + 1;
  struct Block {
    std::atomic<uint64_t> calls[kOpsCounted]{};
    std::atomic<uint64_t> bytes[kOpsCounted]{};
  };
  std::vector<std::shared_ptr<Block>> counted_in_;  // this communicator's block first
};

// comm.h allows one thread per communicator at a time. MPI would call two unordered collectives
// on one communicator erroneous and NCCL would deadlock, so a second thread entering is refused.
class OneThreadAtATime {
 public:
  // Held for one operation; throws if another thread holds the communicator.
  class Turn {
   public:
    Turn(OneThreadAtATime& rule, const char* operation) : rule_(rule) {
      if (rule.in_use_.exchange(true, std::memory_order_acquire))
        throw StatusError(KEEL_ERR_INVALID_ARGUMENT,
                          std::string(operation) + ": another thread is using this communicator: comm.h allows one "
                          "thread per communicator at a time (give each thread its own communicator with split)");
    }
    ~Turn() { rule_.in_use_.store(false, std::memory_order_release); }
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;

   private:
    OneThreadAtATime& rule_;
  };

 private:
  std::atomic<bool> in_use_{false};
};

// The part of a communicator that is the same in every comm plugin; the plugin's class derives
// from it, sets rank_ and size_ once it has joined, and counts each call in counters_.
class CommState {
 public:
  CommState(const CommState&) = delete;
  CommState& operator=(const CommState&) = delete;

  const keel_host* host() const { return host_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  // What this communicator and every one split from it have moved (comm.h's rule).
  keel_comm_counters counters() const { return counters_.read(); }
  OneThreadAtATime& one_thread() { return one_thread_; }

 protected:
  explicit CommState(const keel_host* host) : host_(host) {}
  ~CommState() = default;

  const keel_host* host_;  // borrowed; outlives the communicator
  int rank_ = 0, size_ = 1;
  CommCounters counters_;
  OneThreadAtATime one_thread_;
};

// A peer or root rank inside a communicator of `size` ranks.
inline int checked_peer(int32_t peer, int size, const char* operation) {
  if (peer < 0 || peer >= size)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string(operation) + ": rank " + std::to_string(peer) +
                                                     " is not in this communicator of " + std::to_string(size) +
                                                     " ranks");
  return peer;
}

inline void require_buffer(const void* buffer, size_t bytes, const char* operation, const char* name) {
  if (bytes > 0 && !buffer)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string(operation) + ": " + name + " is NULL with " +
                                                     std::to_string(bytes) + " bytes to move");
}

// A collective's send and recv ranges may not overlap (all_reduce's equal ones, in place, aside).
inline void require_disjoint(const void* a, size_t a_bytes, const void* b, size_t b_bytes, const char* operation) {
  auto a_begin = reinterpret_cast<uintptr_t>(a), b_begin = reinterpret_cast<uintptr_t>(b);
  if (a_bytes > 0 && b_bytes > 0 && a_begin < b_begin + b_bytes && b_begin < a_begin + a_bytes)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string(operation) + ": send and recv overlap" +
                                                     (std::strcmp(operation, "all_reduce") == 0
                                                          ? " without being equal (equal means in place)"
                                                          : " (only all_reduce works in place)"));
}

// One all_to_all_v call's counts (comm.h), checked before anything moves: element offsets of
// each rank's block in send and recv (size + 1 entries, the last the total), and the bytes this
// rank sends to the others, which is what the counters count.
struct AllToAllCounts {
  std::vector<size_t> send_offsets, recv_offsets;
  size_t send_bytes = 0, recv_bytes = 0;
  uint64_t bytes_to_others = 0;
};

inline std::vector<size_t> checked_offsets(const size_t* counts, int size, size_t element_bytes,
                                           const char* operation, const char* name) {
  if (!counts)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string(operation) + ": " + name + " is NULL (expected " +
                                                     std::to_string(size) + " counts, one per rank)");
  std::vector<size_t> offsets(size_t(size) + 1, 0);
  const size_t limit = SIZE_MAX / element_bytes;  // elements whose bytes still fit a size_t
  for (int p = 0; p < size; ++p) {
    if (counts[p] > limit - offsets[size_t(p)])
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT,
                        std::string(operation) + ": " + name + " overflow: " + std::to_string(offsets[size_t(p)]) +
                            " elements before rank " + std::to_string(p) + " plus its " + std::to_string(counts[p]) +
                            " exceed " + std::to_string(limit) + " elements of " + std::to_string(element_bytes) +
                            " bytes (a negative count passed as size_t?)");
    offsets[size_t(p) + 1] = offsets[size_t(p)] + counts[p];
  }
  return offsets;
}

inline AllToAllCounts checked_all_to_all_counts(const size_t* send_counts, const size_t* recv_counts, int size,
                                                int rank, size_t element_bytes, const char* operation) {
  AllToAllCounts out;
  out.send_offsets = checked_offsets(send_counts, size, element_bytes, operation, "send_counts");
  out.recv_offsets = checked_offsets(recv_counts, size, element_bytes, operation, "recv_counts");
  out.send_bytes = out.send_offsets.back() * element_bytes;
  out.recv_bytes = out.recv_offsets.back() * element_bytes;
  if (send_counts[rank] != recv_counts[rank])
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT,
                      std::string(operation) + ": rank " + std::to_string(rank) + " sends itself " +
                          std::to_string(send_counts[rank]) + " elements (send_counts[" + std::to_string(rank) +
                          "]) but expects " + std::to_string(recv_counts[rank]) + " (recv_counts[" +
                          std::to_string(rank) + "]): exchange the counts first");
  out.bytes_to_others = uint64_t(out.send_bytes) - uint64_t(send_counts[rank]) * element_bytes;
  return out;
}

}  // namespace keel_support
