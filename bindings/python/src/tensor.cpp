// keel.Tensor and its DLPack export. The capsule's DLManagedTensor holds a reference to the
// keel.Tensor (and through it the trainer), dropped by the consumer's call to the deleter.
#include "tensor.hpp"

#include <string>
#include <vector>

#include "dlpack_abi.hpp"

namespace keel_python {
namespace {

constexpr const char* kCapsuleName = "dltensor";       // DLPack: a capsule not yet consumed
constexpr const char* kUsedCapsuleName = "used_dltensor";

std::string dtype_name(const keel_dtype& dtype) {
  const std::string bits = std::to_string(dtype.bits);
  switch (dtype.code) {
    case KEEL_DTYPE_FLOAT: return "float" + bits;
    case KEEL_DTYPE_INT: return "int" + bits;
    case KEEL_DTYPE_UINT: return "uint" + bits;
    case KEEL_DTYPE_BFLOAT: return "bfloat" + bits;
    default: return "dtype code " + std::to_string(dtype.code) + " bits " + bits;
  }
}

struct DLPackHolder {
  DLManagedTensor managed{};
  int64_t shape[KEEL_MAX_DIMS] = {};
  PyObject* tensor = nullptr;  // a new reference to the keel.Tensor
};

void delete_holder(DLManagedTensor* managed) {
  auto* holder = static_cast<DLPackHolder*>(managed->manager_ctx);
  if (Py_IsInitialized()) {
    py::gil_scoped_acquire gil;
    Py_XDECREF(holder->tensor);
  }
  delete holder;
}

// Runs when the capsule dies; a consumer that took the tensor renamed it and calls the deleter itself.
void destroy_capsule(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, kCapsuleName)) return;
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);  // a destructor must not disturb a pending exception
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kCapsuleName));
  if (managed && managed->deleter) managed->deleter(managed);
  PyErr_Restore(type, value, traceback);
}

py::capsule to_dlpack(py::object self) {
  const Tensor& tensor = self.cast<const Tensor&>();
  auto* holder = new DLPackHolder;
  const keel_tensor& d = tensor.descriptor;
  for (int32_t i = 0; i < d.ndim; ++i) holder->shape[i] = d.shape[i];
  holder->managed.dl_tensor = {d.data, {d.device.device_type, d.device.device_id}, d.ndim,
                               {d.dtype.code, d.dtype.bits, d.dtype.lanes}, holder->shape, nullptr, d.byte_offset};
  holder->managed.manager_ctx = holder;
  holder->managed.deleter = delete_holder;
  holder->tensor = self.release().ptr();
  PyObject* capsule = PyCapsule_New(&holder->managed, kCapsuleName, destroy_capsule);
  if (!capsule) {
    delete_holder(&holder->managed);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(capsule);
}

py::tuple shape_of(const keel_tensor& descriptor) {
  py::tuple shape(descriptor.ndim);
  for (int32_t i = 0; i < descriptor.ndim; ++i) shape[i] = descriptor.shape[i];
  return shape;
}

}  // namespace

py::array numpy_view(const keel_tensor& descriptor, py::handle base) {
  if (descriptor.device.device_type != KEEL_DEVICE_CPU && descriptor.device.device_type != KEEL_DEVICE_CUDA_HOST)
    throw KeelError(KEEL_ERR_UNIMPLEMENTED, "a NumPy array needs host memory; this tensor lives on device type " +
                                                std::to_string(descriptor.device.device_type) +
                                                " (use DLPack: torch.from_dlpack)");
  auto dtype = py::dtype::from_args(py::str(dtype_name(descriptor.dtype)));  // no bfloat16: TypeError
  std::vector<py::ssize_t> shape(descriptor.shape, descriptor.shape + descriptor.ndim);
  auto* data = static_cast<char*>(descriptor.data) + descriptor.byte_offset;
  return py::array(dtype, shape, data, base);  // C-contiguous strides; `base` keeps the memory's owner alive
}

void bind_tensor(py::module_& module) {
  py::class_<Tensor>(module, "Tensor",
                     "A live tensor of a keel.Trainer (torch.from_dlpack(t) and numpy.asarray(t) share its\n"
                     "memory). Valid until the trainer's next step, train or load (close() keeps it alive).")
      .def_property_readonly("name", [](const Tensor& t) { return t.name; })
      .def_property_readonly("shape", [](const Tensor& t) { return shape_of(t.descriptor); })
      .def_property_readonly("dtype", [](const Tensor& t) { return dtype_name(t.descriptor.dtype); })
      .def_property_readonly("device",
                             [](const Tensor& t) { return py::make_tuple(t.descriptor.device.device_type,
                                                                         t.descriptor.device.device_id); })
      .def_property_readonly("data_ptr",
                             [](const Tensor& t) {
                               return reinterpret_cast<uintptr_t>(t.descriptor.data) + t.descriptor.byte_offset;
                             })
      .def("__dlpack__", [](py::object self, py::kwargs) { return to_dlpack(std::move(self)); },
           "A DLPack capsule over this tensor's memory. Keyword arguments of newer DLPack\n"
           "versions (stream, max_version, ...) are accepted and ignored: Keel's host tensors\n"
           "need no stream and are exported as the unversioned capsule.")
      .def("__dlpack_device__",
           [](const Tensor& t) { return py::make_tuple(t.descriptor.device.device_type, t.descriptor.device.device_id); })
      .def(
          "__array__",
          [](py::object self, py::object dtype, py::object copy) {
            py::object view = numpy_view(self.cast<const Tensor&>().descriptor, self);
            if (!dtype.is_none()) view = view.attr("astype")(dtype, py::arg("copy") = false);
            if (!copy.is_none() && copy.cast<bool>()) view = view.attr("copy")();
            return view;
          },
          py::arg("dtype") = py::none(), py::arg("copy") = py::none())
      .def("__repr__", [](const Tensor& t) {
        return "keel.Tensor(" + t.name + ", shape=" + std::string(py::repr(shape_of(t.descriptor))) + ", " +
               dtype_name(t.descriptor.dtype) + ")";
      });
}

}  // namespace keel_python
