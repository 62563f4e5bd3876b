// Where every element lives under ZeRO: each layer's parameters, concatenated in spec order,
// form the layer's flat region, padded with zeros to a multiple of dp_size and cut into dp_size
// equal contiguous chunks; rank r owns chunk r of every layer. Equal chunks give every
// collective equal counts on all ranks (one all_gather / reduce_scatter per layer).
// Two kinds of flat buffer share this layout:
//   full buffers:  every layer's padded region, layers one after another (stage 1/2
//                  parameters, stage 1 gradients, per-layer transient buffers);
//   shard buffers: this rank's chunk of every layer, one after another (optimizer state,
//                  stage 2/3 gradients, stage 3 parameters).
// Pure bookkeeping over the spec list: no memory is touched here.
#pragma once

#include <keel/params.h>

#include <cstdint>
#include <vector>

namespace keel_zero {

// A half-open range of elements [begin, end).
struct ElementRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t count() const { return end - begin; }
  bool empty() const { return end <= begin; }
};

struct ParamPlace {
  int32_t layer;
  int64_t numel;            // from local_shape
  int64_t offset_in_layer;  // of element 0 in the layer's flat region
};

struct LayerShards {
  std::vector<size_t> param_indices;  // into the spec list, in spec order
  int64_t numel = 0;                  // the layer's parameters, unpadded
  int64_t chunk = 0;                  // elements per rank: ceil(numel / dp_size)
  int64_t full_offset = 0;            // of the layer's padded region in a full buffer
  int64_t shard_offset = 0;           // of this rank's chunk in a shard buffer
};

struct ShardLayout {
  int32_t rank = 0;
  int32_t size = 1;
  std::vector<ParamPlace> params;
  std::vector<LayerShards> layers;
  int64_t full_elements = 0;   // Σ padded layer sizes: every full buffer's length
  int64_t shard_elements = 0;  // Σ chunks: every shard buffer's length
  int64_t max_chunk = 0;

  int64_t padded(int32_t layer) const { return layers[size_t(layer)].chunk * size; }
  // This rank's chunk of `layer`, in the layer's flat coordinates.
  ElementRange owned_chunk(int32_t layer) const;
  // The part of parameter `index` in this rank's chunk, in the parameter's own element
  // coordinates (contiguous, possibly empty).
  ElementRange owned_part(size_t index) const;
  // Element `element` of parameter `index` in a full buffer / in a shard buffer (the latter
  // only for elements inside owned_part).
  int64_t full_position(size_t index, int64_t element) const;
  int64_t shard_position(size_t index, int64_t element) const;
};

// Throws keel_support::StatusError(KEEL_ERR_INVALID_ARGUMENT) naming the bad spec.
ShardLayout build_shard_layout(const keel_param_spec* specs, size_t n_specs, int32_t n_layers, int32_t rank,
                               int32_t size);

}  // namespace keel_zero
