// Expert parallelism's exchange as a model or strategy asks for it: this rank knows how many
// elements it sends each peer (its tokens routed to their experts), and comm.h's all_to_all_v
// also needs how many it receives from each. all_to_all_with_counts does both in one call: an
// all_to_all_v of the counts (each as two int32 words, a type every comm moves), then the
// payload into a buffer the caller allocates once the total is known. The way back is
// all_to_all_v with the two count vectors swapped. A rank that sends and receives nothing still
// calls, as every collective asks.
#pragma once

#include <keel/comm.h>
#include <keel/plugin.h>  // defines: KEEL_HAS_SLOT

#include <cstdint>
#include <string>
#include <vector>

#include "keel_support/common/abi_guard.hpp"      // defines: check_callee, StatusError
#include "keel_support/common/backend_buffer.hpp"  // defines: BackendBuffer
#include "keel_support/common/backend_ops.hpp"     // defines: BackendOps

namespace keel_support {

// A communicator and the memory its buffers live in: a backend's (backend.api set: a device
// communicator reaches only its device, so the counts travel through backend memory too) or
// host memory (backend.api NULL).
struct AllToAllGroup {
  const keel_comm_api* api = nullptr;
  void* obj = nullptr;
  BackendOps backend;
};

// A comm built before ABI 0.19 (or bridged over one) has no all_to_all_v: refused by name, for `who`.
inline void require_all_to_all_v(const keel_comm_api* api, const char* who) {
  if (!KEEL_HAS_SLOT(api, all_to_all_v))
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, std::string(who) +
                                                  " needs the comm's all_to_all_v (appended in ABI 0.19), which this "
                                                  "comm plugin does not have; use one built against 0.19 or later");
}

inline int32_t group_size(const AllToAllGroup& group) {
  int32_t size = 0;
  check_callee(group.api->size(group.obj, &size), "comm size");
  return size;
}

// comm.h's all_to_all_v with counts already known on both sides (the way back, say); the count
// vectors hold one entry per rank of the group.
inline void all_to_all_v(const AllToAllGroup& group, const void* send, const std::vector<size_t>& send_counts,
                         void* recv, const std::vector<size_t>& recv_counts, keel_dtype dtype) {
  require_all_to_all_v(group.api, "all_to_all_v");
  const int32_t size = group_size(group);
  if (send_counts.size() != size_t(size) || recv_counts.size() != size_t(size))
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "all_to_all_v: " + std::to_string(send_counts.size()) +
                                                     " send counts and " + std::to_string(recv_counts.size()) +
                                                     " recv counts for a group of " + std::to_string(size) +
                                                     " ranks (one each per rank)");
  check_callee(group.api->all_to_all_v(group.obj, send, send_counts.data(), recv, recv_counts.data(), dtype, nullptr),
               "comm all_to_all_v");
}

// What every rank will send this one: recv_counts[p] is rank p's send_counts[this rank].
inline std::vector<size_t> exchange_counts(const AllToAllGroup& group, const std::vector<size_t>& send_counts) {
  const int32_t size = group_size(group);
  if (send_counts.size() != size_t(size))
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "exchange_counts: " + std::to_string(send_counts.size()) +
                                                     " send counts for a group of " + std::to_string(size) +
                                                     " ranks (one per rank)");
  std::vector<uint32_t> words(2 * size_t(size)), received(2 * size_t(size));
  for (size_t p = 0; p < send_counts.size(); ++p) {
    words[2 * p] = uint32_t(uint64_t(send_counts[p]));  // low word, then high word
    words[2 * p + 1] = uint32_t(uint64_t(send_counts[p]) >> 32);
  }
  const std::vector<size_t> two_words_each(size_t(size), 2);
  const keel_dtype int32{KEEL_DTYPE_INT, 32, 1};
  const size_t bytes = words.size() * sizeof(uint32_t);
  if (group.backend.api) {
    BackendBuffer send_words = group.backend.alloc_bytes(bytes), recv_words = group.backend.alloc_bytes(bytes);
    group.backend.copy_bytes(send_words.get(), words.data(), bytes, KEEL_COPY_HOST_TO_DEVICE);
    all_to_all_v(group, send_words.get(), two_words_each, recv_words.get(), two_words_each, int32);
    group.backend.copy_bytes(received.data(), recv_words.get(), bytes, KEEL_COPY_DEVICE_TO_HOST);
  } else {
    all_to_all_v(group, words.data(), two_words_each, received.data(), two_words_each, int32);
  }
  std::vector<size_t> recv_counts(static_cast<size_t>(size));
  for (size_t p = 0; p < recv_counts.size(); ++p)
    recv_counts[p] = size_t(uint64_t(received[2 * p]) | uint64_t(received[2 * p + 1]) << 32);
  return recv_counts;
}

// Counts first, then the payload. allocate_recv(total_elements) returns where the received
// blocks go (rank order, contiguous; at least that many elements of dtype); it is called once,
// also for a total of zero. Returns the counts received from each rank.
template <typename AllocateRecv>
std::vector<size_t> all_to_all_with_counts(const AllToAllGroup& group, const void* send,
                                           const std::vector<size_t>& send_counts, keel_dtype dtype,
                                           AllocateRecv&& allocate_recv) {
  require_all_to_all_v(group.api, "all_to_all_with_counts");
  std::vector<size_t> recv_counts = exchange_counts(group, send_counts);
  size_t total = 0;
  for (size_t n : recv_counts) total += n;  // overflow is all_to_all_v's to refuse, with the numbers
  void* recv = allocate_recv(total);
  all_to_all_v(group, send, send_counts, recv, recv_counts, dtype);
  return recv_counts;
}

}  // namespace keel_support
