// Whole-tensor reads and writes, names and external formats (model_parameters.h).
#include "train/model_parameters.h"

#include <keel_support/common/json_section.hpp>
#include <keel_support/common/piece_box.hpp>

#include "host/errors.h"
#include "train/plugin_instances.h"
#include "train/strategy_state.h"

namespace keel {

const keel_model_info& ModelParameters::info() const { return plugins_.model_info; }

int64_t ModelParameters::numel(size_t index) const {
  const keel_param_spec& spec = plugins_.model_info.params[index];
  int64_t n = 1;
  for (int32_t d = 0; d < spec.ndim; ++d) n *= spec.local_shape[d];
  return n;
}

int64_t ModelParameters::global_numel(size_t index) const {
  const keel_param_spec& spec = plugins_.model_info.params[index];
  int64_t n = 1;
  for (int32_t d = 0; d < spec.ndim; ++d) n *= spec.global_shape[d];
  return n;
}

void ModelParameters::require_whole(size_t index, const char* what) const {
  if (numel(index) != global_numel(index))
    throw KeelError(KEEL_ERR_UNIMPLEMENTED,
                    std::string(what) + " of " + plugins_.model_info.params[index].name + ": the parameter is split over the " +
                        std::to_string(plugins_.mesh.layout().tp) + " tensor-parallel ranks; this rank holds a piece, and a "
                        "whole tensor needs every rank to take part: read it with keel_trainer_gather_param, every "
                        "rank calling");
}

std::vector<float> ModelParameters::read_param(size_t index) { return read_whole(index, false); }

std::vector<float> ModelParameters::read_grad(size_t index) { return read_whole(index, true); }

std::vector<float> ModelParameters::read_whole(size_t index, bool gradient) {
  require_whole(index, gradient ? "reading the gradient" : "reading the value");
  std::vector<float> out(numel(index));
  auto* s = plugins_.strategy;
  check_plugin((gradient ? s->read_grad : s->read_param)(plugins_.strategy_obj, index, 0, int64_t(out.size()), out.data()),
               gradient ? "strategy read_grad" : "strategy read_param");
  return out;
}

void ModelParameters::write_param(size_t index, const std::vector<float>& values) {
  if (int64_t(values.size()) != global_numel(index))
    throw KeelError(KEEL_ERR_INVALID_ARGUMENT, std::string("parameter ") + plugins_.model_info.params[index].name + " has " +
                                                   std::to_string(global_numel(index)) + " elements, not " +
                                                   std::to_string(values.size()));
  // Every rank is handed the whole tensor and keeps what it owns of its piece.
  const keel_param_spec& spec = plugins_.model_info.params[index];
  const auto [begin, end] = StrategyState(plugins_, config_.strategy.plugin).owned_range(-1, index);
  if (begin < 0 || end > numel(index))
    throw KeelError(KEEL_ERR_INTERNAL, "strategy '" + config_.strategy.plugin + "' owns [" + std::to_string(begin) + ", " +
                                           std::to_string(end) + ") of " + spec.name + ", which has " +
                                           std::to_string(numel(index)) + " elements here");
  // A rank that owns none of it still calls (with no elements): a sharding strategy drops its
  // gathered copies of the layer on every rank alike, or the ranks' next gathers would differ.
  std::vector<float> owned(size_t(std::max<int64_t>(end - begin, 0)));
  if (!owned.empty())
    keel_support::copy_overlap(keel_support::PieceBox::whole(spec.ndim, spec.global_shape), 0, global_numel(index),
                               values.data(), keel_support::PieceBox::of_spec(spec), begin, end, owned.data());
  check_plugin(plugins_.strategy->write_param(plugins_.strategy_obj, index, owned.empty() ? 0 : begin,
                                              int64_t(owned.size()), owned.data()),
               "strategy write_param");
}

const CommGroup& ModelParameters::world() const { return plugins_.mesh.world; }

keel_external_tensor ModelParameters::external_tensor(const std::string& format, size_t index) {
  if (!KEEL_HAS_SLOT(plugins_.model, external_name))
    throw KeelError(KEEL_ERR_UNIMPLEMENTED, "model '" + config_.model.plugin + "' has no external formats");
  keel_external_tensor out{};
  out.struct_size = sizeof(out);
  check_plugin(plugins_.model->external_name(plugins_.model_obj, format.c_str(), index, &out),
               "model '" + config_.model.plugin + "' external_name(" + format + ")");
  return out;
}

std::string ModelParameters::external_config(const std::string& format) {
  if (!KEEL_HAS_SLOT(plugins_.model, external_config))
    throw KeelError(KEEL_ERR_UNIMPLEMENTED, "model '" + config_.model.plugin + "' has no external formats");
  const char* json = nullptr;
  check_plugin(plugins_.model->external_config(plugins_.model_obj, format.c_str(), &json),
               "model '" + config_.model.plugin + "' external_config(" + format + ")");
  return json ? json : "{}";
}

size_t ModelParameters::param_index(const std::string& name) const {
  const keel_model_info& info = plugins_.model_info;
  std::vector<std::string> names;
  for (size_t i = 0; i < info.n_params; ++i) {
    if (name == info.params[i].name) return i;
    names.push_back(info.params[i].name);
  }
  const std::string hint = keel_support::closest_match(name, names);
  throw KeelError(KEEL_ERR_NOT_FOUND, "model '" + config_.model.plugin + "' has no parameter \"" + name + "\"" +
                                          (hint.empty() ? "" : " (did you mean \"" + hint + "\"?)"));
}

keel_tensor ModelParameters::param_tensor(size_t index) {
  const keel_model_info& info = plugins_.model_info;
  // The view outlives the acquire below, so it is only valid where acquire hands out resident
  // memory. A strategy older than describe (ABI < 0.4) only ever ran on one rank, resident.
  const bool resident = KEEL_HAS_SLOT(plugins_.strategy, describe) ? StrategyState(plugins_, config_.strategy.plugin).info().params_resident != 0
                                                                     : plugins_.mesh.layout().dp == 1;
  if (!resident)
    throw KeelError(KEEL_ERR_UNIMPLEMENTED,
                    std::string("parameter ") + info.params[index].name + ": no zero-copy view under strategy '" +
                        config_.strategy.plugin + "', which does not keep parameters resident (it gathers each "
                        "layer on demand and frees it after use, so a view would point at freed memory); save a "
                        "checkpoint and `keel export` it to read whole parameters");
  // An NF4 tensor (QLoRA's base) is dequantized into a buffer that lives only while its layer
  // is acquired: a view would outlive it.
  if (info.params[index].flags & KEEL_PARAM_NF4)
    throw KeelError(KEEL_ERR_UNIMPLEMENTED, std::string("parameter ") + info.params[index].name +
                                                ": no zero-copy view of a tensor kept in NF4 (QLoRA's base is "
                                                "dequantized per layer use); read its values instead (read_param)");
  const int32_t layer = info.params[index].layer;
  size_t first = index, count = 0;
  while (first > 0 && info.params[first - 1].layer == layer) --first;
  for (size_t i = first; i < info.n_params && info.params[i].layer == layer; ++i) ++count;
  std::vector<keel_tensor> tensors(count);
  check_plugin(plugins_.access.acquire(plugins_.access.ctx, layer, KEEL_PHASE_FORWARD, tensors.data(), nullptr, count),
               "strategy acquire");
  check_plugin(plugins_.access.release(plugins_.access.ctx, layer, KEEL_PHASE_FORWARD, 0), "strategy release");
  return tensors[index - first];
}

}  // namespace keel
