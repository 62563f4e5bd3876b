// keel.Trainer: one training run over the embedding API (abi/keel/embed.h). Every call into the
// core runs with the GIL released, so other Python threads go on while it trains, and with the
// trainer's lock held, taken after the GIL is let go: a thread waiting for a busy trainer never
// holds the GIL that the busy thread's Python callbacks (data, optimizer, progress) need. The
// lock is recursive, so a progress callback may read the trainer it is called from.
#include <keel/host.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "keel_python.hpp"
#include "tensor.hpp"

namespace keel_python {
namespace {

bool starts_with_brace(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  return first != std::string::npos && text[first] == '{';
}

struct ParamShape {
  std::string name;
  std::vector<py::ssize_t> shape;
  size_t count = 1;
};

class Trainer {
 public:
  // `config`: a mapping (its JSON, NumPy and PyTorch scalars as plain numbers), JSON text (a str
  // whose first non-space character is '{'), or the path of a JSON file (str or os.PathLike).
  // `resume`: None, "latest" (the newest checkpoint of the config's train.checkpoint.dir) or a
  // checkpoint folder, loaded once the trainer is built.
  Trainer(const py::object& config, const py::object& resume) {
    keel_trainer* created = nullptr;
    const bool is_text = py::isinstance<py::str>(config) && starts_with_brace(config.cast<std::string>());
    if (is_text || py::isinstance(config, py::module_::import("collections.abc").attr("Mapping"))) {
      py::module_ config_module = py::module_::import("keel._config");
      const std::string json =
          is_text ? config.cast<std::string>()
                  : config_module.attr("to_json_text")(config_module.attr("with_run_folder")(config, resume))
                        .cast<std::string>();
      check(released([&] { return keel_trainer_create_from_json(json.c_str(), &created); }));
    } else {
      const std::string path = py::module_::import("os").attr("fspath")(config).cast<std::string>();
      check(released([&] { return keel_trainer_create_from_file(path.c_str(), &created); }));
    }
    native_.reset(created, keel_trainer_destroy);
    if (resume.is_none()) return;
    const std::string checkpoint = py::module_::import("os").attr("fspath")(resume).cast<std::string>();
    check(released([&] { return keel_trainer_load(handle(), checkpoint.c_str()); }));
  }
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // The native trainer; read inside released() (under the trainer's lock, which close() takes).
  keel_trainer* handle() const {
    if (!native_)
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "this Trainer is closed (Trainer.close(), or the end of its with block)");
    return native_.get();
  }
  // The native trainer, for a keel.Tensor over its memory: a closed Trainer's memory lives on
  // until its last Tensor (and every NumPy or DLPack view of one) is gone.
  std::shared_ptr<keel_trainer> share() {
    std::shared_ptr<keel_trainer> copy;
    check(released([&] {
      handle();
      copy = native_;
      return KEEL_OK;
    }));
    return copy;
  }
  // Frees the native trainer (its memory, plugins and open files) now, or when the last
  // keel.Tensor of it goes; every later call raises. A second close does nothing. Refused from
  // inside a call of this trainer (a train callback, a Python plugin it runs).
  void close() {
    std::shared_ptr<keel_trainer> last;
    bool inside = false;
    {
      py::gil_scoped_release no_gil;
      std::lock_guard<std::recursive_mutex> lock(mutex_);  // waits for other threads' calls to end
      inside = depth_ > 0;                                   // this thread's own call is under way
      if (!inside) last.swap(native_);
    }
    if (inside)
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "Trainer.close: called inside a call of this trainer (a train "
                                                 "callback or a Python plugin it runs); close it after that returns "
                                                 "(a callback can stop training with a truthy return)");
    // `last` (maybe the final owner) destroys the native trainer here, with the GIL held: a Python
    // plugin's destructor may run.
  }
  bool closed() {
    bool is_closed = false;
    check(released([&] {
      is_closed = !native_;
      return KEEL_OK;
    }));
    return is_closed;
  }

  int32_t vocab_size() {
    int32_t vocab = 0;
    check(released([&] { return keel_trainer_vocab_size(handle(), &vocab); }));
    return vocab;
  }

