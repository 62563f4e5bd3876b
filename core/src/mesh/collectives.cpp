// The core's collectives (collectives.h), each checked so a failing comm plugin's message names
// the group.
#include "mesh/collectives.h"

#include <keel_support/common/rank_order_sum.hpp>

#include <algorithm>
#include <cstring>

#include "host/errors.h"

namespace keel {
namespace {

constexpr keel_dtype kInt32 = {KEEL_DTYPE_INT, 32, 1};

std::string on(const char* op, const CommGroup& group) { return std::string("comm ") + op + " (" + group.name + ")"; }

// A failure's message, and its status where it is a KeelError (else `code` is left as it is).
std::string message_of(std::exception_ptr failure, keel_status& code) {
  try {
    std::rethrow_exception(failure);
  } catch (const KeelError& e) {
    code = e.code;
    return e.what();
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

}  // namespace

void barrier(const CommGroup& group) {
  if (!group.alone()) check_plugin(group.comm->barrier(group.obj), on("barrier", group));
}

void rethrow_if_any_failed(const CommGroup& group, std::exception_ptr failure, keel_status code,
                           const std::string& others_message) {
  // Every rank's message ("" where it succeeded, "!" and the message where it failed): one
  // collective while none failed, as a sum would be, and on failure the means to tell a check
  // every rank failed alike (said once, by rank 0) from one rank's own.
  keel_status my_code = code;
  const std::string mine = failure ? "!" + message_of(failure, my_code) : std::string();
  const std::vector<std::string> all = gather_strings(group, mine);
  const auto failed = std::count_if(all.begin(), all.end(), [](const std::string& m) { return !m.empty(); });
  if (failed == 0) return;
  if (!group.alone() && std::all_of(all.begin(), all.end(), [&](const std::string& m) { return m == mine; }))
    throw FailedOnEveryRank(my_code, mine.substr(1), group.rank, group.size);
  if (failure) std::rethrow_exception(failure);
  throw KeelError(code, others_message);
}

double sum_in_rank_order(const CommGroup& group, double value) {
  double sum = value;
  if (!group.alone())
    check_plugin(keel_support::sum_in_rank_order_host(group.comm, group.obj, group.size, value, &sum),
                 on("all_gather", group));
  return sum;
}

std::vector<double> sum_in_rank_order(const CommGroup& group, const std::vector<double>& values) {
  if (group.alone()) return values;
  const size_t n = size_t(group.size);
  int32_t length = int32_t(values.size());
  std::vector<int32_t> lengths(n);
  check_plugin(group.comm->all_gather(group.obj, &length, lengths.data(), 1, kInt32, nullptr), on("all_gather", group));
  for (size_t r = 0; r < n; ++r)
    if (lengths[r] != length)
      throw KeelError(KEEL_ERR_INTERNAL, std::string("summing vectors over the ") + group.name + ": rank " +
                                             std::to_string(r) + " has " + std::to_string(lengths[r]) +
                                             " values, this rank " + std::to_string(length));
  std::vector<double> sum(values.size(), 0.0);
  if (values.empty()) return sum;
  // Each double as two 32-bit words, the one type every comm moves.
  std::vector<int32_t> mine(values.size() * 2), all(values.size() * 2 * n);
  std::memcpy(mine.data(), values.data(), values.size() * sizeof(double));
  check_plugin(group.comm->all_gather(group.obj, mine.data(), all.data(), mine.size(), kInt32, nullptr),
               on("all_gather", group));
  for (size_t r = 0; r < n; ++r)
    for (size_t i = 0; i < values.size(); ++i) {
      double v = 0;
      std::memcpy(&v, all.data() + (r * values.size() + i) * 2, sizeof(double));
      sum[i] += v;
    }
  return sum;
}

std::vector<std::string> gather_strings(const CommGroup& group, const std::string& mine) {
  if (group.alone()) return {mine};
  const size_t n = size_t(group.size);
  int32_t length = int32_t(mine.size());
  std::vector<int32_t> lengths(n);
  check_plugin(group.comm->all_gather(group.obj, &length, lengths.data(), 1, kInt32, nullptr), on("all_gather", group));
  const size_t words = (size_t(*std::max_element(lengths.begin(), lengths.end())) + 3) / 4;
  std::vector<int32_t> padded(words, 0), all(words * n, 0);
  std::memcpy(padded.data(), mine.data(), mine.size());
  if (words > 0)
    check_plugin(group.comm->all_gather(group.obj, padded.data(), all.data(), words, kInt32, nullptr),
                 on("all_gather", group));
  std::vector<std::string> out;
  for (size_t r = 0; r < n; ++r) out.emplace_back(reinterpret_cast<const char*>(all.data() + r * words), size_t(lengths[r]));
  return out;
}

int64_t broadcast_int64(const CommGroup& group, int64_t value, int32_t root) {
  if (group.alone()) return value;
  int32_t words[2];
  std::memcpy(words, &value, sizeof(value));
  check_plugin(group.comm->broadcast(group.obj, words, 2, kInt32, root, nullptr), on("broadcast", group));
  std::memcpy(&value, words, sizeof(value));
  return value;
}

void broadcast_floats(const CommGroup& group, std::vector<float>& values, int32_t root) {
  if (group.alone() || values.empty()) return;
  check_plugin(group.comm->broadcast(group.obj, values.data(), values.size(), keel_dtype{KEEL_DTYPE_FLOAT, 32, 1}, root,
                                     nullptr),
               on("broadcast", group));
}

keel_comm_counters comm_counters(const CommGroup& group) {
  keel_comm_counters counters{};
  counters.struct_size = sizeof(counters);
  if (group.obj) check_plugin(group.comm->counters(group.obj, &counters), on("counters", group));
  return counters;
}

}  // namespace keel
