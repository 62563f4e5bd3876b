// The comm.h operations on one communicator: argument checks, the NCCL call queued on the
// backend's stream, the event the watchdog follows, and the counters by comm.h's convention.
// keel_dtype and KEEL_REDUCE_* map to NCCL's types and ops in the one table below.
#include <algorithm>
#include <cstring>
#include <thread>

#include <keel_support/comm/comm_state.hpp>  // defines: checked_peer, require_buffer, checked_all_to_all_counts
#include <keel_support/common/abi_guard.hpp>

#include "nccl_bf16.hpp"
#include "nccl_communicator.hpp"

namespace keel_nccl {
namespace {

using keel_support::checked_peer;
using keel_support::require_buffer;
using keel_support::require_disjoint;
using keel_support::StatusError;

struct ElementType {
  ncclDataType_t nccl;
  size_t bytes;
};

// fp32, bf16, int32 and fp64: what comm.h asks of every comm plugin. bf16 is moved as is; its
// sums go through fp32 (sum_bf16_in_fp32 below).
ElementType element_type(keel_dtype dtype, const char* operation) {
  if (dtype.lanes == 1) {
    if (dtype.code == KEEL_DTYPE_FLOAT && dtype.bits == 32) return {ncclFloat32, 4};
    if (dtype.code == KEEL_DTYPE_BFLOAT && dtype.bits == 16) return {ncclBfloat16, 2};
    if (dtype.code == KEEL_DTYPE_INT && dtype.bits == 32) return {ncclInt32, 4};
    if (dtype.code == KEEL_DTYPE_FLOAT && dtype.bits == 64) return {ncclFloat64, 8};
  }
  throw StatusError(KEEL_ERR_UNIMPLEMENTED, std::string(operation) + ": dtype (code " + std::to_string(dtype.code) +
                                                ", bits " + std::to_string(dtype.bits) + ", lanes " +
                                                std::to_string(dtype.lanes) +
                                                ") is not supported; expected fp32, bf16, int32 or fp64");
}

ncclRedOp_t reduce_op(int32_t op, const char* operation) {
  if (op == KEEL_REDUCE_SUM) return ncclSum;
  if (op == KEEL_REDUCE_MAX) return ncclMax;
  throw StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string(operation) + ": op " + std::to_string(op) +
                                                   " is not KEEL_REDUCE_SUM (0) or KEEL_REDUCE_MAX (1)");
}

void check_tag(int32_t tag, const char* operation) {
  // The mpi plugin's range, so a program moves between the two; NCCL itself has no tags.
  if (tag < 0 || tag > 32767)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT,
                      std::string(operation) + ": tag must be in [0, 32767], found " + std::to_string(tag));
}

bool is_bf16_sum(const ElementType& type, ncclRedOp_t op) { return type.nccl == ncclBfloat16 && op == ncclSum; }

}  // namespace

// A bf16 SUM as comm.h asks for it (nccl_bf16.hpp): `elements` of send widened into a
// stream-ordered fp32 buffer, `reduce` run on that buffer (it returns where its fp32 result is),
// and `result_elements` of it narrowed into recv. The buffer is freed on the stream after.
template <typename Reduce>
void Communicator::sum_bf16_in_fp32(const void* send, void* recv, size_t elements, size_t result_elements,
                                    const char* name, Reduce&& reduce) {
  float* wide = nullptr;
  check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&wide), elements * sizeof(float), stream_),
             std::string(name) + ": cudaMallocAsync of the fp32 sum");
  try {
    check_cuda(widen_bf16(wide, send, elements, stream_), std::string(name) + ": widening bf16");
    const float* result = reduce(wide);
    check_cuda(narrow_to_bf16(recv, result, result_elements, stream_), std::string(name) + ": narrowing to bf16");
  } catch (...) {
    cudaFreeAsync(wide, stream_);
    throw;
  }
  check_cuda(cudaFreeAsync(wide, stream_), std::string(name) + ": cudaFreeAsync");
}

void Communicator::all_reduce(const void* send, void* recv, size_t count, keel_dtype dtype, int32_t op,
                              keel_comm_request** out) {
  const char* name = "all_reduce";
  const ElementType type = element_type(dtype, name);
  const ncclRedOp_t nccl_op = reduce_op(op, name);
  const size_t bytes = count * type.bytes;
  require_buffer(send, bytes, name, "send");
  require_buffer(recv, bytes, name, "recv");
  if (send != recv) require_disjoint(send, bytes, recv, bytes, name);
  if (is_bf16_sum(type, nccl_op)) {
    sum_bf16_in_fp32(send, recv, count, count, name, [&](float* wide) {
      check_nccl(ncclAllReduce(wide, wide, count, ncclFloat32, ncclSum, comm_, stream_), name);
      return wide;
    });
  } else {
    check_nccl(ncclAllReduce(send, recv, count, type.nccl, nccl_op, comm_, stream_), name);
  }
  queued(KEEL_COMM_ALL_REDUCE, size_ > 1 ? 2 * bytes : 0, "collective all_reduce");  // comm.h: 2n
  hand_out("collective all_reduce", out);
}

