// Causal attention on the tensor cores, for bf16 with head size 64 (GPT-2's and most small
// models'): the same contract as attention_forward.cu and attention_backward.cu, whose scalar
// kernels remain for fp32 and other head sizes. The products run as mma.sync m16n8k16 (bf16 in,
// fp32 accumulate); softmax, its statistics and the gradients' combinations stay in fp32.
//
// Tiling: a block of 4 warps holds 64 rows of one side of the score matrix, 16 rows a warp,
// their operand fragments in registers; it walks the other side in tiles of 64 rows staged in
// shared memory, padded by 8 elements a row so the fragment reads meet no bank conflict.
//   forward  a block per 64 queries: S = QKᵀ, online softmax, O += PV (P rounded to bf16);
//            it saves one log-sum-exp per row, in natural-log units as the scalar kernel does.
//   dk, dv   a block per 64 keys walks the query tiles at or after it (every query head of its
//            key/value head in turn): Sᵀ = KQᵀ, Pᵀ, dV += PᵀdO, dPᵀ = VdOᵀ, dSᵀ = Pᵀ(dPᵀ − D),
//            dK += dSᵀQ.
//   dq       a block per 64 queries walks the key tiles up to its diagonal: S, P, dP = dOVᵀ,
//            dS, dQ += dSK.
// The C fragment of one product is the A fragment of the next (the rows a lane holds are the
// same), so P and dS go from accumulators to operands without leaving registers. Operands that
// the product reads down a column (V in PV, dO in PᵀdO, Q in dSᵀQ, K in dSK) are staged a second
// time transposed. No atomics and a fixed order everywhere: the same bits on every run.
#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/attention_mma.h"
#include "cuda/common.cuh"

namespace keel::cuda {
namespace {

constexpr int kHs = 64;          // the head size these kernels take
constexpr int kRows = 64;        // rows of a block, and of a staged tile
constexpr int kMmaThreads = 128;  // 4 warps of 16 rows
constexpr int kPitch = kHs + 8;   // a staged row (elements)
constexpr int kPitchT = kRows + 8;  // a staged transposed row (elements)
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ uint32_t ld32(const bf16* p) { return *reinterpret_cast<const uint32_t*>(p); }

__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // lo in the low half: the lower column
  return *reinterpret_cast<uint32_t*>(&v);
}

// d += a·b for a 16×16 A (row-major fragment), a 16×8 B (column-major), fp32 accumulators.
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // bf16 mma.sync needs sm_80; the backend refuses older GPUs at create
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// Rows r0.. r0+63 of a (T, stride) bf16 matrix, columns 0..63, into tile[row][col] (pitch
// kPitch); rows past T are zeros. 16-byte loads, consecutive threads along a row.
__device__ void stage(bf16* tile, const bf16* src, int64_t stride, int64_t r0, int64_t T) {
  constexpr int kChunks = kHs / 8;
  for (int idx = threadIdx.x; idx < kRows * kChunks; idx += kMmaThreads) {
    const int row = idx / kChunks, col = idx % kChunks * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r0 + row < T) v = *reinterpret_cast<const uint4*>(src + (r0 + row) * stride + col);
    *reinterpret_cast<uint4*>(tile + row * kPitch + col) = v;
  }
}

// The same rows transposed: tile[col][row] (pitch kPitchT). Consecutive threads take consecutive
// rows, so a warp's stores fall in different banks.
__device__ void stage_transposed(bf16* tile, const bf16* src, int64_t stride, int64_t r0, int64_t T) {
  constexpr int kChunks = kHs / 8;
  for (int idx = threadIdx.x; idx < kRows * kChunks; idx += kMmaThreads) {
    const int row = idx % kRows, col = idx / kRows * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r0 + row < T) v = *reinterpret_cast<const uint4*>(src + (r0 + row) * stride + col);
    const bf16* e = reinterpret_cast<const bf16*>(&v);
#pragma unroll
    for (int i = 0; i < 8; ++i) tile[(col + i) * kPitchT + row] = e[i];
  }
}

