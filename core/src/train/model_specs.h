// The model's parameter specs as the core hands them on: widened to this ABI's struct and
// checked to be the tensor-parallel pieces they claim, so strategies and checkpoints read every
// field of every spec whatever minor the model was built against.
#pragma once

#include <keel/params.h>

#include <string>
#include <vector>

namespace keel {

// `params` is the model's array (stride: its specs' struct_size, at least that of 0.1); `who`
// prefixes messages ("<config>: model 'gpt': parameter "). Throws KeelError naming the
// parameter and dimension when a piece is not the even 1/tp_size split at tp_rank along its
// tp_dim, or not the whole extent elsewhere.
std::vector<keel_param_spec> widen_model_specs(const keel_param_spec* params, size_t n_params, int32_t tp_rank,
                                               int32_t tp_size, const std::string& who);

// The specs as a plugin built before 0.6 indexes them: each the first `struct_size` bytes of
// the widened spec (no local_offset), with struct_size set to it, packed at that stride. Only
// whole-tensor pieces reach such a plugin (the core refuses it at tp > 1).
std::vector<unsigned char> narrow_model_specs(const std::vector<keel_param_spec>& specs, size_t struct_size);

}  // namespace keel
