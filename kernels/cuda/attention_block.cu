// Attention over blocks (keel/backend.h keel_attention_args) on the gpu, flash-style with the
// tiling of attention_tiles.cuh: a warp per query row walks the key tiles its block's rows see at
// all, masking each key to its own row's range [lo, hi] (causal, inside its document), with an
// online softmax; the backward recomputes probabilities from lse, one kernel for dq (a warp per
// query row) and one for dk and dv (a warp per key row, walking the query tiles at or after it),
// so no two blocks add into one gradient. Correct for any positions; the tensor-core and cuDNN
// paths of whole-row attention do not take documents yet (GPU issue).
#include "cuda/attention_tiles.cuh"

namespace keel::cuda {
namespace {

// The keys of the block query t of row b sees: lo .. hi (none when lo > hi).
__device__ __forceinline__ void visible_keys(const AttentionBlockShape& a, int64_t b, int64_t t, int64_t* lo,
                                             int64_t* hi) {
  const int64_t index = a.q_index0 + t;
  const int64_t position = a.positions ? int64_t(a.positions[b * a.Tq + t]) : index;
  const int64_t first = index - position - a.kv_index0;
  *lo = position < 0 ? a.Tkv : (first > 0 ? first : 0);
  const int64_t last = index - a.kv_index0;
  *hi = last < a.Tkv - 1 ? last : a.Tkv - 1;
}

// Every thread of the block: the union of the key ranges of its rows q0 .. q0 + kWarps - 1.
__device__ __forceinline__ void block_keys(const AttentionBlockShape& a, int64_t b, int64_t q0, int64_t* first,
                                           int64_t* last) {
  *first = a.Tkv, *last = -1;
  for (int w = 0; w < kWarps; ++w) {
    if (q0 + w >= a.Tq) break;
    int64_t lo, hi;
    visible_keys(a, b, q0 + w, &lo, &hi);
    if (lo > hi) continue;
    *first = lo < *first ? lo : *first;
    *last = hi > *last ? hi : *last;
  }
}

template <typename E>
__global__ void block_forward_kernel(AttentionBlockShape a, E* out, float* lse, const E* q, const E* kv, float scale) {
  extern __shared__ float smem[];
  const int hs = int(a.hs), ld = hs + 1;
  float* k_tile = smem;
  float* v_tile = k_tile + kTile * ld;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* q_row = v_tile + kTile * ld + warp * hs;

  const int64_t bh = blockIdx.x, b = bh / a.NH, h = bh % a.NH, g = h / (a.NH / a.NKV);
  const int64_t q0 = blockIdx.y * int64_t(kWarps), t = q0 + warp;
  const E* keys = kv + b * a.Tkv * a.kv_stride + g * hs;
  const E* values = keys + a.NKV * hs;
  const bool active = t < a.Tq;
  int64_t lo = 1, hi = 0, first, last;
  block_keys(a, b, q0, &first, &last);
  if (active) {
    visible_keys(a, b, t, &lo, &hi);
    for (int d = lane; d < hs; d += 32) q_row[d] = load(q + (b * a.Tq + t) * a.q_stride + h * hs + d);
  }
  float m = -INFINITY, l = 0.0f, acc[kPerLane] = {};
  for (int64_t k0 = last < first ? a.Tkv : first / kTile * kTile; k0 <= last; k0 += kTile) {
    __syncthreads();  // the previous tile has been read (and q_row written)
    load_rows(k_tile, ld, keys, a.kv_stride, k0, a.Tkv, hs);
    load_rows(v_tile, ld, values, a.kv_stride, k0, a.Tkv, hs);
    __syncthreads();
    if (!active || k0 > hi || k0 + kTile <= lo) continue;  // uniform over the warp
    const int64_t s = k0 + lane;
    const bool seen = s >= lo && s <= hi;
    const float score = seen ? dot_row(q_row, k_tile + lane * ld, hs) * scale : -INFINITY;
    const float m_new = fmaxf(m, warp_max(score));  // finite: the tile meets [lo, hi]
    const float p = seen ? expf(score - m_new) : 0.0f;
    const float correction = m == -INFINITY ? 0.0f : expf(m - m_new);
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
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  E* o = out + (b * a.Tq + t) * a.out_stride + h * hs;
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int d = lane + 32 * r;
    if (d < hs) store(o + d, acc[r] * inv);
  }
  if (lane == 0) lse[bh * a.Tq + t] = l > 0.0f ? m + logf(l) : -INFINITY;
}

// rowdot(B,NH,Tq) = Σ_d dout ∘ out; a warp per row.
template <typename E>
__global__ void block_rowdot_kernel(AttentionBlockShape a, float* rowdot, const E* dout, const E* out) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bh = blockIdx.x, b = bh / a.NH, h = bh % a.NH;
  const int64_t t = blockIdx.y * int64_t(kWarps) + warp;
  if (t >= a.Tq) return;
  const int64_t offset = (b * a.Tq + t) * a.out_stride + h * a.hs;
  float sum = 0.0f;
  for (int d = lane; d < a.hs; d += 32) sum += load(dout + offset + d) * load(out + offset + d);
  sum = warp_sum(sum);
  if (lane == 0) rowdot[bh * a.Tq + t] = sum;
}

template <typename E>
__global__ void block_dq_kernel(AttentionBlockShape a, E* dq, const E* dout, const E* q, const E* kv, const float* lse,
                                const float* rowdot, float scale) {
  extern __shared__ float smem[];
  const int hs = int(a.hs), ld = hs + 1;
  float* k_tile = smem;
  float* v_tile = k_tile + kTile * ld;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* q_row = v_tile + kTile * ld + warp * hs;
  float* do_row = v_tile + kTile * ld + kWarps * hs + warp * hs;

  const int64_t bh = blockIdx.x, b = bh / a.NH, h = bh % a.NH, g = h / (a.NH / a.NKV);
  const int64_t q0 = blockIdx.y * int64_t(kWarps), t = q0 + warp;
  const E* keys = kv + b * a.Tkv * a.kv_stride + g * hs;
  const E* values = keys + a.NKV * hs;
  int64_t lo = 1, hi = 0, first, last;
  block_keys(a, b, q0, &first, &last);
  float lse_t = -INFINITY, D = 0.0f;
  if (t < a.Tq) {
    visible_keys(a, b, t, &lo, &hi);
    for (int d = lane; d < hs; d += 32) {
      q_row[d] = load(q + (b * a.Tq + t) * a.q_stride + h * hs + d);
      do_row[d] = load(dout + (b * a.Tq + t) * a.out_stride + h * hs + d);
    }
    lse_t = lse[bh * a.Tq + t];
    D = rowdot[bh * a.Tq + t];
  }
  const bool active = t < a.Tq && lse_t != -INFINITY;
  float acc[kPerLane] = {};
  for (int64_t k0 = last < first ? a.Tkv : first / kTile * kTile; k0 <= last; k0 += kTile) {
    __syncthreads();
    load_rows(k_tile, ld, keys, a.kv_stride, k0, a.Tkv, hs);
    load_rows(v_tile, ld, values, a.kv_stride, k0, a.Tkv, hs);
    __syncthreads();
    if (!active || k0 > hi || k0 + kTile <= lo) continue;
    const int64_t s = k0 + lane;
    float ds = 0.0f;
    if (s >= lo && s <= hi) {
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
  E* out = dq + (b * a.Tq + t) * a.q_stride + h * hs;
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int d = lane + 32 * r;
    if (d < hs) store(out + d, load(out + d) + scale * acc[r]);
  }
}

// A warp per key row s; the block walks the query tiles whose indices reach s's, for each query
// head sharing the key/value head, one after another (a fixed order: the same bits every run).
template <typename E>
__global__ void block_dkdv_kernel(AttentionBlockShape a, E* dkv, const E* dout, const E* q, const E* kv,
                                  const float* lse, const float* rowdot, float scale) {
  extern __shared__ float smem[];
  __shared__ int64_t lo_tile[kTile], hi_tile[kTile];
  const int hs = int(a.hs), ld = hs + 1;
  float* q_tile = smem;
  float* do_tile = q_tile + kTile * ld;
  float* lse_tile = do_tile + kTile * ld;
  float* rowdot_tile = lse_tile + kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* k_row = rowdot_tile + kTile + warp * hs;
  float* v_row = rowdot_tile + kTile + kWarps * hs + warp * hs;

  const int64_t bg = blockIdx.x, b = bg / a.NKV, g = bg % a.NKV, group = a.NH / a.NKV;
  const int64_t s0 = blockIdx.y * int64_t(kWarps), s = s0 + warp;
  const E* keys = kv + b * a.Tkv * a.kv_stride + g * hs;
  const E* values = keys + a.NKV * hs;
  const bool active = s < a.Tkv;
  if (active)
    for (int d = lane; d < hs; d += 32) {
      k_row[d] = load(keys + s * a.kv_stride + d);
      v_row[d] = load(values + s * a.kv_stride + d);
    }
  // Queries at an index before key s0's see none of this block's keys.
  const int64_t t_first = a.kv_index0 + s0 - a.q_index0;
  const int64_t t_begin = t_first > 0 ? t_first / kTile * kTile : 0;
  float dk[kPerLane] = {}, dv[kPerLane] = {};
  for (int64_t h = g * group; h < (g + 1) * group; ++h) {
    const int64_t bh = b * a.NH + h;
    const E* head = q + b * a.Tq * a.q_stride + h * hs;
    const E* dout_head = dout + b * a.Tq * a.out_stride + h * hs;
    for (int64_t t0 = t_begin; t0 < a.Tq; t0 += kTile) {
      __syncthreads();
      load_rows(q_tile, ld, head, a.q_stride, t0, a.Tq, hs);
      load_rows(do_tile, ld, dout_head, a.out_stride, t0, a.Tq, hs);
      if (threadIdx.x < kTile) {
        const int64_t t = t0 + threadIdx.x;
        int64_t lo = 1, hi = 0;
        if (t < a.Tq) visible_keys(a, b, t, &lo, &hi);
        const float stat = t < a.Tq ? lse[bh * a.Tq + t] : -INFINITY;
        if (stat == -INFINITY) lo = 1, hi = 0;
        lo_tile[threadIdx.x] = lo, hi_tile[threadIdx.x] = hi;
        lse_tile[threadIdx.x] = stat == -INFINITY ? 0.0f : stat;
        rowdot_tile[threadIdx.x] = t < a.Tq ? rowdot[bh * a.Tq + t] : 0.0f;
      }
      __syncthreads();
      if (!active) continue;
      float p = 0.0f, ds = 0.0f;
      if (s >= lo_tile[lane] && s <= hi_tile[lane]) {
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
  E* dk_out = dkv + (b * a.Tkv + s) * a.kv_stride + g * hs;
  E* dv_out = dk_out + a.NKV * hs;
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
void launch_forward(const AttentionBlockShape& a, E* out, float* lse, const E* q, const E* kv, cudaStream_t stream) {
  const int hs = int(a.hs);
  const size_t smem = (2 * kTile * (hs + 1) + kWarps * hs) * sizeof(float);
  const dim3 grid(unsigned(a.B * a.NH), unsigned((a.Tq + kWarps - 1) / kWarps));
  block_forward_kernel<<<grid, 32 * kWarps, smem, stream>>>(a, out, lse, q, kv, 1.0f / sqrtf(float(hs)));
}

template <typename E>
void launch_backward(const AttentionBlockShape& a, E* dq, E* dkv, const E* dout, const E* out, const float* lse,
                     const E* q, const E* kv, float* rowdot, cudaStream_t stream) {
  const int hs = int(a.hs);
  const float scale = 1.0f / sqrtf(float(hs));
  const dim3 grid(unsigned(a.B * a.NH), unsigned((a.Tq + kWarps - 1) / kWarps));
  block_rowdot_kernel<<<grid, 32 * kWarps, 0, stream>>>(a, rowdot, dout, out);
  const size_t dq_smem = (2 * kTile * (hs + 1) + 2 * kWarps * hs) * sizeof(float);
  block_dq_kernel<<<grid, 32 * kWarps, dq_smem, stream>>>(a, dq, dout, q, kv, lse, rowdot, scale);
  if (a.Tkv <= 0) return;
  const size_t dkdv_smem = (2 * kTile * (hs + 1) + 2 * kTile + 2 * kWarps * hs) * sizeof(float);
  const dim3 kv_grid(unsigned(a.B * a.NKV), unsigned((a.Tkv + kWarps - 1) / kWarps));
  block_dkdv_kernel<<<kv_grid, 32 * kWarps, dkdv_smem, stream>>>(a, dkv, dout, q, kv, lse, rowdot, scale);
}

}  // namespace

void attention_block_forward(Elem e, const AttentionBlockShape& s, void* out, float* lse, const void* q,
                             const void* kv, cudaStream_t stream) {
  if (s.B <= 0 || s.Tq <= 0) return;
  if (e == Elem::bf16)
    launch_forward(s, static_cast<bf16*>(out), lse, static_cast<const bf16*>(q), static_cast<const bf16*>(kv), stream);
  else
    launch_forward(s, static_cast<float*>(out), lse, static_cast<const float*>(q), static_cast<const float*>(kv),
                   stream);
}

void attention_block_backward(Elem e, const AttentionBlockShape& s, void* dq, void* dkv, const void* dout,
                              const void* out, const float* lse, const void* q, const void* kv, float* rowdot,
                              cudaStream_t stream) {
  if (s.B <= 0 || s.Tq <= 0) return;
  if (e == Elem::bf16)
    launch_backward(s, static_cast<bf16*>(dq), static_cast<bf16*>(dkv), static_cast<const bf16*>(dout),
                    static_cast<const bf16*>(out), lse, static_cast<const bf16*>(q), static_cast<const bf16*>(kv),
                    rowdot, stream);
  else
    launch_backward(s, static_cast<float*>(dq), static_cast<float*>(dkv), static_cast<const float*>(dout),
                    static_cast<const float*>(out), lse, static_cast<const float*>(q), static_cast<const float*>(kv),
                    rowdot, stream);
}

namespace {

template <typename E>
__global__ void merge_kernel(E* out, int64_t out_stride, float* lse, const E* out_b, int64_t out_b_stride,
                             const float* lse_b, int64_t B, int64_t T, int64_t NH, int64_t hs) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // (b, h, t) in lse's order
  if (i >= B * NH * T) return;
  const int64_t t = i % T, h = (i / T) % NH, b = i / (T * NH);
  const float l = lse[i], lb = lse_b[i];
  if (lb == -INFINITY) return;  // the other block adds nothing
  const float high = fmaxf(l, lb);
  const float merged = high + logf(expf(l - high) + expf(lb - high));
  const float keep = l == -INFINITY ? 0.0f : expf(l - merged), take = expf(lb - merged);
  E* o = out + (b * T + t) * out_stride + h * hs;
  const E* ob = out_b + (b * T + t) * out_b_stride + h * hs;
  for (int64_t d = 0; d < hs; ++d) store(o + d, load(o + d) * keep + load(ob + d) * take);
  lse[i] = merged;
}

}  // namespace

void attention_merge(Elem e, void* out, int64_t out_stride, float* lse, const void* out_b, int64_t out_b_stride,
                     const float* lse_b, int64_t B, int64_t T, int64_t NH, int64_t hs, cudaStream_t stream) {
  const int64_t n = B * NH * T;
  if (n <= 0) return;
  const unsigned threads = 256, blocks = unsigned((n + threads - 1) / threads);
  if (e == Elem::bf16)
    merge_kernel<<<blocks, threads, 0, stream>>>(static_cast<bf16*>(out), out_stride, lse,
                                                 static_cast<const bf16*>(out_b), out_b_stride, lse_b, B, T, NH, hs);
  else
    merge_kernel<<<blocks, threads, 0, stream>>>(static_cast<float*>(out), out_stride, lse,
                                                 static_cast<const float*>(out_b), out_b_stride, lse_b, B, T, NH, hs);
}

namespace {

template <typename E>
__global__ void copy_rows_kernel(E* dst, int64_t dst_stride, const E* src, int64_t src_stride, int64_t rows,
                                 int64_t width, bool accumulate) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * width) return;
  const int64_t r = i / width, c = i % width;
  E* d = dst + r * dst_stride + c;
  const float v = load(src + r * src_stride + c);
  store(d, accumulate ? load(d) + v : v);
}

}  // namespace

void copy_rows(Elem e, void* dst, int64_t dst_stride, const void* src, int64_t src_stride, int64_t rows, int64_t width,
               bool accumulate, cudaStream_t stream) {
  const int64_t n = rows * width;
  if (n <= 0) return;
  const unsigned threads = 256, blocks = unsigned((n + threads - 1) / threads);
  if (e == Elem::bf16)
    copy_rows_kernel<<<blocks, threads, 0, stream>>>(static_cast<bf16*>(dst), dst_stride, static_cast<const bf16*>(src),
                                                     src_stride, rows, width, accumulate);
  else
    copy_rows_kernel<<<blocks, threads, 0, stream>>>(static_cast<float*>(dst), dst_stride,
                                                     static_cast<const float*>(src), src_stride, rows, width, accumulate);
}

}  // namespace keel::cuda
