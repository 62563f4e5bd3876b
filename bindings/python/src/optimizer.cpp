// keel.register_optimizer(name, factory): an optimizer-kind plugin (abi/keel/optimizer.h)
// written in Python. factory(config) gets the run's "optimizer" section as a dict and returns
// an object with `n_state_slots` (int), `lr` (the peak learning rate) and
// step(params, grads, states, lr, grad_scale, step, apply_weight_decay), which updates the
// float32 NumPy views `params` and `states[i]` in place. The views wrap the strategy's own
// memory (no copies) and are valid only during the call; `grads` is read-only.
//
// With `per_tensor = True` the object is called once per tensor piece with tensor=
// keel.optim.TensorPiece (name, shapes, box): Keel then keeps its state per piece (optimizer.h
// 0.12 packed state, laid out as the n_state_slots fp32 arrays one after another, so packing is
// a copy), and `whole_tensors = True` asks for whole tensors only.
#include <keel/optimizer.h>
#include <keel/params.h>
#include <pybind11/numpy.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>

#include "python_callback.hpp"
#include "python_plugin.hpp"

namespace keel_python {
namespace {

struct PythonOptimizer {
  const PythonPlugin<keel_optimizer_api>* plugin = nullptr;
  const keel_host* host = nullptr;
  py::object optimizer;
  int32_t n_state_slots = 0;
  float base_lr = 0;
  uint32_t decay_flags = KEEL_PARAM_NO_WEIGHT_DECAY;
  uint32_t flags = 0;  // KEEL_OPTIMIZER_PACKED_STATE (per tensor), | KEEL_OPTIMIZER_WHOLE_TENSORS
};

// A float32 vector over memory the caller owns. The no-op capsule as base keeps NumPy from
// copying or freeing it.
py::array_t<float> borrowed_vector(const float* data, int64_t n, bool writable) {
  py::capsule not_owned(data, [](void*) {});
  py::array_t<float> view({py::ssize_t(n)}, {py::ssize_t(sizeof(float))}, data, not_owned);
  if (!writable) view.attr("setflags")(py::arg("write") = false);
  return view;
}

template <typename T>
T required_attribute(const py::object& object, const char* name, const std::string& what) {
  if (!py::hasattr(object, name))
    throw KeelError(KEEL_ERR_INVALID_CONFIG, "the factory's object has no attribute '" + std::string(name) +
                                                 "' (" + what + ")");
  return object.attr(name).cast<T>();
}

keel_status validate_config(const keel_host*, const char*, const char*) {
  return KEEL_OK;  // the factory checks its own section when it is called
}

void destroy(void* handle) {
  if (!handle || !Py_IsInitialized()) return;  // after interpreter exit: leak rather than crash
  py::gil_scoped_acquire gil;
  delete static_cast<PythonOptimizer*>(handle);
}

keel_status describe(void* handle, keel_optimizer_info* out_info) {
  auto* optimizer = static_cast<PythonOptimizer*>(handle);
  if (!optimizer || !out_info || out_info->struct_size < offsetof(keel_optimizer_info, decay_flags) + sizeof(uint32_t))
    return KEEL_ERR_INVALID_ARGUMENT;
  out_info->n_state_slots = optimizer->n_state_slots;
  out_info->base_lr = optimizer->base_lr;
  out_info->decay_flags = optimizer->decay_flags;
  if (out_info->struct_size >= offsetof(keel_optimizer_info, flags) + sizeof(uint32_t))
    out_info->flags = optimizer->flags;
  return KEEL_OK;
}

// Per-tensor state: the slots' fp32 arrays back to back, so the exchange form is a copy.
keel_status packed_state_bytes(void* handle, const keel_optimizer_range* range, int64_t* out_bytes) {
  auto* optimizer = static_cast<PythonOptimizer*>(handle);
  if (!optimizer || !range || !out_bytes || range->n < 0) return KEEL_ERR_INVALID_ARGUMENT;
  *out_bytes = int64_t(optimizer->n_state_slots) * range->n * int64_t(sizeof(float));
  return KEEL_OK;
}

keel_status pack_state(void* handle, const keel_optimizer_range* range, const float* const* state, void* packed) {
  auto* optimizer = static_cast<PythonOptimizer*>(handle);
  if (!optimizer || !range || range->n < 0 || (optimizer->n_state_slots > 0 && (!state || !packed)))
    return KEEL_ERR_INVALID_ARGUMENT;
  for (int32_t slot = 0; slot < optimizer->n_state_slots; ++slot)
    std::memcpy(static_cast<float*>(packed) + slot * range->n, state[slot], size_t(range->n) * sizeof(float));
  return KEEL_OK;
}

keel_status unpack_state(void* handle, const keel_optimizer_range* range, const void* packed, float* const* state) {
  auto* optimizer = static_cast<PythonOptimizer*>(handle);
  if (!optimizer || !range || range->n < 0 || (optimizer->n_state_slots > 0 && (!state || !packed)))
    return KEEL_ERR_INVALID_ARGUMENT;
  for (int32_t slot = 0; slot < optimizer->n_state_slots; ++slot)
    std::memcpy(state[slot], static_cast<const float*>(packed) + slot * range->n, size_t(range->n) * sizeof(float));
  return KEEL_OK;
}

py::tuple dims(const int64_t* values, int32_t ndim) {
  py::tuple out(ndim);
  for (int32_t d = 0; d < ndim; ++d) out[d] = values[d];
  return out;
}

// The keel.optim.TensorPiece of a per-tensor call.
py::object tensor_piece(const keel_optimizer_step_args& args) {
  const keel_optimizer_range& range = args.range;
  if (range.struct_size < sizeof(keel_optimizer_range) || !range.spec)
    throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "step: the strategy did not say which tensor the call covers "
                                               "(optimizer.h 0.12 range); per_tensor needs a strategy built "
                                               "against 0.12 or later");
  const keel_param_spec& spec = *range.spec;
  const int32_t ndim = std::clamp(spec.ndim, 0, int32_t(KEEL_MAX_DIMS));
  return py::module_::import("keel.optim")
      .attr("TensorPiece")(std::string(spec.name ? spec.name : ""), dims(spec.global_shape, ndim),
                           dims(spec.local_shape, ndim), dims(spec.local_offset, ndim), range.offset, range.n);
}

keel_status step(void* handle, const keel_optimizer_step_args* args) {
  auto* optimizer = static_cast<PythonOptimizer*>(handle);
  if (!optimizer) return KEEL_ERR_INVALID_ARGUMENT;
  return call_python(optimizer->host, optimizer->plugin->source, KEEL_ERR_INTERNAL, [&] {
    if (!args || args->struct_size < sizeof(keel_optimizer_step_args))
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "step: args is NULL or older than this plugin's ABI");
    if (args->device.device_type != KEEL_DEVICE_CPU)
      throw KeelError(KEEL_ERR_UNIMPLEMENTED, "step: only host (CPU) memory is supported, found device type " +
                                                  std::to_string(args->device.device_type));
    const bool per_tensor = (optimizer->flags & KEEL_OPTIMIZER_PACKED_STATE) != 0;
    if (per_tensor && optimizer->n_state_slots > 0 && !args->packed_state)
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "step: per_tensor, but the strategy handed no per-tensor state");
    py::list states;
    for (int32_t slot = 0; slot < optimizer->n_state_slots; ++slot)
      states.append(borrowed_vector(per_tensor ? static_cast<float*>(args->packed_state) + slot * args->n
                                               : args->state[slot],
                                    args->n, true));
    py::object step_method = optimizer->optimizer.attr("step");
    py::object params = borrowed_vector(args->params, args->n, true);
    py::object grads = borrowed_vector(args->grads, args->n, false);
    if (per_tensor)
      step_method(params, grads, states, args->lr, args->grad_scale, args->step, bool(args->apply_weight_decay),
                  py::arg("tensor") = tensor_piece(*args));
    else
      step_method(params, grads, states, args->lr, args->grad_scale, args->step, bool(args->apply_weight_decay));
  });
}

