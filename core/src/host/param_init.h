// Parameter initialisation that does not depend on layout: element i of parameter "name" gets
// the same value whether it lives on one rank or is sharded over eight, so runs at different
// parallel layouts start from identical weights (the basis of every parity test).
#pragma once

#include <keel/params.h>

#include <cstdint>

namespace keel {

// [begin, begin+count) of the whole tensor, row-major.
void init_param_range(const keel_param_spec& spec, uint64_t seed, int64_t begin, int64_t count, float* out);
// [begin, begin+count) of this rank's piece (spec.local_offset + local_shape), row-major in the
// piece: the same numbers as the same elements of the whole tensor.
void init_piece_range(const keel_param_spec& spec, uint64_t seed, int64_t begin, int64_t count, float* out);

// A stateless, counter-based generator: uniform in (0,1) and standard normal for (key, index).
uint64_t mix64(uint64_t x);
uint64_t hash_name(const char* name);
double uniform_open01(uint64_t key, uint64_t index);
double standard_normal(uint64_t key, uint64_t index);

}  // namespace keel
