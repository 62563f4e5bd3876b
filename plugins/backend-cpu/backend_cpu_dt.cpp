// The cpu backend's ops at an element type (ABI 0.8 *_dt), plus crossentropy_combine and
// sum_squares_dt. At fp32 each forwards the caller's pointers to the fp32 kernel. At bf16 the
// storage is bf16 and the arithmetic fp32, done the simplest way: the bf16 operands are widened
// to fp32 scratch (exact), the fp32 kernel runs, and the bf16 results are rounded back once (a
// destination the op accumulates into is widened first, so the sum is rounded once). Weight
// gradients, layernorm's mean and rstd, the attention's saved probabilities and every
// cross-entropy statistic stay fp32 at either type.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <keel_support/backend/backend_slots.hpp>  // defines: KEEL_FILL_BACKEND_SLOTS

#include "backend_cpu.hpp"      // defines: CpuBackend, run, require*, is_bf16
#include "backend_cpu_dt.hpp"   // defines: bf16_storage, Fp32Input, Fp32Output
#include "cpu/attention.h"      // defines: attention_forward, attention_backward
#include "cpu/bf16.h"           // defines: bf16, widen_bf16, round_to_bf16
#include "cpu/elementwise.h"    // defines: add, accumulate, scale
#include "cpu/embedding.h"      // defines: embedding_forward, embedding_backward
#include "cpu/gelu.h"           // defines: gelu_forward, gelu_backward
#include "cpu/layernorm.h"      // defines: layernorm_forward, layernorm_backward
#include "cpu/matmul.h"         // defines: matmul_forward, matmul_backward
#include "cpu/parallel_threshold.h"  // defines: kParallelMinElements
#include "cpu/reduce.h"         // defines: sum_squares
#include "cpu/vocab_shard.h"    // defines: embedding_rows_*, crossentropy_shard_*, crossentropy_combine

