// Gradient buffers and their reduce_scatter into this rank's chunks (see grad_reduction.hpp).
// The 1/dp_size scaling runs on each reduced chunk before it is stored or added, so the stored
// value is always a mean and read_grad never shows a half-scaled sum.
#include "grad_reduction.hpp"

#include <string>

namespace keel_zero {

using keel_support::StatusError;

GradReduction::GradReduction(int32_t stage, const ShardLayout& layout, DataParallelGroup& group, BackendCalls backend)
    : stage_(stage), layout_(layout), group_(group), backend_(backend), transient_(layout.layers.size()),
      open_(layout.layers.size(), false) {
  persistent_ = backend_.alloc_floats(persistent_elements());
}

float* GradReduction::open_layer(int32_t layer) {
  if (reduced_)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT,
                      "acquire: layer " + std::to_string(layer) + " is acquired for backward after this "
                      "accumulation's gradients were reduced (grad_sq_norm or step); call zero_grads first");
  open_[size_t(layer)] = true;
  if (stage_ == 1) return resident_layer(layer);
  keel_support::BackendBuffer& buffer = transient_[size_t(layer)];
  if (!buffer.get()) buffer = backend_.alloc_floats(layout_.padded(layer));  // zero-filled
  return buffer.floats();
}

void GradReduction::close_layer(int32_t layer) {
  open_[size_t(layer)] = false;
  if (stage_ == 1) return;
  keel_support::BackendBuffer& buffer = transient_[size_t(layer)];
  const int64_t chunk = layout_.layers[size_t(layer)].chunk;
  if (chunk > 0) {
    const float* reduced = buffer.floats() + layout_.owned_chunk(layer).begin;  // one rank: its own sum
    if (group_.size() > 1) {
      group_.reduce_scatter_sum(buffer.floats(), group_.scratch(), chunk);
      backend_.scale(group_.scratch(), 1.0f / float(group_.size()), chunk);
      reduced = group_.scratch();
    }
    backend_.accumulate(owned_chunk(layer), reduced, chunk);
  }
  buffer = keel_support::BackendBuffer();
}

bool GradReduction::has_open_layer(int32_t* out_layer) const {
  for (size_t l = 0; l < open_.size(); ++l)
    if (open_[l]) {
      *out_layer = int32_t(l);
      return true;
    }
  return false;
}

float* GradReduction::resident_layer(int32_t layer) const {
  if (stage_ != 1) return nullptr;
  return persistent_.floats() + layout_.layers[size_t(layer)].full_offset;
}

void GradReduction::finish_reduction() {
  int32_t open_layer = -1;
  if (has_open_layer(&open_layer))
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "layer " + std::to_string(open_layer) +
                                                     " was acquired for backward but never released with "
                                                     "grads_final = 1; its gradients are incomplete");
  if (reduced_) return;
  reduced_ = true;
  if (stage_ != 1 || group_.size() == 1) return;  // stages 2/3 reduced at each final release
  for (size_t l = 0; l < layout_.layers.size(); ++l) {
    const int32_t layer = int32_t(l);
    const int64_t chunk = layout_.layers[l].chunk;
    if (chunk == 0) continue;
    group_.reduce_scatter_sum(resident_layer(layer), group_.scratch(), chunk);
    backend_.scale(group_.scratch(), 1.0f / float(group_.size()), chunk);
    backend_.copy(owned_chunk(layer), group_.scratch(), chunk);
  }
}

float* GradReduction::owned_chunk(int32_t layer) const {
  const LayerShards& shards = layout_.layers[size_t(layer)];
  if (stage_ == 1) return persistent_.floats() + shards.full_offset + layout_.owned_chunk(layer).begin;
  return persistent_.floats() + shards.shard_offset;
}

double GradReduction::local_sum_squares() const {
  if (stage_ != 1) return backend_.sum_squares(persistent_.floats(), layout_.shard_elements);
  double sum = 0.0;
  for (size_t l = 0; l < layout_.layers.size(); ++l)
    sum += backend_.sum_squares(owned_chunk(int32_t(l)), layout_.layers[l].chunk);
  return sum;
}

void GradReduction::zero() {
  backend_.fill_zero(persistent_.floats(), persistent_elements());
  reduced_ = false;
}

}  // namespace keel_zero
