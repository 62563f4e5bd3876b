// The tensors that do not train (params.h KEEL_PARAM_FROZEN: the base under a LoRA fine-tune),
// held by the core instead of the strategy: each whole on every data-parallel rank, at the
// backend's compute type only, with no gradient buffer and no optimizer state. That is where a
// frozen base saves its memory: a trained tensor costs an fp32 master, a gradient and the
// optimizer's slots (18 bytes a parameter under bf16 AdamW), a frozen one its compute copy (2).
// It serves the strategy table, so a split (split_strategy.h) can put it beside the configured
// strategy: acquire gives the tensors with NULL gradients, the norm and the step have nothing to
// do, read_ and write_param convert to and from fp32 for checkpoints and Hugging Face import.
// A tensor flagged KEEL_PARAM_NF4 (QLoRA) is kept quantized instead (keel_support/common/nf4.hpp,
// about 0.52 bytes a weight): quantized on the host when written whole (a partial write gathers in
// an fp32 staging copy until the tensor is next used), dequantized by the backend into a buffer
// that lives from a layer's acquire to its release. Its scales are the strategy's own state in
// checkpoints (strategy.h 0.5): quantizing the saved, dequantized values again gives the same
// codes but not always the same second-level scales, so a resume at the same layout puts the
// saved ones back and continues bit for bit.
#pragma once

#include <keel/keel.h>

#include <cstdint>
#include <map>
#include <string>
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

  // An NF4 tensor's storage in backend memory, and its fp32 staging while partly written.
  struct Nf4Stored {
    keel_support::BackendBuffer codes, block_scales, scale_factors;
    float scale_mean = 0.0f;
    int64_t bytes = 0;
    std::vector<float> staging;  // non-empty: newer than the codes
  };
  bool is_nf4(size_t index) const { return specs_[index].flags & KEEL_PARAM_NF4; }
  void quantize_into(size_t index, const float* values);
  void flush(size_t index);
  // The tensor dequantized into `out` (numel elements of `dt`), queued on the backend.
  void dequantize(size_t index, void* out, keel_dtype dt) const;
  void write_nf4(size_t index, int64_t begin, int64_t count, const float* src);
  void read_nf4(size_t index, int64_t begin, int64_t count, float* dst);

  keel_support::BackendOps backend_;
  keel_dtype dtype_{};
  std::vector<keel_param_spec> specs_;
  std::vector<int64_t> numel_;
  std::vector<keel_support::BackendBuffer> values_;  // one per tensor, at dtype_ (empty for NF4 ones)
  std::map<size_t, Nf4Stored> nf4_;                  // the NF4 tensors, by index
  std::vector<std::string> own_state_names_;          // "nf4.<tensor>.scales", one per NF4 tensor
  // Each acquired layer's dequantized NF4 tensors and how many acquires hold them.
  struct Lease {
    int32_t holders = 0;
    std::map<size_t, keel_support::BackendBuffer> values;
  };
  std::map<int32_t, Lease> leases_;
  std::vector<std::vector<size_t>> layer_indices_;   // each layer's tensors, in spec order
  keel_device device_{};
};

}  // namespace keel