  // Runs `call` (returning a keel_status) without the GIL and with this trainer locked.
  template <typename Call>
  keel_status released(Call&& call) {
    take_python_error();  // none from an earlier call may pass for this one's
    py::gil_scoped_release no_gil;
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    struct Depth {  // close() refuses while this thread is inside a call (a callback's re-entry)
      int& depth;
      explicit Depth(int& d) : depth(d) { ++depth; }
      ~Depth() { --depth; }
    } inside{depth_};
    return call();
  }

  const std::vector<ParamShape>& param_shapes() {
    if (!param_shapes_.empty()) return param_shapes_;
    size_t count = 0;
    check(released([&] { return keel_trainer_param_count(handle(), &count); }));
    std::vector<ParamShape> shapes(count);
    for (size_t i = 0; i < count; ++i) {
      keel_param_info info{};
      info.struct_size = sizeof(info);
      check(released([&] { return keel_trainer_param_info(handle(), i, &info); }));
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
  std::shared_ptr<keel_trainer> native_;
  std::recursive_mutex mutex_;
  int depth_ = 0;  // calls under way on the thread holding mutex_
  std::vector<ParamShape> param_shapes_;  // fixed for the trainer's life
};

// The token ids of a prompt: any sequence of ints (list, tuple, NumPy array), else a TypeError
// that names the method and the argument as Python sees them.
std::vector<int32_t> token_ids(const py::object& value, const char* method, const char* argument) {
  auto type_name = [](py::handle h) { return std::string(py::str(py::type::of(h).attr("__name__"))); };
  if (!py::isinstance<py::sequence>(value) || py::isinstance<py::bytes>(value))
    throw py::type_error(std::string(method) + ": " + argument + " must be a str or a sequence of int token ids, found " +
                         type_name(value));
  std::vector<int32_t> ids;
  for (py::handle item : value) {
    if (!py::hasattr(item, "__index__"))
      throw py::type_error(std::string(method) + ": " + argument + " must hold int token ids, found an element of type " +
                           type_name(item));
    const py::int_ index = py::reinterpret_borrow<py::object>(item).attr("__index__")();
    const bool in_range = index >= py::int_(0) && index <= py::int_(INT32_MAX);
    const std::string shown = py::str(index);
    if (!in_range)
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, std::string(method) + ": token id " + shown + " in " + argument +
                                                     " is outside [0, 2^31)");
    const long long id = index.cast<long long>();
    if (id < 0 || id > INT32_MAX)
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, std::string(method) + ": token id " + std::to_string(id) + " in " +
                                                     argument + " is outside [0, 2^31)");
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

keel_step_metrics last_metrics(Trainer& t) {
  keel_step_metrics metrics{};
  metrics.struct_size = sizeof(metrics);
  check(t.released([&] { return keel_trainer_last_metrics(t.handle(), &metrics); }));
  return metrics;
}

py::dict metrics_dict(const keel_step_metrics& m) {
  py::dict d;
  d["step"] = m.step;
  d["loss"] = m.loss;
  d["lr"] = m.lr;
  d["grad_norm"] = m.grad_norm;
  d["tokens_per_s"] = m.tokens_per_s;
  d["mfu"] = m.mfu;
  d["step_ms"] = m.step_ms;
  d["tokens"] = m.tokens;
  py::dict phases;
  phases["data"] = m.data_ms;
  phases["forward"] = m.forward_ms;
  phases["backward"] = m.backward_ms;
  phases["optimizer"] = m.optimizer_ms;
  d["time_ms"] = phases;
  if (!std::isnan(m.val_loss)) d["val_loss"] = m.val_loss;  // the step evaluated (an inf loss too)
  if (m.checkpoint) d["checkpoint"] = std::string(m.checkpoint);  // the step saved
  // The model's own metrics (ABI 0.19), by name, when it reports any.
  const bool has_model = m.struct_size >= offsetof(keel_step_metrics, model_json) + sizeof(m.model_json);
  if (has_model && m.model_json && std::string(m.model_json) != "{}")
    d["model"] = py::module_::import("json").attr("loads")(std::string(m.model_json));
  return d;
}

// What train's C callback needs: the Python callable and the first error it raised (or a
// pending Ctrl-C), re-raised in the caller once the core has stopped.
struct ProgressCallback {
  py::object callback;
  std::exception_ptr error;
};

// A KeyboardInterrupt (Ctrl-C, or raised by the callback) stops as an interrupt, which saves the
// step where the config's train.checkpoint.on_interrupt asks; any other exception just stops.
int32_t on_step(const keel_step_metrics* metrics, void* user_data) {
  auto* progress = static_cast<ProgressCallback*>(user_data);
  py::gil_scoped_acquire gil;
  try {
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (progress->callback.is_none()) return 0;
    return py::bool_(progress->callback(metrics_dict(*metrics))) ? 1 : 0;
  } catch (py::error_already_set& e) {
    const bool interrupted = e.matches(PyExc_KeyboardInterrupt);
    progress->error = std::current_exception();
    return interrupted ? KEEL_STEP_INTERRUPTED : 1;
  } catch (...) {
    progress->error = std::current_exception();
    return 1;
  }
}

// A (batch, seq_len) integer array of token ids (keel/__init__.py's _as_batch has turned torch
// tensors, DLPack and nested lists into NumPy already).
py::array_t<int32_t, py::array::c_style | py::array::forcecast> id_rows(const py::object& value, const char* method,
                                                                       const char* argument) {
  py::array array = py::module_::import("numpy").attr("asarray")(value);
  if (array.dtype().kind() != 'i' && array.dtype().kind() != 'u')
    throw KeelError(KEEL_ERR_INVALID_ARGUMENT, std::string(method) + ": " + argument + " must be integers, found dtype " +
                                                   std::string(py::str(array.dtype())));
  if (array.ndim() != 2)
    throw KeelError(KEEL_ERR_INVALID_ARGUMENT, std::string(method) + ": " + argument + " must be (batch, seq_len), found " +
                                                   std::to_string(array.ndim()) + " dimensions");
  return py::array_t<int32_t, py::array::c_style | py::array::forcecast>::ensure(array);
}

// The caller's tokens, targets and (a packed batch) positions, checked to be one shape, as the C
// calls take them.
struct OwnBatch {
  py::array_t<int32_t, py::array::c_style | py::array::forcecast> tokens, targets, positions;
  bool packed = false;
  int32_t batch = 0, seq_len = 0;
  OwnBatch(const py::object& token_rows, const py::object& target_rows, const py::object& position_rows,
           const char* method)
      : tokens(id_rows(token_rows, method, "tokens")), targets(id_rows(target_rows, method, "targets")),
        packed(!position_rows.is_none()) {
    same_shape(targets, "targets", method);
    if (packed) {
      positions = id_rows(position_rows, method, "positions");
      same_shape(positions, "positions", method);
    }
    batch = int32_t(tokens.shape(0));
    seq_len = int32_t(tokens.shape(1));
  }
  const int32_t* position_data() const { return packed ? positions.data() : nullptr; }

 private:
  void same_shape(const py::array_t<int32_t, py::array::c_style | py::array::forcecast>& other, const char* what,
                  const char* method) const {
    if (tokens.shape(0) != other.shape(0) || tokens.shape(1) != other.shape(1))
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, std::string(method) + ": tokens are (" + std::to_string(tokens.shape(0)) +
                                                     ", " + std::to_string(tokens.shape(1)) + ") but " + what + " (" +
                                                     std::to_string(other.shape(0)) + ", " +
                                                     std::to_string(other.shape(1)) + "): they must match");
  }
};

std::string fspath(const py::object& path) { return py::module_::import("os").attr("fspath")(path).cast<std::string>(); }

}  // namespace

