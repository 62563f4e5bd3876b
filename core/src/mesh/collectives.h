// The core's collectives on one group of the mesh. One element-type rule, the same as the
// built-in strategies' (keel_support/common/rank_order_sum.hpp): what the core moves between ranks
// travels as 32-bit integer words (a double as two, a string padded to whole words), the one
// type every comm plugin moves, and sums are added in rank order so every rank gets the same
// bits. Only activations and logits travel as fp32. On a group this rank is alone in, each
// call is the identity. Each call is collective: every rank of the group makes it.
#pragma once

#include <keel/types.h>

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "mesh/mesh.h"

namespace keel {

void barrier(const CommGroup& group);
// Sum of one double per rank, added in rank order.
double sum_in_rank_order(const CommGroup& group, double value);
// The element-wise sum of each rank's vector (the same length on every rank: refused otherwise,
// naming both), added in rank order.
std::vector<double> sum_in_rank_order(const CommGroup& group, const std::vector<double>& values);
// Every rank's string, in rank order.
std::vector<std::string> gather_strings(const CommGroup& group, const std::string& mine);
// The group's rank-`root` value, on every rank.
int64_t broadcast_int64(const CommGroup& group, int64_t value, int32_t root);
void broadcast_floats(const CommGroup& group, std::vector<float>& values, int32_t root);
// After rank-local work that may have failed (`failure`: its exception, or null), every rank
// learns whether any rank failed: that rank rethrows its own exception, the others throw
// KeelError(code, others_message), so no rank goes on into a collective the failed one left.
// When every rank failed with the same message, each throws FailedOnEveryRank (host/errors.h)
// with it instead, which rank 0 alone prints.
void rethrow_if_any_failed(const CommGroup& group, std::exception_ptr failure, keel_status code,
                           const std::string& others_message);
// The communicator's traffic counters (zeros for a group this rank is alone in).
keel_comm_counters comm_counters(const CommGroup& group);

}  // namespace keel
