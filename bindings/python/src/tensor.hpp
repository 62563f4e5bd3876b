// keel.Tensor: a live tensor of the core (a keel_tensor descriptor) that NumPy, PyTorch and JAX
// take without copying, through DLPack (__dlpack__, __dlpack_device__) or __array__.
#pragma once

#include <keel/types.h>
#include <pybind11/numpy.h>

#include <memory>
#include <string>

#include "keel_python.hpp"

namespace keel_python {

struct Tensor {
  keel_tensor descriptor;
  std::string name;
  py::object owner;  // the keel.Trainer whose memory this is: kept alive with the tensor
  std::shared_ptr<keel_trainer> native;  // and its native trainer, past Trainer.close()
};

// A NumPy array over the descriptor's memory, keeping `base` alive. Host memory only.
py::array numpy_view(const keel_tensor& descriptor, py::handle base);

}  // namespace keel_python
