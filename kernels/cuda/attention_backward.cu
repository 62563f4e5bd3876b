// Causal attention backward, flash-style: probabilities are recomputed tile by tile from the
// forward's log-sum-exp, P = exp(scale q·k - lse), and with D = rowsum(dout ∘ out),
// dS = P (dout·v - D). Two kernels, so that no two blocks ever add into one gradient (no
// atomics, same bits on every run):
//   dq:   a warp per query row t walks key tiles s ≤ t:   dq_t += scale Σ_s dS_ts k_s
//   dkdv: a warp per key row s walks query tiles t ≥ s:   dk_s += scale Σ_t dS_ts q_t,
//                                                         dv_s += Σ_t P_ts dout_t
// D is computed once per row first (rowdot). Tiling as in attention_tiles.cuh.
// Grouped-query attention (the layout of attention_forward.cu): the dkdv kernel gives a block
// key rows of one key/value head and walks the NH/NKV query heads that share it one after
// another, so their contributions add in a fixed order, still without atomics.
#include "cuda/attention_mma.h"
#include "cuda/attention_tiles.cuh"

#include <type_traits>

namespace keel::cuda {
namespace {

// rowdot(B,NH,T) = Σ_d dout[b,t,h,d] out[b,t,h,d]; a warp per row.
template <typename E>
__global__ void attention_rowdot_kernel(float* rowdot, const E* dout, const E* out, int64_t T, int64_t C, int64_t NH,
                                        int hs) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int64_t t = blockIdx.y * int64_t(kWarps) + warp;
  if (t >= T) return;
  const int64_t offset = (b * T + t) * C + h * hs;
  float sum = 0.0f;
  for (int d = lane; d < hs; d += 32) sum += load(dout + offset + d) * load(out + offset + d);
  sum = warp_sum(sum);
  if (lane == 0) rowdot[bh * T + t] = sum;
}

template <typename E>
__global__ void attention_dq_kernel(E* dqkv, const E* dout, const E* qkv, const float* lse, const float* rowdot,
                                    int64_t T, int64_t C, int64_t NH, int64_t NKV, int hs, float scale) {
  extern __shared__ float smem[];
  const int ld = hs + 1;
  float* k_tile = smem;
  float* v_tile = k_tile + kTile * ld;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* q_row = v_tile + kTile * ld + warp * hs;
  float* do_row = v_tile + kTile * ld + kWarps * hs + warp * hs;

  const int64_t bh = blockIdx.x, b = bh / NH, h = bh % NH, W = C + 2 * NKV * hs, kv = h / (NH / NKV);
  const int64_t q0 = blockIdx.y * int64_t(kWarps), t = q0 + warp;
  const E* head = qkv + b * T * W + h * hs;
  const E* keys = qkv + b * T * W + C + kv * hs;
  const E* values = keys + NKV * hs;
  const bool active = t < T;
  float lse_t = 0.0f, D = 0.0f;
  if (active) {
    for (int d = lane; d < hs; d += 32) {
      q_row[d] = load(head + t * W + d);
      do_row[d] = load(dout + (b * T + t) * C + h * hs + d);
    }
    lse_t = lse[bh * T + t];
    D = rowdot[bh * T + t];
  }
  float acc[kPerLane] = {};
  const int64_t last = (q0 + kWarps < T ? q0 + kWarps : T) - 1;
  for (int64_t k0 = 0; k0 <= last; k0 += kTile) {
    __syncthreads();
    load_rows(k_tile, ld, keys, W, k0, T, hs);
    load_rows(v_tile, ld, values, W, k0, T, hs);
    __syncthreads();
    if (!active || k0 > t) continue;
    const int64_t s = k0 + lane;
    float ds = 0.0f;
    if (s <= t) {
      const float p = expf(dot_row(q_row, k_tile + lane * ld, hs) * scale - lse_t);
      ds = p * (dot_row(do_row, v_tile + lane * ld, hs) - D);
    }
    for (int j = 0; j < kTile; ++j) {
      const float dsj = __shfl_sync(0xffffffffu, ds, j);
#pragma unroll
      for (int r = 0; r < kPerLane; ++r) {
        const int d = lane + 32 * r;
        if (d < hs) acc[r] += dsj * k_tile[j * ld + d];
      }
    }
  }
  if (!active) return;
  E* dq = dqkv + b * T * W + h * hs + t * W;
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int d = lane + 32 * r;
    if (d < hs) store(dq + d, load(dq + d) + scale * acc[r]);
  }
}

