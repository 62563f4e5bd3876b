// The four mappings as calls on the tp communicator. Each direction is one collective or none;
// the element counts are checked here so a shape mistake in the model is named, not a hang.
#include "tp_mappings.hpp"

#include <keel_support/abi_guard.hpp>

#include <string>

namespace keel_gpt {

namespace {

using keel_support::StatusError;

void identity(const TpGroup& g, const void* in, void* out, int64_t n) {
  if (in != out) g.ops.copy(g.ops.at(out), g.ops.at(in), n);
}

void all_reduce(const TpGroup& g, const void* in, void* out, int64_t n) {
  if (!g.active()) return identity(g, in, out, n);
  keel_support::check_callee(g.api->all_reduce(g.obj, in, out, static_cast<size_t>(n), g.ops.dtype(), KEEL_REDUCE_SUM, nullptr),
                             "tp all_reduce");
}

void all_gather(const TpGroup& g, const void* in, void* out, int64_t n) {
  if (!g.active()) return identity(g, in, out, n);
  keel_support::check_callee(g.api->all_gather(g.obj, in, out, static_cast<size_t>(n), g.ops.dtype(), nullptr),
                             "tp all_gather");
}

void reduce_scatter(const TpGroup& g, const void* in, void* out, int64_t n, const char* mapping) {
  if (n % g.size != 0)
    throw StatusError(KEEL_ERR_INTERNAL, std::string(mapping) + ": " + std::to_string(n) +
                                             " elements do not split into " + std::to_string(g.size) +
                                             " equal row blocks");
  if (!g.active()) return identity(g, in, out, n);
  keel_support::check_callee(g.api->reduce_scatter(g.obj, in, out, static_cast<size_t>(n / g.size), g.ops.dtype(),
                                                   KEEL_REDUCE_SUM, nullptr),
                             "tp reduce_scatter");
}

}  // namespace

void CopyToTpRegion::forward(const TpGroup& g, const void* in, void* out, int64_t n) { identity(g, in, out, n); }
void CopyToTpRegion::backward(const TpGroup& g, const void* in, void* out, int64_t n) { all_reduce(g, in, out, n); }

void ReduceFromTpRegion::forward(const TpGroup& g, const void* in, void* out, int64_t n) { all_reduce(g, in, out, n); }
void ReduceFromTpRegion::backward(const TpGroup& g, const void* in, void* out, int64_t n) { identity(g, in, out, n); }

void GatherFromSequenceRegion::forward(const TpGroup& g, const void* in, void* out, int64_t n) {
  all_gather(g, in, out, n);
}
void GatherFromSequenceRegion::backward(const TpGroup& g, const void* in, void* out, int64_t n) {
  reduce_scatter(g, in, out, n, "gather_from_sequence_region backward");
}

void ScatterToSequenceRegion::forward(const TpGroup& g, const void* in, void* out, int64_t n) {
  reduce_scatter(g, in, out, n, "scatter_to_sequence_region forward");
}
void ScatterToSequenceRegion::backward(const TpGroup& g, const void* in, void* out, int64_t n) {
  all_gather(g, in, out, n);
}

}  // namespace keel_gpt
