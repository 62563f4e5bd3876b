// keel.register_data_source(name, factory): a data-kind plugin (abi/keel/data.h) fed by Python.
// factory(config) gets the plugin's part of the run's "data" section as a dict, plus "split"
// ("train" or "validation"), "micro_batch" (B) and "seq_len" (T), and returns an iterable of
// integer arrays of shape (B, T+1); row b gives tokens a[b, :-1] and targets a[b, 1:]. The
// factory is called at a split's first batch, when B and T are known. The core calls
// next_batch on its training thread with the GIL released; each call takes the GIL, pulls one
// array and copies it into the core's buffers. reset_split drops a split's iterator, so the
// next batch calls the factory again.
//
// Checkpoints keep the train split's place (data.h 0.16): an iterable with state_dict() and
// load_state_dict(state) (torchdata's StatefulDataLoader convention: loaded before its iterator
// is made) saves its state, which must be JSON; any other is replayed, its first batches pulled
// again and dropped, so a deterministic one resumes exactly.
#include <keel/data.h>
#include <pybind11/numpy.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>

#include "python_callback.hpp"
#include "python_plugin.hpp"

namespace keel_python {
namespace {

const char* split_name(int32_t split) { return split == KEEL_SPLIT_TRAIN ? "train" : "validation"; }

struct PythonDataSource {
  const PythonPlugin<keel_data_api>* plugin = nullptr;
  const keel_host* host = nullptr;
  py::dict config;
  py::object iterables[2];  // per split, what the factory returned; empty until its first batch or after reset_split
  py::object iterators[2];
  int64_t batches_taken[2] = {0, 0};
  py::object pending_position;  // the train split's checkpointed place, applied when it starts
};

// The most batches a resume replays: far beyond any run, small enough to count exactly.
constexpr int64_t kMostReplayedBatches = int64_t(1) << 40;

std::string shape_text(const py::array& array) {
  std::string text = "(";
  for (py::ssize_t d = 0; d < array.ndim(); ++d) text += (d ? ", " : "") + std::to_string(array.shape(d));
  return text + (array.ndim() == 1 ? ",)" : ")");
}

// Checks one yielded array and copies it into tokens (B,T) and targets (B,T).
void copy_batch(const py::object& item, int32_t batch, int32_t seq_len, int32_t* tokens, int32_t* targets) {
  py::array array = py::module_::import("numpy").attr("asarray")(item);
  const char kind = array.dtype().kind();
  const std::string expected = "an integer array of shape (" + std::to_string(batch) + ", " +
                               std::to_string(seq_len + 1) + ") = (micro_batch, seq_len + 1)";
  if ((kind != 'i' && kind != 'u') || array.ndim() != 2 || array.shape(0) != batch || array.shape(1) != seq_len + 1)
    throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "expected " + expected + ", found " +
                                                   std::string(py::str(array.dtype())) + " array of shape " +
                                                   shape_text(array));
  if (array.size() > 0) {
    const py::object lowest = array.attr("min")(), highest = array.attr("max")();  // any integer width
    if (lowest < py::int_(0) || highest > py::int_(std::numeric_limits<int32_t>::max()))
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "token ids must lie in [0, 2^31), found values from " +
                                                     std::string(py::str(lowest)) + " to " +
                                                     std::string(py::str(highest)));
  }
  auto values = py::array_t<int32_t, py::array::c_style | py::array::forcecast>::ensure(array);
  if (!values) throw py::error_already_set();
  const int32_t* rows = values.data();
  for (int32_t b = 0; b < batch; ++b) {
    const int32_t* row = rows + int64_t(b) * (seq_len + 1);
    for (int32_t t = 0; t < seq_len; ++t) {
      tokens[int64_t(b) * seq_len + t] = row[t];
      targets[int64_t(b) * seq_len + t] = row[t + 1];
    }
  }
}

bool stateful(const py::object& iterable) {
  return py::hasattr(iterable, "state_dict") && py::hasattr(iterable, "load_state_dict");
}

// Starts the train split where the checkpoint left it: the iterable's own state, loaded before
// its iterator is made (as a StatefulDataLoader expects), or its first batches replayed.
void start_at_position(PythonDataSource& source) {
  const py::dict position = source.pending_position;
  const int64_t batches = position["batches"].cast<int64_t>();
  const py::object& iterable = source.iterables[KEEL_SPLIT_TRAIN];
  if (position.contains("state")) {
    if (!stateful(iterable))
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "the checkpoint holds the train iterable's state_dict(), but the "
                                                 "factory's iterable now has no load_state_dict");
    iterable.attr("load_state_dict")(position["state"]);
    source.iterators[KEEL_SPLIT_TRAIN] = py::iter(iterable);
  } else {
    source.iterators[KEEL_SPLIT_TRAIN] = py::iter(iterable);
    for (int64_t b = 0; b < batches; ++b) {
      PyObject* next = PyIter_Next(source.iterators[KEEL_SPLIT_TRAIN].ptr());
      if (!next) {
        if (PyErr_Occurred()) throw py::error_already_set();
        throw KeelError(KEEL_ERR_IO, "resuming: the train iterator ended after " + std::to_string(b) + " of the " +
                                         std::to_string(batches) + " batches the checkpoint had taken");
      }
      Py_DECREF(next);
    }
  }
  source.batches_taken[KEEL_SPLIT_TRAIN] = batches;
  source.pending_position = py::object();
}

