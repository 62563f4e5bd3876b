// A pipelined model's saved forward state, one entry per (micro-batch, chunk) in flight: a
// finished backward hands its entry back for the next forward of the same chunk and shape, so
// memory follows the micro-batches in flight, not those ever seen. The entry type is the model's
// (gpt's and llama's Activations); it needs the fields B, T and chunk. Installed for third-party
// models.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace keel_support {

template <class Entry>
class ActivationCache {
 public:
  using Key = std::pair<int32_t, int32_t>;  // (micro-batch, chunk)

  // The entry for this micro-batch and chunk at shape B x T: the live one when it has that shape,
  // else a spare one of that chunk and shape, else a new one (`*fresh` true: the caller sizes it).
  Entry& get(int32_t microbatch, int32_t chunk, int32_t B, int32_t T, bool* fresh) {
    *fresh = false;
    auto found = live_.find({microbatch, chunk});
    if (found != live_.end() && found->second.B == B && found->second.T == T) return found->second;
    if (found != live_.end()) live_.erase(found);  // free the old size first: peak memory is one copy
    for (auto spare = spare_.begin(); spare != spare_.end(); ++spare) {
      if (spare->chunk != chunk || spare->B != B || spare->T != T) continue;
      Entry& e = live_[{microbatch, chunk}] = std::move(*spare);
      spare_.erase(spare);
      return e;
    }
    *fresh = true;
    return live_[{microbatch, chunk}];
  }
  Entry* find(Key key) {
    auto found = live_.find(key);
    return found == live_.end() ? nullptr : &found->second;
  }
  // The entry's backward is done: it waits for the next forward of its chunk and shape.
  void recycle(Key key) {
    auto found = live_.find(key);
    if (found == live_.end()) return;
    spare_.push_back(std::move(found->second));
    live_.erase(found);
  }

 private:
  std::map<Key, Entry> live_;
  std::vector<Entry> spare_;
};

}  // namespace keel_support
