// A transformer model's parameter list as the strategy sees it: specs sorted by layer, their
// names kept alive beside them, and where each layer's specs begin, so a layer lease can be
// handed its consecutive specs. Also a tensor-parallel piece of a spec (Megatron's split of one
// dimension into tp equal boxes). Shared by the gpt and llama models; installed for third-party
// ones.
#pragma once

#include <keel/params.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace keel_support {

// This rank's box of `spec` when dimension tp_dim is split over tp_size ranks (-1: replicated).
inline void split_for_tp(keel_param_spec& spec, int32_t tp_dim, int32_t tp_size, int32_t tp_rank) {
  spec.tp_dim = tp_dim;
  if (tp_dim < 0) return;
  const int64_t piece = spec.global_shape[tp_dim] / tp_size;
  spec.local_shape[tp_dim] = piece;
  spec.local_offset[tp_dim] = piece * tp_rank;
}

struct NamedSpec {
  std::string name;
  keel_param_spec spec;
};

class LayerSpecs {
 public:
  // `held`: this rank's specs in layer order; layers 0 .. n_layers-1 (some may hold nothing here).
  void assign(std::vector<NamedSpec> held, int32_t n_layers) {
    names_.clear();
    specs_.clear();
    for (auto& p : held) names_.push_back(std::move(p.name));
    for (size_t i = 0; i < held.size(); ++i) {
      specs_.push_back(held[i].spec);
      specs_.back().name = names_[i].c_str();  // names_ no longer grows, so the pointers stay valid
    }
    // A layer this rank does not hold starts where the next held one does: it has no specs.
    first_.assign(static_cast<size_t>(n_layers + 1), specs_.size());
    for (size_t i = specs_.size(); i-- > 0;) first_[static_cast<size_t>(specs_[i].layer)] = i;
    for (size_t layer = static_cast<size_t>(n_layers); layer-- > 0;) first_[layer] = std::min(first_[layer], first_[layer + 1]);
  }

  const std::vector<keel_param_spec>& specs() const { return specs_; }
  const std::vector<std::string>& names() const { return names_; }
  const keel_param_spec* layer(int32_t l) const { return specs_.data() + first_[static_cast<size_t>(l)]; }
  size_t layer_size(int32_t l) const { return first_[static_cast<size_t>(l) + 1] - first_[static_cast<size_t>(l)]; }

 private:
  std::vector<std::string> names_;    // storage for specs_[i].name
  std::vector<keel_param_spec> specs_;
  std::vector<size_t> first_;         // n_layers + 1 entries, the last is specs_.size()
};

}  // namespace keel_support
