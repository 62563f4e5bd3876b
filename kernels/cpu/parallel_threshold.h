// How many elements a host loop needs before an OpenMP parallel region pays for itself: waking
// the team and splitting the range cost a few microseconds, which a short loop finishes in on
// one thread. Every CPU kernel and optimizer update asks here (the cpu backend's own loops too),
// so a later tuning changes one line per kind of loop instead of seventeen literals. The
// comparisons at the sites (> or >=) are kept as they were written, so these constants reproduce
// the earlier behaviour exactly. It lives with the kernels because they are its users; plugins
// that are not backends have no loops of this kind.
#pragma once

#include <cstdint>

namespace keel::cpu {

// Loops with a little arithmetic per element over streaming memory (add, scale, embedding,
// cross-entropy rows, matmul's output tasks, the optimizer updates).
constexpr int64_t kParallelMinElements = int64_t(1) << 15;

// Loops that spend several times more per element: layernorm's two passes over a row and its
// normalisation, gelu's tanh. Half as many elements already amortise the team's start. These two
// values are those the kernels were written with; neither was measured against the other, which
// the tuning issue is to do.
constexpr int64_t kParallelMinElementsHeavy = int64_t(1) << 14;

}  // namespace keel::cpu
