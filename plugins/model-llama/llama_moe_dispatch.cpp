// The exchange of llama_moe_dispatch.hpp: counts, payload and the re-sort, on backend memory.
#include "llama_moe_dispatch.hpp"

#include <keel_support/common/backend_ops.hpp>  // defines: KEEL_OP

#include <numeric>

namespace keel_llama {


ExpertDispatch::ExpertDispatch(const keel_support::BackendOps& backend, const keel_support::ComputeOps& ops,
                               const keel_comm_api* comm, void* comm_obj, int32_t rank, int32_t size, int64_t experts,
                               int64_t C)
    : be_(backend),
      ops_(ops),
      group_{comm, comm_obj, backend},
      rank_(rank),
      size_(size),
      experts_(experts),
      local_experts_(experts / size),
      C_(C) {
  keel_support::require_all_to_all_v(comm, "the llama model's expert parallelism (parallel.ep)");
  counts_memory_ = be_.alloc_bytes(size_t(2 * experts_) * sizeof(int32_t));
}

std::vector<size_t> ExpertDispatch::elements(const std::vector<size_t>& rows) const {
  std::vector<size_t> out(rows.size());
  for (size_t p = 0; p < rows.size(); ++p) out[p] = rows[p] * size_t(C_);
  return out;
}

void ExpertDispatch::plan(ExpertRoute& route, const std::vector<int64_t>& counts) const {
  const size_t ranks = size_t(size_), El = size_t(local_experts_);
  // Each rank sends every other its rows per expert of that rank's: E/ep int32 counts to each.
  std::vector<int32_t> mine(counts.begin(), counts.end()), theirs(static_cast<size_t>(experts_));
  int32_t* send = static_cast<int32_t*>(counts_memory_.get());
  int32_t* recv = send + experts_;
  be_.copy_bytes(send, mine.data(), mine.size() * sizeof(int32_t), KEEL_COPY_HOST_TO_DEVICE);
  const std::vector<size_t> each(ranks, El);
  keel_support::all_to_all_v(group_, send, each, recv, each, keel_dtype{KEEL_DTYPE_INT, 32, 1});
  be_.copy_bytes(theirs.data(), recv, theirs.size() * sizeof(int32_t), KEEL_COPY_DEVICE_TO_HOST);
  route.send_rows.assign(ranks, 0);
  route.recv_rows.assign(ranks, 0);
  route.local_counts.assign(El, 0);
  for (size_t p = 0; p < ranks; ++p)
    for (size_t j = 0; j < El; ++j) {
      route.send_rows[p] += size_t(counts[p * El + j]);
      route.recv_rows[p] += size_t(theirs[p * El + j]);
      route.local_counts[j] += theirs[p * El + j];
    }
  route.rows = int64_t(std::accumulate(route.recv_rows.begin(), route.recv_rows.end(), size_t(0)));
  // Received row i (sender p's block, expert j within it) goes after every expert before j's rows
  // and, within j, after the rows of the senders before p.
  std::vector<int64_t> expert_start(El, 0), sender_offset(El, 0);
  for (size_t j = 1; j < El; ++j) expert_start[j] = expert_start[j - 1] + route.local_counts[j - 1];
  std::vector<int32_t> positions(static_cast<size_t>(route.rows));
  size_t i = 0;
  for (size_t p = 0; p < ranks; ++p)
    for (size_t j = 0; j < El; ++j)
      for (int32_t r = 0; r < theirs[p * El + j]; ++r) positions[i++] = int32_t(expert_start[j] + sender_offset[j]++);
  const size_t bytes = positions.size() * sizeof(int32_t);
  if (route.positions_memory.bytes() < bytes) route.positions_memory = be_.alloc_bytes(bytes);
  route.positions = static_cast<int32_t*>(route.positions_memory.get());
  if (bytes > 0) be_.copy_bytes(route.positions, positions.data(), bytes, KEEL_COPY_HOST_TO_DEVICE);
}

void ExpertDispatch::to_experts(const ExpertRoute& route, Elems global_rows, Elems local_rows, Elems staging) const {
  keel_support::all_to_all_v(group_, global_rows.get(), elements(route.send_rows), staging.get(),
                             elements(route.recv_rows), ops_.dtype());
  if (route.rows > 0)  // local_rows[positions[i]] = staging[i]
    KEEL_OP(be_, moe_permute_dt, ops_.dtype(), local_rows.get(), staging.get(), nullptr, route.positions, route.rows, 1,
            C_);
}

void ExpertDispatch::from_experts(const ExpertRoute& route, Elems local_rows, Elems global_rows, Elems staging) const {
  if (route.rows > 0)  // staging[i] = local_rows[positions[i]]
    KEEL_OP(be_, moe_unpermute_dt, ops_.dtype(), staging.get(), local_rows.get(), nullptr, route.positions, route.rows, 1,
            C_);
  keel_support::all_to_all_v(group_, staging.get(), elements(route.recv_rows), global_rows.get(),
                             elements(route.send_rows), ops_.dtype());
}

}  // namespace keel_llama
