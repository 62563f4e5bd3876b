// Generating tokens from a run's model: the CLI's end-of-run sample and the embedding API's
// generate calls both draw through sample_each.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "train/trainer.h"

namespace keel {

// Generates up to `max_count` tokens after `prompt`, sampling at `temperature` (0: greedy) among
// the `top_k` most likely tokens (0: all) that are also the smallest set whose probability
// reaches `top_p` (1: all). With `kv_cache`, the model's key/value cache runs each new token
// alone where the model has one (cached_decoder.h). Each token goes to `on_token` (token, index)
// as it is drawn; true stops after it, on every rank at the same token (collective: every rank
// calls, and on more than one rank every token's answer is agreed). Memory does not grow with
// max_count. Returns the count generated.
int64_t sample_each(Trainer& trainer, const std::vector<int32_t>& prompt, int64_t max_count, uint64_t seed,
                    double temperature, int32_t top_k, double top_p, bool kv_cache,
                    const std::function<bool(int32_t, int64_t)>& on_token);

}  // namespace keel
