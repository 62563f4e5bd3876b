// Causal attention forward, flash-style: the T×T scores are never stored. A block takes
// kWarps query rows of one (b, head), one warp per row, and walks the keys in tiles of kTile
// held in shared memory; lane j scores key j of the tile, and each row keeps an online softmax
// (running max m, running sum l, output accumulator in fp32 registers, lane owning channels
// lane, lane+32, ...). What the backward needs is one log-sum-exp per row. Every sum runs in a
// fixed order (warp butterflies, key order), so the output is the same on every run.
// Grouped-query attention: a qkv row holds NH query heads, then NKV key and NKV value heads
// (width W = C + 2·NKV·hs); query head h reads key/value head h / (NH/NKV). NKV = NH is
// multi-head attention, the 0.8 layout.
#include "cuda/attention_mma.h"
#include "cuda/attention_tiles.cuh"

namespace keel::cuda {
namespace {

template <typename E>
__global__ void attention_forward_kernel(E* out, float* lse, const E* qkv, int64_t T, int64_t C, int64_t NH,
                                         int64_t NKV, int hs, float scale) {
  extern __shared__ float smem[];
  const int ld = hs + 1;  // padded rows: lane j reading row j hits bank (j + d) % 32
  float* k_tile = smem;
  float* v_tile = k_tile + kTile * ld;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* q_row = v_tile + kTile * ld + warp * hs;

  const int64_t bh = blockIdx.x, b = bh / NH, h = bh % NH, W = C + 2 * NKV * hs, kv = h / (NH / NKV);
  const int64_t q0 = blockIdx.y * int64_t(kWarps), t = q0 + warp;
  const E* head = qkv + b * T * W + h * hs;               // q of row s at head + s*W
  const E* keys = qkv + b * T * W + C + kv * hs;          // k of row s at keys + s*W
  const E* values = keys + NKV * hs;                      // v of row s at values + s*W
  const bool active = t < T;
  if (active)
    for (int d = lane; d < hs; d += 32) q_row[d] = load(head + t * W + d);

  float m = -INFINITY, l = 0.0f, acc[kPerLane] = {};
  const int64_t last = (q0 + kWarps < T ? q0 + kWarps : T) - 1;  // the block's last query row
  for (int64_t k0 = 0; k0 <= last; k0 += kTile) {
    __syncthreads();  // the previous tile has been read (and q_row written)
    load_rows(k_tile, ld, keys, W, k0, T, hs);
    load_rows(v_tile, ld, values, W, k0, T, hs);
    __syncthreads();
    if (!active || k0 > t) continue;  // uniform over the warp
    const int64_t s = k0 + lane;
    float score = -INFINITY;
    if (s <= t) score = dot_row(q_row, k_tile + lane * ld, hs) * scale;
    const float m_new = fmaxf(m, warp_max(score));  // finite: key k0 <= t is in the tile
    const float p = s <= t ? expf(score - m_new) : 0.0f;
    const float correction = expf(m - m_new);  // 0 on the first tile (m = -inf)
    l = l * correction + warp_sum(p);
    m = m_new;
#pragma unroll
    for (int r = 0; r < kPerLane; ++r) acc[r] *= correction;
    for (int j = 0; j < kTile; ++j) {
      const float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
      for (int r = 0; r < kPerLane; ++r) {
        const int d = lane + 32 * r;
        if (d < hs) acc[r] += pj * v_tile[j * ld + d];
      }
    }
  }
  if (!active) return;
  const float inv = 1.0f / l;
  E* o = out + (b * T + t) * C + h * hs;
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int d = lane + 32 * r;
    if (d < hs) store(o + d, acc[r] * inv);
  }
  if (lane == 0) lse[bh * T + t] = m + logf(l);
}

template <typename E>
void launch(E* out, float* lse, const E* qkv, int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV,
            cudaStream_t stream) {
  const int hs = static_cast<int>(C / NH);
  const size_t smem = (2 * kTile * (hs + 1) + kWarps * hs) * sizeof(float);
  const dim3 grid(static_cast<unsigned>(B * NH), static_cast<unsigned>((T + kWarps - 1) / kWarps));
  attention_forward_kernel<<<grid, 32 * kWarps, smem, stream>>>(out, lse, qkv, T, C, NH, NKV, hs,
                                                                1.0f / sqrtf(static_cast<float>(hs)));
}

}  // namespace

void attention_forward(Elem e, void* out, float* lse, const void* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                       int64_t NKV, cudaStream_t stream) {
  if (B <= 0 || T <= 0 || C <= 0) return;
  if (attention_mma_applies(e, B, T, C, NH, {out, qkv}))
    attention_forward_mma(out, lse, qkv, B, T, C, NH, NKV, stream);
  else if (e == Elem::bf16)
    launch(static_cast<bf16*>(out), lse, static_cast<const bf16*>(qkv), B, T, C, NH, NKV, stream);
  else
    launch(static_cast<float*>(out), lse, static_cast<const float*>(qkv), B, T, C, NH, NKV, stream);
}

}  // namespace keel::cuda
