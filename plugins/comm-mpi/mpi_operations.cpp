// The comm.h operations on one communicator: argument checks, the MPI call (blocking under the
// watchdog, or non-blocking into a request) or the world of one's local copy, and the counters
// by comm.h's convention.
#include <climits>
#include <cstring>
#include <vector>

#include <keel_support/comm/comm_state.hpp>  // defines: checked_peer, require_buffer, checked_all_to_all_counts
#include <keel_support/common/abi_guard.hpp>

#include "mpi_communicator.hpp"
#include "mpi_dtype.hpp"

namespace keel_mpi {
namespace {

using keel_support::checked_peer;
using keel_support::require_buffer;
using keel_support::require_disjoint;
using keel_support::StatusError;

// MPI-3 counts are ints; MPI-4's large-count calls are not in the MPI libraries CI has.
int mpi_count(size_t count, size_t blocks, const char* operation) {
  if (count > static_cast<size_t>(INT_MAX) / blocks)
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, std::string(operation) + ": " + std::to_string(count * blocks) +
                                                  " elements exceed MPI's int count (2^31-1); split the buffer");
  return static_cast<int>(count);
}

// all_to_all_v's counts and displacements as MPI-3 ints, in one array: send counts, send
// displacements, recv counts, recv displacements (size each). Every one is at most its side's
// total, so the totals are what must fit.
std::vector<int> mpi_all_to_all_layout(const keel_support::AllToAllCounts& counts, int size, const char* operation) {
  for (const auto* offsets : {&counts.send_offsets, &counts.recv_offsets})
    if (offsets->back() > static_cast<size_t>(INT_MAX))
      throw StatusError(KEEL_ERR_UNIMPLEMENTED,
                        std::string(operation) + ": " + (offsets == &counts.send_offsets ? "send" : "recv") +
                            " holds " + std::to_string(offsets->back()) +
                            " elements, beyond MPI's int counts and displacements (2^31-1 = " +
                            std::to_string(INT_MAX) + "); split the exchange");
  std::vector<int> layout(4 * size_t(size));
  for (size_t p = 0; p < size_t(size); ++p) {
    layout[p] = int(counts.send_offsets[p + 1] - counts.send_offsets[p]);
    layout[size + p] = int(counts.send_offsets[p]);
    layout[2 * size + p] = int(counts.recv_offsets[p + 1] - counts.recv_offsets[p]);
    layout[3 * size + p] = int(counts.recv_offsets[p]);
  }
  return layout;
}

}  // namespace

void Communicator::all_reduce(const void* send, void* recv, size_t count, keel_dtype dtype, int32_t op,
                              keel_comm_request** out) {
  const char* name = "all_reduce";
  const ElementType type = element_type(dtype, name);
  const MPI_Op mpi_op = reduce_op(op, name, type);
  const int n = mpi_count(count, 1, name);
  const size_t bytes = count * type.bytes;
  require_buffer(send, bytes, name, "send");
  require_buffer(recv, bytes, name, "recv");
  const bool in_place = send == recv;
  if (!in_place) require_disjoint(send, bytes, recv, bytes, name);
  auto request = new_collective(name);
  if (is_local()) {
    if (!in_place && bytes > 0) std::memcpy(recv, send, bytes);
  } else {
    const void* from = in_place ? MPI_IN_PLACE : send;
    run_on_mpi(
        *request, out != nullptr, name, [&] { return MPI_Allreduce(from, recv, n, type.mpi, mpi_op, comm_); },
        [&](MPI_Request* r) { return MPI_Iallreduce(from, recv, n, type.mpi, mpi_op, comm_, r); });
  }
  counters_.count(KEEL_COMM_ALL_REDUCE, size_ > 1 ? 2 * bytes : 0);  // comm.h's convention: 2n
  complete_or_hand_out(std::move(request), out);
}

