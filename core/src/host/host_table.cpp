// Binds the host table's C slots to the core's logger, error store and initialiser.
#include "host/host_table.h"

#include <keel/version.h>

#include "host/errors.h"
#include "host/log.h"
#include "host/param_init.h"

#include <keel_support/common/piece_box.hpp>

#include <string>

namespace keel {
namespace {

keel_status host_set_error(keel_status code, const char* message) {
  set_last_error(message ? message : "");
  return code;
}

void host_log(int32_t level, const char* source, const char* message) { log_line(level, source, message ? message : ""); }

keel_status host_init_param(const keel_param_spec* spec, uint64_t seed, int64_t begin, int64_t count, float* out) {
  if (!spec || !out || begin < 0 || count < 0) {
    set_last_error("host init_param: invalid arguments (NULL spec or output, or negative range)");
    return KEEL_ERR_INVALID_ARGUMENT;
  }
  init_param_range(*spec, seed, begin, count, out);
  return KEEL_OK;
}

keel_status host_init_piece(const keel_param_spec* spec, uint64_t seed, int64_t begin, int64_t count, float* out) {
  if (!spec || !out || begin < 0 || count < 0) {
    set_last_error("host init_piece: invalid arguments (NULL spec or output, or negative range)");
    return KEEL_ERR_INVALID_ARGUMENT;
  }
  const std::string name = std::string("host init_piece: \"") + (spec->name ? spec->name : "") + "\": ";
  if (spec->ndim < 0 || spec->ndim > KEEL_MAX_DIMS) {
    set_last_error(name + "ndim " + std::to_string(spec->ndim) + " is outside [0, " + std::to_string(KEEL_MAX_DIMS) + "]");
    return KEEL_ERR_INVALID_ARGUMENT;
  }
  const keel_support::PieceBox box = keel_support::PieceBox::of_spec(*spec);
  if (!box.fits()) {
    std::string dims;
    for (int32_t d = 0; d < box.ndim; ++d)
      dims += (d ? ", " : "") + std::string("dim ") + std::to_string(d) + ": offset " + std::to_string(box.offset[d]) +
              " + extent " + std::to_string(box.shape[d]) + " of " + std::to_string(box.global_shape[d]);
    set_last_error(name + "the piece does not fit inside the global tensor (" + dims + ")");
    return KEEL_ERR_INVALID_ARGUMENT;
  }
  if (count > box.numel() - begin) {
    set_last_error(name + "elements [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
                   ") run past the piece's " + std::to_string(box.numel()));
    return KEEL_ERR_INVALID_ARGUMENT;
  }
  init_piece_range(*spec, seed, begin, count, out);
  return KEEL_OK;
}

}  // namespace

const keel_host* host_table() {
  static const keel_host table = {sizeof(keel_host), KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR,
                                  host_set_error, host_log, host_init_param, last_error,
                                  host_init_piece};
  return &table;
}

}  // namespace keel
