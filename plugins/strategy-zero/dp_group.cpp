// Per-layer collectives over the data-parallel group (see dp_group.hpp). sum_over_ranks takes
// the core's one rule for sums over ranks (keel_support/common/rank_order_sum.hpp): bit-identical on
// every rank whatever algorithm the communicator uses, and 32-bit words only.
#include "dp_group.hpp"

#include <keel/plugin.h>
#include <keel_support/common/rank_order_sum.hpp>

#include <cstring>
#include <string>
#include <vector>

namespace keel_zero {
namespace {

using keel_support::StatusError;

constexpr keel_dtype kFloat32 = {KEEL_DTYPE_FLOAT, 32, 1};

void check_comm_slots(const keel_comm_api* comm) {
  const char* missing = !KEEL_HAS_SLOT(comm, rank)             ? "rank"
                        : !KEEL_HAS_SLOT(comm, size)           ? "size"
                        : !KEEL_HAS_SLOT(comm, reduce_scatter) ? "reduce_scatter"
                        : !KEEL_HAS_SLOT(comm, all_gather)     ? "all_gather"
                        : !KEEL_HAS_SLOT(comm, wait)           ? "wait"
                                                               : nullptr;
  if (missing)
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, std::string("the data-parallel communicator lacks the \"") + missing +
                                                  "\" slot this strategy needs");
}

}  // namespace

DataParallelGroup::DataParallelGroup(const keel_comm_api* comm, void* comm_obj, int32_t rank, int32_t size,
                                     keel_support::BackendOps backend, int64_t scratch_elements)
    : comm_(comm), comm_obj_(comm_obj), rank_(rank), size_(size), backend_(backend) {
  if (size < 1 || rank < 0 || rank >= size)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: dp_rank " + std::to_string(rank) + " is outside a group of " +
                                                     std::to_string(size) + " (dp_size)");
  if (!comm && size > 1)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: dp_size is " + std::to_string(size) +
                                                     " but dp_comm is NULL; a data-parallel group needs a communicator");
  if (comm) {
    check_comm_slots(comm);
    int32_t comm_rank = -1, comm_size = -1;
    keel_support::check_callee(comm->rank(comm_obj, &comm_rank), "comm rank");
    keel_support::check_callee(comm->size(comm_obj, &comm_size), "comm size");
    if (comm_rank != rank || comm_size != size)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: dp_rank/dp_size say " + std::to_string(rank) + "/" +
                                                       std::to_string(size) + " but dp_comm is rank " +
                                                       std::to_string(comm_rank) + " of " + std::to_string(comm_size));
  }
  scratch_ = backend_.alloc_floats(scratch_elements);
  if (size > 1) sum_words_ = backend_.alloc_floats(2 * (int64_t(size) + 1));
}

void* DataParallelGroup::split_communicator() {
  if (!KEEL_HAS_SLOT(comm_, split))
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "the data-parallel communicator lacks the \"split\" slot this strategy needs");
  void* part = nullptr;
  keel_support::check_callee(comm_->split(comm_obj_, 0, rank_, &part), "comm split");
  return part;
}

void DataParallelGroup::set_replicas(const keel_comm_api* comm, void* comm_obj, int32_t replicas) {
  if (replicas < 1 || (replicas > 1 && (!comm || !comm_obj)))
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: " + std::to_string(replicas) +
                                                     " replica groups without a communicator across them");
  if (replicas > 1 && (!KEEL_HAS_SLOT(comm, all_reduce) || !KEEL_HAS_SLOT(comm, split)))
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "the outer data-parallel communicator lacks the \"all_reduce\" or "
                                              "\"split\" slot hybrid sharding needs");
  replicas_comm_ = replicas > 1 ? comm : nullptr;
  replicas_obj_ = replicas > 1 ? comm_obj : nullptr;
  replicas_ = replicas;
}

void DataParallelGroup::sum_across_replicas(float* chunk, int64_t n) {
  if (replicas_ == 1 || n == 0) return;
  keel_support::check_callee(
      replicas_comm_->all_reduce(replicas_obj_, chunk, chunk, size_t(n), kFloat32, KEEL_REDUCE_SUM, nullptr),
      "comm all_reduce across the data-parallel groups");
}

void* DataParallelGroup::split_replicas_communicator() {
  if (replicas_ == 1) return nullptr;
  void* part = nullptr;
  keel_support::check_callee(replicas_comm_->split(replicas_obj_, 0, 0, &part), "comm split (across the groups)");
  return part;
}

void DataParallelGroup::reduce_scatter_sum(const float* send, float* recv, int64_t chunk) {
  if (chunk == 0) return;
  if (size_ == 1) return backend_.copy(recv, send, chunk);
  keel_support::check_callee(comm_->reduce_scatter(comm_obj_, send, recv, size_t(chunk), kFloat32, KEEL_REDUCE_SUM, nullptr),
                             "comm reduce_scatter");
}

void DataParallelGroup::all_gather(const float* send, float* recv, int64_t chunk, keel_comm_request** out_request) {
  all_gather(send, recv, chunk, kFloat32, out_request);
}

void DataParallelGroup::all_gather(const void* send, void* recv, int64_t chunk, keel_dtype dtype,
                                   keel_comm_request** out_request) {
  if (out_request) *out_request = nullptr;
  if (chunk == 0) return;
  if (size_ == 1) return backend_.copy_bytes(recv, send, size_t(chunk) * (dtype.bits / 8), KEEL_COPY_DEVICE_TO_DEVICE);
  keel_support::check_callee(comm_->all_gather(comm_obj_, send, recv, size_t(chunk), dtype, out_request),
                             "comm all_gather");
}

void DataParallelGroup::wait(keel_comm_request* request) {
  if (request) keel_support::check_callee(comm_->wait(comm_obj_, request), "comm wait");
}

void DataParallelGroup::all_gather_in_place(float* full, int64_t chunk) {
  if (chunk == 0 || size_ == 1) return;  // one rank: its chunk is the whole layer already
  backend_.copy(scratch(), full + rank_ * chunk, chunk);
  all_gather(scratch(), full, chunk);
}

double DataParallelGroup::sum_over_ranks(double local) {
  // The core's rule for sums every rank must agree on (keel_support/common/rank_order_sum.hpp), through
  // backend memory like every other collective's buffers here.
  auto words = reinterpret_cast<int32_t*>(sum_words_.floats());
  auto to_backend = [this](int32_t* dst, const int32_t* src, int64_t n) {
    backend_.copy(reinterpret_cast<float*>(dst), reinterpret_cast<const float*>(src), n, KEEL_COPY_HOST_TO_DEVICE);
  };
  auto to_host = [this](int32_t* dst, const int32_t* src, int64_t n) {
    backend_.copy(reinterpret_cast<float*>(dst), reinterpret_cast<const float*>(src), n, KEEL_COPY_DEVICE_TO_HOST);
  };
  double sum = local;
  keel_support::check_callee(
      keel_support::sum_in_rank_order(comm_, comm_obj_, size_, local, words, to_backend, to_host, &sum),
      "comm all_gather");
  return sum;
}

}  // namespace keel_zero
