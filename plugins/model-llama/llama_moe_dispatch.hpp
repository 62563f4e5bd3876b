// Expert parallelism's token exchange for the sparse MLP (parallel.ep; docs/parallelism.md "Expert
// parallelism"). The ep ranks of a block split each sparse layer's experts, rank r holding experts
// [r·E/ep, (r+1)·E/ep). A micro-batch's (token, slot) rows, already in global expert order, reach
// their experts' ranks by all_to_all_v (the rows for one rank's experts are one contiguous block),
// after the per-expert counts; the rows received are re-sorted from (sender, expert) order into
// (expert, sender) order, so each local expert's rows stand together for the grouped matmuls; the
// results take the same way back. The backward sends the gradients along the same route. Every
// rank of the block joins every exchange, also with no rows to send or receive.
#pragma once

#include <keel/comm.h>

#include <cstdint>
#include <vector>

#include <keel_support/comm/all_to_all.hpp>       // defines: AllToAllGroup
#include <keel_support/common/backend_buffer.hpp>  // defines: BackendBuffer
#include <keel_support/model/compute_ops.hpp>     // defines: ComputeOps, Elems

namespace keel_llama {

using keel_support::Elems;

// One sparse block's exchange of one micro-batch, planned in the forward and kept for its backward.
struct ExpertRoute {
  std::vector<size_t> send_rows;      // (ep) rows this rank sends each rank of the block
  std::vector<size_t> recv_rows;      // (ep) rows each rank of the block sends this one
  std::vector<int64_t> local_counts;  // (E/ep) rows received for each local expert, from every rank
  int64_t rows = 0;                   // rows received in all
  keel_support::BackendBuffer positions_memory;
  int32_t* positions = nullptr;       // (rows) each received row's place in local-expert order
};

class ExpertDispatch {
 public:
  ExpertDispatch(const keel_support::BackendOps& backend, const keel_support::ComputeOps& ops, const keel_comm_api* comm,
                 void* comm_obj, int32_t rank, int32_t size, int64_t experts, int64_t C);

  int32_t size() const { return size_; }
  int64_t local_experts() const { return local_experts_; }
  int64_t first_expert() const { return int64_t(rank_) * local_experts_; }

  // Plans `route` from this rank's rows per expert (global order, host): exchanges the counts.
  void plan(ExpertRoute& route, const std::vector<int64_t>& counts) const;
  // Rows in global expert order here (NK, C) to the experts' ranks, where they arrive in local-expert
  // order (route.rows, C); `staging` holds route.rows rows.
  void to_experts(const ExpertRoute& route, Elems global_rows, Elems local_rows, Elems staging) const;
  // The way back: rows in local-expert order (route.rows, C) to the ranks whose tokens they are,
  // arriving in global expert order (NK, C); `staging` holds route.rows rows.
  void from_experts(const ExpertRoute& route, Elems local_rows, Elems global_rows, Elems staging) const;

 private:
  std::vector<size_t> elements(const std::vector<size_t>& rows) const;

  keel_support::BackendOps be_;
  keel_support::ComputeOps ops_;
  keel_support::AllToAllGroup group_;
  int32_t rank_, size_;
  int64_t experts_, local_experts_, C_;
  keel_support::BackendBuffer counts_memory_;  // (2·E) int32: this rank's counts, then those received
};

}  // namespace keel_llama