// The A fragments of a warp's 16 rows (from `row0` of the staged tile) over all 64 columns.
__device__ __forceinline__ void a_fragments(uint32_t (&f)[kHs / 16][4], const bf16* tile, int row0) {
  const int lane = threadIdx.x % 32, g = lane >> 2, c = 2 * (lane & 3);
#pragma unroll
  for (int ks = 0; ks < kHs / 16; ++ks) {
    f[ks][0] = ld32(tile + (row0 + g) * kPitch + ks * 16 + c);
    f[ks][1] = ld32(tile + (row0 + g + 8) * kPitch + ks * 16 + c);
    f[ks][2] = ld32(tile + (row0 + g) * kPitch + ks * 16 + 8 + c);
    f[ks][3] = ld32(tile + (row0 + g + 8) * kPitch + ks * 16 + 8 + c);
  }
}

// acc[n] (16 × 64, n-tiles of 8) = A (16 × kHs, fragments) · tileᵀ, tile holding 64 rows of kHs.
__device__ __forceinline__ void times_rows(float (&acc)[kRows / 8][4], const uint32_t (&a)[kHs / 16][4],
                                           const bf16* tile) {
  const int lane = threadIdx.x % 32, g = lane >> 2, c = 2 * (lane & 3);
#pragma unroll
  for (int nt = 0; nt < kRows / 8; ++nt) {
    acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kHs / 16; ++ks)
      mma(acc[nt], a[ks], ld32(tile + (nt * 8 + g) * kPitch + ks * 16 + c),
          ld32(tile + (nt * 8 + g) * kPitch + ks * 16 + 8 + c));
  }
}

// acc (16 × kHs) += P (16 × 64, accumulators rounded to bf16) · M, M (64 × kHs) staged transposed.
__device__ __forceinline__ void accumulate_times(float (&acc)[kHs / 8][4], const float (&p)[kRows / 8][4],
                                                 const bf16* transposed) {
  const int lane = threadIdx.x % 32, g = lane >> 2, c = 2 * (lane & 3);
#pragma unroll
  for (int kk = 0; kk < kRows / 16; ++kk) {
    const uint32_t a[4] = {pack(p[2 * kk][0], p[2 * kk][1]), pack(p[2 * kk][2], p[2 * kk][3]),
                           pack(p[2 * kk + 1][0], p[2 * kk + 1][1]), pack(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
    for (int dt = 0; dt < kHs / 8; ++dt)
      mma(acc[dt], a, ld32(transposed + (dt * 8 + g) * kPitchT + kk * 16 + c),
          ld32(transposed + (dt * 8 + g) * kPitchT + kk * 16 + 8 + c));
  }
}

// dst[row] (+)= scale · acc for the warp's rows row0 and row0 + 8 (below `limit`), bf16 pairs.
__device__ __forceinline__ void add_rows(bf16* dst, int64_t stride, int64_t row0, int64_t limit,
                                         const float (&acc)[kHs / 8][4], float scale, bool accumulate) {
  const int c = 2 * (threadIdx.x % 4);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t row = row0 + 8 * half;
    if (row >= limit) continue;
#pragma unroll
    for (int dt = 0; dt < kHs / 8; ++dt) {
      bf16* p = dst + row * stride + dt * 8 + c;
      float x = scale * acc[dt][2 * half], y = scale * acc[dt][2 * half + 1];
      if (accumulate) {
        const __nv_bfloat162 old = *reinterpret_cast<const __nv_bfloat162*>(p);
        x += __bfloat162float(old.x);
        y += __bfloat162float(old.y);
      }
      *reinterpret_cast<uint32_t*>(p) = pack(x, y);
    }
  }
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

struct Heads {
  int64_t T, C, NH, NKV, W;
  __device__ int64_t kv_of(int64_t h) const { return h / (NH / NKV); }
};

__global__ void __launch_bounds__(kMmaThreads) forward_kernel(bf16* out, float* lse, const bf16* qkv, Heads hd,
                                                              float scale) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* q_s = reinterpret_cast<bf16*>(smem);
  bf16* k_s = q_s + kRows * kPitch;
  bf16* vt_s = k_s + kRows * kPitch;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, c = 2 * (lane & 3);
  const int64_t T = hd.T, q0 = (gridDim.x - 1 - blockIdx.x) * int64_t(kRows);  // the longest blocks first
  const int64_t bh = blockIdx.y, b = bh / hd.NH, h = bh % hd.NH;
  const bf16* keys = qkv + b * T * hd.W + hd.C + hd.kv_of(h) * kHs;
  const bf16* values = keys + hd.NKV * kHs;
  stage(q_s, qkv + b * T * hd.W + h * kHs, hd.W, q0, T);
  __syncthreads();
  uint32_t qf[kHs / 16][4];
  a_fragments(qf, q_s, warp * 16);

  const int64_t row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  const float scale2 = scale * kLog2e;  // scores in log2 units: exp2 throughout
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, o[kHs / 8][4] = {};
  const int64_t last = (q0 + kRows < T ? q0 + kRows : T) - 1;
  for (int64_t k0 = 0; k0 <= last; k0 += kRows) {
    __syncthreads();  // the previous tile has been read
    stage(k_s, keys, hd.W, k0, T);
    stage_transposed(vt_s, values, hd.W, k0, T);
    __syncthreads();
    float s[kRows / 8][4];
    times_rows(s, qf, k_s);
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < kRows / 8; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t key = k0 + nt * 8 + c + (i & 1);
        const float v = key <= row[i / 2] && key < T ? s[nt][i] * scale2 : -INFINITY;
        s[nt][i] = v;
        tile_max[i / 2] = fmaxf(tile_max[i / 2], v);
      }
    float correction[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m_new = fmaxf(m[r], quad_max(tile_max[r]));
      const float base = m_new == -INFINITY ? 0.0f : m_new;  // a row with no key yet (past T only)
      correction[r] = exp2f(m[r] - base);
      m[r] = m_new;
      tile_max[r] = base;
    }
    float sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nt = 0; nt < kRows / 8; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        s[nt][i] = exp2f(s[nt][i] - tile_max[i / 2]);
        sum[i / 2] += s[nt][i];
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) l[r] = l[r] * correction[r] + quad_sum(sum[r]);
#pragma unroll
    for (int dt = 0; dt < kHs / 8; ++dt) {
      o[dt][0] *= correction[0], o[dt][1] *= correction[0];
      o[dt][2] *= correction[1], o[dt][3] *= correction[1];
    }
    accumulate_times(o, s, vt_s);
  }
  const float inv[2] = {1.0f / l[0], 1.0f / l[1]};