void Communicator::reduce_scatter(const void* send, void* recv, size_t count, keel_dtype dtype, int32_t op,
                                  keel_comm_request** out) {
  const char* name = "reduce_scatter";
  const ElementType type = element_type(dtype, name);
  const MPI_Op mpi_op = reduce_op(op, name, type);
  const int n = mpi_count(count, size_, name);
  const size_t block_bytes = count * type.bytes;
  require_buffer(send, block_bytes * size_, name, "send");
  require_buffer(recv, block_bytes, name, "recv");
  require_disjoint(send, block_bytes * size_, recv, block_bytes, name);
  auto request = new_collective(name);
  if (is_local()) {
    if (block_bytes > 0) std::memcpy(recv, send, block_bytes);
  } else {
    run_on_mpi(
        *request, out != nullptr, name, [&] { return MPI_Reduce_scatter_block(send, recv, n, type.mpi, mpi_op, comm_); },
        [&](MPI_Request* r) { return MPI_Ireduce_scatter_block(send, recv, n, type.mpi, mpi_op, comm_, r); });
  }
  counters_.count(KEEL_COMM_REDUCE_SCATTER, size_ > 1 ? block_bytes * size_ : 0);  // its n input bytes
  complete_or_hand_out(std::move(request), out);
}

void Communicator::all_gather(const void* send, void* recv, size_t count, keel_dtype dtype,
                              keel_comm_request** out) {
  const char* name = "all_gather";
  const ElementType type = element_type(dtype, name);
  const int n = mpi_count(count, size_, name);
  const size_t block_bytes = count * type.bytes;
  require_buffer(send, block_bytes, name, "send");
  require_buffer(recv, block_bytes * size_, name, "recv");
  require_disjoint(send, block_bytes, recv, block_bytes * size_, name);
  auto request = new_collective(name);
  if (is_local()) {
    if (block_bytes > 0) std::memcpy(recv, send, block_bytes);
  } else {
    run_on_mpi(
        *request, out != nullptr, name, [&] { return MPI_Allgather(send, n, type.mpi, recv, n, type.mpi, comm_); },
        [&](MPI_Request* r) { return MPI_Iallgather(send, n, type.mpi, recv, n, type.mpi, comm_, r); });
  }
  counters_.count(KEEL_COMM_ALL_GATHER, size_ > 1 ? block_bytes * size_ : 0);  // its n output bytes
  complete_or_hand_out(std::move(request), out);
}

void Communicator::broadcast(void* buffer, size_t count, keel_dtype dtype, int32_t root, keel_comm_request** out) {
  const char* name = "broadcast";
  const ElementType type = element_type(dtype, name);
  const int n = mpi_count(count, 1, name);
  checked_peer(root, size_, name);
  const size_t bytes = count * type.bytes;
  require_buffer(buffer, bytes, name, "buffer");
  auto request = new_collective(name);
  if (!is_local())
    run_on_mpi(
        *request, out != nullptr, name, [&] { return MPI_Bcast(buffer, n, type.mpi, root, comm_); },
        [&](MPI_Request* r) { return MPI_Ibcast(buffer, n, type.mpi, root, comm_, r); });
  // The root sends n; in a world of one it sends nothing, as all_reduce's 2n(p-1)/p is 0 there.
  counters_.count(KEEL_COMM_BROADCAST, size_ > 1 ? bytes : 0);  // n on every rank
  complete_or_hand_out(std::move(request), out);
}

void Communicator::send(const void* buffer, size_t count, keel_dtype dtype, int32_t peer, int32_t tag,
                        keel_comm_request** out) {
  const char* name = "send";
  const ElementType type = element_type(dtype, name);
  const int n = mpi_count(count, 1, name);
  checked_peer(peer, size_, name);
  check_tag(tag, name);
  const size_t bytes = count * type.bytes;
  require_buffer(buffer, bytes, name, "buffer");
  auto request = std::make_unique<keel_comm_request>();
  request->what = "send to rank " + std::to_string(peer) + " (tag " + std::to_string(tag) + ")";
  request->stalled_because = "rank " + std::to_string(peer) + " died or never called the matching recv";
  if (is_local()) mailbox_.send(buffer, bytes, tag);
  else
    run_on_mpi(
        *request, out != nullptr, name, [&] { return MPI_Send(buffer, n, type.mpi, peer, tag, comm_); },
        [&](MPI_Request* r) { return MPI_Isend(buffer, n, type.mpi, peer, tag, comm_, r); });
  counters_.count(KEEL_COMM_SEND, size_ > 1 ? bytes : 0);
  complete_or_hand_out(std::move(request), out);
}

