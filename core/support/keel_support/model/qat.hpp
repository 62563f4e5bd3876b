// Quantization-aware training (torchao's QAT): the model computes with each targeted linear's
// weight fake-quantized (backend.h fake_quantize_dt: int8 one scale per output channel, or int4
// in groups of 32 input columns, symmetric) and, with "activations": "int8", its input too
// (fake_quantize_tokens_dt: one scale and zero point per token, asymmetric; torchao's 8da4w).
// Gradients pass straight through (the straight-through estimator): the weight's gradient goes to
// the weight itself, and the input's to the unquantized input; the weight-gradient matmul reads
// the quantized input the forward multiplied. A layer use fake-quantizes its target weights once
// into one layer's scratch, as LoRA merges (lora.hpp); inputs are quantized where the model
// keeps them (a norm's output, the MLP's activation) or, when another op's backward reads the
// unquantized tensor (attention's output), into a scratch copy, again in the backward.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "keel_support/common/backend_buffer.hpp"
#include "keel_support/common/json_section.hpp"
#include "keel_support/model/compute_ops.hpp"
#include "keel_support/model/layer_lease.hpp"

namespace keel_support {

struct QatConfig {
  int32_t bits = 0;        // 0: off; 8 or 4
  int64_t group_size = 0;  // 0: one scale per output channel (a weight's row)
  int32_t activation_bits = 0;  // 0: inputs unquantized; 8: int8 per token
  std::vector<std::string> target_modules;

  bool enabled() const { return bits > 0; }
  // Whether `module`'s input is fake-quantized.
  bool quantizes_input(const std::string& module) const { return activation_bits > 0 && targets(module); }
  bool targets(const std::string& module) const {
    for (const std::string& m : target_modules)
      if (m == module) return true;
    return false;
  }
  std::string describe() const {
    return (bits == 8 ? "int8 per channel" : "int4 in groups of " + std::to_string(group_size)) +
           (activation_bits ? ", activations int8 per token" : "");
  }
};

// Reads model.qat when present: {"weights": "int8" | "int4", "group_size" (int4: 32 by default, a
// power of two from 8 to 1024), "activations": "none" (the default) | "int8", "target_modules":
// names or "all-linear" (the default)}. Throws ConfigError naming the key.
inline QatConfig parse_qat_config(JsonSection& model, const std::vector<std::string>& modules) {
  QatConfig c;
  if (!model.has("qat") || model.raw("qat").is_null()) return c;
  JsonSection s(model.raw("qat"), model.path_of("qat"));
  const std::string weights = s.get<std::string>("weights", "");
  if (weights == "int8") {
    c.bits = 8;
  } else if (weights == "int4") {
    c.bits = 4;
    c.group_size = 32;
  } else {
    throw ConfigError(s.path_of("weights") + ": expected \"int8\" (one scale per output channel) or \"int4\" (groups "
                                             "of group_size input columns), found \"" + weights + "\"");
  }
  if (s.has("group_size")) {
    if (c.bits != 4)
      throw ConfigError(s.path_of("group_size") + ": int8 weights take one scale per output channel; group_size is "
                                                  "for int4");
    c.group_size = s.get_in_range<int64_t>("group_size", 32, 8, 1024);
    if ((c.group_size & (c.group_size - 1)) != 0)
      throw ConfigError(s.path_of("group_size") + ": expected a power of two, found " + std::to_string(c.group_size));
  }
  if (s.has("activations")) {
    const nlohmann::json& a = s.raw("activations");
    if (!a.is_string() || (a.get<std::string>() != "int8" && a.get<std::string>() != "none"))
      throw ConfigError(s.path_of("activations") + ": expected \"int8\" (each linear's input fake-quantized per "
                                                   "token, asymmetric) or \"none\", found " + a.dump());
    c.activation_bits = a.get<std::string>() == "int8" ? 8 : 0;
  }
  c.target_modules = modules;
  if (s.has("target_modules")) {
    const nlohmann::json& t = s.raw("target_modules");
    const std::string at = s.path_of("target_modules");
    if (!(t.is_string() && t.get<std::string>() == "all-linear")) {
      if (!t.is_array() || t.empty())
        throw ConfigError(at + ": expected a non-empty list of module names (or \"all-linear\"), found " + t.dump());
      c.target_modules.clear();
      for (const auto& m : t) {
        bool known = false;
        for (const std::string& k : modules) known = known || (m.is_string() && k == m.get<std::string>());
        if (!known) {
          std::string list;
          for (const std::string& k : modules) list += (list.empty() ? "" : ", ") + k;
          throw ConfigError(at + ": the model has no linear module " + m.dump() + " (it has: " + list + ")");
        }
        c.target_modules.push_back(m.get<std::string>());
      }
    }
  }
  s.finish();
  return c;
}

// One target in a layer's specs: the weight's index and its local shape (out, in).
struct QatTarget {
  size_t weight = 0;
  int64_t out = 0, in = 0;
};

// Quantized activations beside LoRA are refused: the adapters are folded into the weight
// (lora.hpp), so they would read the quantized input, where torchtune's QAT-LoRA feeds them the
// unquantized one. `qat_path`: the section's JSON path.
inline void refuse_activations_with_lora(const QatConfig& c, bool lora, const std::string& qat_path) {
  if (c.activation_bits && lora)
    throw ConfigError(qat_path + ".activations: with LoRA the adapters are folded into the weight, so they would read "
                                 "the quantized input, where torchtune's read the unquantized one; quantize the "
                                 "weights only, or leave out lora");
}

// A targeted linear's QatTarget from its spec (this rank's piece: every leading dimension a row),
// checked: int4's groups must divide the piece's columns, and int8's one scale per row needs
// whole rows, which tensor parallelism splits for a row-parallel linear (each rank would scale
// its part of a row alone, unlike one rank and unlike `keel export --quantize`). Throws
// StatusError naming the module.
inline QatTarget qat_target(const QatConfig& c, const std::string& module, size_t index, const keel_param_spec& spec) {
  const int64_t in = spec.local_shape[spec.ndim - 1];
  int64_t out = 1;
  for (int32_t d = 0; d + 1 < spec.ndim; ++d) out *= spec.local_shape[d];
  if (c.group_size && in % c.group_size != 0)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "model.qat.group_size: " + module + " has " + std::to_string(in) +
                                                     " input columns on this rank, which groups of " +
                                                     std::to_string(c.group_size) + " do not divide");
  if (c.activation_bits && in != spec.global_shape[spec.ndim - 1])
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT,
                      "model.qat.activations: a token's scale spans the whole input row of " + module + ", which "
                      "tensor parallelism splits over the ranks (row-parallel): leave " + module + " out of "
                      "target_modules, or train at parallel.tp 1");
  if (!c.group_size && in != spec.global_shape[spec.ndim - 1])
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT,
                      "model.qat.weights: int8 takes one scale per whole row of " + module + ", which tensor "
                      "parallelism splits over the ranks (row-parallel): use \"int4\" (groups within a rank's "
                      "part), leave " + module + " out of target_modules, or train at parallel.tp 1");
  return {index, out, in};
}

