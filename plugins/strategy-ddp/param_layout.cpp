// Builds the flat layout from the spec list (see param_layout.hpp) and checks each spec's
// layer and shape, since every later offset depends on them.
#include "param_layout.hpp"

#include <keel_support/abi_guard.hpp>
#include <keel_support/param_specs.hpp>
#include <keel_support/tp_pieces.hpp>

#include <string>

namespace keel_ddp {
namespace {

using keel_support::spec_label;
using keel_support::StatusError;


void append_grad_region(std::vector<ElementRange>& regions, int64_t begin, int64_t count) {
  if (count == 0) return;
  if (!regions.empty() && regions.back().begin + regions.back().count == begin)
    regions.back().count += count;
  else
    regions.push_back({begin, count});
}

}  // namespace

ParamLayout build_param_layout(const keel_param_spec* specs, size_t n_specs, int32_t n_layers) {
  if (n_layers < 0) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "n_layers is negative: " + std::to_string(n_layers));
  if (n_specs > 0 && !specs) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "params is NULL but n_params > 0");
  ParamLayout layout;
  layout.layers.resize(static_cast<size_t>(n_layers));
  for (size_t i = 0; i < n_specs; ++i) {
    const keel_param_spec& spec = specs[i];
    if (spec.layer < 0 || spec.layer >= n_layers)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, spec_label(spec, i) + ": layer " + std::to_string(spec.layer) +
                                                       " is outside [0, " + std::to_string(n_layers) + ")");
    const int64_t numel = keel_support::checked_piece_numel(spec, i);
    layout.numel.push_back(numel);
    layout.offset.push_back(layout.total_elements);
    LayerSlots& layer = layout.layers[static_cast<size_t>(spec.layer)];
    layer.param_indices.push_back(i);
    append_grad_region(layer.grad_regions, layout.total_elements, numel);
    layout.total_elements += numel;
  }
  return layout;
}

}  // namespace keel_ddp
