// Sampling over the model's key/value cache (model.h 0.18), for one row: the prompt runs once,
// then each new token runs alone over the cache (cached_decoder.cpp says when it serves).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "train/plugin_instances.h"

namespace keel {

class CachedDecoder {
 public:
  // Starts the model's cache of `capacity` positions, where the model, layout and backend can
  // (capacity 0: never, every token runs the whole window).
  CachedDecoder(PluginInstances& plugins, int32_t capacity);
  ~CachedDecoder();
  CachedDecoder(const CachedDecoder&) = delete;
  CachedDecoder& operator=(const CachedDecoder&) = delete;
  // Whether the cache can give the logits after a context of this many tokens.
  bool serves(size_t context_length) const;
  // The logits (padded vocabulary) at the context's last position; the context extends the one
  // of the previous call.
  std::vector<float> last_logits(const std::vector<int32_t>& context);

 private:
  PluginInstances& plugins_;
  int32_t capacity_;
  bool usable_ = false;
  int32_t cached_ = 0;  // positions in the cache
  void* device_tokens_ = nullptr;
};

}  // namespace keel
