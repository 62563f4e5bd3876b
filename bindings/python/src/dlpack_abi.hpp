// DLPack's C structs (dlpack.h, v0.8: the unversioned "dltensor" capsule every NumPy and PyTorch
// release reads), declared here because they are a fixed ABI of a few fields and no Debian
// package ships the header. keel_tensor maps onto DLTensor field for field (abi/keel/types.h).
#pragma once

#include <keel/types.h>

#include <cstddef>
#include <cstdint>

namespace keel_python {

struct DLDevice {
  int32_t device_type;  // DLDeviceType: kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3 (KEEL_DEVICE_*)
  int32_t device_id;
};

struct DLDataType {
  uint8_t code;  // DLDataTypeCode: kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4 (KEEL_DTYPE_*)
  uint8_t bits;
  uint16_t lanes;
};

struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // NULL: compact row-major
  uint64_t byte_offset;
};

struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

static_assert(sizeof(DLDevice) == sizeof(keel_device), "keel_device must match DLDevice");
static_assert(sizeof(DLDataType) == sizeof(keel_dtype), "keel_dtype must match DLDataType");
static_assert(offsetof(DLTensor, shape) == 24 && offsetof(DLTensor, byte_offset) == 40 && sizeof(DLTensor) == 48,
              "DLTensor layout of dlpack.h");

}  // namespace keel_python