#pragma unroll
  for (int dt = 0; dt < kHs / 8; ++dt) {
    o[dt][0] *= inv[0], o[dt][1] *= inv[0];
    o[dt][2] *= inv[1], o[dt][3] *= inv[1];
  }
  add_rows(out + b * T * hd.C + h * kHs, hd.C, row[0], T, o, 1.0f, false);
  if ((lane & 3) == 0)
    for (int r = 0; r < 2; ++r)
      if (row[r] < T) lse[bh * T + row[r]] = (m[r] + log2f(l[r])) * kLn2;
}

// The log-sum-exp and D of a tile's 64 rows, lse in log2 units; rows past T get +inf (P = 0).
__device__ void stage_row_stats(float* lse2_s, float* d_s, const float* lse, const float* rowdot, int64_t bh,
                                int64_t r0, int64_t T) {
  if (threadIdx.x < kRows) {
    const int64_t t = r0 + threadIdx.x;
    lse2_s[threadIdx.x] = t < T ? lse[bh * T + t] * kLog2e : INFINITY;
    d_s[threadIdx.x] = t < T ? rowdot[bh * T + t] : 0.0f;
  }
}

__global__ void __launch_bounds__(kMmaThreads) dkdv_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv,
                                                           const float* lse, const float* rowdot, Heads hd,
                                                           float scale) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* q_s = reinterpret_cast<bf16*>(smem);  // first K, then each query tile
  bf16* do_s = q_s + kRows * kPitch;          // first V, then each dout tile
  bf16* qt_s = do_s + kRows * kPitch;
  bf16* dot_s = qt_s + kHs * kPitchT;
  float* lse2_s = reinterpret_cast<float*>(dot_s + kHs * kPitchT);
  float* d_s = lse2_s + kRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, c = 2 * (lane & 3);
  const int64_t T = hd.T, s0 = (gridDim.x - 1 - blockIdx.x) * int64_t(kRows);
  const int64_t bkv = blockIdx.y, b = bkv / hd.NKV, kv = bkv % hd.NKV, group = hd.NH / hd.NKV;
  const bf16* keys = qkv + b * T * hd.W + hd.C + kv * kHs;
  const bf16* values = keys + hd.NKV * kHs;
  stage(q_s, keys, hd.W, s0, T);
  stage(do_s, values, hd.W, s0, T);
  __syncthreads();
  uint32_t kf[kHs / 16][4], vf[kHs / 16][4];
  a_fragments(kf, q_s, warp * 16);
  a_fragments(vf, do_s, warp * 16);

  const int64_t key[2] = {s0 + warp * 16 + g, s0 + warp * 16 + g + 8};
  const float scale2 = scale * kLog2e;
  float dk[kHs / 8][4] = {}, dv[kHs / 8][4] = {};
  for (int64_t h = kv * group; h < (kv + 1) * group; ++h) {
    const int64_t bh = b * hd.NH + h;
    const bf16* queries = qkv + b * T * hd.W + h * kHs;
    const bf16* dout_head = dout + b * T * hd.C + h * kHs;
    for (int64_t q0 = s0; q0 < T; q0 += kRows) {
      __syncthreads();  // the previous tile (or K and V) has been read
      stage(q_s, queries, hd.W, q0, T);
      stage_transposed(qt_s, queries, hd.W, q0, T);
      stage(do_s, dout_head, hd.C, q0, T);
      stage_transposed(dot_s, dout_head, hd.C, q0, T);
      stage_row_stats(lse2_s, d_s, lse, rowdot, bh, q0, T);
      __syncthreads();
      float p[kRows / 8][4], dp[kRows / 8][4];
      times_rows(p, kf, q_s);   // Sᵀ: the warp's keys × the tile's queries
      times_rows(dp, vf, do_s);  // dPᵀ = V dOᵀ
#pragma unroll
      for (int nt = 0; nt < kRows / 8; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int j = nt * 8 + c + (i & 1);  // the query within the tile
          const int64_t query = q0 + j;
          const float prob = query >= key[i / 2] ? exp2f(p[nt][i] * scale2 - lse2_s[j]) : 0.0f;
          p[nt][i] = prob;
          dp[nt][i] = prob * (dp[nt][i] - d_s[j]);  // dSᵀ
        }
      accumulate_times(dv, p, dot_s);  // dV += Pᵀ dO
      accumulate_times(dk, dp, qt_s);  // dK += dSᵀ Q
    }
  }
  bf16* dk_out = dqkv + b * T * hd.W + hd.C + kv * kHs;
  add_rows(dk_out, hd.W, key[0], T, dk, scale, true);
  add_rows(dk_out + hd.NKV * kHs, hd.W, key[0], T, dv, 1.0f, true);
}