struct OptimizerKind {
  using Api = keel_optimizer_api;
  static keel_status create(const PythonPlugin<Api>& plugin, const keel_host* host, const char* config_json,
                            const char*, void** out_optimizer) {
    return call_python(host, plugin.source, KEEL_ERR_INVALID_CONFIG, [&] {
      if (!out_optimizer) throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "create: out_optimizer is NULL");
      auto optimizer = std::make_unique<PythonOptimizer>();
      optimizer->plugin = &plugin;
      optimizer->host = host;
      optimizer->optimizer = plugin.factory(config_dict(config_json));
      const py::object& object = optimizer->optimizer;
      optimizer->n_state_slots = required_attribute<int32_t>(object, "n_state_slots", "fp32 arrays per element");
      optimizer->base_lr = required_attribute<float>(object, "lr", "the peak learning rate");
      if (!py::hasattr(object, "step") || !PyCallable_Check(object.attr("step").ptr()))
        throw KeelError(KEEL_ERR_INVALID_CONFIG, "the factory's object has no callable step(params, grads, "
                                                 "states, lr, grad_scale, step, apply_weight_decay)");
      if (optimizer->n_state_slots < 0 || optimizer->n_state_slots > KEEL_OPTIMIZER_MAX_STATE_SLOTS)
        throw KeelError(KEEL_ERR_INVALID_CONFIG, "n_state_slots must lie in [0, " +
                                                     std::to_string(KEEL_OPTIMIZER_MAX_STATE_SLOTS) + "], found " +
                                                     std::to_string(optimizer->n_state_slots));
      if (py::hasattr(object, "no_decay_flags")) optimizer->decay_flags = object.attr("no_decay_flags").cast<uint32_t>();
      const bool whole = py::hasattr(object, "whole_tensors") && py::bool_(object.attr("whole_tensors"));
      if (whole || (py::hasattr(object, "per_tensor") && py::bool_(object.attr("per_tensor"))))
        optimizer->flags = KEEL_OPTIMIZER_PACKED_STATE | (whole ? KEEL_OPTIMIZER_WHOLE_TENSORS : 0u);
      *out_optimizer = optimizer.release();
    });
  }
};

}  // namespace

