// keel.Trainer: one training run over the embedding API (abi/keel/embed.h). Every call into the
// core runs with the GIL released, so other Python threads go on while it trains, and with the
// trainer's lock held, taken after the GIL is let go: a thread waiting for a busy trainer never
// holds the GIL that the busy thread's Python callbacks (data, optimizer, progress) need. The
// lock is recursive, so a progress callback may read the trainer it is called from.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "keel_python.hpp"
#include "tensor.hpp"

namespace keel_python {
namespace {

struct ParamShape {
  std::string name;
  std::vector<py::ssize_t> shape;
  size_t count = 1;
};

class Trainer {
 public:
  explicit Trainer(const py::object& config) {
    keel_trainer* handle = nullptr;
    if (py::isinstance<py::dict>(config)) {
      const std::string json = py::module_::import("json").attr("dumps")(config).cast<std::string>();
      check(released([&] { return keel_trainer_create_from_json(json.c_str(), &handle); }));
    } else {
      const std::string path = py::module_::import("os").attr("fspath")(config).cast<std::string>();
      check(released([&] { return keel_trainer_create_from_file(path.c_str(), &handle); }));
    }
    handle_ = handle;
  }
  ~Trainer() { keel_trainer_destroy(handle_); }
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  keel_trainer* handle() const { return handle_; }

  // Runs `call` (returning a keel_status) without the GIL and with this trainer locked.
  template <typename Call>
  keel_status released(Call&& call) {
    py::gil_scoped_release no_gil;
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    return call();
  }

  const std::vector<ParamShape>& param_shapes() {
    if (!param_shapes_.empty()) return param_shapes_;
    size_t count = 0;
    check(released([&] { return keel_trainer_param_count(handle_, &count); }));
    std::vector<ParamShape> shapes(count);
    for (size_t i = 0; i < count; ++i) {
      keel_param_info info{};
      info.struct_size = sizeof(info);
      check(released([&] { return keel_trainer_param_info(handle_, i, &info); }));
      shapes[i].name = info.name;
      for (int32_t d = 0; d < info.ndim; ++d) shapes[i].shape.push_back(info.shape[d]), shapes[i].count *= info.shape[d];
    }
    return param_shapes_ = std::move(shapes);
  }

  const ParamShape& param_shape(const std::string& name) {
    for (const auto& p : param_shapes())
      if (p.name == name) return p;
    throw KeelError(KEEL_ERR_NOT_FOUND, "no parameter named '" + name + "' (Trainer.param_shapes() lists them)");
  }

