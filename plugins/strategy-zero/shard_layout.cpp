// Builds the per-layer chunk layout (see shard_layout.hpp) and checks each spec's layer and
// shape, since every offset and every collective's count depends on them.
#include "shard_layout.hpp"

#include <keel_support/abi_guard.hpp>
#include <keel_support/param_specs.hpp>
#include <keel_support/tp_pieces.hpp>

#include <algorithm>
#include <string>

namespace keel_zero {
namespace {

using keel_support::spec_label;
using keel_support::StatusError;

}  // namespace

ElementRange ShardLayout::owned_chunk(int32_t layer) const {
  const int64_t chunk = layers[size_t(layer)].chunk;
  return {rank * chunk, (rank + 1) * chunk};
}

ElementRange ShardLayout::owned_part(size_t index) const {
  const ParamPlace& place = params[index];
  const ElementRange chunk = owned_chunk(place.layer);
  const int64_t begin = std::max(chunk.begin, place.offset_in_layer);
  const int64_t end = std::min(chunk.end, place.offset_in_layer + place.numel);
  if (end <= begin) return {0, 0};
  return {begin - place.offset_in_layer, end - place.offset_in_layer};
}

int64_t ShardLayout::full_position(size_t index, int64_t element) const {
  const ParamPlace& place = params[index];
  return layers[size_t(place.layer)].full_offset + place.offset_in_layer + element;
}

int64_t ShardLayout::shard_position(size_t index, int64_t element) const {
  const ParamPlace& place = params[index];
  return layers[size_t(place.layer)].shard_offset + place.offset_in_layer + element - owned_chunk(place.layer).begin;
}

ShardLayout build_shard_layout(const keel_param_spec* specs, size_t n_specs, int32_t n_layers, int32_t rank,
                               int32_t size) {
  if (n_layers < 0) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "n_layers is negative: " + std::to_string(n_layers));
  if (n_specs > 0 && !specs) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "params is NULL but n_params > 0");
  ShardLayout layout;
  layout.rank = rank;
  layout.size = size;
  layout.layers.resize(size_t(n_layers));
  for (size_t i = 0; i < n_specs; ++i) {
    const keel_param_spec& spec = specs[i];
    if (spec.layer < 0 || spec.layer >= n_layers)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, spec_label(spec, i) + ": layer " + std::to_string(spec.layer) +
                                                       " is outside [0, " + std::to_string(n_layers) + ")");
    LayerShards& layer = layout.layers[size_t(spec.layer)];
    const int64_t numel = keel_support::checked_piece_numel(spec, i);
    layout.params.push_back({spec.layer, numel, layer.numel});
    layer.param_indices.push_back(i);
    layer.numel += numel;
  }
  for (LayerShards& layer : layout.layers) {
    layer.chunk = (layer.numel + size - 1) / size;
    layer.full_offset = layout.full_elements;
    layer.shard_offset = layout.shard_elements;
    layout.full_elements += layer.chunk * size;
    layout.shard_elements += layer.chunk;
    layout.max_chunk = std::max(layout.max_chunk, layer.chunk);
  }
  return layout;
}

}  // namespace keel_zero
