// The model's parameters as whole tensors and zero-copy views, for the bindings, export and
// `model.init_from`: reads and writes go through the strategy (which owns the memory), names and
// external formats through the model.
#pragma once

#include <keel/keel.h>

#include <string>
#include <vector>

#include "config/run_config.h"
#include "mesh/mesh.h"

namespace keel {

struct PluginInstances;

class ModelParameters {
 public:
  ModelParameters(PluginInstances& plugins, const RunConfig& config) : plugins_(plugins), config_(config) {}

  const keel_model_info& info() const;   // the specs of this rank's pieces
  const std::string& model_plugin() const { return config_.model.plugin; }
  const CommGroup& world() const;  // every rank, for what the core agrees on across them

  // Whole tensors. Reading refuses a parameter split over tp ranks (a whole tensor would need
  // every rank); writing takes the whole tensor on every rank, and each keeps the part it owns
  // (its tensor-parallel piece, of that the range its strategy holds: a ZeRO-3 shard).
  std::vector<float> read_param(size_t index);
  std::vector<float> read_grad(size_t index);
  void write_param(size_t index, const std::vector<float>& values);
  int64_t numel(size_t index) const;         // of this rank's piece (the whole tensor at tp 1)
  int64_t global_numel(size_t index) const;  // of the whole tensor
  // The index of parameter `name`; throws KeelError (KEEL_ERR_NOT_FOUND) with a suggestion.
  size_t param_index(const std::string& name) const;
  // Parameter `index` in the strategy's own memory (zero-copy), as its forward acquire gives it.
  keel_tensor param_tensor(size_t index);
  // How parameter `index` appears in an external format ("huggingface"); throws KeelError
  // (KEEL_ERR_UNIMPLEMENTED) when the model does not know the format.
  keel_external_tensor external_tensor(const std::string& format, size_t index);
  std::string external_config(const std::string& format);

 private:
  void require_whole(size_t index, const char* what) const;
  std::vector<float> read_whole(size_t index, bool gradient);

  PluginInstances& plugins_;
  const RunConfig& config_;
};

}  // namespace keel