__global__ void __launch_bounds__(kMmaThreads) dq_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv,
                                                         const float* lse, const float* rowdot, Heads hd,
                                                         float scale) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* k_s = reinterpret_cast<bf16*>(smem);  // first Q, then each key tile
  bf16* v_s = k_s + kRows * kPitch;           // first dout, then each value tile
  bf16* kt_s = v_s + kRows * kPitch;
  float* lse2_s = reinterpret_cast<float*>(kt_s + kHs * kPitchT);
  float* d_s = lse2_s + kRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, c = 2 * (lane & 3);
  const int64_t T = hd.T, q0 = (gridDim.x - 1 - blockIdx.x) * int64_t(kRows);
  const int64_t bh = blockIdx.y, b = bh / hd.NH, h = bh % hd.NH;
  const bf16* keys = qkv + b * T * hd.W + hd.C + hd.kv_of(h) * kHs;
  const bf16* values = keys + hd.NKV * kHs;
  stage(k_s, qkv + b * T * hd.W + h * kHs, hd.W, q0, T);
  stage(v_s, dout + b * T * hd.C + h * kHs, hd.C, q0, T);
  stage_row_stats(lse2_s, d_s, lse, rowdot, bh, q0, T);
  __syncthreads();
  uint32_t qf[kHs / 16][4], dof[kHs / 16][4];
  a_fragments(qf, k_s, warp * 16);
  a_fragments(dof, v_s, warp * 16);
  const int local[2] = {warp * 16 + g, warp * 16 + g + 8};
  const float lse2[2] = {lse2_s[local[0]], lse2_s[local[1]]}, dd[2] = {d_s[local[0]], d_s[local[1]]};

  const int64_t row[2] = {q0 + local[0], q0 + local[1]};
  const float scale2 = scale * kLog2e;
  float dq[kHs / 8][4] = {};
  const int64_t last = (q0 + kRows < T ? q0 + kRows : T) - 1;
  for (int64_t k0 = 0; k0 <= last; k0 += kRows) {
    __syncthreads();
    stage(k_s, keys, hd.W, k0, T);
    stage_transposed(kt_s, keys, hd.W, k0, T);
    stage(v_s, values, hd.W, k0, T);
    __syncthreads();
    float p[kRows / 8][4], dp[kRows / 8][4];
    times_rows(p, qf, k_s);    // S
    times_rows(dp, dof, v_s);  // dP = dO Vᵀ
#pragma unroll
    for (int nt = 0; nt < kRows / 8; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t k = k0 + nt * 8 + c + (i & 1);
        const float prob = k <= row[i / 2] && k < T ? exp2f(p[nt][i] * scale2 - lse2[i / 2]) : 0.0f;
        dp[nt][i] = prob * (dp[nt][i] - dd[i / 2]);  // dS
      }
    accumulate_times(dq, dp, kt_s);  // dQ += dS K
  }
  add_rows(dqkv + b * T * hd.W + h * kHs, hd.W, row[0], T, dq, scale, true);
}

