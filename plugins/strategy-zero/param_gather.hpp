// Stage 3's parameters between acquire and release: each layer's chunks all_gathered from the
// persistent parameter shard into a transient full-size buffer, held while the model uses it
// and freed when the last hold drops. With prefetch, the strategy starts the non-blocking
// gather of the next layer in the direction of travel at each acquire, and the next hold
// waits on it instead of gathering. Each layer's own chunk comes from ParamShard (resident, or
// read from the offload tier); read_ahead starts that read for a layer further along.
// The gathered layer is at the backend's compute type: under bf16 each rank converts its fp32
// master chunk once per gather and the group moves bf16, half the bytes (DeepSpeed's ZeRO-3
// gathers its fp16/bf16 copies the same way).
#pragma once

#include <keel/comm.h>

#include <vector>

#include <keel_support/common/backend_ops.hpp>
#include "dp_group.hpp"
#include "param_shard.hpp"
#include <keel_support/strategy/store_layout.hpp>

namespace keel_zero {

class ParamGather {
 public:
  // `shard` gives each layer's own chunk; it outlives this object.
  ParamGather(const keel_support::StoreLayout& layout, DataParallelGroup& group, keel_support::BackendOps backend,
              ParamShard& shard);
  ~ParamGather();
  ParamGather(const ParamGather&) = delete;
  ParamGather& operator=(const ParamGather&) = delete;

  // The layer's full padded region at the compute type (NULL for a layer without elements),
  // gathered now unless a prefetch already is; valid until the matching drop.
  void* hold(int32_t layer);
  void drop(int32_t layer);
  int32_t holds(int32_t layer) const { return layers_[size_t(layer)].holds; }
  // Starts gathering `layer` without waiting; nothing for a layer out of range, without
  // elements, already gathered or in flight.
  void prefetch(int32_t layer);
  // Completes every gather in flight and frees every buffer (before the shard changes).
  void drop_all();
  // The layer's shard changed outside a step (write_param): a gathered copy nobody holds is
  // stale, so it is completed and freed; the next hold gathers again.
  void forget_unheld(int32_t layer);
  // Starts reading the layer's chunk from the offload tier (nothing when resident, or when the
  // layer is gathered or being gathered).
  void read_ahead(int32_t layer);

 private:
  struct GatheredLayer {
    keel_support::BackendBuffer full;      // empty while not gathered
    keel_support::BackendBuffer converted; // bf16: the own chunk being sent, until the gather ends
    keel_comm_request* pending = nullptr;  // a prefetch in flight into `full`
    int32_t holds = 0;
  };
  void start_gather(int32_t layer, keel_comm_request** out_request);
  void finish_gather(int32_t layer);
  void finished(GatheredLayer& gathered, int32_t layer);

  const keel_support::StoreLayout& layout_;
  DataParallelGroup& group_;
  keel_support::BackendOps backend_;
  ParamShard& shard_;
  keel_dtype compute_dtype_;
  std::vector<GatheredLayer> layers_;
};

}  // namespace keel_zero
