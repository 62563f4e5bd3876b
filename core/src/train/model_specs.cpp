// Widening and checking the model's parameter specs (model_specs.h).
#include "train/model_specs.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "host/errors.h"

namespace keel {

// Copies the model's specs into structs of this ABI's size (a model built before 0.6 has a
// shorter struct, so its array has another stride, and no local_offset: its pieces are whole
// tensors), and checks every piece lies inside its global tensor and is the tp split it claims.
std::vector<keel_param_spec> widen_model_specs(const keel_param_spec* params, size_t n_params, int32_t tp_rank,
                                               int32_t tp_size, const std::string& who) {
  if (n_params > 0 && params == nullptr)
    throw KeelError(KEEL_ERR_INVALID_ARGUMENT, who + "list is NULL");
  const size_t stride = n_params ? params[0].struct_size : sizeof(keel_param_spec);
  if (stride < offsetof(keel_param_spec, local_offset) || stride > (1u << 16))
    throw KeelError(KEEL_ERR_INVALID_ARGUMENT, who + "specs have struct_size " + std::to_string(stride) + ", expected at least " +
                                                   std::to_string(offsetof(keel_param_spec, local_offset)));
  std::vector<keel_param_spec> specs(n_params, keel_param_spec{});
  const char* base = reinterpret_cast<const char*>(params);
  for (size_t i = 0; i < n_params; ++i) {
    const auto* given = reinterpret_cast<const keel_param_spec*>(base + i * stride);
    if (given->struct_size != stride)
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, who + std::to_string(i) + " has struct_size " +
                                                     std::to_string(given->struct_size) + ", the first had " + std::to_string(stride));
    std::memcpy(&specs[i], given, std::min(stride, sizeof(keel_param_spec)));
    specs[i].struct_size = sizeof(keel_param_spec);
    keel_param_spec& spec = specs[i];
    const std::string name = who + "\"" + (spec.name ? spec.name : "") + "\"";
    if (spec.ndim < 0 || spec.ndim > KEEL_MAX_DIMS)
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, name + ": ndim " + std::to_string(spec.ndim) + " is outside [0, 4]");
    if (spec.tp_dim < -1 || spec.tp_dim >= spec.ndim)
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, name + ": tp_dim " + std::to_string(spec.tp_dim) + " is not -1 or a dimension");
    for (int32_t d = 0; d < spec.ndim; ++d) {
      const bool split = d == spec.tp_dim && tp_size > 1;
      const bool whole = spec.local_offset[d] == 0 && spec.local_shape[d] == spec.global_shape[d];
      const bool is_piece = spec.global_shape[d] % tp_size == 0 && spec.local_shape[d] == spec.global_shape[d] / tp_size &&
                            spec.local_offset[d] == int64_t(tp_rank) * spec.local_shape[d];
      if (spec.global_shape[d] < 0 || (split ? !is_piece : !whole))
        throw KeelError(KEEL_ERR_INVALID_ARGUMENT,
                        name + ": dimension " + std::to_string(d) + " has global extent " + std::to_string(spec.global_shape[d]) +
                            ", local offset " + std::to_string(spec.local_offset[d]) + " and extent " +
                            std::to_string(spec.local_shape[d]) + "; expected " +
                            (split ? "tp rank " + std::to_string(tp_rank) + "'s even 1/" + std::to_string(tp_size) + " of it"
                                   : std::string("the whole extent")));
    }
  }
  return specs;
}


std::vector<unsigned char> narrow_model_specs(const std::vector<keel_param_spec>& specs, size_t struct_size) {
  struct_size = std::min(struct_size, sizeof(keel_param_spec));
  std::vector<unsigned char> packed(specs.size() * struct_size);
  for (size_t i = 0; i < specs.size(); ++i) {
    keel_param_spec copy = specs[i];
    copy.struct_size = struct_size;
    std::memcpy(packed.data() + i * struct_size, &copy, struct_size);
  }
  return packed;
}

}  // namespace keel
