// The tensors that do not train (params.h KEEL_PARAM_FROZEN: the base under a LoRA fine-tune),
// held by the core instead of the strategy: each whole on every data-parallel rank, at the
// backend's compute type only, with no gradient buffer and no optimizer state. That is where a
// frozen base saves its memory: a trained tensor costs an fp32 master, a gradient and the
// optimizer's slots (18 bytes a parameter under bf16 AdamW), a frozen one its compute copy (2).
// It serves the strategy table, so a split (split_strategy.h) can put it beside the configured
// strategy: acquire gives the tensors with NULL gradients, the norm and the step have nothing to
// do, read_ and write_param convert to and from fp32 for checkpoints and Hugging Face import.
#pragma once

#include <keel/keel.h>

#include <cstdint>
#include <vector>

#include <keel_support/common/backend_buffer.hpp>
#include <keel_support/common/backend_ops.hpp>

namespace keel {

class FrozenParams {
 public:
  // `args`: the create args a strategy over the frozen tensors would get (backend, params, layers,
  // seed); each tensor is initialised as a strategy would, through the host.
  explicit FrozenParams(const keel_strategy_create_args& args);

  // The strategy table over FrozenParams objects (its destroy deletes one); static.
  static const keel_strategy_api* table();

 private:
  friend struct FrozenSlots;
  void check_index(size_t index, int64_t begin, int64_t count) const;

  keel_support::BackendOps backend_;
  keel_dtype dtype_{};
  std::vector<keel_param_spec> specs_;
  std::vector<int64_t> numel_;
  std::vector<keel_support::BackendBuffer> values_;  // one per tensor, at dtype_
  std::vector<std::vector<size_t>> layer_indices_;   // each layer's tensors, in spec order
  keel_device device_{};
};

}  // namespace keel
