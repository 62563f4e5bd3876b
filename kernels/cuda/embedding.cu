// Token and position embeddings, forward and backward, for the whole table or a block of its
// rows (the vocabulary split over tensor-parallel ranks). A token can repeat within a batch, so
// the dwte scatter cannot simply add from every position at once without float atomics, whose
// order varies between runs. Instead the positions are sorted by token (CUB's radix sort, which is
// stable: a token's positions stay in position order) and the sorted list is cut into fixed
// chunks of kChunk positions. Pass 1 sums, in order, each run of one token inside a chunk (a
// piece) into registers: a token whose positions all lie in one chunk is added onto its row at
// once; a token spanning chunks leaves its pieces in scratch, and pass 2 adds them onto the row
// in chunk order. Every chunk is the same work however often a token repeats (GPT-2 on bytes
// repeats some ~20,000 times), and the grouping of the sums depends on the tokens alone, not on
// the GPU or on timing: the same bits on every run.
#include "cuda/common.cuh"
#include "cuda/kernels.h"

#include <cub/device/device_radix_sort.cuh>

#include <climits>
#include <type_traits>

namespace keel::cuda {
namespace {

template <typename E>
__global__ void embedding_forward_kernel(E* out, const int32_t* tokens, const E* wte_rows, const E* wpe, int64_t T,
                                         int64_t C, int64_t row_begin, int64_t rows, int64_t n) {
  KEEL_GRID_STRIDE(i, n) {
    const int64_t bt = i / C, c = i % C, t = bt % T;
    const int64_t row = static_cast<int64_t>(tokens[bt]) - row_begin;
    float v = row >= 0 && row < rows ? load(wte_rows + row * C + c) : 0.0f;
    if (wpe) v += load(wpe + t * C + c);
    store(out + i, v);
  }
}

// dwpe(T,C) += Σ_b dout(b,t,:): a thread per (t, c), walking b in order.
template <typename E>
__global__ void embedding_dwpe_kernel(float* dwpe, const E* dout, int64_t B, int64_t T, int64_t C) {
  KEEL_GRID_STRIDE(i, T * C) {
    float acc = dwpe[i];
    for (int64_t b = 0; b < B; ++b) acc += load(dout + b * T * C + i);
    dwpe[i] = acc;
  }
}

constexpr int kChunk = 64;                // sorted positions per chunk: fixes how the sums group
constexpr int kRowsInFlight = 4;          // gradient rows a pass-1 thread loads before adding them
constexpr int kPiecesInFlight = 16;       // partial rows a pass-2 thread loads ahead of its adds
constexpr int kMaxColumnThreads = 256;    // threads across the columns of one block
constexpr int64_t kScratchAlign = 256;    // each part of the scratch starts on this boundary

int64_t chunks_of(int64_t n) { return (n + kChunk - 1) / kChunk; }

__device__ __forceinline__ bool in_block(int32_t token, int64_t row_begin, int64_t rows) {
  const int64_t row = static_cast<int64_t>(token) - row_begin;
  return row >= 0 && row < rows;  // a negative token is below any block (row_begin >= 0)
}

// W adjacent columns of dout as fp32: 8 bf16 or 4 fp32 in one 16-byte load, or 1.
template <int W, typename E>
__device__ __forceinline__ void load_columns(float (&v)[W], const E* p) {
  if constexpr (W == 1)
    v[0] = load(p);
  else if constexpr (W == 8)
    load8(v, p);
  else
    load4(v, p);
}

// W adjacent fp32 columns (W a multiple of 4: 16-byte accesses).
template <int W>
__device__ __forceinline__ void load_floats(float (&v)[W], const float* p) {
  if constexpr (W == 1) {
    v[0] = *p;
  } else {
#pragma unroll
    for (int k = 0; k < W; k += 4) {
      const float4 f = *reinterpret_cast<const float4*>(p + k);
      v[k] = f.x, v[k + 1] = f.y, v[k + 2] = f.z, v[k + 3] = f.w;
    }
  }
}
template <int W>
__device__ __forceinline__ void store_floats(float* p, const float (&v)[W]) {
  if constexpr (W == 1) {
    *p = v[0];
  } else {
#pragma unroll
    for (int k = 0; k < W; k += 4) *reinterpret_cast<float4*>(p + k) = make_float4(v[k], v[k + 1], v[k + 2], v[k + 3]);
  }
}

__global__ void iota_kernel(int32_t* positions, int64_t n) {
  KEEL_GRID_STRIDE(i, n) positions[i] = static_cast<int32_t>(i);
}

// Pass 1: block (chunk x, column slice y), thread: W adjacent columns. It walks the chunk's
// sorted positions in order, summing each piece in registers. A piece that goes on from the
// previous chunk is stored in the chunk's head slot, partials(2·chunk); one that begins here and
// goes on into the next, in its tail slot, partials(2·chunk + 1); any other is its token's whole
// gradient, added onto the row (no other block touches that row).
template <int W, typename E>
__global__ void __launch_bounds__(kMaxColumnThreads)
    dwte_chunk_kernel(float* dwte_rows, float* partials, const E* dout, const int32_t* sorted_tokens,
                      const int32_t* sorted_positions, int64_t n, int64_t C, int64_t row_begin, int64_t rows) {
  __shared__ int32_t token[kChunk], position[kChunk];
  const int64_t chunk = blockIdx.x, first = chunk * kChunk;
  const int count = n - first < kChunk ? static_cast<int>(n - first) : kChunk;
  for (int k = threadIdx.x; k < count; k += blockDim.x) {
    token[k] = sorted_tokens[first + k];
    position[k] = sorted_positions[first + k];
  }
  __syncthreads();
  const int64_t c = (blockIdx.y * int64_t(blockDim.x) + threadIdx.x) * W;
  if (c >= C) return;  // no barrier follows
  const bool from_previous = first > 0 && sorted_tokens[first - 1] == token[0];
  const bool into_next = first + count < n && sorted_tokens[first + count] == token[count - 1];
  float* head = partials + 2 * chunk * C + c;
  float* tail = head + C;
  float acc[W] = {};
  int piece_begin = 0;
  for (int k0 = 0; k0 < count; k0 += kRowsInFlight) {
    float g[kRowsInFlight][W];  // the loads first, so several rows are in flight at once
#pragma unroll
    for (int u = 0; u < kRowsInFlight; ++u) {
      const int k = k0 + u;
      if (k < count && in_block(token[k], row_begin, rows)) {
        load_columns(g[u], dout + position[k] * C + c);
      } else {
#pragma unroll
        for (int w = 0; w < W; ++w) g[u][w] = 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < kRowsInFlight; ++u) {
      const int k = k0 + u;
      if (k >= count) break;
#pragma unroll
      for (int w = 0; w < W; ++w) acc[w] += g[u][w];
      if (k + 1 < count && token[k + 1] == token[k]) continue;  // the piece goes on
      if (in_block(token[k], row_begin, rows)) {
        if (piece_begin == 0 && from_previous) {
          store_floats(head, acc);
        } else if (k + 1 == count && into_next) {
          store_floats(tail, acc);
        } else {
          float* d = dwte_rows + (static_cast<int64_t>(token[k]) - row_begin) * C + c;
          float sum[W];
          load_floats(sum, d);
#pragma unroll
          for (int w = 0; w < W; ++w) sum[w] += acc[w];
          store_floats(d, sum);
        }
      }
#pragma unroll
      for (int w = 0; w < W; ++w) acc[w] = 0.0f;
      piece_begin = k + 1;
    }
  }
}

// Pass 2: block (chunk x, column slice y), thread: W adjacent columns. A chunk whose last piece
// went to its tail slot starts a chain: its token's row gets that tail, then the head slots of
// the following chunks up to the one holding the token's last position, in chunk order.
template <int W>
__global__ void __launch_bounds__(kMaxColumnThreads)
    dwte_chain_kernel(float* dwte_rows, const float* partials, const int32_t* sorted_tokens, int64_t n, int64_t C,
                      int64_t row_begin, int64_t rows) {
  const int64_t chunk = blockIdx.x, first = chunk * kChunk;
  const int64_t last = (n - first < kChunk ? n : first + kChunk) - 1;
  const int32_t token = sorted_tokens[last];
  if (last + 1 >= n || sorted_tokens[last + 1] != token) return;  // the token ends in this chunk
  if (first > 0 && sorted_tokens[first - 1] == token) return;      // a head slot: an earlier chain's
  if (!in_block(token, row_begin, rows)) return;
  const int64_t c = (blockIdx.y * int64_t(blockDim.x) + threadIdx.x) * W;
  if (c >= C) return;
  // The token's last sorted index, by bisection (keys ascend): sorted_tokens[lo] == token, and
  // hi == n or sorted_tokens[hi] != token.
  int64_t lo = last + 1, hi = n;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (sorted_tokens[mid] == token) lo = mid;
    else hi = mid;
  }
  const int64_t end = lo / kChunk + 1;  // one past the chain's last chunk
  float* d = dwte_rows + (static_cast<int64_t>(token) - row_begin) * C + c;
  float acc[W], piece[kPiecesInFlight][W];
  load_floats(acc, d);
  load_floats(piece[0], partials + (2 * chunk + 1) * C + c);
#pragma unroll
  for (int w = 0; w < W; ++w) acc[w] += piece[0][w];
  // Batches of kPiecesInFlight head slots, the next batch loading while this one is added.
  const int64_t batches = (end - chunk - 1) / kPiecesInFlight;
  int64_t j = chunk + 1;
  if (batches > 0) {
#pragma unroll
    for (int u = 0; u < kPiecesInFlight; ++u) load_floats(piece[u], partials + 2 * (j + u) * C + c);
  }
  for (int64_t batch = 0; batch < batches; ++batch, j += kPiecesInFlight) {
    float current[kPiecesInFlight][W];
#pragma unroll
    for (int u = 0; u < kPiecesInFlight; ++u)
#pragma unroll
      for (int w = 0; w < W; ++w) current[u][w] = piece[u][w];
    if (batch + 1 < batches) {
#pragma unroll
      for (int u = 0; u < kPiecesInFlight; ++u)
        load_floats(piece[u], partials + 2 * (j + kPiecesInFlight + u) * C + c);
    }
#pragma unroll
    for (int u = 0; u < kPiecesInFlight; ++u)
#pragma unroll
      for (int w = 0; w < W; ++w) acc[w] += current[u][w];
  }
  for (; j < end; ++j) {
    load_floats(piece[0], partials + 2 * j * C + c);
#pragma unroll
    for (int w = 0; w < W; ++w) acc[w] += piece[0][w];
  }
  store_floats(d, acc);
}

// Where the dwte scatter's scratch parts lie: the positions 0..n-1, the sorted tokens and
// positions, two partial rows per chunk, then CUB's own storage.
struct DwteScratch {
  int32_t* positions = nullptr;
  int32_t* sorted_tokens = nullptr;
  int32_t* sorted_positions = nullptr;
  float* partials = nullptr;
  void* sort_storage = nullptr;
  size_t sort_storage_bytes = 0;
  int64_t bytes = 0;  // all of it
};

int64_t aligned(int64_t bytes) { return (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign; }

// Lays the parts out from `base` (NULL: only measures); CUB's size query needs no device memory.
cudaError_t plan_scratch(int64_t n, int64_t C, char* base, DwteScratch& s) {
  const cudaError_t status = cub::DeviceRadixSort::SortPairs(
      nullptr, s.sort_storage_bytes, static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), static_cast<int>(n));
  if (status != cudaSuccess) return status;
  const int64_t list_bytes = aligned(n * int64_t{sizeof(int32_t)});
  const int64_t partial_bytes = aligned(2 * chunks_of(n) * C * int64_t{sizeof(float)});
  s.bytes = 3 * list_bytes + partial_bytes + aligned(static_cast<int64_t>(s.sort_storage_bytes));
  if (base) {
    s.positions = reinterpret_cast<int32_t*>(base);
    s.sorted_tokens = reinterpret_cast<int32_t*>(base + list_bytes);
    s.sorted_positions = reinterpret_cast<int32_t*>(base + 2 * list_bytes);
    s.partials = reinterpret_cast<float*>(base + 3 * list_bytes);
    s.sort_storage = base + 3 * list_bytes + partial_bytes;
  }
  return cudaSuccess;
}

// Threads a block and slices a row of C columns takes, W columns a thread.
dim3 column_grid(int64_t chunks, int64_t C, int W, unsigned* threads) {
  const int64_t groups = (C + W - 1) / W;
  const int64_t t = std::min<int64_t>(kMaxColumnThreads, (groups + 31) / 32 * 32);
  *threads = static_cast<unsigned>(t);
  return dim3(static_cast<unsigned>(chunks), static_cast<unsigned>((groups + t - 1) / t));
}

template <int W, typename E>
void launch_chunks(float* dwte_rows, const E* dout, const DwteScratch& s, int64_t n, int64_t C, int64_t row_begin,
                   int64_t rows, cudaStream_t stream) {
  unsigned threads = 0;
  const dim3 grid = column_grid(chunks_of(n), C, W, &threads);
  dwte_chunk_kernel<W><<<grid, threads, 0, stream>>>(dwte_rows, s.partials, dout, s.sorted_tokens,
                                                      s.sorted_positions, n, C, row_begin, rows);
}

template <int W>
void launch_chains(float* dwte_rows, const DwteScratch& s, int64_t n, int64_t C, int64_t row_begin, int64_t rows,
                   cudaStream_t stream) {
  unsigned threads = 0;
  const dim3 grid = column_grid(chunks_of(n), C, W, &threads);
  dwte_chain_kernel<W><<<grid, threads, 0, stream>>>(dwte_rows, s.partials, s.sorted_tokens, n, C, row_begin, rows);
}

// Whether rows of C fp32 at these pointers can be taken four at a time.
bool in_fours(int64_t C, std::initializer_list<const void*> pointers) {
  if (C % 4 != 0) return false;
  for (const void* p : pointers)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

template <typename E>
cudaError_t dwte_backward(float* dwte_rows, const E* dout, const int32_t* tokens, int64_t n, int64_t C,
                          int64_t row_begin, int64_t rows, void* scratch, int64_t scratch_bytes, cudaStream_t stream) {
  if (n > INT_MAX) return cudaErrorInvalidValue;  // positions are int32
  DwteScratch s;
  cudaError_t status = plan_scratch(n, C, static_cast<char*>(scratch), s);
  if (status != cudaSuccess) return status;
  if (!scratch || scratch_bytes < s.bytes) return cudaErrorInvalidValue;
  iota_kernel<<<grid_for(n), kThreads, 0, stream>>>(s.positions, n);
  status = cub::DeviceRadixSort::SortPairs(s.sort_storage, s.sort_storage_bytes, tokens, s.sorted_tokens,
                                           s.positions, s.sorted_positions, static_cast<int>(n), 0, 32, stream);
  if (status != cudaSuccess) return status;
  if constexpr (std::is_same_v<E, bf16>) {
    if (in_eights(C, {dout, dwte_rows, s.partials}))
      launch_chunks<8>(dwte_rows, dout, s, n, C, row_begin, rows, stream);
    else
      launch_chunks<1>(dwte_rows, dout, s, n, C, row_begin, rows, stream);
  } else {
    if (in_fours(C, {dout, dwte_rows, s.partials}))
      launch_chunks<4>(dwte_rows, dout, s, n, C, row_begin, rows, stream);
    else
      launch_chunks<1>(dwte_rows, dout, s, n, C, row_begin, rows, stream);
  }
  if (in_fours(C, {dwte_rows, s.partials}))
    launch_chains<4>(dwte_rows, s, n, C, row_begin, rows, stream);
  else
    launch_chains<1>(dwte_rows, s, n, C, row_begin, rows, stream);
  return cudaSuccess;
}

template <typename E>
cudaError_t backward(float* dwte_rows, float* dwpe, const E* dout, const int32_t* tokens, int64_t B, int64_t T,
                     int64_t C, int64_t row_begin, int64_t rows, void* scratch, int64_t scratch_bytes,
                     cudaStream_t stream) {
  if (dwpe) embedding_dwpe_kernel<<<grid_for(T * C), kThreads, 0, stream>>>(dwpe, dout, B, T, C);
  if (!dwte_rows || rows <= 0) return cudaSuccess;
  return dwte_backward(dwte_rows, dout, tokens, B * T, C, row_begin, rows, scratch, scratch_bytes, stream);
}

}  // namespace

void embedding_forward(Elem e, void* out, const int32_t* tokens, const void* wte_rows, const void* wpe, int64_t B,
                       int64_t T, int64_t C, int64_t row_begin, int64_t rows, cudaStream_t stream) {
  const int64_t n = B * T * C;
  if (n <= 0) return;
  if (e == Elem::bf16)
    embedding_forward_kernel<<<grid_for(n), kThreads, 0, stream>>>(
        static_cast<bf16*>(out), tokens, static_cast<const bf16*>(wte_rows), static_cast<const bf16*>(wpe), T, C,
        row_begin, rows, n);
  else
    embedding_forward_kernel<<<grid_for(n), kThreads, 0, stream>>>(
        static_cast<float*>(out), tokens, static_cast<const float*>(wte_rows), static_cast<const float*>(wpe), T, C,
        row_begin, rows, n);
}

int64_t embedding_backward_scratch_bytes(int64_t B, int64_t T, int64_t C) {
  if (B <= 0 || T <= 0 || C <= 0 || B * T > INT_MAX) return 0;
  DwteScratch s;
  return plan_scratch(B * T, C, nullptr, s) == cudaSuccess ? s.bytes : 0;  // a failure recurs in the launcher
}

cudaError_t embedding_backward(Elem e, float* dwte_rows, float* dwpe, const void* dout, const int32_t* tokens,
                               int64_t B, int64_t T, int64_t C, int64_t row_begin, int64_t rows, void* scratch,
                               int64_t scratch_bytes, cudaStream_t stream) {
  if (B <= 0 || T <= 0 || C <= 0) return cudaSuccess;
  if (e == Elem::bf16)
    return backward(dwte_rows, dwpe, static_cast<const bf16*>(dout), tokens, B, T, C, row_begin, rows, scratch,
                    scratch_bytes, stream);
  return backward(dwte_rows, dwpe, static_cast<const float*>(dout), tokens, B, T, C, row_begin, rows, scratch,
                  scratch_bytes, stream);
}

}  // namespace keel::cuda
