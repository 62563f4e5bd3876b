// Where every element of a parameter store lives: each layer's parameters (this rank's tp
// pieces), concatenated in spec order, form the layer's flat region, padded with zeros to a
// multiple of `shards` and cut into that many equal contiguous chunks; shard rank r owns chunk
// r of every layer. With one shard (ddp, localsgd) a region is its layer's parameters, unpadded.
// Two kinds of flat array share this layout:
//   full arrays:  every layer's padded region, layers one after another;
//   shard arrays: this rank's chunk of every layer, one after another.
// Equal chunks give every collective equal counts on all ranks. Pure bookkeeping over the
// spec list: no memory is touched here.
#pragma once

#include <keel/params.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "keel_support/common/abi_guard.hpp"
#include "keel_support/strategy/param_specs.hpp"
#include "keel_support/strategy/tp_pieces.hpp"

namespace keel_support {

// A half-open range of elements [begin, end).
struct ElementRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t count() const { return end - begin; }
  bool empty() const { return end <= begin; }
};

struct ParamPlace {
  int32_t layer;
  int64_t numel;            // of this rank's piece (local_shape)
  int64_t offset_in_layer;  // of element 0 in the layer's flat region
};

struct LayerPlace {
  std::vector<size_t> param_indices;  // into the spec list, in spec order
  int64_t numel = 0;                  // the layer's parameters, unpadded
  int64_t chunk = 0;                  // elements per shard: ceil(numel / shards)
  int64_t full_offset = 0;            // of the layer's padded region in a full array
  int64_t shard_offset = 0;           // of this rank's chunk in a shard array
};

struct StoreLayout {
  int32_t rank = 0;
  int32_t size = 1;
  std::vector<ParamPlace> params;
  std::vector<LayerPlace> layers;
  int64_t full_elements = 0;   // Σ padded layer sizes: every full array's length
  int64_t shard_elements = 0;  // Σ chunks: every shard array's length
  int64_t max_chunk = 0;

  int64_t padded(int32_t layer) const { return layers[size_t(layer)].chunk * size; }
  // This rank's chunk of `layer`, in the layer's flat coordinates.
  ElementRange owned_chunk(int32_t layer) const {
    const int64_t chunk = layers[size_t(layer)].chunk;
    return {rank * chunk, (rank + 1) * chunk};
  }
  // The part of parameter `index` in this rank's chunk, in the parameter's own (piece-local)
  // element coordinates: contiguous, possibly empty.
  ElementRange owned_part(size_t index) const {
    const ParamPlace& place = params[index];
    const ElementRange chunk = owned_chunk(place.layer);
    const int64_t begin = std::max(chunk.begin, place.offset_in_layer);
    const int64_t end = std::min(chunk.end, place.offset_in_layer + place.numel);
    if (end <= begin) return {0, 0};
    return {begin - place.offset_in_layer, end - place.offset_in_layer};
  }
  // Element `element` of parameter `index` in a full array / in a shard array (the latter only
  // for elements inside owned_part).
  int64_t full_position(size_t index, int64_t element) const {
    const ParamPlace& place = params[index];
    return layers[size_t(place.layer)].full_offset + place.offset_in_layer + element;
  }
  int64_t shard_position(size_t index, int64_t element) const {
    const ParamPlace& place = params[index];
    return layers[size_t(place.layer)].shard_offset + place.offset_in_layer + element - owned_chunk(place.layer).begin;
  }
};

// Throws StatusError(KEEL_ERR_INVALID_ARGUMENT) naming the bad spec.
inline StoreLayout build_store_layout(const keel_param_spec* specs, size_t n_specs, int32_t n_layers, int32_t rank,
                                      int32_t size) {
  if (n_layers < 0) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "n_layers is negative: " + std::to_string(n_layers));
  if (n_specs > 0 && !specs) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "params is NULL but n_params > 0");
  StoreLayout layout;
  layout.rank = rank;
  layout.size = size;
  layout.layers.resize(size_t(n_layers));
  for (size_t i = 0; i < n_specs; ++i) {
    const keel_param_spec& spec = specs[i];
    if (spec.layer < 0 || spec.layer >= n_layers)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, spec_label(spec, i) + ": layer " + std::to_string(spec.layer) +
                                                       " is outside [0, " + std::to_string(n_layers) + ")");
    LayerPlace& layer = layout.layers[size_t(spec.layer)];
    const int64_t numel = checked_piece_numel(spec, i);
    layout.params.push_back({spec.layer, numel, layer.numel});
    layer.param_indices.push_back(i);
    layer.numel += numel;
  }
  for (LayerPlace& layer : layout.layers) {
    layer.chunk = (layer.numel + size - 1) / size;
    layer.full_offset = layout.full_elements;
    layer.shard_offset = layout.shard_elements;
    layout.full_elements += layer.chunk * size;
    layout.shard_elements += layer.chunk;
    layout.max_chunk = std::max(layout.max_chunk, layer.chunk);
  }
  return layout;
}

}  // namespace keel_support
