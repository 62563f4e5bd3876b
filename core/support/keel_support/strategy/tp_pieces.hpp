// What every strategy needs to hold tensor-parallel pieces (ABI 0.6): its tp position from the
// create args (older args mean tp 1), the check that a spec's piece lies inside its global
// tensor, the piece's initialisation through the host, and which gradients the strategy's
// grad_sq_norm counts (a tp-replicated parameter only on tp rank 0, no pipeline STAGE_COPY;
// the core sums over tp and pp).
// One header so every strategy treats pieces alike.
#pragma once

#include <keel/host.h>
#include <keel/plugin.h>
#include <keel/strategy.h>

#include <cstddef>
#include <string>

#include "keel_support/common/abi_guard.hpp"
#include "keel_support/strategy/param_specs.hpp"
#include "keel_support/common/piece_box.hpp"

namespace keel_support {

struct TpPosition {
  int32_t rank = 0;
  int32_t size = 1;
};

// Args from before 0.6 (or a zero-initialised tp_size) mean a single tp rank.
inline TpPosition tp_position(const keel_strategy_create_args& args) {
  TpPosition tp;
  if (args.struct_size < offsetof(keel_strategy_create_args, tp_size) + sizeof(args.tp_size)) return tp;
  if (args.tp_size == 0 && args.tp_rank == 0) return tp;
  if (args.tp_size < 1 || args.tp_rank < 0 || args.tp_rank >= args.tp_size)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: tp_rank " + std::to_string(args.tp_rank) +
                                                     " is outside a tensor-parallel group of " +
                                                     std::to_string(args.tp_size));
  tp.rank = args.tp_rank;
  tp.size = args.tp_size;
  return tp;
}

// Elements of this rank's piece, after checking that the box local_offset + local_shape lies
// inside global_shape (a piece outside it would initialise and save the wrong elements).
inline int64_t checked_piece_numel(const keel_param_spec& spec, size_t index) {
  const int64_t numel = checked_local_numel(spec, index);
  const PieceBox box = PieceBox::of_spec(spec);
  if (!box.fits()) {
    std::string dims;
    for (int32_t d = 0; d < spec.ndim; ++d)
      dims += (d ? ", " : "") + std::to_string(box.offset[d]) + "+" + std::to_string(box.shape[d]) + " of " +
              std::to_string(box.global_shape[d]);
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, spec_label(spec, index) + ": the piece local_offset + local_shape (" +
                                                     dims + ") does not lie inside global_shape");
  }
  return numel;
}

inline bool is_whole_tensor(const keel_param_spec& spec) {
  const PieceBox box = PieceBox::of_spec(spec);
  for (int32_t d = 0; d < spec.ndim; ++d)
    if (box.offset[d] != 0 || box.shape[d] != box.global_shape[d]) return false;
  return true;
}

// Piece-local elements [begin, begin+count) of the spec's piece, as the global tensor has them:
// host->init_piece where the host has it; a host from before 0.6 can only do whole tensors.
inline void init_piece_elements(const keel_host* host, const keel_param_spec& spec, size_t index, uint64_t seed,
                                int64_t begin, int64_t count, float* out_host) {
  if (KEEL_HAS_SLOT(host, init_piece)) {
    check_callee(host->init_piece(&spec, seed, begin, count, out_host), "host init_piece");
    return;
  }
  if (!is_whole_tensor(spec))
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, spec_label(spec, index) +
                                                  ": a tensor-parallel piece needs the host's init_piece slot "
                                                  "(ABI 0.6); this host has only init_param");
  check_callee(host->init_param(&spec, seed, begin, count, out_host), "host init_param");
}

// grad_sq_norm counts a parameter replicated over tp ranks (tp_dim -1) only on tp rank 0, and
// never a pipeline stage's STAGE_COPY (0.7: the first stage counts the tied parameter), so the
// core's sums over the tp and pp groups count every distinct gradient once.
inline bool counts_in_grad_norm(const keel_param_spec& spec, TpPosition tp) {
  if (spec.flags & KEEL_PARAM_STAGE_COPY) return false;
  return spec.tp_dim >= 0 || tp.rank == 0;
}

}  // namespace keel_support
