// Sampling tokens from a trained model (generate/sampling.h): temperature, top-k and top-p over
// the last position's logits, one counter-based uniform per token, so a seed gives the same
// tokens on every rank and every run.
#include "generate/sampling.h"

#include <algorithm>
#include <cmath>

#include "generate/cached_decoder.h"
#include "host/param_init.h"
#include "mesh/collectives.h"

namespace keel {

// Top-k, then top-p (nucleus) filtering: zeroes every weight outside the `top_k` largest (ties
// to the lower id) and outside the smallest set of those, largest first, whose share of their
// total reaches `top_p` (at least one); returns the weights left.
namespace {

double keep_most_likely(std::vector<double>& weights, int32_t top_k, double top_p) {
  std::vector<int32_t> order(weights.size());
  for (size_t v = 0; v < order.size(); ++v) order[v] = int32_t(v);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return weights[a] > weights[b]; });
  size_t keep = top_k > 0 ? std::min(order.size(), size_t(top_k)) : order.size();
  double kept_total = 0;
  for (size_t i = 0; i < keep; ++i) kept_total += weights[order[i]];
  if (top_p < 1.0) {
    double running = 0;
    for (size_t i = 0; i < keep; ++i)
      if ((running += weights[order[i]]) >= top_p * kept_total) {
        keep = i + 1;
        break;
      }
  }
  double total = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    if (i < keep) total += weights[order[i]];
    else weights[order[i]] = 0;
  }
  return total;
}

}  // namespace

int64_t sample_each(Trainer& trainer, const std::vector<int32_t>& prompt, int64_t max_count, uint64_t seed,
                    double sampling_temperature, int32_t top_k, double top_p, bool kv_cache,
                    const std::function<bool(int32_t, int64_t)>& on_token) {
  // While the context fits seq_len positions the model's key/value cache runs each new token
  // alone (cached_decoder.h). Otherwise a fixed window of seq_len tokens, left-aligned and
  // padded: causal attention makes the logits at the last real position independent of the
  // padding after it. Only the last window of the context is kept (trimmed in amortised steps),
  // so memory is bounded whatever max_count is.
  std::vector<int32_t> context = prompt.empty() ? std::vector<int32_t>{0} : prompt;
  size_t context_length = context.size();  // the whole context's, trimmed or not
  const int32_t seq_len = trainer.seq_len();
  CachedDecoder cache(trainer.plugins(), kv_cache ? seq_len : 0);
  const int32_t vocab = trainer.model_info().vocab_size, padded = trainer.model_info().padded_vocab_size;
  const double temperature = std::max(sampling_temperature, 1e-6);
  const uint64_t key = mix64(seed ^ 0x73616D706C65ull);
  int64_t i = 0;
  while (i < max_count) {
    std::vector<float> all;
    const float* row = nullptr;
    if (cache.serves(context_length)) {
      all = cache.last_logits(context);
      row = all.data();
    } else {
      const size_t keep = std::min<size_t>(context.size(), size_t(seq_len));
      std::vector<int32_t> window(context.end() - keep, context.end());
      const size_t last = window.size() - 1;
      window.resize(seq_len, 0);
      all = trainer.logits(window, 1, seq_len);
      row = all.data() + last * padded;
    }
    double max_logit = row[0];
    for (int32_t v = 1; v < vocab; ++v) max_logit = std::max<double>(max_logit, row[v]);
    std::vector<double> weights(vocab);
    double total = 0;
    for (int32_t v = 0; v < vocab; ++v) total += weights[v] = std::exp((row[v] - max_logit) / temperature);
    if ((top_k > 0 && top_k < vocab) || top_p < 1.0) total = keep_most_likely(weights, top_k, top_p);
    double pick = uniform_open01(key, uint64_t(i)) * total;
    int32_t token = vocab - 1;
    for (int32_t v = 0; v < vocab; ++v)
      if ((pick -= weights[v]) <= 0) { token = v; break; }
    context.push_back(token);
    ++context_length;
    if (!cache.serves(context_length) && context.size() >= 2 * size_t(seq_len))
      context.erase(context.begin(), context.end() - seq_len);
    bool stop = on_token(token, i++);
    if (!trainer.mesh().world.alone()) stop = sum_in_rank_order(trainer.mesh().world, stop ? 1.0 : 0.0) > 0;
    if (stop) break;
  }
  return i;
}

}  // namespace keel