void bind_trainer(py::module_& module) {
  module.def(
      "set_log_level",
      [](const std::string& level) {
        static const std::pair<const char*, int32_t> kLevels[] = {
            {"debug", KEEL_LOG_DEBUG}, {"info", KEEL_LOG_INFO}, {"warn", KEEL_LOG_WARN}, {"error", KEEL_LOG_ERROR}};
        for (const auto& [name, value] : kLevels)
          if (level == name) return check(keel_set_log_level(value));
        throw KeelError(KEEL_ERR_INVALID_ARGUMENT,
                        "keel.set_log_level: expected \"debug\", \"info\", \"warn\" or \"error\", found \"" + level + "\"");
      },
      py::arg("level"),
      "The least severe of Keel's log lines (stderr) printed from now on, for every trainer and\n"
      "plugin of the process: \"debug\", \"info\" (the default, or KEEL_LOG_LEVEL's), \"warn\", \"error\".");
  py::class_<Trainer>(module, "Trainer",
                      "A training run: Trainer(config, resume=None) with config a dict (the JSON of a Keel config) or\n"
                      "the path of a JSON config file; resume \"latest\" (the newest checkpoint of\n"
                      "train.checkpoint.dir) or a checkpoint folder continues from it. A dict that names no output\n"
                      "path writes to runs/run/version_N, a new N each run (resume=\"latest\": the highest).\n"
                      "Raises keel.ConfigError (a ValueError) naming the JSON path of a bad key, keel.PluginNotFound\n"
                      "(a LookupError), keel.MissingFile (a FileNotFoundError).")
      .def(py::init<const py::object&, const py::object&>(), py::arg("config"), py::arg("resume") = py::none())
      .def(
          "step",
          [](Trainer& t) {
            keel_step_metrics metrics{};
            metrics.struct_size = sizeof(metrics);
            check(t.released([&] { return keel_trainer_step(t.handle(), &metrics); }));
            return metrics_dict(metrics);
          },
          "One optimizer step; returns its metrics: step, loss, lr, grad_norm, tokens_per_s, mfu, step_ms,\n"
          "tokens (trained so far) and time_ms (the step's data, forward, backward and optimizer phases).")
      .def("close", &Trainer::close,
           "Frees the trainer now (memory, plugins, open files) rather than when Python collects it;\n"
           "every later call raises keel.InvalidArgument. Arrays from parameters() and keel.Tensors\n"
           "stay valid: the memory goes with the last of them. `with keel.Trainer(...) as t:` closes\n"
           "at the block's end. A second close does nothing.")
      .def_property_readonly("closed", &Trainer::closed)
      .def_property_readonly("vocab_size", &Trainer::vocab_size,
                             "The model's vocabulary size (model.vocab_size; logits have this many columns).")
      .def(
          "_set_verbose",
          [](Trainer& t, bool verbose) {
            check(t.released([&] { return keel_trainer_set_verbose(t.handle(), verbose ? 1 : 0); }));
          },
          py::arg("verbose"))
      .def(
          "_step_on",
          [](Trainer& t, const py::object& tokens, const py::object& targets, const py::object& positions) {
            const OwnBatch b(tokens, targets, positions, "Trainer.step");
            keel_step_metrics metrics{};
            metrics.struct_size = sizeof(metrics);
            check(t.released([&] {
              return keel_trainer_step_on_packed(t.handle(), b.tokens.data(), b.targets.data(), b.position_data(),
                                                 b.batch, b.seq_len, &metrics);
            }));
            return metrics_dict(metrics);
          },
          py::arg("tokens"), py::arg("targets"), py::arg("positions") = py::none())
      .def(
          "_forward_backward",
          [](Trainer& t, const py::object& tokens, const py::object& targets, const py::object& positions) {
            const OwnBatch b(tokens, targets, positions, "Trainer.forward_backward");
            float loss = 0;
            check(t.released([&] {
              return keel_trainer_forward_backward_packed(t.handle(), b.tokens.data(), b.targets.data(),
                                                          b.position_data(), b.batch, b.seq_len, &loss);
            }));
            return loss;
          },
          py::arg("tokens"), py::arg("targets"), py::arg("positions") = py::none())
      .def(
          "grad",
          [](Trainer& t, const std::string& name) {
            const ParamShape& p = t.param_shape(name);
            py::array_t<float> copy(p.shape);
            float* data = copy.mutable_data();
            check(t.released([&] { return keel_trainer_read_grad(t.handle(), name.c_str(), data, p.count); }));
            return copy;
          },
          py::arg("name"),
          "A float32 copy of parameter `name`'s gradient from the last forward_backward, as the\n"
          "update will see it (under ddp the data-parallel mean); readable until optimizer_step.")
      .def(
          "optimizer_step",
          [](Trainer& t) {
            keel_step_metrics metrics{};
            metrics.struct_size = sizeof(metrics);
            check(t.released([&] { return keel_trainer_optimizer_step(t.handle(), &metrics); }));
            return metrics_dict(metrics);
          },
          "The update from the last forward_backward's gradients, as step() makes it (the gradient\n"
          "norm, train.grad_clip, the scheduled learning rate, the strategy); returns the step's\n"
          "metrics. keel.InvalidArgument when no forward_backward came first.")
      .def(
          "train",
          [](Trainer& t, std::optional<int64_t> requested, py::object callback) {
            if (requested && *requested < 0)
              throw KeelError(KEEL_ERR_INVALID_ARGUMENT,
                              "Trainer.train: steps must be >= 0 (or None), found " + std::to_string(*requested));
            const int64_t steps = requested ? *requested : KEEL_TRAIN_TO_CONFIGURED_STEPS;
            ProgressCallback progress{std::move(callback), nullptr};
            // The core prints progress to the process's stdout: what Python printed before goes first.
            py::module_::import("sys").attr("stdout").attr("flush")();
            const keel_status status =
                t.released([&] { return keel_trainer_train(t.handle(), steps, on_step, &progress); });
            if (progress.error) {
              // The callback's exception goes first; a failure after it (the save of an
              // interrupt) must not vanish with it.
              if (status != KEEL_OK)
                py::module_::import("warnings").attr("warn")(
                    "Trainer.train: after the callback stopped training: " + std::string(keel_last_error()),
                    py::module_::import("builtins").attr("RuntimeWarning"));
              std::rethrow_exception(progress.error);
            }
            check(status);
          },
          py::arg("steps") = py::none(), py::arg("callback") = py::none(),
          "Trains `steps` more optimizer steps (None: up to train.steps) the way `keel run` does,\n"
          "calling callback(metrics) (with val_loss on evaluation steps, checkpoint on saving ones)\n"
          "after each; a truthy return stops after that step, and an exception in the callback\n"
          "stops training and is re-raised. Like `keel run` it prints progress (stdout), appends to\n"
          "train.metrics_path (one metrics file across calls; a trainer that has stepped or was\n"
          "loaded continues it), writes TensorBoard events to train.tensorboard_dir, evaluates at\n"
          "every train.eval_every steps (the record gets val_loss) and at step train.steps, and saves\n"
          "a checkpoint to train.checkpoint.dir at every train.checkpoint.every steps. Unlike `keel\n"
          "run` it saves no checkpoint and prints no sample when it returns (call save(), generate()),\n"
          "except that a KeyboardInterrupt (Ctrl-C, or raised by the callback) saves the step it\n"
          "stopped after to train.checkpoint.dir when train.checkpoint.on_interrupt is true.\n"
          "The learning-rate schedule's horizon is always train.steps, not `steps`: train(10) ten\n"
          "times follows the same schedule as one train(100) or `keel run` with train.steps 100, and\n"
          "steps past train.steps train at the schedule's final value.")
      .def(
          "logits",
          [](Trainer& t, const py::object& tokens) {
            py::array array = py::module_::import("numpy").attr("asarray")(tokens);
            if (array.dtype().kind() != 'i' && array.dtype().kind() != 'u')
              throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "Trainer.logits: tokens must be integers, found dtype " +
                                                             std::string(py::str(array.dtype())));
            const bool one_row = array.ndim() == 1;
            if (array.ndim() != 1 && array.ndim() != 2)
              throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "Trainer.logits: tokens must be (batch, seq_len) or (seq_len,), found " +
                                                             std::to_string(array.ndim()) + " dimensions");
            auto rows = py::array_t<int32_t, py::array::c_style | py::array::forcecast>::ensure(array);
            const int32_t batch = one_row ? 1 : int32_t(rows.shape(0));
            const int32_t seq_len = int32_t(rows.shape(one_row ? 0 : 1));
            const int32_t vocab = t.vocab_size();
            std::vector<py::ssize_t> shape{batch, seq_len, vocab};
            if (one_row) shape.erase(shape.begin());
            py::array_t<float> out(shape);
            const int32_t* data = rows.data();
            float* logits = out.mutable_data();
            const size_t count = size_t(out.size());
            check(t.released([&] { return keel_trainer_logits(t.handle(), data, batch, seq_len, logits, count); }));
            return out;
          },
          py::arg("tokens"),
          "Logits of an inference forward: tokens an integer array or nested list (batch, seq_len),\n"
          "seq_len at most data.seq_len, gives a float32 array (batch, seq_len, vocab) over the true\n"
          "vocabulary; a 1-D (seq_len,) gives (seq_len, vocab). Under mpirun every rank must call\n"
          "it with the same tokens (a sharding strategy gathers parameters over the group).")
      .def(
          "_generate_each",
          [](Trainer& t, const py::object& prompt, const py::int_& n, std::optional<double> temperature,
             std::optional<uint64_t> seed, int32_t top_k, double top_p, bool use_cache, const py::object& on_token) {
            const std::vector<int32_t> tokens = token_ids(prompt, "Trainer.generate", "prompt");
            if (n < py::int_(0) || n > py::int_(int64_t(1) << 62))
              throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "Trainer.generate: n must be a whole number from 0 to 2^62, found " +
                                                             std::string(py::str(n)));
            const int64_t max_count = n.cast<int64_t>();  // here: the GIL is released below
            const uint64_t key = seed ? *seed : py::module_::import("random").attr("getrandbits")(64).cast<uint64_t>();
            if (temperature && !(*temperature >= 0))
              throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "Trainer.generate: temperature must be >= 0");
            // Each token reaches Python as it is drawn (holding the GIL for that moment only):
            // on_token may stop, and a pending Ctrl-C stops after the token in progress.
            struct Streaming {
              std::vector<int32_t> tokens;
              py::object on_token;
              std::exception_ptr error;
            } streaming{{}, on_token, nullptr};
            auto callback = [](void* user, int32_t token, int64_t index) -> int32_t {
              auto* s = static_cast<Streaming*>(user);
              py::gil_scoped_acquire gil;
              try {
                s->tokens.push_back(token);
                if (PyErr_CheckSignals() != 0) throw py::error_already_set();
                return !s->on_token.is_none() && py::bool_(s->on_token(token, index)) ? 1 : 0;
              } catch (...) {
                s->error = std::current_exception();
                return 1;
              }
            };
            check(t.released([&] { return keel_trainer_set_kv_cache(t.handle(), use_cache ? 1 : 0); }));
            check(t.released([&] {
              return keel_trainer_generate_each(t.handle(), tokens.data(), tokens.size(), max_count,
                                                temperature ? *temperature : -1.0, top_k, top_p, key, callback,
                                                &streaming, nullptr);
            }));
            if (streaming.error) std::rethrow_exception(streaming.error);
            return streaming.tokens;
          },
          py::arg("prompt"), py::arg("n"), py::arg("temperature") = py::none(), py::arg("seed") = py::none(),
          py::arg("top_k") = 0, py::arg("top_p") = 1.0, py::arg("use_cache") = true, py::arg("on_token") = py::none(),
          "The generated token ids after one prompt of token ids (Trainer.generate's engine): on_token(token,\n"
          "index) sees each as it is drawn and returns True to stop after it.")
      .def(
          "export_hf",
          [](Trainer& t, const py::object& folder, const py::object& tokenizer) {
            const std::string path = fspath(folder), tokenizer_path = tokenizer.is_none() ? "" : fspath(tokenizer);
            check(t.released([&] {
              return keel_trainer_export_hf_tokenizer(t.handle(), path.c_str(),
                                                      tokenizer.is_none() ? nullptr : tokenizer_path.c_str());
            }));
          },
          py::arg("folder"), py::arg("tokenizer") = py::none(),
          "Writes folder/model.safetensors and folder/config.json as `keel export` does: what\n"
          "transformers' from_pretrained loads; with a tokenizer (a tokenizer.json or a folder holding\n"
          "one) that too, its ids as bos/eos/pad. Every rank calls it (rank 0 writes).")
      .def(
          "_load_hf",
          [](Trainer& t, const std::string& path) {
            check(t.released([&] { return keel_trainer_load_hf(t.handle(), path.c_str()); }));
          },
          py::arg("path"))
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
          [](Trainer& t) { return metrics_dict(last_metrics(t)); },
          "The metrics of the last step (zeros before the first; after load(), the checkpoint's step\n"
          "and zeros).")
      .def_property_readonly(
          "global_step",
          [](Trainer& t) { return last_metrics(t).step; },
          "Optimizer steps done so far: 0 for a new trainer, the checkpoint's step right after load().")
      .def(
          "save",
          [](Trainer& t, const py::object& root_dir, std::optional<int32_t> keep) {
            if (root_dir.is_none()) {
              if (keep) throw py::value_error("Trainer.save: keep goes with a root_dir; without one, the config's "
                                              "train.checkpoint.keep applies");
              check(t.released([&] { return keel_trainer_save(t.handle(), nullptr, 0); }));
              return;
            }
            const std::string root = fspath(root_dir);
            const int32_t kept = keep ? *keep : 3;
            if (kept < 1) throw py::value_error("Trainer.save: keep must be >= 1, found " + std::to_string(kept));
            check(t.released([&] { return keel_trainer_save(t.handle(), root.c_str(), kept); }));
          },
          py::arg("root_dir") = py::none(), py::arg("keep") = py::none(),
          "Saves a checkpoint as root_dir/step-N and points root_dir/latest at it, keeping the newest\n"
          "`keep` (3). save() with no root_dir saves where the run does: train.checkpoint.dir, keeping\n"
          "train.checkpoint.keep.")
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
              // Based on a keel.Tensor, which keeps the native trainer alive past close().
              arrays[py::str(p.name)] = numpy_view(tensor, py::cast(Tensor{tensor, p.name, self, t.share()}));
            }
            return arrays;
          },
          "Parameter name -> float32 NumPy array sharing the trainer's memory (writes change the\n"
          "model; each array keeps the trainer alive). Valid until the next step, train or load; close() keeps them.\n"
          "Raises keel.Error when the parallel strategy does not keep whole parameters resident.")
      .def(
          "tensor",
          [](py::object self, const std::string& name) {
            Trainer& t = self.cast<Trainer&>();
            keel_tensor tensor{};
            check(t.released([&] { return keel_trainer_param_tensor(t.handle(), name.c_str(), &tensor); }));
            return Tensor{tensor, name, self, t.share()};
          },
          py::arg("name"),
          "Parameter `name` as a keel.Tensor (DLPack: torch.from_dlpack shares its memory). Valid until\n"
          "the next step, train or load.")
      .def(
          "read_param",
          [](Trainer& t, const std::string& name, bool gather) {
            if (gather) {  // every rank takes part: first the shape, then the values
              int64_t shape[KEEL_MAX_DIMS] = {};
              int32_t ndim = 0;
              check(t.released([&] { return keel_trainer_gather_param(t.handle(), name.c_str(), nullptr, 0, shape, &ndim); }));
              py::array_t<float> whole(std::vector<py::ssize_t>(shape, shape + ndim));
              float* data = whole.mutable_data();
              const size_t count = size_t(whole.size());
              check(t.released(
                  [&] { return keel_trainer_gather_param(t.handle(), name.c_str(), data, count, shape, &ndim); }));
              return whole;
            }
            const ParamShape& p = t.param_shape(name);
            py::array_t<float> copy(p.shape);
            float* data = copy.mutable_data();
            check(t.released([&] { return keel_trainer_read_param(t.handle(), name.c_str(), data, p.count); }));
            return copy;
          },
          py::arg("name"), py::kw_only(), py::arg("gather") = false,
          "A float32 copy of parameter `name`. With gather=True the whole tensor whatever the layout\n"
          "(tensor-parallel pieces, ZeRO shards, pipeline stages): every rank must call it, with the\n"
          "same name, and every rank gets the whole tensor.")
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
