// keel_dtype and KEEL_REDUCE_* to MPI's datatypes and ops: the one table of what the plugin
// can move and reduce. Shared by MPI worlds and the world of one, so both refuse the same things.
#pragma once

#include <keel/comm.h>
#include <mpi.h>

#include <cstdint>
#include <cstring>
#include <string>

#include <keel_support/common/abi_guard.hpp>

namespace keel_mpi {

struct ElementType {
  MPI_Datatype mpi;
  size_t bytes;
  bool bf16 = false;  // moved as 16-bit words, reduced by the ops below
};

// bf16 has no MPI type: it travels as 16-bit words and is reduced by a user-defined op that
// widens to fp32, adds (or takes the maximum) and rounds to nearest even once.
inline float bf16_widen(uint16_t bits) {
  uint32_t word = uint32_t(bits) << 16;
  float value;
  std::memcpy(&value, &word, sizeof value);
  return value;
}
inline uint16_t bf16_round(float value) {
  uint32_t word;
  std::memcpy(&word, &value, sizeof word);
  if ((word & 0x7f800000u) == 0x7f800000u && (word & 0x007fffffu)) return uint16_t((word >> 16) | 0x40);  // NaN stays NaN
  word += 0x7fffu + ((word >> 16) & 1u);
  return uint16_t(word >> 16);
}
template <bool kMax>
void bf16_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = bf16_widen(a[i]), y = bf16_widen(b[i]);
    b[i] = bf16_round(kMax ? (x > y ? x : y) : x + y);
  }
}

inline ElementType element_type(keel_dtype dtype, const char* operation) {
  using keel_support::StatusError;
  if (dtype.lanes == 1) {
    if (dtype.code == KEEL_DTYPE_FLOAT && dtype.bits == 32) return {MPI_FLOAT, 4};
    if (dtype.code == KEEL_DTYPE_FLOAT && dtype.bits == 64) return {MPI_DOUBLE, 8};
    if (dtype.code == KEEL_DTYPE_INT && dtype.bits == 32) return {MPI_INT32_T, 4};
    if (dtype.code == KEEL_DTYPE_INT && dtype.bits == 64) return {MPI_INT64_T, 8};
    if (dtype.code == KEEL_DTYPE_BFLOAT && dtype.bits == 16) return {MPI_UINT16_T, 2, true};
  }
  throw StatusError(KEEL_ERR_UNIMPLEMENTED, std::string(operation) + ": dtype (code " + std::to_string(dtype.code) +
                                                ", bits " + std::to_string(dtype.bits) + ", lanes " +
                                                std::to_string(dtype.lanes) +
                                                ") is not supported; expected fp32, bf16, fp64, int32 or int64");
}

// The MPI op for `op` on `type`; bf16's user-defined ops are made on first use (after MPI_Init:
// a world of one never reduces through MPI, so there it is MPI_OP_NULL).
inline MPI_Op reduce_op(int32_t op, const char* operation, const ElementType& type) {
  if ((op == KEEL_REDUCE_SUM || op == KEEL_REDUCE_MAX) && type.bf16) {
    int initialised = 0;
    MPI_Initialized(&initialised);
    if (!initialised) return MPI_OP_NULL;
    struct Bf16Ops {
      MPI_Op sum = MPI_OP_NULL, max = MPI_OP_NULL;
      Bf16Ops() {
        MPI_Op_create(bf16_reduce<false>, 1, &sum);
        MPI_Op_create(bf16_reduce<true>, 1, &max);
      }
    };
    static const Bf16Ops ops;  // made once, by the first thread to get here
    return op == KEEL_REDUCE_SUM ? ops.sum : ops.max;
  }
  if (op == KEEL_REDUCE_SUM) return MPI_SUM;
  if (op == KEEL_REDUCE_MAX) return MPI_MAX;
  throw keel_support::StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string(operation) + ": op " + std::to_string(op) +
                                                                 " is not KEEL_REDUCE_SUM (0) or KEEL_REDUCE_MAX (1)");
}

}  // namespace keel_mpi