void start_split(PythonDataSource& source, int32_t split, int32_t batch, int32_t seq_len) {
  py::dict config = py::module_::import("copy").attr("deepcopy")(source.config);
  config["split"] = split_name(split);
  config["micro_batch"] = batch;
  config["seq_len"] = seq_len;
  source.iterables[split] = source.plugin->factory(config);
  if (split != KEEL_SPLIT_TRAIN || !source.pending_position) {
    source.iterators[split] = py::iter(source.iterables[split]);
    return;
  }
  try {
    start_at_position(source);
  } catch (...) {  // not half-started: the next batch tries the checkpoint's position again
    source.iterables[split] = source.iterators[split] = py::object();
    throw;
  }
}

keel_status validate_config(const keel_host*, const char*, const char*) {
  return KEEL_OK;  // the factory checks its own section when it is called
}

void destroy(void* handle) {
  if (!handle || !Py_IsInitialized()) return;  // after interpreter exit: leak rather than crash
  py::gil_scoped_acquire gil;
  delete static_cast<PythonDataSource*>(handle);
}

keel_status next_batch(void* handle, int32_t split, int32_t batch, int32_t seq_len, int32_t* tokens,
                       int32_t* targets) {
  auto* source = static_cast<PythonDataSource*>(handle);
  if (!source) return KEEL_ERR_INVALID_ARGUMENT;  // no host to carry a message
  return call_python(source->host, source->plugin->source, KEEL_ERR_IO, [&] {
    if (split != KEEL_SPLIT_TRAIN && split != KEEL_SPLIT_VALIDATION)
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "next_batch: unknown split " + std::to_string(split));
    if (batch <= 0 || seq_len <= 0 || !tokens || !targets)
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "next_batch: empty batch or NULL buffers");
    if (!source->iterators[split]) start_split(*source, split, batch, seq_len);
    const py::object& iterator = source->iterators[split];
    PyObject* next = PyIter_Next(iterator.ptr());
    if (!next) {
      if (PyErr_Occurred()) throw py::error_already_set();
      throw KeelError(KEEL_ERR_IO, std::string("the ") + split_name(split) + " iterator ended after " +
                                       std::to_string(source->batches_taken[split]) +
                                       " batches (yield batches for as long as the run needs them)");
    }
    copy_batch(py::reinterpret_steal<py::object>(next), batch, seq_len, tokens, targets);
    ++source->batches_taken[split];
  });
}

keel_status reset_split(void* handle, int32_t split) {
  auto* source = static_cast<PythonDataSource*>(handle);
  if (!source) return KEEL_ERR_INVALID_ARGUMENT;
  return call_python(source->host, source->plugin->source, KEEL_ERR_IO, [&] {
    if (split != KEEL_SPLIT_TRAIN && split != KEEL_SPLIT_VALIDATION)
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "reset_split: unknown split " + std::to_string(split));
    source->iterables[split] = source->iterators[split] = py::object();
    source->batches_taken[split] = 0;
    if (split == KEEL_SPLIT_TRAIN) source->pending_position = py::object();
  });
}

// {"batches": n} and, from a stateful iterable, "state": its state_dict().
keel_status save_position(void* handle, char* out, size_t capacity, size_t* out_length) {
  auto* source = static_cast<PythonDataSource*>(handle);
  if (!source) return KEEL_ERR_INVALID_ARGUMENT;
  return call_python(source->host, source->plugin->source, KEEL_ERR_INVALID_ARGUMENT, [&] {
    if (!out_length || (capacity > 0 && !out))
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "save_position: NULL output");
    py::dict position;
    if (source->pending_position) {  // resumed but not started: still where the checkpoint was
      position = py::dict(source->pending_position);
    } else {
      position["batches"] = source->batches_taken[KEEL_SPLIT_TRAIN];
      const py::object& iterable = source->iterables[KEEL_SPLIT_TRAIN];
      if (iterable && stateful(iterable)) position["state"] = iterable.attr("state_dict")();
    }
    std::string text;
    try {
      text = py::module_::import("json").attr("dumps")(position, py::arg("allow_nan") = false).cast<std::string>();
    } catch (py::error_already_set& e) {
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "the train iterable's state_dict() is not JSON (dicts, lists, "
                                                 "strings, finite numbers): " + std::string(e.what()));
    }
    *out_length = text.size();
    if (capacity > 0) {
      const size_t copied = std::min(text.size(), capacity - 1);
      std::memcpy(out, text.data(), copied);
      out[copied] = '\0';
    }
  });
}