void bind_optimizers(py::module_& module) {
  module.def(
      "register_optimizer",
      [](const std::string& name, py::object factory, const std::string& version, const std::string& description,
         bool replace) {
        if (!PyCallable_Check(factory.ptr())) throw py::type_error("register_optimizer: factory must be callable");
        keel_optimizer_api api{sizeof(keel_optimizer_api), validate_config, nullptr,   destroy,     describe,
                               step, packed_state_bytes, pack_state, unpack_state};
        PythonPluginSlots<OptimizerKind>::add(KEEL_KIND_OPTIMIZER, "optimizer", name, std::move(factory), api,
                                              version, description, replace);
      },
      py::arg("name"), py::arg("factory"), py::arg("version") = "0.1.0",
      py::arg("description") = "an optimizer written in Python", py::arg("replace") = false,
      "Registers an optimizer for configs with \"optimizer\": {\"plugin\": name, ...}.\n\n"
      "factory(config) gets the optimizer section as a dict and returns an object with\n"
      "n_state_slots (int, 0..4), lr (float: the peak learning rate), optionally no_decay_flags\n"
      "(KEEL_PARAM_* flags whose ranges get apply_weight_decay False; default: no-decay params),\n"
      "optionally per_tensor = True (one call per tensor piece, with tensor=keel.optim.TensorPiece:\n"
      "name, shape, piece box, offset) or whole_tensors = True (per tensor, whole tensors only),\n"
      "and step(params, grads, states, lr, grad_scale, step, apply_weight_decay), which updates\n"
      "the float32 arrays params and states[i] in place. grads is read-only and not yet\n"
      "multiplied by grad_scale; step counts from 1. The arrays are views of Keel's memory, valid\n"
      "only during the call.\n\n"
      "A name already taken (by a built-in or library plugin such as \"adamw\", or one registered\n"
      "from Python before) raises keel.Error naming who has it, unless replace=True: then this one\n"
      "serves trainers created afterwards (re-running a notebook cell that registers a name needs it).");
}

}  // namespace keel_python
