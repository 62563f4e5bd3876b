// An all-reduce over the data-parallel group's two levels (strategy.h 0.19 dp_inner and
// dp_outer, parallel.dp_groups): the buffer is reduce-scattered inside the inner group (one
// host's or one site's ranks), its pieces all-reduced across the groups, and gathered back
// inside, so only 1/L of it (L ranks per group) crosses between groups from each rank, where a
// flat all-reduce may cross with all of it. Buffers below a size go flat: for small messages the
// comm library's own all-reduce (a latency-optimal one) beats three collectives. The leftover
// count % L elements go flat too. ddp reduces its gradient buckets with it (on its communication
// thread), diloco its parameters at each outer step across sites; one thread at a time.
#pragma once

#include <keel/comm.h>
#include <keel/plugin.h>
#include <keel/strategy.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "keel_support/common/abi_guard.hpp"
#include "keel_support/common/backend_ops.hpp"

namespace keel_support {

class LevelAllReduce {
 public:
  // Whether the create args carry the dp group's levels (0.19, parallel.dp_groups).
  static bool given(const keel_strategy_create_args& args) {
    return args.struct_size >= KEEL_STRUCT_SIZE(keel_strategy_create_args, dp_outer_size) &&
           args.dp_inner_comm_obj != nullptr;
  }

  // `largest_count`: the most elements one call reduces; `flat_below_bytes`: buffers smaller
  // than this go through the flat all-reduce.
  LevelAllReduce(const keel_strategy_create_args& args, BackendOps backend, int64_t largest_count,
                 uint64_t flat_below_bytes)
      : inner_(args.dp_inner_comm),
        inner_obj_(args.dp_inner_comm_obj),
        inner_size_(args.dp_inner_size),
        outer_(args.dp_outer_comm),
        outer_obj_(args.dp_outer_comm_obj),
        outer_size_(args.dp_outer_size),
        flat_below_bytes_(flat_below_bytes) {
    if (!inner_ || !inner_obj_ || !outer_ || !outer_obj_ || inner_size_ < 1 || outer_size_ < 1 ||
        int64_t(inner_size_) * outer_size_ != args.dp_size)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: the data-parallel levels are " +
                                                       std::to_string(inner_size_) + " x " + std::to_string(outer_size_) +
                                                       " ranks with communicators " +
                                                       (inner_obj_ && outer_obj_ ? "" : "not ") + "given, for a " +
                                                       "data-parallel group of " + std::to_string(args.dp_size));
    for (const keel_comm_api* comm : {inner_, outer_})
      if (!KEEL_HAS_SLOT(comm, reduce_scatter) || !KEEL_HAS_SLOT(comm, all_gather) || !KEEL_HAS_SLOT(comm, all_reduce))
        throw StatusError(KEEL_ERR_UNIMPLEMENTED, "the comm plugin lacks reduce_scatter, all_gather or all_reduce, "
                                                  "which the two-level all-reduce needs");
    piece_ = backend.alloc_floats(std::max<int64_t>(largest_count / inner_size_, 1));
  }

  // data (count fp32, backend memory) = its sum over the whole dp group, in place; `dp_comm` the
  // flat group (small buffers and the leftover). Returns the first failing call's status.
  keel_status all_reduce(const keel_comm_api* dp_comm, void* dp_obj, float* data, size_t count) {
    const keel_dtype fp32{KEEL_DTYPE_FLOAT, 32, 1};
    const size_t L = size_t(inner_size_);
    const size_t piece = count / L;
    if (count * sizeof(float) < flat_below_bytes_ || piece == 0)
      return dp_comm->all_reduce(dp_obj, data, data, count, fp32, KEEL_REDUCE_SUM, nullptr);
    float* mine = piece_.floats();
    if (keel_status s = inner_->reduce_scatter(inner_obj_, data, mine, piece, fp32, KEEL_REDUCE_SUM, nullptr);
        s != KEEL_OK)
      return s;
    if (outer_size_ > 1)
      if (keel_status s = outer_->all_reduce(outer_obj_, mine, mine, piece, fp32, KEEL_REDUCE_SUM, nullptr);
          s != KEEL_OK)
        return s;
    if (keel_status s = inner_->all_gather(inner_obj_, mine, data, piece, fp32, nullptr); s != KEEL_OK) return s;
    const size_t left = count - piece * L;
    if (left == 0) return KEEL_OK;
    return dp_comm->all_reduce(dp_obj, data + piece * L, data + piece * L, left, fp32, KEEL_REDUCE_SUM, nullptr);
  }

  int32_t inner_size() const { return inner_size_; }
  int32_t outer_size() const { return outer_size_; }
  const keel_comm_api* inner_comm() const { return inner_; }
  void* inner_obj() const { return inner_obj_; }

 private:
  const keel_comm_api* inner_;
  void* inner_obj_;
  int32_t inner_size_;
  const keel_comm_api* outer_;
  void* outer_obj_;
  int32_t outer_size_;
  uint64_t flat_below_bytes_;
  BackendBuffer piece_;  // this rank's piece of a buffer: largest_count / inner_size fp32
};

}  // namespace keel_support
