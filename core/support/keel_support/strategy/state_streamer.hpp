// The optimizer step over arrays that live in the offload tier, pipelined like DeepSpeed's
// swapper: the store's shard positions are cut into windows of a few of the tier's ideal
// requests, and while window k is updated, window k+1 is read and window k-1 written, through
// three sets of aligned host buffers. Arrays still resident are handed to the optimizer in
// place. Each window calls the optimizer once per piece of the store's runs that falls in it:
// the same element-wise arithmetic as the resident step, so the results are the same bits.
// On a device backend each window is copied through backend staging buffers around the
// optimizer call. The buffers are made at the first step and kept for the next ones (a step
// that allocated and first-touched them each time would spend a good part of its I/O time in
// page faults).
#pragma once

#include <keel/optimizer.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "keel_support/common/backend_ops.hpp"
#include "keel_support/strategy/tier_home.hpp"

namespace keel_support {

// One run of elements for the optimizer, at the same position in every streamed array
// (stream arrays share the store's shard coordinates); resident arrays use their own position.
struct StreamRun {
  int64_t param_position = 0;
  int64_t grad_position = 0;
  int64_t state_position = 0;
  int64_t count = 0;
  bool decay = false;
};

// One array the step touches: resident (a backend address) or in the tier.
struct StreamArray {
  float* resident = nullptr;
  TierHome* tier = nullptr;
  bool written = true;  // the step changes it (parameters, state), so it goes back to the tier
};

// The optimizer on one piece: params, grads, per-slot state pointers, count, decay.
using StreamUpdate = std::function<void(float* params, float* grads, float** state, int64_t count, bool decay)>;

class StateStreamer {
 public:
  // `arrays`: params, grads, then each state slot; `elements`: the streamed arrays' length.
  // pipelined false runs each window's read, update and write back to back (for measurements).
  StateStreamer(const OffloadTier& tier, BackendOps backend, keel_device device, std::vector<StreamArray> arrays,
                int64_t elements, bool pipelined = true)
      : tier_(tier), backend_(backend), device_(device), arrays_(std::move(arrays)), elements_(elements),
        pipelined_(pipelined) {
    const uint64_t ideal = std::max<uint64_t>(tier.ideal_request_bytes(), tier.alignment());
    const uint64_t whole = tier.round_up(uint64_t(std::max<int64_t>(elements, 1)) * sizeof(float));
    window_bytes_ = std::min(std::max(tier.alignment(), tier.round_down(ideal)), whole);
    window_ = int64_t(window_bytes_ / sizeof(float));
  }

  int64_t window_elements() const { return window_; }

  // Runs `update` over every run (sorted by state position, disjoint).
  void step(const std::vector<StreamRun>& runs, const StreamUpdate& update) {
    const int64_t windows = (elements_ + window_ - 1) / window_;
    if (windows == 0) return;
    const size_t sets = pipelined_ ? 3 : 1;
    const std::vector<size_t>& streamed = streamed_;
    const bool stage_on_backend = device_.device_type != KEEL_DEVICE_CPU;
    if (buffers_.empty()) allocate(sets, stage_on_backend);
    for (size_t a : streamed) arrays_[a].tier->settle_writes();  // e.g. gradients written behind
    Buffers& buffers = buffers_;
    std::vector<BackendBuffer>& staging = staging_;
    try {
      size_t next_run = 0;
      if (pipelined_) start_reads(buffers[0], 0, streamed);
      for (int64_t k = 0; k < windows; ++k) {
        Set& set = buffers[size_t(k) % sets];
        if (!pipelined_) start_reads(set, k, streamed);
        if (pipelined_ && k + 1 < windows) start_reads(buffers[size_t(k + 1) % sets], k + 1, streamed);
        for (size_t a : streamed) tier_.wait(std::exchange(set.reads[a], 0));
        update_window(set, staging, stage_on_backend, k, runs, next_run, update, streamed);
        start_writes(set, k, streamed);
        if (!pipelined_) wait_writes(set, streamed);
      }
      for (Set& set : buffers) wait_writes(set, streamed);
    } catch (...) {
      tier_.wait_all_quietly();  // nothing may move into the buffers once they are freed or reused
      for (Set& set : buffers) {
        std::fill(set.reads.begin(), set.reads.end(), 0);
        std::fill(set.writes.begin(), set.writes.end(), 0);
      }
      throw;
    }
  }