// The text comes from a checkpoint: checked before anything trusts it.
keel_status restore_position(void* handle, const char* position_json) {
  auto* source = static_cast<PythonDataSource*>(handle);
  if (!source) return KEEL_ERR_INVALID_ARGUMENT;
  return call_python(source->host, source->plugin->source, KEEL_ERR_IO, [&] {
    if (!position_json) throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "restore_position: NULL text");
    py::object position;
    try {
      position = py::module_::import("json").attr("loads")(py::str(position_json));
    } catch (py::error_already_set& e) {
      throw KeelError(KEEL_ERR_IO, "the saved position is not JSON: " + std::string(e.what()));
    }
    const auto bad = [](const std::string& why) {
      return KeelError(KEEL_ERR_IO, "the saved position " + why + " (expected {\"batches\": n} with 0 <= n <= 2^40, "
                                    "and \"state\" from the iterable's state_dict())");
    };
    if (!py::isinstance<py::dict>(position)) throw bad("is not an object");
    const py::dict fields = position;
    for (const auto& [key, value] : fields)
      if (py::str(key).cast<std::string>() != "batches" && py::str(key).cast<std::string>() != "state")
        throw bad("has an unknown key '" + py::str(key).cast<std::string>() + "'");
    if (!fields.contains("batches") || !py::isinstance<py::int_>(fields["batches"]) ||
        py::isinstance<py::bool_>(fields["batches"]))
      throw bad("has no integer \"batches\"");
    const py::object batches = fields["batches"];
    if (batches < py::int_(0) || batches > py::int_(kMostReplayedBatches)) throw bad("has batches out of range");
    source->iterables[KEEL_SPLIT_TRAIN] = source->iterators[KEEL_SPLIT_TRAIN] = py::object();
    source->batches_taken[KEEL_SPLIT_TRAIN] = 0;
    source->pending_position = fields;
  });
}

struct DataKind {
  using Api = keel_data_api;
  static keel_status create(const PythonPlugin<Api>& plugin, const keel_host* host, const char* config_json,
                            const char*, void** out_source) {
    return call_python(host, plugin.source, KEEL_ERR_INVALID_CONFIG, [&] {
      if (!out_source) throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "create: out_source is NULL");
      auto source = std::make_unique<PythonDataSource>();
      source->plugin = &plugin;
      source->host = host;
      source->config = config_dict(config_json);
      *out_source = source.release();
    });
  }
};

}  // namespace

void bind_data_sources(py::module_& module) {
  module.def(
      "register_data_source",
      [](const std::string& name, py::object factory, const std::string& version, const std::string& description,
         bool replace) {
        if (!PyCallable_Check(factory.ptr())) throw py::type_error("register_data_source: factory must be callable");
        keel_data_api api{sizeof(keel_data_api), validate_config, nullptr,   destroy,         next_batch,
                          reset_split,           save_position,   restore_position};
        PythonPluginSlots<DataKind>::add(KEEL_KIND_DATA, "data source", name, std::move(factory), api, version,
                                         description, replace);
      },
      py::arg("name"), py::arg("factory"), py::arg("version") = "0.1.0",
      py::arg("description") = "a data source written in Python", py::arg("replace") = false,
      "Registers a data source for configs with \"data\": {\"plugin\": name, ...}.\n\n"
      "factory(config) gets the data section's own keys as a dict, plus \"split\" (\"train\" or\n"
      "\"validation\"), \"micro_batch\" and \"seq_len\", at the split's first batch, and returns\n"
      "an iterable of integer arrays of shape (micro_batch, seq_len + 1):\n"
      "tokens are a[:, :-1], next-token targets a[:, 1:]. Before each evaluation the validation\n"
      "split restarts by calling the factory again.\n\n"
      "Checkpoints keep the train split's place: an iterable with state_dict() and\n"
      "load_state_dict(state) saves its state (JSON-serialisable); any other is replayed on\n"
      "resume, its first batches drawn again and dropped, which is exact when it is deterministic.\n\n"
      "A name already taken (by a built-in or library plugin, or one registered from Python\n"
      "before) raises keel.Error naming who has it, unless replace=True: then this one serves\n"
      "trainers created afterwards (re-running a notebook cell that registers a name needs it).");
}

}  // namespace keel_python
