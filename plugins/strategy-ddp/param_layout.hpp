// Where each parameter lives in the flat buffers (parameters, gradients and every optimizer
// state slot share one layout), and which parameters and gradient regions make up each layer.
// Pure bookkeeping over the model's spec list: no memory is touched here.
#pragma once

#include <keel/params.h>

#include <cstdint>
#include <vector>

namespace keel_ddp {

// A run of elements [begin, begin + count) in the flat buffers.
struct ElementRange {
  int64_t begin;
  int64_t count;
};

struct LayerSlots {
  std::vector<size_t> param_indices;        // into the spec list, in spec order
  // The layer's gradients as maximal contiguous runs of the flat gradient buffer: the unit a
  // data-parallel all-reduce will launch once the layer's gradients are final.
  std::vector<ElementRange> grad_regions;
};

struct ParamLayout {
  std::vector<int64_t> numel;    // per parameter, from local_shape
  std::vector<int64_t> offset;   // per parameter, in elements, spec order, no padding
  std::vector<LayerSlots> layers;
  int64_t total_elements = 0;
};

// Throws keel_support::StatusError(KEEL_ERR_INVALID_ARGUMENT) naming the bad spec.
ParamLayout build_param_layout(const keel_param_spec* specs, size_t n_specs, int32_t n_layers);

}  // namespace keel_ddp