void Communicator::reduce_scatter(const void* send, void* recv, size_t count, keel_dtype dtype, int32_t op,
                                  keel_comm_request** out) {
  const char* name = "reduce_scatter";
  const ElementType type = element_type(dtype, name);
  const ncclRedOp_t nccl_op = reduce_op(op, name);
  const size_t block_bytes = count * type.bytes;
  require_buffer(send, block_bytes * size_, name, "send");
  require_buffer(recv, block_bytes, name, "recv");
  require_disjoint(send, block_bytes * size_, recv, block_bytes, name);
  if (is_bf16_sum(type, nccl_op)) {
    // In place in the fp32 buffer: NCCL takes recv == send + rank * count.
    sum_bf16_in_fp32(send, recv, count * size_, count, name, [&](float* wide) {
      float* block = wide + static_cast<size_t>(rank_) * count;
      check_nccl(ncclReduceScatter(wide, block, count, ncclFloat32, ncclSum, comm_, stream_), name);
      return block;
    });
  } else {
    check_nccl(ncclReduceScatter(send, recv, count, type.nccl, nccl_op, comm_, stream_), name);
  }
  queued(KEEL_COMM_REDUCE_SCATTER, size_ > 1 ? block_bytes * size_ : 0, "collective reduce_scatter");
  hand_out("collective reduce_scatter", out);
}

void Communicator::all_gather(const void* send, void* recv, size_t count, keel_dtype dtype, keel_comm_request** out) {
  const char* name = "all_gather";
  const ElementType type = element_type(dtype, name);
  const size_t block_bytes = count * type.bytes;
  require_buffer(send, block_bytes, name, "send");
  require_buffer(recv, block_bytes * size_, name, "recv");
  require_disjoint(send, block_bytes, recv, block_bytes * size_, name);
  check_nccl(ncclAllGather(send, recv, count, type.nccl, comm_, stream_), name);
  queued(KEEL_COMM_ALL_GATHER, size_ > 1 ? block_bytes * size_ : 0, "collective all_gather");
  hand_out("collective all_gather", out);
}

void Communicator::broadcast(void* buffer, size_t count, keel_dtype dtype, int32_t root, keel_comm_request** out) {
  const char* name = "broadcast";
  const ElementType type = element_type(dtype, name);
  checked_peer(root, size_, name);
  const size_t bytes = count * type.bytes;
  require_buffer(buffer, bytes, name, "buffer");
  check_nccl(ncclBroadcast(buffer, buffer, count, type.nccl, root, comm_, stream_), name);
  queued(KEEL_COMM_BROADCAST, size_ > 1 ? bytes : 0, "collective broadcast");  // n on every rank
  hand_out("collective broadcast", out);
}

void Communicator::send(const void* buffer, size_t count, keel_dtype dtype, int32_t peer, int32_t tag,
                        keel_comm_request** out) {
  const char* name = "send";
  const ElementType type = element_type(dtype, name);
  checked_peer(peer, size_, name);
  check_tag(tag, name);
  const size_t bytes = count * type.bytes;
  require_buffer(buffer, bytes, name, "buffer");
  const std::string what = "send to rank " + std::to_string(peer) + " (tag " + std::to_string(tag) + ")";
  if (peer == rank_) self_send(buffer, bytes, tag);
  else check_nccl(ncclSend(buffer, count, type.nccl, peer, comm_, stream_), name);
  queued(KEEL_COMM_SEND, size_ > 1 ? bytes : 0, what);
  hand_out(what, out);
}

void Communicator::recv(void* buffer, size_t count, keel_dtype dtype, int32_t peer, int32_t tag,
                        keel_comm_request** out) {
  const char* name = "recv";
  const ElementType type = element_type(dtype, name);
  checked_peer(peer, size_, name);
  check_tag(tag, name);
  const size_t bytes = count * type.bytes;
  require_buffer(buffer, bytes, name, "buffer");
  const std::string what = "recv from rank " + std::to_string(peer) + " (tag " + std::to_string(tag) + ")";
  std::shared_ptr<SelfReceive> self;
  if (peer == rank_) {
    self = self_recv(buffer, bytes, tag);
    // Blocking: completes now, or fails as a wait on it would (nothing sent, or truncated).
    if (!out) {
      wait(new keel_comm_request{what, self});
      self.reset();
    }
  } else {
    check_nccl(ncclRecv(buffer, count, type.nccl, peer, comm_, stream_), name);
  }
  queued(KEEL_COMM_RECV, size_ > 1 ? bytes : 0, what);
  if (out) *out = new keel_comm_request{what, self};
}

