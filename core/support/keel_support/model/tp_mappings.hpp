// Megatron's four tensor-parallel mappings (Shoeybi et al. 2019, Korthikanti et al. 2022), each a
// forward and its backward, named for what they communicate over the model's tp group; shared by
// the gpt and llama models and installed for third-party ones. A model calls these and nothing
// else of the communicator, so every byte its tensor parallelism moves is visible here. Buffers
// are the backend's memory, row-major, at the model's compute type (fp32 or bf16); the
// communicator is one the core bridged for that memory (comm.h reaches), and the identity is a
// copy on the backend. A group of one makes every mapping a copy (or nothing, in place).
//
//   mapping                      forward                    backward
//   copy_to_tp_region            identity                   all-reduce (sum)
//   reduce_from_tp_region        all-reduce (sum)           identity
//   gather_from_sequence_region  all-gather of row blocks   reduce-scatter of row blocks (sum)
//   scatter_to_sequence_region   reduce-scatter (sum)       all-gather of row blocks
//
// The sequence mappings split a (rows, C) tensor into size contiguous blocks of rows/size rows,
// block r on rank r; `n` is always the element count of the operand being passed in.
#pragma once

#include <keel/comm.h>
#include "keel_support/common/abi_guard.hpp"
#include "keel_support/model/compute_ops.hpp"

#include <cstdint>
#include <string>

namespace keel_support {

// The model's tensor-parallel group: a communicator on the backend's memory, its size, our rank,
// and the compute type's ops, which give the element type and copy for the identity directions.
struct TpGroup {
  const keel_comm_api* api = nullptr;
  void* obj = nullptr;
  int32_t size = 1;
  int32_t rank = 0;
  ComputeOps ops;
  bool active() const { return size > 1; }
};

// in and out may be the same buffer for the identity and all-reduce directions, never for the
// gather and scatter ones.
struct CopyToTpRegion {
  static void forward(const TpGroup& group, const void* in, void* out, int64_t n);   // identity
  static void backward(const TpGroup& group, const void* in, void* out, int64_t n);  // all-reduce
};
struct ReduceFromTpRegion {
  static void forward(const TpGroup& group, const void* in, void* out, int64_t n);   // all-reduce
  static void backward(const TpGroup& group, const void* in, void* out, int64_t n);  // identity
};
// forward: in (rows/size, C) → out (rows, C); backward: in (rows, C) → out (rows/size, C).
struct GatherFromSequenceRegion {
  static void forward(const TpGroup& group, const void* in, void* out, int64_t n);   // all-gather
  static void backward(const TpGroup& group, const void* in, void* out, int64_t n);  // reduce-scatter
};
// forward: in (rows, C) partial sums → out (rows/size, C); backward: in (rows/size, C) → out (rows, C).
struct ScatterToSequenceRegion {
  static void forward(const TpGroup& group, const void* in, void* out, int64_t n);   // reduce-scatter
  static void backward(const TpGroup& group, const void* in, void* out, int64_t n);  // all-gather
};

// The mappings as calls on the tp communicator. Each direction is one collective or none; the
// element counts are checked so a shape mistake in the model is named, not a hang.
namespace tp_detail {

inline void identity(const TpGroup& g, const void* in, void* out, int64_t n) {
  if (in != out) g.ops.copy(g.ops.at(out), g.ops.at(in), n);
}

inline void all_reduce(const TpGroup& g, const void* in, void* out, int64_t n) {
  if (!g.active()) return identity(g, in, out, n);
  check_callee(g.api->all_reduce(g.obj, in, out, static_cast<size_t>(n), g.ops.dtype(), KEEL_REDUCE_SUM, nullptr),
               "tp all_reduce");
}

inline void all_gather(const TpGroup& g, const void* in, void* out, int64_t n) {
  if (!g.active()) return identity(g, in, out, n);
  check_callee(g.api->all_gather(g.obj, in, out, static_cast<size_t>(n), g.ops.dtype(), nullptr),
               "tp all_gather");
}

inline void reduce_scatter(const TpGroup& g, const void* in, void* out, int64_t n, const char* mapping) {
  if (n % g.size != 0)
    throw StatusError(KEEL_ERR_INTERNAL, std::string(mapping) + ": " + std::to_string(n) +
                                             " elements do not split into " + std::to_string(g.size) +
                                             " equal row blocks");
  if (!g.active()) return identity(g, in, out, n);
  check_callee(g.api->reduce_scatter(g.obj, in, out, static_cast<size_t>(n / g.size), g.ops.dtype(),
                                     KEEL_REDUCE_SUM, nullptr),
               "tp reduce_scatter");
}

}  // namespace tp_detail

inline void CopyToTpRegion::forward(const TpGroup& g, const void* in, void* out, int64_t n) {
  tp_detail::identity(g, in, out, n);
}
inline void CopyToTpRegion::backward(const TpGroup& g, const void* in, void* out, int64_t n) {
  tp_detail::all_reduce(g, in, out, n);
}

inline void ReduceFromTpRegion::forward(const TpGroup& g, const void* in, void* out, int64_t n) {
  tp_detail::all_reduce(g, in, out, n);
}
inline void ReduceFromTpRegion::backward(const TpGroup& g, const void* in, void* out, int64_t n) {
  tp_detail::identity(g, in, out, n);
}

inline void GatherFromSequenceRegion::forward(const TpGroup& g, const void* in, void* out, int64_t n) {
  tp_detail::all_gather(g, in, out, n);
}
inline void GatherFromSequenceRegion::backward(const TpGroup& g, const void* in, void* out, int64_t n) {
  tp_detail::reduce_scatter(g, in, out, n, "gather_from_sequence_region backward");
}

inline void ScatterToSequenceRegion::forward(const TpGroup& g, const void* in, void* out, int64_t n) {
  tp_detail::reduce_scatter(g, in, out, n, "scatter_to_sequence_region forward");
}
inline void ScatterToSequenceRegion::backward(const TpGroup& g, const void* in, void* out, int64_t n) {
  tp_detail::all_gather(g, in, out, n);
}

}  // namespace keel_support
