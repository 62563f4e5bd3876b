// The one place a batch is cut into a context-parallel rank's chunks (context_slice.h).
#include "train/context_slice.h"

#include <keel/keel.h>
#include <keel_support/model/ring_attention.hpp>  // defines: context_chunk

#include <string>

#include "host/errors.h"

namespace keel {

Batch context_slice(const Batch& batch, int32_t cp_rank, int32_t cp) {
  if (cp == 1) return batch;
  const int64_t B = batch.batch, T = batch.seq_len;
  if (T % (2 * int64_t(cp)) != 0)
    throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "parallel.cp " + std::to_string(cp) + ": a sequence of " +
                                                   std::to_string(T) + " tokens does not divide into 2 × cp = " +
                                                   std::to_string(2 * cp) + " equal chunks");
  if (!batch.positions.empty())
    throw KeelError(KEEL_ERR_INVALID_CONFIG, "parallel.cp " + std::to_string(cp) + ": the data is packed (several "
                                                 "documents a sample), which context parallelism does not split yet; "
                                                 "prepare it unpacked, or run at parallel.cp 1");
  const int64_t Tc = T / (2 * cp);
  Batch out;
  out.batch = int32_t(2 * B);
  out.seq_len = int32_t(Tc);
  const bool targets = !batch.targets.empty();
  for (int32_t which = 0; which < 2; ++which) {
    const int64_t first = keel_support::context_chunk(cp_rank, cp, which) * Tc;
    for (int64_t b = 0; b < B; ++b) {
      const auto from = batch.tokens.begin() + b * T + first;
      out.tokens.insert(out.tokens.end(), from, from + Tc);
      if (targets) {
        const auto at = batch.targets.begin() + b * T + first;
        out.targets.insert(out.targets.end(), at, at + Tc);
      }
      for (int64_t t = 0; t < Tc; ++t) out.positions.push_back(int32_t(first + t));
    }
  }
  return out;
}

}  // namespace keel
