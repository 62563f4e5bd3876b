// The one rule for sums over ranks that every rank must agree on to the bit (the loss, the
// gradient norm, a strategy's counts): each rank's double travels as two 32-bit integer words
// through all_gather, and every rank adds the gathered values in rank order on the host. An
// fp64 all_reduce would let the communicator pick a reduction tree, so ranks could differ in
// the last bit and disagree on a clip or a skipped step; and int32 is the one element type every
// comm plugin moves. `words` holds 2 × (size + 1) words in memory the communicator reads and
// writes; `to_words(dst, src, n)` and `from_words(dst, src, n)` copy n words into and out of it
// (memcpy for host memory, a backend copy for device memory).
#pragma once

#include <keel/comm.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace keel_support {

// Returns the status of the all_gather; *sum is written only on KEEL_OK. On one rank (or with
// no communicator) the sum is the value itself and nothing is called.
template <typename ToWords, typename FromWords>
keel_status sum_in_rank_order(const keel_comm_api* comm, void* group, int32_t size, double local, int32_t* words,
                              ToWords to_words, FromWords from_words, double* sum) {
  if (!comm || !group || size <= 1) {
    *sum = local;
    return KEEL_OK;
  }
  static_assert(sizeof(double) == 2 * sizeof(int32_t), "a double travels as two 32-bit words");
  int32_t mine[2];
  std::memcpy(mine, &local, sizeof(local));
  to_words(words, mine, 2);
  const keel_status status = comm->all_gather(group, words, words + 2, 2, keel_dtype{KEEL_DTYPE_INT, 32, 1}, nullptr);
  if (status != KEEL_OK) return status;
  std::vector<double> each(size_t(size), 0.0);
  from_words(reinterpret_cast<int32_t*>(each.data()), words + 2, 2 * size);
  double total = 0.0;
  for (double value : each) total += value;
  *sum = total;
  return KEEL_OK;
}

// The host-memory form, for callers whose communicator reads host memory.
inline keel_status sum_in_rank_order_host(const keel_comm_api* comm, void* group, int32_t size, double local,
                                          double* sum) {
  std::vector<int32_t> words(2 * (size_t(size > 1 ? size : 1) + 1));
  auto copy = [](int32_t* dst, const int32_t* src, int64_t n) { std::memcpy(dst, src, size_t(n) * sizeof(int32_t)); };
  return sum_in_rank_order(comm, group, size, local, words.data(), copy, copy, sum);
}

}  // namespace keel_support
