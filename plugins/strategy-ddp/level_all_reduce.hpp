// ddp's all-reduce over the data-parallel group's two levels (strategy.h 0.19 dp_inner and
// dp_outer, parallel.dp_groups): each bucket region is reduce-scattered inside the inner group
// (one host's or one site's ranks), its pieces all-reduced across the groups, and gathered back
// inside, so only 1/L of the region (L ranks per group) crosses between groups from each rank,
// where a flat all-reduce may cross with all of it. Regions below a size go flat: for small
// messages the comm library's own all-reduce (a latency-optimal one) beats three collectives.
// The leftover count % L elements go flat too. Runs on ddp's communication thread alone.
#pragma once

#include <keel/comm.h>
#include <keel/strategy.h>

#include <cstddef>
#include <cstdint>

#include <keel_support/common/backend_ops.hpp>

namespace keel_ddp {

class LevelAllReduce {
 public:
  // `largest_count`: the most elements one call reduces (the largest bucket region);
  // `flat_below_bytes`: regions smaller than this go through the flat all-reduce.
  LevelAllReduce(const keel_strategy_create_args& args, keel_support::BackendOps backend, int64_t largest_count,
                 uint64_t flat_below_bytes);

  // data (count fp32, backend memory) = its sum over the whole dp group, in place; `dp_comm` the
  // flat group (the small regions and the leftover). Returns the first failing call's status.
  keel_status all_reduce(const keel_comm_api* dp_comm, void* dp_obj, float* data, size_t count);

  int32_t inner_size() const { return inner_size_; }
  int32_t outer_size() const { return outer_size_; }

 private:
  const keel_comm_api* inner_;
  void* inner_obj_;
  int32_t inner_size_;
  const keel_comm_api* outer_;
  void* outer_obj_;
  int32_t outer_size_;
  uint64_t flat_below_bytes_;
  keel_support::BackendBuffer piece_;  // this rank's piece of a region: largest_count / inner_size fp32
};

}  // namespace keel_ddp