// Grouped point-to-point, as NCCL's own documentation builds an all-to-all: a send and a recv per
// peer with elements to move, one group, so NCCL schedules them together without deadlock. This
// rank's own block is a device copy on the stream.
void Communicator::all_to_all_v(const void* send, const size_t* send_counts, void* recv, const size_t* recv_counts,
                                keel_dtype dtype, keel_comm_request** out) {
  const char* name = "all_to_all_v";
  const ElementType type = element_type(dtype, name);
  const auto counts = keel_support::checked_all_to_all_counts(send_counts, recv_counts, size_, rank_, type.bytes, name);
  require_buffer(send, counts.send_bytes, name, "send");
  require_buffer(recv, counts.recv_bytes, name, "recv");
  require_disjoint(send, counts.send_bytes, recv, counts.recv_bytes, name);
  const auto* send_bytes = static_cast<const char*>(send);
  auto* recv_bytes = static_cast<char*>(recv);
  const size_t own = send_counts[rank_] * type.bytes;
  if (own > 0)
    check_cuda(cudaMemcpyAsync(recv_bytes + counts.recv_offsets[size_t(rank_)] * type.bytes,
                               send_bytes + counts.send_offsets[size_t(rank_)] * type.bytes, own,
                               cudaMemcpyDeviceToDevice, stream_),
               "all_to_all_v: its own block");
  // The group is always ended, also after a failed call inside it; the first failure is reported.
  ncclResult_t failed = ncclGroupStart();
  for (int p = 0; p < size_ && failed == ncclSuccess; ++p) {
    if (p == rank_) continue;
    if (send_counts[p] > 0)
      failed = ncclSend(send_bytes + counts.send_offsets[size_t(p)] * type.bytes, send_counts[p], type.nccl, p, comm_,
                        stream_);
    if (recv_counts[p] > 0 && failed == ncclSuccess)
      failed = ncclRecv(recv_bytes + counts.recv_offsets[size_t(p)] * type.bytes, recv_counts[p], type.nccl, p, comm_,
                        stream_);
  }
  const ncclResult_t ended = ncclGroupEnd();
  check_nccl(failed != ncclSuccess ? failed : ended, name);
  queued(KEEL_COMM_ALL_TO_ALL, counts.bytes_to_others, "collective all_to_all_v");  // the bytes sent to the others
  hand_out("collective all_to_all_v", out);
}

void Communicator::barrier() {
  const char* name = "barrier";
  int32_t* word = nullptr;
  check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&word), sizeof *word, stream_), "barrier: cudaMallocAsync");
  check_cuda(cudaMemsetAsync(word, 0, sizeof *word, stream_), "barrier: cudaMemsetAsync");
  check_nccl(ncclAllReduce(word, word, 1, ncclInt32, ncclSum, comm_, stream_), name);
  check_cuda(cudaFreeAsync(word, stream_), "barrier: cudaFreeAsync");
  queued(KEEL_COMM_BARRIER, 0, "barrier");
  // The host waits for the stream by polling, so the watchdog can still end a barrier that a
  // dead peer never lets finish.
  for (;;) {
    const cudaError_t state = cudaStreamQuery(stream_);
    if (state == cudaSuccess) return;
    if (state != cudaErrorNotReady) check_cuda(state, "barrier: cudaStreamQuery");
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void Communicator::self_send(const void* buffer, size_t bytes, int32_t tag) {
  auto posted = std::find_if(posted_.begin(), posted_.end(), [tag](const auto& r) { return r->tag == tag; });
  if (posted != posted_.end()) {
    SelfReceive& receive = **posted;
    if (bytes > receive.bytes)
      receive.error = "message truncated: " + std::to_string(bytes) + " bytes sent into a receive buffer of " +
                      std::to_string(receive.bytes) + " bytes";
    else if (bytes > 0)
      check_cuda(cudaMemcpyAsync(receive.buffer, buffer, bytes, cudaMemcpyDeviceToDevice, stream_), "send to itself");
    receive.done = true;
    posted_.erase(posted);
    return;
  }
  // No recv yet: a copy of the buffer as it is now, as MPI's send would take it.
  void* staged = nullptr;
  if (bytes > 0) {
    check_cuda(cudaMallocAsync(&staged, bytes, stream_), "send to itself: cudaMallocAsync");
    check_cuda(cudaMemcpyAsync(staged, buffer, bytes, cudaMemcpyDeviceToDevice, stream_), "send to itself");
  }
  unreceived_.push_back(SelfMessage{tag, staged, bytes});
}

std::shared_ptr<SelfReceive> Communicator::self_recv(void* buffer, size_t bytes, int32_t tag) {
  auto receive = std::make_shared<SelfReceive>(SelfReceive{buffer, bytes, tag, false, {}});
  auto sent = std::find_if(unreceived_.begin(), unreceived_.end(), [tag](const auto& m) { return m.tag == tag; });
  if (sent == unreceived_.end()) {
    posted_.push_back(receive);
    return receive;
  }
  if (sent->bytes > bytes)
    receive->error = "message truncated: " + std::to_string(sent->bytes) + " bytes sent into a receive buffer of " +
                     std::to_string(bytes) + " bytes";
  else if (sent->bytes > 0)
    check_cuda(cudaMemcpyAsync(buffer, sent->staged, sent->bytes, cudaMemcpyDeviceToDevice, stream_),
               "recv from itself");
  if (sent->staged) cudaFreeAsync(sent->staged, stream_);
  receive->done = true;
  unreceived_.erase(sent);
  return receive;
}

}  // namespace keel_nccl