namespace keel_backend_cpu {
namespace {

namespace cpu = keel::cpu;
using cpu::bf16;

// The table rows the tokens pick, widened, in token order: rows(count, C), and `local[i]` the
// row of token i in it, or `count` (no row) for a token outside [row_begin, row_begin+rows).
// The embedding ops are not told the table's size, so the bf16 path widens only these rows.
struct GatheredRows {
  std::unique_ptr<float[]> rows;
  std::vector<int32_t> local;
};
GatheredRows gather_widened_rows(const void* table, const int32_t* tokens, int64_t count, int64_t C,
                                 int64_t row_begin, int64_t rows) {
  require(count < INT32_MAX, "embedding: B*T = " + std::to_string(count) + " does not fit the int32 token ids");
  GatheredRows g{std::unique_ptr<float[]>(new float[count * C]), std::vector<int32_t>(count)};
  const auto* bits = static_cast<const bf16*>(table);
#pragma omp parallel for if (count * C > keel::cpu::kParallelMinElements)
  for (int64_t i = 0; i < count; ++i) {
    const int64_t row = static_cast<int64_t>(tokens[i]) - row_begin;
    const bool mine = row >= 0 && row < rows;
    g.local[i] = static_cast<int32_t>(mine ? i : count);
    if (mine) cpu::widen_bf16(g.rows.get() + i * C, bits + row * C, C);
  }
  return g;
}

// --- the layers ---

keel_status matmul_forward_dt(void* backend, keel_dtype dt, void* out, void* gelu_pre, const void* inp,
                              const void* weight, const void* bias, int64_t N, int64_t IC, int64_t OC) {
  return run(backend, [&] {
    require_sizes({N, IC, OC}, "matmul_forward_dt");
    const bool bf = bf16_storage(dt, "matmul_forward_dt");
    const double eb = bf ? 2.0 : 4.0;
    count_work(2.0 * N * IC * OC, eb * (N * IC + OC * IC + (bias ? OC : 0) + (gelu_pre ? 2 : 1) * N * OC));
    const Fp32Input x(bf, inp, N * IC), w(bf, weight, OC * IC), b(bf, bias, OC);
    const Fp32Output y(bf, out, N * OC, kWrite);
    if (!gelu_pre) {
      cpu::matmul_forward(y.get(), x.get(), w.get(), b.get(), N, IC, OC);
      y.store();
      return;
    }
    const Fp32Output pre(bf, gelu_pre, N * OC, kWrite);
    cpu::matmul_forward(pre.get(), x.get(), w.get(), b.get(), N, IC, OC);
    cpu::gelu_forward(y.get(), pre.get(), N * OC);  // from the fp32 product, as a fused epilogue
    pre.store();
    y.store();
  });
}

keel_status matmul_backward_dt(void* backend, keel_dtype dt, void* dinp, float* dweight, float* dbias,
                               const void* dout, const void* inp, const void* weight, int64_t N, int64_t IC,
                               int64_t OC) {
  return run(backend, [&] {
    require_sizes({N, IC, OC}, "matmul_backward_dt");
    const bool bf = bf16_storage(dt, "matmul_backward_dt");
    const double eb = bf ? 2.0 : 4.0;  // weight gradients are fp32, read and written
    count_work(2.0 * N * IC * OC * ((dinp ? 1 : 0) + (dweight ? 1 : 0)),
               eb * (N * OC + (dweight ? N * IC : 0) + (dinp ? OC * IC + 2 * N * IC : 0)) +
                   (dweight ? 8.0 * OC * IC : 0.0) + (dbias ? 8.0 * OC : 0.0));
    const Fp32Input g(bf, dout, N * OC);
    const Fp32Input x(bf, dweight ? inp : nullptr, N * IC), w(bf, dinp ? weight : nullptr, OC * IC);  // only if read
    const Fp32Output dx(bf, dinp, N * IC, kAccumulate);
    cpu::matmul_backward(dx.get(), dweight, dbias, g.get(), x.get(), w.get(), N, IC, OC);
    dx.store();
  });
}

keel_status layernorm_forward_dt(void* backend, keel_dtype dt, void* out, float* mean, float* rstd, const void* inp,
                                 const void* weight, const void* bias, int64_t N, int64_t C) {
  return run(backend, [&] {
    require_sizes({N, C}, "layernorm_forward_dt");
    const bool bf = bf16_storage(dt, "layernorm_forward_dt");
    count_work(0.0, (bf ? 2.0 : 4.0) * (2 * N * C + 2 * C) + 8.0 * N);
    const Fp32Input x(bf, inp, N * C), w(bf, weight, C), b(bf, bias, C);
    const Fp32Output y(bf, out, N * C, kWrite);
    cpu::layernorm_forward(y.get(), mean, rstd, x.get(), w.get(), b.get(), N, C);
    y.store();
  });
}

keel_status layernorm_backward_dt(void* backend, keel_dtype dt, void* dinp, float* dweight, float* dbias,
                                  const void* dout, const void* inp, const void* weight, const float* mean,
                                  const float* rstd, int64_t N, int64_t C) {
  return run(backend, [&] {
    require_sizes({N, C}, "layernorm_backward_dt");
    const bool bf = bf16_storage(dt, "layernorm_backward_dt");
    count_work(0.0, (bf ? 2.0 : 4.0) * (4 * N * C + C) + 8.0 * N + 16.0 * C);
    const Fp32Input g(bf, dout, N * C), x(bf, inp, N * C), w(bf, weight, C);
    const Fp32Output dx(bf, dinp, N * C, kAccumulate);
    cpu::layernorm_backward(dx.get(), dweight, dbias, g.get(), x.get(), w.get(), mean, rstd, N, C);
    dx.store();
  });
}

// The cpu keeps its fp32 probabilities at either type.
int64_t attention_saved_bytes(void* backend, keel_dtype dt, int64_t B, int64_t T, int64_t C, int64_t NH) {
  int64_t bytes = -1;
  run(backend, [&] {
    require_attention_shape(B, T, C, NH, "attention_saved_bytes");
    bf16_storage(dt, "attention_saved_bytes");
    bytes = cpu::attention_saved_floats(B, T, C, NH) * static_cast<int64_t>(sizeof(float));
  });
  return bytes;
}

keel_status attention_forward_dt(void* backend, keel_dtype dt, void* out, void* saved, const void* qkv, int64_t B,
                                 int64_t T, int64_t C, int64_t NH) {
  return run(backend, [&] {
    require_attention_shape(B, T, C, NH, "attention_forward_dt");
    const bool bf = bf16_storage(dt, "attention_forward_dt");
    // Counted as the full T × T products (the kernel skips key blocks past a query block's end,
    // about half of them for long sequences), the probabilities written once in fp32.
    count_work(4.0 * B * T * T * C, (bf ? 2.0 : 4.0) * (4 * B * T * C) + 4.0 * B * NH * T * T);
    const Fp32Input x(bf, qkv, B * T * 3 * C);
    const Fp32Output y(bf, out, B * T * C, kWrite);
    cpu::attention_forward(y.get(), static_cast<float*>(saved), x.get(), B, T, C, NH, NH);
    y.store();
  });
}

// `out` is not needed: the saved probabilities hold what the backward reads.
keel_status attention_backward_dt(void* backend, keel_dtype dt, void* dqkv, const void* dout, const void* qkv,
                                  const void* /*out*/, const void* saved, int64_t B, int64_t T, int64_t C,
                                  int64_t NH) {
  return run(backend, [&] {
    require_attention_shape(B, T, C, NH, "attention_backward_dt");
    const bool bf = bf16_storage(dt, "attention_backward_dt");
    count_work(8.0 * B * T * T * C, (bf ? 2.0 : 4.0) * (B * T * C + 9 * B * T * C) + 4.0 * B * NH * T * T);
    const Fp32Input g(bf, dout, B * T * C), x(bf, qkv, B * T * 3 * C);
    const Fp32Output dx(bf, dqkv, B * T * 3 * C, kAccumulate);
    cpu::attention_backward(dx.get(), g.get(), x.get(), static_cast<const float*>(saved), B, T, C, NH, NH);
    dx.store();
  });
}

keel_status gelu_forward_dt(void* backend, keel_dtype dt, void* out, const void* inp, int64_t n) {
  return run(backend, [&] {
    require_sizes({n}, "gelu_forward_dt");
    const bool bf = bf16_storage(dt, "gelu_forward_dt");
    count_work(0.0, (bf ? 2.0 : 4.0) * 2 * n);
    const Fp32Input x(bf, inp, n);
    const Fp32Output y(bf, out, n, kWrite);
    cpu::gelu_forward(y.get(), x.get(), n);
    y.store();
  });
}

keel_status gelu_backward_dt(void* backend, keel_dtype dt, void* dinp, const void* inp, const void* dout, int64_t n) {
  return run(backend, [&] {
    require_sizes({n}, "gelu_backward_dt");
    const bool bf = bf16_storage(dt, "gelu_backward_dt");
    count_work(0.0, (bf ? 2.0 : 4.0) * 4 * n);
    const Fp32Input x(bf, inp, n), g(bf, dout, n);
    const Fp32Output dx(bf, dinp, n, kAccumulate);
    cpu::gelu_backward(dx.get(), x.get(), g.get(), n);
    dx.store();
  });
}

// out may alias a or b: at bf16 both are widened before anything is stored.
keel_status add_dt(void* backend, keel_dtype dt, void* out, const void* a, const void* b, int64_t n) {
  return run(backend, [&] {
    require_sizes({n}, "add_dt");
    const bool bf = bf16_storage(dt, "add_dt");
    count_work(0.0, (bf ? 2.0 : 4.0) * 3 * n);
    const Fp32Input x(bf, a, n), y(bf, b, n);
    const Fp32Output sum(bf, out, n, kWrite);
    cpu::add(sum.get(), x.get(), y.get(), n);
    sum.store();
  });
}

keel_status accumulate_dt(void* backend, keel_dtype dt, void* dst, const void* src, int64_t n) {
  return run(backend, [&] {
    require_sizes({n}, "accumulate_dt");
    const bool bf = bf16_storage(dt, "accumulate_dt");
    count_work(0.0, (bf ? 2.0 : 4.0) * 3 * n);
    const Fp32Input x(bf, src, n);
    const Fp32Output d(bf, dst, n, kAccumulate);
    cpu::accumulate(d.get(), x.get(), n);
    d.store();
  });
}

keel_status scale_dt(void* backend, keel_dtype dt, void* x, float alpha, int64_t n) {
  return run(backend, [&] {
    require_sizes({n}, "scale_dt");
    const Fp32Output v(bf16_storage(dt, "scale_dt"), x, n, kAccumulate);
    count_work(0.0, (is_bf16(dt) ? 2.0 : 4.0) * 2 * n);
    cpu::scale(v.get(), alpha, n);
    v.store();
  });
}

// --- embeddings ---

keel_status embedding_forward_dt(void* backend, keel_dtype dt, void* out, const int32_t* tokens, const void* wte,
                                 const void* wpe, int64_t B, int64_t T, int64_t C) {
  return run(backend, [&] {
    require_sizes({B, T, C}, "embedding_forward_dt");
    require_tokens(tokens, B * T, "embedding_forward_dt");
    count_work(0.0, (is_bf16(dt) ? 2.0 : 4.0) * 3 * B * T * C);  // a table row and a position row per token
    if (!bf16_storage(dt, "embedding_forward_dt")) {
      cpu::embedding_forward(static_cast<float*>(out), tokens, static_cast<const float*>(wte),
                             static_cast<const float*>(wpe), B, T, C);
      return;
    }
    const GatheredRows rows = gather_widened_rows(wte, tokens, B * T, C, 0, INT64_MAX);
    const Fp32Input position(true, wpe, T * C);
    const Fp32Output y(true, out, B * T * C, kWrite);
    cpu::embedding_forward(y.get(), rows.local.data(), rows.rows.get(), position.get(), B, T, C);
    y.store();
  });
}

keel_status embedding_backward_dt(void* backend, keel_dtype dt, float* dwte, float* dwpe, const void* dout,
                                  const int32_t* tokens, int64_t B, int64_t T, int64_t C) {
  return run(backend, [&] {
    require_sizes({B, T, C}, "embedding_backward_dt");
    require_tokens(tokens, B * T, "embedding_backward_dt");
    count_work(0.0, (is_bf16(dt) ? 2.0 : 4.0) * B * T * C + 16.0 * B * T * C);  // fp32 rows read and written
    const Fp32Input g(bf16_storage(dt, "embedding_backward_dt"), dout, B * T * C);
    cpu::embedding_backward(dwte, dwpe, g.get(), tokens, B, T, C);
  });
}

keel_status embedding_rows_forward_dt(void* backend, keel_dtype dt, void* out, const int32_t* tokens,
                                      const void* wte_rows, const void* wpe, int64_t B, int64_t T, int64_t C,
                                      int64_t row_begin, int64_t rows) {
  return run(backend, [&] {
    require_sizes({B, T, C}, "embedding_rows_forward_dt");
    require_row_block(row_begin, rows, "embedding_rows_forward_dt", "row_begin", "rows");
    require_tokens(tokens, B * T, "embedding_rows_forward_dt");
    if (!bf16_storage(dt, "embedding_rows_forward_dt")) {
      cpu::embedding_rows_forward(static_cast<float*>(out), tokens, static_cast<const float*>(wte_rows),
                                  static_cast<const float*>(wpe), B, T, C, row_begin, rows);
      return;
    }
    const GatheredRows mine = gather_widened_rows(wte_rows, tokens, B * T, C, row_begin, rows);
    const Fp32Input position(true, wpe, T * C);
    const Fp32Output y(true, out, B * T * C, kWrite);
    cpu::embedding_rows_forward(y.get(), mine.local.data(), mine.rows.get(), position.get(), B, T, C, 0, B * T);
    y.store();
  });
}

keel_status embedding_rows_backward_dt(void* backend, keel_dtype dt, float* dwte_rows, float* dwpe, const void* dout,
                                       const int32_t* tokens, int64_t B, int64_t T, int64_t C, int64_t row_begin,
                                       int64_t rows) {
  return run(backend, [&] {
    require_sizes({B, T, C}, "embedding_rows_backward_dt");
    require_row_block(row_begin, rows, "embedding_rows_backward_dt", "row_begin", "rows");
    require_tokens(tokens, B * T, "embedding_rows_backward_dt");
    const Fp32Input g(bf16_storage(dt, "embedding_rows_backward_dt"), dout, B * T * C);
    cpu::embedding_rows_backward(dwte_rows, dwpe, g.get(), tokens, B, T, C, row_begin, rows);
  });
}

// --- cross-entropy and the gradient norm ---

keel_status crossentropy_stats_dt(void* backend, keel_dtype dt, float* stats, const void* logits,
                                  const int32_t* targets, int64_t N, int64_t col_begin, int64_t valid_cols,
                                  int64_t cols) {
  return run(backend, [&] {
    require_column_block(N, col_begin, valid_cols, cols, "crossentropy_stats_dt");
    const Fp32Input x(bf16_storage(dt, "crossentropy_stats_dt"), logits, N * cols);
    count_work(0.0, (is_bf16(dt) ? 2.0 : 4.0) * N * valid_cols);
    cpu::crossentropy_shard_stats(stats, x.get(), targets, N, col_begin, valid_cols, cols);
  });
}

keel_status crossentropy_combine(void* backend, float* lse, float* loss_sum, const float* stats, int32_t n_shards,
                                 const int32_t* targets, int64_t N, float weight) {
  return run(backend, [&] {
    require_sizes({N}, "crossentropy_combine");
    require(n_shards >= 1, "crossentropy_combine: n_shards must be at least 1, found " + std::to_string(n_shards));
    require(N == 0 || (lse && stats && targets), "crossentropy_combine: NULL pointer");
    require(loss_sum != nullptr, "crossentropy_combine: loss_sum is NULL");
    cpu::crossentropy_combine(lse, loss_sum, stats, n_shards, targets, N, weight);
  });
}

keel_status crossentropy_backward_dt(void* backend, keel_dtype dt, void* dlogits, const void* logits,
                                     const float* lse, const int32_t* targets, float dloss, int64_t N,
                                     int64_t col_begin, int64_t valid_cols, int64_t cols) {
  return run(backend, [&] {
    require_column_block(N, col_begin, valid_cols, cols, "crossentropy_backward_dt");
    const bool bf = bf16_storage(dt, "crossentropy_backward_dt");
    count_work(0.0, (bf ? 2.0 : 4.0) * (dlogits == logits ? 2 : 3) * N * valid_cols);  // in place: read, write
    // Accumulate mode in both cases: in place, the widened destination is the logits.
    const Fp32Output d(bf, dlogits, N * cols, kAccumulate);
    if (dlogits == logits) {
      cpu::crossentropy_shard_backward_in_place(d.get(), lse, targets, dloss, N, col_begin, valid_cols, cols);
    } else {
      const Fp32Input x(bf, logits, N * cols);
      cpu::crossentropy_shard_backward(d.get(), x.get(), lse, targets, dloss, N, col_begin, valid_cols, cols);
    }
    d.store();
  });
}

// Summed in double, added to the fp32 scalar once.
keel_status sum_squares_dt(void* backend, keel_dtype dt, const void* x, int64_t n, float* acc) {
  return run(backend, [&] {
    require_sizes({n}, "sum_squares_dt");
    require(acc != nullptr, "sum_squares_dt: acc is NULL");
    const Fp32Input v(bf16_storage(dt, "sum_squares_dt"), x, n);
    count_work(0.0, (is_bf16(dt) ? 2.0 : 4.0) * n);
    *acc = static_cast<float>(static_cast<double>(*acc) + cpu::sum_squares(v.get(), n));
  });
}

}  // namespace

void fill_dt_slots(keel_backend_api& api) { KEEL_FILL_BACKEND_SLOTS(api, KEEL_BACKEND_DT_SLOTS_0_8); }

}  // namespace keel_backend_cpu
