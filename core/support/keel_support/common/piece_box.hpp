// A parameter's piece on one rank is a box of the global tensor (an offset and a shape per
// dimension); checkpoints, init and resharding all need the same two operations on boxes:
// mapping an element of the box to its global flat index, and copying the part two pieces
// share. One header so the core and plugins compute them alike.
#pragma once

#include <keel/params.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace keel_support {

struct PieceBox {
  int32_t ndim = 0;
  int64_t global_shape[KEEL_MAX_DIMS] = {};
  int64_t offset[KEEL_MAX_DIMS] = {};
  int64_t shape[KEEL_MAX_DIMS] = {};

  // The whole tensor.
  static PieceBox whole(int32_t ndim, const int64_t* global_shape) {
    PieceBox b;
    b.ndim = ndim;
    for (int32_t d = 0; d < ndim; ++d) b.global_shape[d] = b.shape[d] = global_shape[d];
    return b;
  }

  // This rank's piece of a spec: local_offset + local_shape (a spec narrower than 0.6 has no
  // offsets: its piece starts at the origin).
  static PieceBox of_spec(const keel_param_spec& spec) {
    PieceBox b = whole(spec.ndim, spec.global_shape);
    const bool has_offset = spec.struct_size >= offsetof(keel_param_spec, local_offset) + sizeof spec.local_offset;
    for (int32_t d = 0; d < spec.ndim; ++d) {
      b.shape[d] = spec.local_shape[d];
      b.offset[d] = has_offset ? spec.local_offset[d] : 0;
    }
    return b;
  }

  int64_t numel() const {
    int64_t n = 1;
    for (int32_t d = 0; d < ndim; ++d) n *= shape[d];
    return n;
  }

  // Inside the global tensor, every extent non-negative.
  bool fits() const {
    for (int32_t d = 0; d < ndim; ++d)
      if (offset[d] < 0 || shape[d] < 0 || offset[d] > global_shape[d] || shape[d] > global_shape[d] - offset[d])
        return false;
    return true;
  }

  // Global row-major flat index of element `local` (row-major within the box).
  int64_t global_index(int64_t local) const {
    int64_t index = 0, stride = 1;
    for (int32_t d = ndim - 1; d >= 0; --d) {
      const int64_t coordinate = shape[d] ? local % shape[d] : 0;
      local = shape[d] ? local / shape[d] : 0;
      index += (offset[d] + coordinate) * stride;
      stride *= global_shape[d];
    }
    return index;
  }
};

inline bool same_box(const PieceBox& a, const PieceBox& b) {
  if (a.ndim != b.ndim) return false;
  for (int32_t d = 0; d < a.ndim; ++d)
    if (a.offset[d] != b.offset[d] || a.shape[d] != b.shape[d]) return false;
  return true;
}

// Whether two boxes of one tensor share any element.
inline bool boxes_meet(const PieceBox& a, const PieceBox& b) {
  for (int32_t d = 0; d < a.ndim; ++d)
    if (std::max(a.offset[d], b.offset[d]) >= std::min(a.offset[d] + a.shape[d], b.offset[d] + b.shape[d])) return false;
  return true;
}

// Copies the elements two pieces of one global tensor have in common: `src` holds flat range
// [src_begin, src_end) of box `src_box` (row-major in the box), `dst` flat range [dst_begin,
// dst_end) of `dst_box`. Works one innermost-dimension run at a time, so a tensor-parallel
// split along any dimension costs one memcpy per row. Returns the elements copied.
inline int64_t copy_overlap(const PieceBox& src_box, int64_t src_begin, int64_t src_end, const float* src,
                            const PieceBox& dst_box, int64_t dst_begin, int64_t dst_end, float* dst) {
  const int32_t ndim = src_box.ndim;
  if (ndim == 0) {
    const bool both = src_begin == 0 && src_end == 1 && dst_begin == 0 && dst_end == 1;
    if (both) dst[0] = src[0];
    return both ? 1 : 0;
  }
  int64_t lo[KEEL_MAX_DIMS], extent[KEEL_MAX_DIMS];
  for (int32_t d = 0; d < ndim; ++d) {
    lo[d] = std::max(src_box.offset[d], dst_box.offset[d]);
    const int64_t hi = std::min(src_box.offset[d] + src_box.shape[d], dst_box.offset[d] + dst_box.shape[d]);
    if (hi <= lo[d]) return 0;
    extent[d] = hi - lo[d];
  }
  const int32_t last = ndim - 1;
  int64_t rows = 1;
  for (int32_t d = 0; d < last; ++d) rows *= extent[d];
  int64_t copied = 0;
  for (int64_t row = 0; row < rows; ++row) {
    int64_t s = 0, t = 0, rest = row;
    int64_t coordinate[KEEL_MAX_DIMS];
    for (int32_t d = last - 1; d >= 0; --d) {
      coordinate[d] = lo[d] + rest % extent[d];
      rest /= extent[d];
    }
    coordinate[last] = lo[last];
    for (int32_t d = 0; d < ndim; ++d) {
      s = s * src_box.shape[d] + (coordinate[d] - src_box.offset[d]);
      t = t * dst_box.shape[d] + (coordinate[d] - dst_box.offset[d]);
    }
    // The run [s, s+n) in the source box and [t, t+n) in the destination box, clipped to both
    // flat ranges.
    int64_t skip = std::max<int64_t>({0, src_begin - s, dst_begin - t});
    int64_t end = std::min<int64_t>({extent[last], src_end - s, dst_end - t});
    if (end <= skip) continue;
    std::memcpy(dst + (t + skip - dst_begin), src + (s + skip - src_begin),
                static_cast<size_t>(end - skip) * sizeof(float));
    copied += end - skip;
  }
  return copied;
}

}  // namespace keel_support