void Communicator::recv(void* buffer, size_t count, keel_dtype dtype, int32_t peer, int32_t tag,
                        keel_comm_request** out) {
  const char* name = "recv";
  const ElementType type = element_type(dtype, name);
  const int n = mpi_count(count, 1, name);
  checked_peer(peer, size_, name);
  check_tag(tag, name);
  const size_t bytes = count * type.bytes;
  require_buffer(buffer, bytes, name, "buffer");
  auto request = std::make_unique<keel_comm_request>();
  request->what = "recv from rank " + std::to_string(peer) + " (tag " + std::to_string(tag) + ")";
  request->stalled_because = "rank " + std::to_string(peer) + " died or never called the matching send";
  if (is_local()) {
    request->local = mailbox_.receive(buffer, bytes, tag);
  } else {
    run_on_mpi(
        *request, out != nullptr, name,
        [&] { return MPI_Recv(buffer, n, type.mpi, peer, tag, comm_, MPI_STATUS_IGNORE); },
        [&](MPI_Request* r) { return MPI_Irecv(buffer, n, type.mpi, peer, tag, comm_, r); });
  }
  counters_.count(KEEL_COMM_RECV, size_ > 1 ? bytes : 0);
  complete_or_hand_out(std::move(request), out);
}

void Communicator::all_to_all_v(const void* send, const size_t* send_counts, void* recv, const size_t* recv_counts,
                                keel_dtype dtype, keel_comm_request** out) {
  const char* name = "all_to_all_v";
  const ElementType type = element_type(dtype, name);
  const auto counts = keel_support::checked_all_to_all_counts(send_counts, recv_counts, size_, rank_, type.bytes, name);
  std::vector<int> layout = mpi_all_to_all_layout(counts, size_, name);  // the world of one refuses the same
  require_buffer(send, counts.send_bytes, name, "send");
  require_buffer(recv, counts.recv_bytes, name, "recv");
  require_disjoint(send, counts.send_bytes, recv, counts.recv_bytes, name);
  auto request = new_collective(name);
  if (is_local()) {
    if (counts.send_bytes > 0) std::memcpy(recv, send, counts.send_bytes);  // its own block, checked equal
  } else {
    request->all_to_all_layout = std::move(layout);
    const int* send_n = request->all_to_all_layout.data();
    const int *send_at = send_n + size_, *recv_n = send_n + 2 * size_, *recv_at = send_n + 3 * size_;
    run_on_mpi(
        *request, out != nullptr, name,
        [&] { return MPI_Alltoallv(send, send_n, send_at, type.mpi, recv, recv_n, recv_at, type.mpi, comm_); },
        [&](MPI_Request* r) {
          return MPI_Ialltoallv(send, send_n, send_at, type.mpi, recv, recv_n, recv_at, type.mpi, comm_, r);
        });
  }
  counters_.count(KEEL_COMM_ALL_TO_ALL, counts.bytes_to_others);  // the bytes it sends to the others
  complete_or_hand_out(std::move(request), out);
}

void Communicator::barrier() {
  auto request = new_collective("barrier");
  if (!is_local())
    run_on_mpi(
        *request, false, "barrier", [&] { return MPI_Barrier(comm_); },
        [&](MPI_Request* r) { return MPI_Ibarrier(comm_, r); });
  counters_.count(KEEL_COMM_BARRIER, 0);
  complete(*request);
}

void Communicator::check_tag(int32_t tag, const char* operation) const {
  // MPI guarantees tags up to 32767 on every implementation (MPI_TAG_UB is at least that).
  if (tag < 0 || tag > 32767)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT,
                      std::string(operation) + ": tag must be in [0, 32767], found " + std::to_string(tag));
}

}  // namespace keel_mpi
