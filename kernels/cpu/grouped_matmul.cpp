// One matmul per expert, in expert order, over that expert's block of rows.
#include "cpu/grouped_matmul.h"

#include "cpu/matmul.h"  // defines: matmul_forward, matmul_backward

namespace keel::cpu {

void grouped_matmul_forward(float* out, const float* inp, const float* const* weights, const int64_t* counts,
                            int32_t E, int64_t IC, int64_t OC) {
  int64_t row = 0;
  for (int32_t e = 0; e < E; ++e) {
    if (counts[e] > 0) matmul_forward(out + row * OC, inp + row * IC, weights[e], nullptr, counts[e], IC, OC);
    row += counts[e];
  }
}

void grouped_matmul_backward(float* dinp, float* const* dweights, const float* dout, const float* inp,
                             const float* const* weights, const int64_t* counts, int32_t E, int64_t IC, int64_t OC) {
  int64_t row = 0;
  for (int32_t e = 0; e < E; ++e) {
    float* dweight = dweights ? dweights[e] : nullptr;
    if (counts[e] > 0 && (dinp || dweight))
      matmul_backward(dinp ? dinp + row * IC : nullptr, dweight, nullptr, dout + row * OC, inp + row * IC, weights[e],
                      counts[e], IC, OC);
    row += counts[e];
  }
}

}  // namespace keel::cpu