 private:
  struct Set {
    std::vector<TierBuffer> host;  // per array; empty for resident ones
    std::vector<uint64_t> reads, writes;
  };
  using Buffers = std::vector<Set>;

  void allocate(size_t sets, bool stage_on_backend) {
    for (size_t a = 0; a < arrays_.size(); ++a)
      if (arrays_[a].tier) streamed_.push_back(a);
    buffers_.resize(sets);
    for (Set& set : buffers_) {
      set.host.resize(arrays_.size());
      set.reads.assign(arrays_.size(), 0);
      set.writes.assign(arrays_.size(), 0);
      for (size_t a : streamed_) set.host[a] = TierBuffer(tier_, window_bytes_);
    }
    staging_.resize(arrays_.size());
    if (stage_on_backend)
      for (size_t a : streamed_) staging_[a] = backend_.alloc_floats(window_);
  }

  uint64_t window_offset(int64_t k) const { return uint64_t(k) * window_bytes_; }
  int64_t window_count(int64_t k) const { return std::min(window_, elements_ - k * window_); }
  uint64_t window_span(int64_t k) const { return tier_.round_up(uint64_t(window_count(k)) * sizeof(float)); }

  // The set's buffers are reused: its previous window's writes must land first.
  void start_reads(Set& set, int64_t k, const std::vector<size_t>& streamed) {
    wait_writes(set, streamed);
    for (size_t a : streamed)
      set.reads[a] = tier_.submit_read(arrays_[a].tier->name(), window_offset(k), set.host[a].get(), window_span(k));
  }
  void start_writes(Set& set, int64_t k, const std::vector<size_t>& streamed) {
    for (size_t a : streamed)
      if (arrays_[a].written)
        set.writes[a] = tier_.submit_write(arrays_[a].tier->name(), window_offset(k), set.host[a].get(), window_span(k));
  }
  void wait_writes(Set& set, const std::vector<size_t>& streamed) {
    for (size_t a : streamed) tier_.wait(std::exchange(set.writes[a], 0));
  }

  // Every piece of the runs inside window k; `next_run` carries over to the next window.
  void update_window(Set& set, std::vector<BackendBuffer>& staging, bool stage_on_backend, int64_t k,
                     const std::vector<StreamRun>& runs, size_t& next_run, const StreamUpdate& update,
                     const std::vector<size_t>& streamed) {
    const int64_t begin = k * window_, end = begin + window_count(k);
    std::vector<float*> window(arrays_.size(), nullptr);
    for (size_t a : streamed) {
      window[a] = stage_on_backend ? staging[a].floats() : set.host[a].floats();
      if (stage_on_backend) backend_.copy(window[a], set.host[a].floats(), window_count(k), KEEL_COPY_HOST_TO_DEVICE);
    }
    auto where = [&](size_t a, int64_t run_position, int64_t state_position) {
      return arrays_[a].tier ? window[a] + (state_position - begin) : arrays_[a].resident + run_position;
    };
    float* state[KEEL_OPTIMIZER_MAX_STATE_SLOTS] = {};
    for (; next_run < runs.size(); ++next_run) {
      const StreamRun& run = runs[next_run];
      const int64_t first = std::max(begin, run.state_position);
      const int64_t last = std::min(end, run.state_position + run.count);
      if (first < last) {
        const int64_t skip = first - run.state_position;
        for (size_t a = 2; a < arrays_.size(); ++a) state[a - 2] = where(a, run.state_position + skip, first);
        update(where(0, run.param_position + skip, first), where(1, run.grad_position + skip, first), state,
               last - first, run.decay);
      }
      if (run.state_position + run.count > end) break;  // the run goes on in the next window
    }
    if (stage_on_backend)
      for (size_t a : streamed)
        if (arrays_[a].written) backend_.copy(set.host[a].floats(), window[a], window_count(k), KEEL_COPY_DEVICE_TO_HOST);
  }

  const OffloadTier& tier_;
  BackendOps backend_;
  keel_device device_;
  std::vector<StreamArray> arrays_;
  int64_t elements_;
  bool pipelined_;
  uint64_t window_bytes_ = 0;
  int64_t window_ = 0;
  std::vector<size_t> streamed_;        // the arrays in the tier
  Buffers buffers_;                     // empty until the first step
  std::vector<BackendBuffer> staging_;  // a device backend's window per streamed array
};

}  // namespace keel_support
