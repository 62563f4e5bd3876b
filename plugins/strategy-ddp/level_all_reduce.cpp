// The two-level all-reduce (level_all_reduce.hpp).
#include "level_all_reduce.hpp"

#include <keel/plugin.h>
#include <keel_support/common/abi_guard.hpp>

#include <algorithm>
#include <string>

namespace keel_ddp {

using keel_support::StatusError;

LevelAllReduce::LevelAllReduce(const keel_strategy_create_args& args, keel_support::BackendOps backend,
                               int64_t largest_count, uint64_t flat_below_bytes)
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
                                                     " ranks with communicators " + (inner_obj_ && outer_obj_ ? "" : "not ") +
                                                     "given, for a data-parallel group of " + std::to_string(args.dp_size));
  for (const keel_comm_api* comm : {inner_, outer_})
    if (!KEEL_HAS_SLOT(comm, reduce_scatter) || !KEEL_HAS_SLOT(comm, all_gather) || !KEEL_HAS_SLOT(comm, all_reduce))
      throw StatusError(KEEL_ERR_UNIMPLEMENTED, "the comm plugin lacks reduce_scatter, all_gather or all_reduce, which "
                                                "the two-level all-reduce needs");
  piece_ = backend.alloc_floats(std::max<int64_t>(largest_count / inner_size_, 1));
}

keel_status LevelAllReduce::all_reduce(const keel_comm_api* dp_comm, void* dp_obj, float* data, size_t count) {
  const keel_dtype fp32{KEEL_DTYPE_FLOAT, 32, 1};
  const size_t L = size_t(inner_size_);
  const size_t piece = count / L;
  if (count * sizeof(float) < flat_below_bytes_ || piece == 0)
    return dp_comm->all_reduce(dp_obj, data, data, count, fp32, KEEL_REDUCE_SUM, nullptr);
  float* mine = piece_.floats();
  if (keel_status s = inner_->reduce_scatter(inner_obj_, data, mine, piece, fp32, KEEL_REDUCE_SUM, nullptr); s != KEEL_OK)
    return s;
  if (outer_size_ > 1)
    if (keel_status s = outer_->all_reduce(outer_obj_, mine, mine, piece, fp32, KEEL_REDUCE_SUM, nullptr); s != KEEL_OK)
      return s;
  if (keel_status s = inner_->all_gather(inner_obj_, mine, data, piece, fp32, nullptr); s != KEEL_OK) return s;
  const size_t left = count - piece * L;
  if (left == 0) return KEEL_OK;
  return dp_comm->all_reduce(dp_obj, data + piece * L, data + piece * L, left, fp32, KEEL_REDUCE_SUM, nullptr);
}

}  // namespace keel_ddp
