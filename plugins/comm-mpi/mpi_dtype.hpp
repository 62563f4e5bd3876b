// keel_dtype and KEEL_REDUCE_* to MPI's datatypes and ops: the one table of what the plugin
// can move and reduce. Shared by MPI worlds and the world of one, so both refuse the same things.
#pragma once

#include <keel/comm.h>
#include <mpi.h>

#include <string>

#include <keel_support/abi_guard.hpp>

namespace keel_mpi {

struct ElementType {
  MPI_Datatype mpi;
  size_t bytes;
};

inline ElementType element_type(keel_dtype dtype, const char* operation) {
  using keel_support::StatusError;
  if (dtype.lanes == 1) {
    if (dtype.code == KEEL_DTYPE_FLOAT && dtype.bits == 32) return {MPI_FLOAT, 4};
    if (dtype.code == KEEL_DTYPE_FLOAT && dtype.bits == 64) return {MPI_DOUBLE, 8};
    if (dtype.code == KEEL_DTYPE_INT && dtype.bits == 32) return {MPI_INT32_T, 4};
    if (dtype.code == KEEL_DTYPE_INT && dtype.bits == 64) return {MPI_INT64_T, 8};
    if (dtype.code == KEEL_DTYPE_BFLOAT && dtype.bits == 16)
      throw StatusError(KEEL_ERR_UNIMPLEMENTED, std::string(operation) +
                                                    ": bf16 is not supported yet (MPI has no bf16 type; reducing it "
                                                    "needs a user-defined op); use fp32");
  }
  throw StatusError(KEEL_ERR_UNIMPLEMENTED, std::string(operation) + ": dtype (code " + std::to_string(dtype.code) +
                                                ", bits " + std::to_string(dtype.bits) + ", lanes " +
                                                std::to_string(dtype.lanes) +
                                                ") is not supported; expected fp32, fp64, int32 or int64");
}

inline MPI_Op reduce_op(int32_t op, const char* operation) {
  if (op == KEEL_REDUCE_SUM) return MPI_SUM;
  if (op == KEEL_REDUCE_MAX) return MPI_MAX;
  throw keel_support::StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string(operation) + ": op " + std::to_string(op) +
                                                                 " is not KEEL_REDUCE_SUM (0) or KEEL_REDUCE_MAX (1)");
}

}  // namespace keel_mpi