template <typename E>
__global__ void attention_dkdv_kernel(E* dqkv, const E* dout, const E* qkv, const float* lse, const float* rowdot,
                                      int64_t T, int64_t C, int64_t NH, int64_t NKV, int hs, float scale) {
  extern __shared__ float smem[];
  const int ld = hs + 1;
  float* q_tile = smem;
  float* do_tile = q_tile + kTile * ld;
  float* lse_tile = do_tile + kTile * ld;
  float* rowdot_tile = lse_tile + kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* k_row = rowdot_tile + kTile + warp * hs;
  float* v_row = rowdot_tile + kTile + kWarps * hs + warp * hs;

  const int64_t bkv = blockIdx.x, b = bkv / NKV, kv = bkv % NKV, W = C + 2 * NKV * hs, group = NH / NKV;
  const int64_t s0 = blockIdx.y * int64_t(kWarps), s = s0 + warp;
  const E* keys = qkv + b * T * W + C + kv * hs;
  const E* values = keys + NKV * hs;
  const bool active = s < T;
  if (active)
    for (int d = lane; d < hs; d += 32) {
      k_row[d] = load(keys + s * W + d);
      v_row[d] = load(values + s * W + d);
    }
  float dk[kPerLane] = {}, dv[kPerLane] = {};
  for (int64_t h = kv * group; h < (kv + 1) * group; ++h) {  // the query heads sharing this key/value head
    const int64_t bh = b * NH + h;
    const E* head = qkv + b * T * W + h * hs;
    const E* dout_head = dout + b * T * C + h * hs;
    for (int64_t t0 = s0 / kTile * kTile; t0 < T; t0 += kTile) {
      __syncthreads();
      load_rows(q_tile, ld, head, W, t0, T, hs);
      load_rows(do_tile, ld, dout_head, C, t0, T, hs);
      if (threadIdx.x < kTile) {
        const int64_t t = t0 + threadIdx.x;
        lse_tile[threadIdx.x] = t < T ? lse[bh * T + t] : 0.0f;
        rowdot_tile[threadIdx.x] = t < T ? rowdot[bh * T + t] : 0.0f;
      }
      __syncthreads();
      if (!active || t0 + kTile <= s) continue;  // uniform over the warp: no query of the tile sees s
      const int64_t t = t0 + lane;
      float p = 0.0f, ds = 0.0f;
      if (t < T && t >= s) {
        p = expf(dot_row(q_tile + lane * ld, k_row, hs) * scale - lse_tile[lane]);
        ds = p * (dot_row(do_tile + lane * ld, v_row, hs) - rowdot_tile[lane]);
      }
      for (int j = 0; j < kTile; ++j) {
        const float pj = __shfl_sync(0xffffffffu, p, j);
        const float dsj = __shfl_sync(0xffffffffu, ds, j);
#pragma unroll
        for (int r = 0; r < kPerLane; ++r) {
          const int d = lane + 32 * r;
          if (d < hs) {
            dv[r] += pj * do_tile[j * ld + d];
            dk[r] += dsj * q_tile[j * ld + d];
          }
        }
      }
    }
  }
  if (!active) return;
  E* dk_out = dqkv + b * T * W + C + kv * hs + s * W;
  E* dv_out = dk_out + NKV * hs;
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int d = lane + 32 * r;
    if (d < hs) {
      store(dk_out + d, load(dk_out + d) + scale * dk[r]);
      store(dv_out + d, load(dv_out + d) + dv[r]);
    }
  }
}

template <typename E>
void launch(E* dqkv, const E* dout, const E* qkv, const E* out, const float* lse, float* rowdot, int64_t B, int64_t T,
            int64_t C, int64_t NH, int64_t NKV, cudaStream_t stream) {
  const int hs = static_cast<int>(C / NH);
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  const dim3 grid(static_cast<unsigned>(B * NH), static_cast<unsigned>((T + kWarps - 1) / kWarps));
  attention_rowdot_kernel<<<grid, 32 * kWarps, 0, stream>>>(rowdot, dout, out, T, C, NH, hs);
  if (attention_mma_applies(std::is_same_v<E, bf16> ? Elem::bf16 : Elem::f32, B, T, C, NH, {dqkv, dout, qkv})) {
    attention_backward_mma(dqkv, dout, qkv, lse, rowdot, B, T, C, NH, NKV, stream);
    return;
  }
  const size_t dq_smem = (2 * kTile * (hs + 1) + 2 * kWarps * hs) * sizeof(float);
  attention_dq_kernel<<<grid, 32 * kWarps, dq_smem, stream>>>(dqkv, dout, qkv, lse, rowdot, T, C, NH, NKV, hs, scale);
  const size_t dkdv_smem = (2 * kTile * (hs + 1) + 2 * kTile + 2 * kWarps * hs) * sizeof(float);
  const dim3 kv_grid(static_cast<unsigned>(B * NKV), static_cast<unsigned>((T + kWarps - 1) / kWarps));
  attention_dkdv_kernel<<<kv_grid, 32 * kWarps, dkdv_smem, stream>>>(dqkv, dout, qkv, lse, rowdot, T, C, NH, NKV, hs,
                                                                     scale);
}

}  // namespace

void attention_backward(Elem e, void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
                        float* rowdot, int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV, cudaStream_t stream) {
  if (B <= 0 || T <= 0 || C <= 0) return;
  if (e == Elem::bf16)
    launch(static_cast<bf16*>(dqkv), static_cast<const bf16*>(dout), static_cast<const bf16*>(qkv),
           static_cast<const bf16*>(out), lse, rowdot, B, T, C, NH, NKV, stream);
  else
    launch(static_cast<float*>(dqkv), static_cast<const float*>(dout), static_cast<const float*>(qkv),
           static_cast<const float*>(out), lse, rowdot, B, T, C, NH, NKV, stream);
}

}  // namespace keel::cuda
