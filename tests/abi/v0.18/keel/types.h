/* Values that cross the ABI in every direction: status codes, device and dtype tags, and the
   tensor descriptor. keel_tensor maps field for field onto DLPack's DLTensor (shape held
   inline, strides always NULL: Keel tensors are dense and row-major). */
#ifndef KEEL_TYPES_H
#define KEEL_TYPES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every call across the ABI returns one of these; the message is read with keel_last_error()
   on the calling thread. Outputs are left untouched when a call fails. */
typedef int32_t keel_status;
enum {
  KEEL_OK = 0,
  KEEL_ERR_INVALID_ARGUMENT = 1, /* a caller broke a documented precondition */
  KEEL_ERR_INVALID_CONFIG = 2,   /* a JSON section is wrong: the message names the path */
  KEEL_ERR_OUT_OF_MEMORY = 3,
  KEEL_ERR_UNIMPLEMENTED = 4,    /* a NULL slot, or an option this plugin does not support */
  KEEL_ERR_IO = 5,               /* files, data shards, checkpoints */
  KEEL_ERR_ABI_MISMATCH = 6,     /* a plugin built for another ABI major */
  KEEL_ERR_NOT_FOUND = 7,        /* a plugin, parameter or file that does not exist */
  KEEL_ERR_INTERNAL = 8,         /* a bug: the message says where */
  KEEL_ERR_NONFINITE = 9         /* NaN or Inf where a finite value was required */
};

/* DLPack's DLDeviceType values, so a descriptor converts without a table. */
enum { KEEL_DEVICE_CPU = 1, KEEL_DEVICE_CUDA = 2, KEEL_DEVICE_CUDA_HOST = 3,
       /* 0.8 (DLPack's kDLExtDev): memory host code must not read, such as a test backend's */
       KEEL_DEVICE_EXT = 12 };
typedef struct keel_device {
  int32_t device_type; /* KEEL_DEVICE_* */
  int32_t device_id;   /* ordinal of the device; 0 on the CPU */
} keel_device;

/* DLPack's DLDataTypeCode values. */
enum { KEEL_DTYPE_INT = 0, KEEL_DTYPE_UINT = 1, KEEL_DTYPE_FLOAT = 2, KEEL_DTYPE_BFLOAT = 4 };
typedef struct keel_dtype {
  uint8_t code;   /* KEEL_DTYPE_* */
  uint8_t bits;   /* 32 for fp32, 16 for bf16 */
  uint16_t lanes; /* 1 */
} keel_dtype;

#define KEEL_MAX_DIMS 4

typedef struct keel_tensor {
  void* data;             /* borrowed: the call that hands out the descriptor says how long it lives */
  keel_device device;
  int32_t ndim;           /* 0..KEEL_MAX_DIMS */
  keel_dtype dtype;
  int64_t shape[KEEL_MAX_DIMS]; /* entries past ndim are 0 */
  uint64_t byte_offset;   /* from data to the first element; 0 for tensors Keel makes */
} keel_tensor;

#ifdef __cplusplus
}
#endif
#endif