constexpr size_t kForwardSmem = (2 * kRows * kPitch + kHs * kPitchT) * sizeof(bf16);
constexpr size_t kDkdvSmem = (2 * kRows * kPitch + 2 * kHs * kPitchT) * sizeof(bf16) + 2 * kRows * sizeof(float);
constexpr size_t kDqSmem = (2 * kRows * kPitch + kHs * kPitchT) * sizeof(bf16) + 2 * kRows * sizeof(float);

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Kernels whose shared memory is over the default 48 KiB must say so once.
void allow_shared_memory() {
  static const bool done = [] {
    cudaFuncSetAttribute(forward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kForwardSmem));
    cudaFuncSetAttribute(dkdv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kDkdvSmem));
    cudaFuncSetAttribute(dq_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kDqSmem));
    return true;
  }();
  (void)done;
}

Heads heads(int64_t T, int64_t C, int64_t NH, int64_t NKV) { return Heads{T, C, NH, NKV, C + 2 * NKV * kHs}; }

}  // namespace

bool attention_mma_applies(Elem e, int64_t B, int64_t T, int64_t C, int64_t NH,
                           std::initializer_list<const void*> pointers) {
  if (e != Elem::bf16 || NH <= 0 || C != NH * kHs || B <= 0 || T <= 0) return false;
  if (B * NH > 65535 || (T + kRows - 1) / kRows > (int64_t{1} << 31) - 1) return false;
  for (const void* p : pointers)
    if (!aligned16(p)) return false;
  return true;
}

void attention_forward_mma(void* out, float* lse, const void* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                           int64_t NKV, cudaStream_t stream) {
  allow_shared_memory();
  const dim3 grid(static_cast<unsigned>((T + kRows - 1) / kRows), static_cast<unsigned>(B * NH));
  forward_kernel<<<grid, kMmaThreads, kForwardSmem, stream>>>(static_cast<bf16*>(out), lse,
                                                              static_cast<const bf16*>(qkv), heads(T, C, NH, NKV),
                                                              1.0f / sqrtf(float(kHs)));
}

void attention_backward_mma(void* dqkv, const void* dout, const void* qkv, const float* lse, const float* rowdot,
                            int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV, cudaStream_t stream) {
  allow_shared_memory();
  const Heads hd = heads(T, C, NH, NKV);
  const float scale = 1.0f / sqrtf(float(kHs));
  const unsigned tiles = static_cast<unsigned>((T + kRows - 1) / kRows);
  dkdv_kernel<<<dim3(tiles, static_cast<unsigned>(B * NKV)), kMmaThreads, kDkdvSmem, stream>>>(
      static_cast<bf16*>(dqkv), static_cast<const bf16*>(dout), static_cast<const bf16*>(qkv), lse, rowdot, hd, scale);
  dq_kernel<<<dim3(tiles, static_cast<unsigned>(B * NH)), kMmaThreads, kDqSmem, stream>>>(
      static_cast<bf16*>(dqkv), static_cast<const bf16*>(dout), static_cast<const bf16*>(qkv), lse, rowdot, hd, scale);
}

}  // namespace keel::cuda
