// Gathering stage 3's layers on demand and ahead of use (see param_gather.hpp). A buffer is
// allocated per gather and freed at the last drop, so at most the layers in use plus one
// prefetched layer are whole at any time.
#include "param_gather.hpp"

#include <string>

#include <keel_support/model/compute_ops.hpp>

namespace keel_zero {

using keel_support::StatusError;

ParamGather::ParamGather(const keel_support::StoreLayout& layout, DataParallelGroup& group, keel_support::BackendOps backend,
                         ParamShard& shard)
    : layout_(layout), group_(group), backend_(backend), shard_(shard),
      compute_dtype_(keel_support::compute_dtype_of(backend)), layers_(layout.layers.size()) {}

ParamGather::~ParamGather() {
  // A gather still in flight writes into its buffer: complete it before the buffer goes.
  for (GatheredLayer& layer : layers_) {
    if (!layer.pending) continue;
    try {
      group_.wait(layer.pending);
    } catch (...) {
      // Destruction cannot report; the communicator's own error path (abort) covers a failure.
    }
    layer.pending = nullptr;
  }
}

void ParamGather::start_gather(int32_t layer, keel_comm_request** out_request) {
  GatheredLayer& gathered = layers_[size_t(layer)];
  const keel_support::LayerPlace& shards = layout_.layers[size_t(layer)];
  const size_t element_bytes = compute_dtype_.bits / 8;
  gathered.full = backend_.alloc_bytes(size_t(layout_.padded(layer)) * element_bytes);
  const void* send = shard_.chunk(layer);
  if (!keel_support::is_fp32(compute_dtype_)) {
    gathered.converted = backend_.alloc_bytes(size_t(shards.chunk) * element_bytes);
    KEEL_OP(backend_, convert, gathered.converted.get(), compute_dtype_, send, keel_dtype{KEEL_DTYPE_FLOAT, 32, 1},
            shards.chunk);
    send = gathered.converted.get();
  }
  group_.all_gather(send, gathered.full.get(), shards.chunk, compute_dtype_, out_request);
  if (!out_request) finished(gathered, layer);
}

// The gather has ended: its staged and converted chunks are done.
void ParamGather::finished(GatheredLayer& gathered, int32_t layer) {
  gathered.converted = keel_support::BackendBuffer();
  shard_.release(layer);
}

// Waits for the layer's gather in flight; its staged chunk is done then.
void ParamGather::finish_gather(int32_t layer) {
  GatheredLayer& gathered = layers_[size_t(layer)];
  if (!gathered.pending) return;
  keel_comm_request* request = gathered.pending;
  gathered.pending = nullptr;
  group_.wait(request);
  finished(gathered, layer);
}

void ParamGather::read_ahead(int32_t layer) {
  if (layer < 0 || size_t(layer) >= layers_.size() || layers_[size_t(layer)].full.get()) return;
  shard_.read_ahead(layer);
}

void* ParamGather::hold(int32_t layer) {
  GatheredLayer& gathered = layers_[size_t(layer)];
  if (layout_.layers[size_t(layer)].chunk > 0) {
    if (gathered.pending) {
      finish_gather(layer);
    } else if (!gathered.full.get()) {
      start_gather(layer, nullptr);
    }
  }
  ++gathered.holds;
  return gathered.full.get();
}

void ParamGather::drop(int32_t layer) {
  GatheredLayer& gathered = layers_[size_t(layer)];
  if (gathered.holds <= 0)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "release: layer " + std::to_string(layer) + " is not acquired");
  if (--gathered.holds == 0) gathered.full = keel_support::BackendBuffer();
}

void ParamGather::prefetch(int32_t layer) {
  if (layer < 0 || size_t(layer) >= layers_.size()) return;
  GatheredLayer& gathered = layers_[size_t(layer)];
  if (layout_.layers[size_t(layer)].chunk == 0 || gathered.full.get()) return;  // gathered or in flight
  start_gather(layer, &gathered.pending);
}

void ParamGather::forget_unheld(int32_t layer) {
  GatheredLayer& gathered = layers_[size_t(layer)];
  if (gathered.holds > 0) return;
  finish_gather(layer);
  shard_.release(layer);  // a chunk read ahead from the tier is stale too
  gathered.full = keel_support::BackendBuffer();
}

void ParamGather::drop_all() {
  for (size_t l = 0; l < layers_.size(); ++l) {
    finish_gather(int32_t(l));
    layers_[l].full = keel_support::BackendBuffer();
    layers_[l].holds = 0;
  }
  shard_.release_all();  // chunks read ahead: the shard is about to change
}

}  // namespace keel_zero