 private:
  keel_trainer* handle_ = nullptr;
  std::recursive_mutex mutex_;
  std::vector<ParamShape> param_shapes_;  // fixed for the trainer's life
};

py::dict metrics_dict(const keel_step_metrics& m) {
  py::dict d;
  d["step"] = m.step;
  d["loss"] = m.loss;
  d["lr"] = m.lr;
  d["grad_norm"] = m.grad_norm;
  d["tokens_per_s"] = m.tokens_per_s;
  d["mfu"] = m.mfu;
  d["step_ms"] = m.step_ms;
  return d;
}

// What train's C callback needs: the Python callable and the first error it raised (or a
// pending Ctrl-C), re-raised in the caller once the core has stopped.
struct ProgressCallback {
  py::object callback;
  std::exception_ptr error;
};

int32_t on_step(const keel_step_metrics* metrics, void* user_data) {
  auto* progress = static_cast<ProgressCallback*>(user_data);
  py::gil_scoped_acquire gil;
  try {
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (progress->callback.is_none()) return 0;
    return py::bool_(progress->callback(metrics_dict(*metrics))) ? 1 : 0;
  } catch (...) {
    progress->error = std::current_exception();
    return 1;
  }
}

std::string fspath(const py::object& path) { return py::module_::import("os").attr("fspath")(path).cast<std::string>(); }

}  // namespace

void bind_trainer(py::module_& module) {
  py::class_<Trainer>(module, "Trainer",
                      "A training run: Trainer(config) with config a dict (the JSON of a Keel config) or\n"
                      "the path of a JSON config file. Raises keel.Error naming the JSON path of a bad key.")
      .def(py::init<const py::object&>(), py::arg("config"))
      .def(
          "step",
          [](Trainer& t) {
            keel_step_metrics metrics{};
            metrics.struct_size = sizeof(metrics);
            check(t.released([&] { return keel_trainer_step(t.handle(), &metrics); }));
            return metrics_dict(metrics);
          },
          "One optimizer step; returns its metrics: step, loss, lr, grad_norm, tokens_per_s, mfu, step_ms.")
      .def(
          "train",
          [](Trainer& t, int64_t steps, py::object callback) {
            ProgressCallback progress{std::move(callback), nullptr};
            const keel_status status =
                t.released([&] { return keel_trainer_train(t.handle(), steps, on_step, &progress); });
            if (progress.error) std::rethrow_exception(progress.error);
            check(status);
          },
          py::arg("steps"), py::arg("callback") = py::none(),
          "Trains `steps` optimizer steps, calling callback(metrics) after each; a truthy return\n"
          "stops after that step. An exception in the callback stops training and is re-raised.")
      .def(
          "evaluate",
          [](Trainer& t) {
            float val_loss = 0;
            check(t.released([&] { return keel_trainer_evaluate(t.handle(), &val_loss); }));
            return val_loss;
          },
          "Mean validation loss over data.val_batches batches.")
      .def(
          "last_metrics",
          [](Trainer& t) {
            keel_step_metrics metrics{};
            metrics.struct_size = sizeof(metrics);
            check(t.released([&] { return keel_trainer_last_metrics(t.handle(), &metrics); }));
            return metrics_dict(metrics);
          },
          "The metrics of the last step (zeros before the first).")
      .def(
          "save",
          [](Trainer& t, const py::object& root_dir, int32_t keep) {
            const std::string root = fspath(root_dir);
            check(t.released([&] { return keel_trainer_save(t.handle(), root.c_str(), keep); }));
          },
          py::arg("root_dir"), py::arg("keep") = 3,
          "Saves a checkpoint as root_dir/step-N and points root_dir/latest at it, keeping the newest `keep`.")
      .def(
          "load",
          [](Trainer& t, const py::object& checkpoint) {
            const std::string path = fspath(checkpoint);
            check(t.released([&] { return keel_trainer_load(t.handle(), path.c_str()); }));
          },
          py::arg("checkpoint"), "Loads a checkpoint: a step folder, or a root whose `latest` names one.")
      .def(
          "param_shapes",
          [](Trainer& t) {
            py::dict shapes;
            for (const auto& p : t.param_shapes()) shapes[py::str(p.name)] = py::tuple(py::cast(p.shape));
            return shapes;
          },
          "Parameter name -> global shape, in the model's order.")
      .def(
          "parameters",
          [](py::object self) {
            Trainer& t = self.cast<Trainer&>();
            py::dict arrays;
            for (const auto& p : t.param_shapes()) {
              keel_tensor tensor{};
              check(t.released([&] { return keel_trainer_param_tensor(t.handle(), p.name.c_str(), &tensor); }));
              arrays[py::str(p.name)] = numpy_view(tensor, self);
            }
            return arrays;
          },
          "Parameter name -> float32 NumPy array sharing the trainer's memory (writes change the\n"
          "model; each array keeps the trainer alive). Valid until the next step, train or load.\n"
          "Raises keel.Error when the parallel strategy does not keep whole parameters resident.")
      .def(
          "tensor",
          [](py::object self, const std::string& name) {
            Trainer& t = self.cast<Trainer&>();
            keel_tensor tensor{};
            check(t.released([&] { return keel_trainer_param_tensor(t.handle(), name.c_str(), &tensor); }));
            return Tensor{tensor, name, self};
          },
          py::arg("name"),
          "Parameter `name` as a keel.Tensor (DLPack: torch.from_dlpack shares its memory). Valid until\n"
          "the next step, train or load.")
      .def(
          "read_param",
          [](Trainer& t, const std::string& name) {
            const ParamShape& p = t.param_shape(name);
            py::array_t<float> copy(p.shape);
            float* data = copy.mutable_data();
            check(t.released([&] { return keel_trainer_read_param(t.handle(), name.c_str(), data, p.count); }));
            return copy;
          },
          py::arg("name"), "A float32 copy of parameter `name`.")
      .def(
          "write_param",
          [](Trainer& t, const std::string& name, const py::object& values) {
            const ParamShape& p = t.param_shape(name);
            auto array = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(values);
            if (!array) throw py::error_already_set();
            std::vector<py::ssize_t> shape(array.shape(), array.shape() + array.ndim());
            if (shape != p.shape)
              throw KeelError(KEEL_ERR_INVALID_ARGUMENT,
                              "write_param('" + name + "'): expected shape " + std::string(py::repr(py::cast(p.shape))) +
                                  ", found " + std::string(py::repr(py::cast(shape))));
            const float* data = array.data();
            check(t.released([&] { return keel_trainer_write_param(t.handle(), name.c_str(), data, p.count); }));
          },
          py::arg("name"), py::arg("values"), "Copies `values` (any array of the parameter's shape) into parameter `name`.");
}

}  // namespace keel_python
