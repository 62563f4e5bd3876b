// Counter-based normals (splitmix64 finaliser + Box–Muller): each element is a pure function of
// (seed, parameter name, element index), so any shard can be filled independently and in parallel.
#include "host/param_init.h"

#include <keel_support/common/piece_box.hpp>

#include <cmath>

namespace keel {

uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t hash_name(const char* name) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a
  for (const char* p = name; p && *p; ++p) h = (h ^ static_cast<unsigned char>(*p)) * 0x100000001B3ull;
  return h;
}

double uniform_open01(uint64_t key, uint64_t index) {
  uint64_t bits = mix64(key ^ mix64(index));
  return (static_cast<double>(bits >> 11) + 0.5) * (1.0 / 9007199254740992.0);  // (0,1), never 0
}

double standard_normal(uint64_t key, uint64_t index) {
  double u1 = uniform_open01(key, 2 * index);
  double u2 = uniform_open01(key, 2 * index + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

namespace {

// Element `element` (global flat index) of the tensor `spec` describes.
class ElementInit {
 public:
  ElementInit(const keel_param_spec& spec, uint64_t seed) : spec_(spec), key_(mix64(seed ^ hash_name(spec.name))) {
    int64_t row_elements = 1;
    for (int32_t d = 1; d < spec.ndim; ++d) row_elements *= spec.global_shape[d];
    first_zero_element_ = spec.init_rows < 0 ? INT64_MAX : spec.init_rows * row_elements;
  }
  float operator()(int64_t element) const {
    if (element >= first_zero_element_) return 0.0f;
    if (spec_.init == KEEL_INIT_ONES) return 1.0f;
    if (spec_.init == KEEL_INIT_NORMAL)
      return static_cast<float>(spec_.init_std * standard_normal(key_, static_cast<uint64_t>(element)));
    return 0.0f;
  }

 private:
  const keel_param_spec& spec_;
  uint64_t key_;
  int64_t first_zero_element_;
};

}  // namespace

void init_param_range(const keel_param_spec& spec, uint64_t seed, int64_t begin, int64_t count, float* out) {
  const ElementInit value(spec, seed);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i) out[i] = value(begin + i);
}

void init_piece_range(const keel_param_spec& spec, uint64_t seed, int64_t begin, int64_t count, float* out) {
  const ElementInit value(spec, seed);
  const keel_support::PieceBox box = keel_support::PieceBox::of_spec(spec);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i) out[i] = value(box.global_index(begin + i));
}

}  // namespace keel
