// Optimizer state kept packed (optimizer.h KEEL_OPTIMIZER_PACKED_STATE, ABI 0.12): one host
// buffer per owned tensor part, sized and converted by the optimizer, instead of fp32 arrays
// per element. The store asks it for the step's buffers and serves the checkpoint's reads and
// writes in the exchange form (n_state_slots fp32 values per element): a read unpacks, a write
// goes to an unpacked copy of the part that is packed again at the next step, so a checkpoint
// that writes a part in pieces never packs a half-written block.
#pragma once

#include <keel/optimizer.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "keel_support/common/abi_guard.hpp"
#include "keel_support/strategy/param_specs.hpp"
#include "keel_support/strategy/store_layout.hpp"

namespace keel_support {

// The optimizer's 0.12 flags, trusted only from a table long enough for 0.12's slots (whether
// or not they are filled): an older plugin's describe may leave that word as its padding.
inline uint32_t optimizer_flags(const keel_optimizer_api* api, const keel_optimizer_info& info) {
  if (!api || api->struct_size < offsetof(keel_optimizer_api, unpack_state) + sizeof(api->unpack_state) ||
      info.struct_size < offsetof(keel_optimizer_info, flags) + sizeof(uint32_t))
    return 0;
  return info.flags;
}

class PackedState {
 public:
  // One part per parameter with owned elements. Throws when the optimizer lacks a 0.12 slot or
  // (KEEL_OPTIMIZER_WHOLE_TENSORS) when the layout splits a tensor.
  PackedState(const keel_optimizer_api* api, void* optimizer, const keel_optimizer_info& info,
              const keel_param_spec* specs, const StoreLayout& layout, bool sharded, const std::string& label)
      : api_(api), optimizer_(optimizer), slots_(info.n_state_slots), specs_(specs) {
    if (!KEEL_HAS_SLOT(api, packed_state_bytes) || !KEEL_HAS_SLOT(api, pack_state) || !KEEL_HAS_SLOT(api, unpack_state))
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "the optimizer says its state is packed (KEEL_OPTIMIZER_PACKED_STATE) "
                                                   "but lacks packed_state_bytes, pack_state or unpack_state (ABI 0.12)");
    const bool whole = (optimizer_flags(api, info) & KEEL_OPTIMIZER_WHOLE_TENSORS) != 0;
    part_of_.assign(layout.params.size(), -1);
    for (size_t index = 0; index < layout.params.size(); ++index) {
      const keel_param_spec& spec = specs[index];
      if (whole && (sharded || spec_is_split(spec)))
        throw StatusError(KEEL_ERR_INVALID_CONFIG,
                          "the optimizer updates each tensor whole (it reduces over rows, columns or the tensor), "
                          "but " + label + spec_label(spec, size_t(index)) +
                              (sharded ? " is sharded across data-parallel ranks"
                                       : " is split across tensor-parallel ranks") +
                              " (expected parallel.strategy ddp, diloco or edit at parallel.tp 1)");
      const ElementRange owned = layout.owned_part(index);
      if (owned.empty()) continue;
      Part part;
      part.index = index;
      part.owned = owned;
      part.range = keel_optimizer_range{sizeof(keel_optimizer_range), owned.count(), &specs_[index], owned.begin};
      int64_t bytes = 0;
      check_callee(api->packed_state_bytes(optimizer, &part.range, &bytes), "optimizer packed_state_bytes");
      if (bytes < 0 || bytes > (int64_t(1) << 40))
        throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "optimizer packed_state_bytes gave " + std::to_string(bytes) +
                                                         " bytes for " + spec_label(spec, index) + " (expected 0 to 2^40)");
      part.bytes.assign(size_t(bytes), 0);  // zero bytes: the zero state of the first step
      part_of_[index] = int32_t(parts_.size());
      parts_.push_back(std::move(part));
    }
  }

  struct Part {
    size_t index;
    ElementRange owned;
    keel_optimizer_range range;
    std::vector<unsigned char> bytes;
    std::vector<float> unpacked;  // slots × count while a checkpoint writes it; empty otherwise
  };

  // The buffer of index's part for its step, packed again first if a checkpoint wrote it.
  Part& for_step(size_t index) {
    Part& part = at("step", index);
    if (!part.unpacked.empty()) {
      std::vector<const float*> arrays = slot_arrays(part, static_cast<const float*>(part.unpacked.data()));
      check_callee(api_->pack_state(optimizer_, &part.range, arrays.data(), part.bytes.data()), "optimizer pack_state");
      part.unpacked.clear();
      part.unpacked.shrink_to_fit();
    }
    return part;
  }

  // Elements [begin, begin + count) of slot `slot` of parameter index (piece-local, owned).
  void read(int32_t slot, size_t index, int64_t begin, int64_t count, float* dst) const {
    const Part& part = at("read_state", index);
    if (!part.unpacked.empty()) return copy_out(part, part.unpacked.data(), slot, begin, count, dst);
    std::vector<float> unpacked = unpack(part);
    copy_out(part, unpacked.data(), slot, begin, count, dst);
  }
  void write(int32_t slot, size_t index, int64_t begin, int64_t count, const float* src) {
    Part& part = at("write_state", index);
    if (part.unpacked.empty()) part.unpacked = unpack(part);
    std::memcpy(part.unpacked.data() + size_t(slot) * size_t(part.owned.count()) + size_t(begin - part.owned.begin),
                src, size_t(count) * sizeof(float));
  }

  int64_t bytes() const {
    int64_t total = 0;
    for (const Part& part : parts_) total += int64_t(part.bytes.size());
    return total;
  }

 private:
  static bool spec_is_split(const keel_param_spec& spec) {
    for (int32_t d = 0; d < spec.ndim; ++d)
      if (spec.local_shape[d] != spec.global_shape[d]) return true;
    return false;
  }
  Part& at(const char* what, size_t index) { return const_cast<Part&>(std::as_const(*this).at(what, index)); }
  const Part& at(const char* what, size_t index) const {
    if (index >= part_of_.size() || part_of_[index] < 0)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string(what) + ": parameter " + std::to_string(index) +
                                                       " has no packed optimizer state on this rank");
    return parts_[size_t(part_of_[index])];
  }
  template <typename T>
  std::vector<T*> slot_arrays(const Part& part, T* base) const {
    std::vector<T*> arrays;
    for (int32_t slot = 0; slot < slots_; ++slot) arrays.push_back(base + size_t(slot) * size_t(part.owned.count()));
    return arrays;
  }
  std::vector<float> unpack(const Part& part) const {
    std::vector<float> unpacked(size_t(slots_) * size_t(part.owned.count()));
    std::vector<float*> arrays = slot_arrays(part, unpacked.data());
    check_callee(api_->unpack_state(optimizer_, &part.range, part.bytes.data(), arrays.data()), "optimizer unpack_state");
    return unpacked;
  }
  static void copy_out(const Part& part, const float* unpacked, int32_t slot, int64_t begin, int64_t count, float* dst) {
    std::memcpy(dst, unpacked + size_t(slot) * size_t(part.owned.count()) + size_t(begin - part.owned.begin),
                size_t(count) * sizeof(float));
  }

  const keel_optimizer_api* api_;
  void* optimizer_;
  int32_t slots_;
  const keel_param_spec* specs_;
  std::vector<int32_t> part_of_;  // per parameter: its part, or -1
  std::vector<Part> parts_;
};

}  // namespace keel_support