class QatLayer {
 public:
  QatLayer() = default;
  QatLayer(const ComputeOps& ops, const QatConfig& config, std::vector<QatTarget> targets)
      : ops_(ops), bits_(config.bits), group_(config.group_size), activation_bits_(config.activation_bits),
        targets_(std::move(targets)) {
    int64_t total = 0;
    for (const QatTarget& t : targets_) total += t.out * t.in;
    memory_ = ops_.backend().alloc_bytes(ops_.bytes(total));
    Elems at = ops_.at(memory_.get());
    for (const QatTarget& t : targets_) {
      quantized_.push_back(at);
      at = at + t.out * t.in;
    }
  }

  bool active() const { return !targets_.empty(); }

  // Each target's weight (`source`: what the layer would compute with) fake-quantized into
  // scratch; once per layer use, before any weight is read.
  template <typename Source>
  void apply(const Source& source) {
    for (size_t t = 0; t < targets_.size(); ++t) {
      const QatTarget& g = targets_[t];
      ops_.fake_quantize(quantized_[t], source(g.weight), g.out, g.in, group_ ? group_ : g.in, bits_);
    }
  }
  // An input the model keeps (its rows tokens), fake-quantized in place.
  void quantize_input(Elems x, int64_t rows, int64_t cols) const {
    ops_.fake_quantize_tokens(x, x, rows, cols, activation_bits_);
  }
  // An input another op's backward reads unquantized: its fake-quantized copy, in scratch that
  // lives until the next call.
  Elems quantized_input(Elems x, int64_t rows, int64_t cols) {
    if (input_elems_ < rows * cols) {
      input_ = BackendBuffer();
      input_ = ops_.backend().alloc_bytes(ops_.bytes(rows * cols));
      input_elems_ = rows * cols;
    }
    const Elems copy = ops_.at(input_.get());
    ops_.fake_quantize_tokens(copy, x, rows, cols, activation_bits_);
    return copy;
  }
  // The weight to compute with: the fake-quantized copy for a target, else `other`.
  Elems weight(size_t index, Elems other) const {
    for (size_t t = 0; t < targets_.size(); ++t)
      if (targets_[t].weight == index) return quantized_[t];
    return other;
  }

 private:
  ComputeOps ops_;
  int32_t bits_ = 0;
  int64_t group_ = 0;
  int32_t activation_bits_ = 0;
  std::vector<QatTarget> targets_;
  BackendBuffer memory_;
  std::vector<Elems> quantized_;
  BackendBuffer input_;  // quantized_input's copy
  int64_t input_elems_ = 0;
};

}  // namespace keel_support
