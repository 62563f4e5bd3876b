// The data-parallel group as the zero strategy uses it: blocking and non-blocking per-layer
// collectives on fp32 chunks (all_gather also at the compute type), plus the sum of one double
// over ranks. A group of one (no communicator, or dp_size 1) degenerates to local copies, so
// every stage runs single-rank without communication. Buffers are backend memory, which the
// communicator must be able to reach (host memory for the mpi comm plugin with the CPU backend).
#pragma once

#include <keel/comm.h>

#include <cstdint>

#include <keel_support/common/backend_ops.hpp>

namespace keel_zero {

class DataParallelGroup {
 public:
  // Checks that the communicator agrees with rank and size; comm may be NULL only for size 1.
  DataParallelGroup(const keel_comm_api* comm, void* comm_obj, int32_t rank, int32_t size, keel_support::BackendOps backend,
                    int64_t scratch_elements);

  int32_t rank() const { return rank_; }
  const keel_comm_api* comm_api() const { return comm_; }
  // A new communicator over the same ranks (collective; the caller destroys it through
  // comm_api()), for a thread of the caller's own.
  void* split_communicator();
  int32_t size() const { return size_; }

  // recv (chunk elements) = Σ over ranks of block `rank` of send (size * chunk elements).
  void reduce_scatter_sum(const float* send, float* recv, int64_t chunk);
  // recv (size * chunk elements) = every rank's chunk in rank order. Non-blocking when
  // out_request is given (NULL comes back when nothing is in flight); send must not lie in recv.
  void all_gather(const float* send, float* recv, int64_t chunk, keel_comm_request** out_request = nullptr);
  // The same for chunks of another element type (stage 3's bf16 parameter gathers).
  void all_gather(const void* send, void* recv, int64_t chunk, keel_dtype dtype, keel_comm_request** out_request);
  void wait(keel_comm_request* request);
  // all_gather where this rank's chunk already sits at its place in `full` (staged through
  // the scratch buffer, since a collective's send and recv may not overlap).
  void all_gather_in_place(float* full, int64_t chunk);
  // Σ of `local` over ranks, added in rank order: the bit-identical double on every rank.
  double sum_over_ranks(double local);

  // A working buffer of scratch_elements for the callers' per-layer staging (one user at a time).
  float* scratch() const { return scratch_.floats(); }

  // Hybrid sharding (strategy.h 0.19, parallel.dp_groups): this group is one of `replicas`
  // groups that hold the same shards; a reduced chunk is summed across them over `comm` (the
  // ranks at this rank's place in every group). Without it the group stands alone.
  void set_replicas(const keel_comm_api* comm, void* comm_obj, int32_t replicas);
  int32_t replicas() const { return replicas_; }
  int32_t total_size() const { return size_ * replicas_; }  // the ranks the mean is over
  // chunk (n fp32, backend memory) = its sum across the replicas, in place, on the calling thread.
  void sum_across_replicas(float* chunk, int64_t n);
  // A new communicator over the replicas (collective across them), for a thread of the caller's
  // own; the caller destroys it through replicas_api(). NULL without replicas.
  void* split_replicas_communicator();
  const keel_comm_api* replicas_api() const { return replicas_comm_; }

 private:
  const keel_comm_api* comm_;
  void* comm_obj_;
  int32_t rank_;
  int32_t size_;
  keel_support::BackendOps backend_;
  keel_support::BackendBuffer scratch_;
  keel_support::BackendBuffer sum_words_;  // sum_over_ranks' send and receive words
  const keel_comm_api* replicas_comm_ = nullptr;
  void* replicas_obj_ = nullptr;
  int32_t replicas_ = 1;
};

}  // namespace keel_zero
