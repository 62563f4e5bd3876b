// The `cpu` backend plugin: the keel_backend_api table over kernels/cpu. This file parses the
// config section and holds the fp32 ops of ABI 0.1-0.6; the 0.8 slots live beside it (see
// backend_cpu.hpp). Slots only check arguments and keep C++ exceptions from crossing the ABI
// (every slot runs under keel_support::guard); the math lives in the kernels.
#include <keel/backend.h>
#include <keel/plugin.h>
#include <keel_support/common/plugin_entry.hpp>
#include <keel_support/backend/backend_slots.hpp>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "cpu/attention.h"      // defines: attention_forward, attention_backward
#include "cpu/blas.h"           // defines: load_blas, set_num_threads, measure_sgemm_flops
#include "cpu/crossentropy.h"   // defines: crossentropy_forward, crossentropy_backward
#include "cpu/elementwise.h"    // defines: add, accumulate, scale, zero_fill
#include "cpu/embedding.h"      // defines: embedding_forward, embedding_backward
#include "cpu/gelu.h"           // defines: gelu_forward, gelu_backward
#include "cpu/layernorm.h"      // defines: layernorm_forward, layernorm_backward
#include "cpu/matmul.h"         // defines: matmul_forward, matmul_backward
#include "cpu/reduce.h"         // defines: sum_squares
#include "cpu/vocab_shard.h"    // defines: embedding_rows_*, crossentropy_shard_*

#include "backend_cpu.hpp"      // defines: CpuBackend, run, require*, fill_*_slots

namespace keel_backend_cpu {

std::string dtype_name(keel_dtype t) {
  if (is_fp32(t)) return "fp32";
  if (is_bf16(t)) return "bf16";
  return "dtype {code " + std::to_string(t.code) + ", bits " + std::to_string(t.bits) + ", lanes " +
         std::to_string(t.lanes) + "}";
}

// Shapes and ranges the 0.8 ops check the same way.

void require_attention_shape(int64_t B, int64_t T, int64_t C, int64_t NH, const char* op) {
  require_sizes({B, T, C}, op);
  require(NH > 0 && C % NH == 0, std::string(op) + ": C = " + std::to_string(C) +
                                     " must be a positive multiple of NH = " + std::to_string(NH));
}

// (The op has no vocabulary size, so ids past the table's end cannot be checked here.)
void require_tokens(const int32_t* tokens, int64_t count, const char* op) {
  for (int64_t i = 0; i < count; ++i)
    require(tokens[i] >= 0, std::string(op) + ": token id " + std::to_string(tokens[i]) + " at position " +
                                std::to_string(i) + " is negative");
}

void require_row_block(int64_t begin, int64_t count, const char* op, const char* begin_name, const char* count_name) {
  require(begin >= 0 && count >= 0, std::string(op) + ": need " + begin_name + " >= 0 and " + count_name +
                                        " >= 0, found " + std::to_string(begin) + " and " + std::to_string(count));
}

void require_column_block(int64_t N, int64_t col_begin, int64_t valid_cols, int64_t cols, const char* op) {
  require_sizes({N, cols}, op);
  require_row_block(col_begin, valid_cols, op, "col_begin", "valid_cols");
  require(valid_cols <= cols, std::string(op) + ": valid_cols " + std::to_string(valid_cols) +
                                  " exceeds cols " + std::to_string(cols));
}

void require_copy_direction(int32_t direction, const char* op) {
  require(direction >= KEEL_COPY_HOST_TO_DEVICE && direction <= KEEL_COPY_DEVICE_TO_DEVICE,
          std::string(op) + ": unknown direction " + std::to_string(direction));
}

void* allocate_aligned(size_t bytes, size_t* out_rounded, const char* op) {
  const size_t rounded = (bytes + 63) / 64 * 64 + (bytes == 0 ? 64 : 0);  // aligned_alloc wants a multiple
  void* ptr = std::aligned_alloc(64, rounded);
  if (!ptr)
    throw StatusError(KEEL_ERR_OUT_OF_MEMORY,
                      std::string(op) + ": cannot allocate " + std::to_string(bytes) + " bytes");
  *out_rounded = rounded;
  return ptr;
}

}  // namespace keel_backend_cpu

namespace {

using namespace keel_backend_cpu;

struct Settings {
  int threads = 0;           // 0: OpenMP's default (OMP_NUM_THREADS or all cores)
  double peak_tflops = 0.0;  // 0: measure sgemm at create
  std::string openblas_coretype = "auto";
  keel::cpu::GemmThreading gemm_threading = keel::cpu::GemmThreading::kPartition;
  keel_dtype compute_dtype{KEEL_DTYPE_FLOAT, 32, 1};  // "precision": "fp32" or "bf16" (bf16 storage, fp32 math)
  bool op_profile = false;
};

Settings parse_settings(const char* config_json, const char* json_path) {
  auto section = keel_support::JsonSection::parse(config_json, json_path ? json_path : "backend");
  section.allow("plugin");
  Settings s;
  s.threads = section.get_in_range<int>("threads", 0, 0, 1024);  // libgomp crashes creating ~65536
  s.peak_tflops = section.get_in_range<double>("peak_tflops", 0.0, 0.0, 1e6);
  s.openblas_coretype = section.get<std::string>("openblas_coretype", "auto");
  if (s.openblas_coretype.empty())
    throw keel_support::ConfigError(section.path_of("openblas_coretype") +
                                    ": expected \"auto\", \"env\" or an OpenBLAS core name such as "
                                    "\"SkylakeX\", found \"\"");
  const std::string threading = section.get<std::string>("gemm_threading", "partition");
  if (threading == "openblas")
    s.gemm_threading = keel::cpu::GemmThreading::kLibrary;
  else if (threading != "partition")
    throw keel_support::ConfigError(section.path_of("gemm_threading") + ": expected \"partition\" (keel splits "
                                    "each product over its threads) or \"openblas\" (OpenBLAS threads it), "
                                    "found \"" + threading + "\"");
  const std::string precision = section.get<std::string>("precision", "fp32");
  if (precision == "bf16")
    s.compute_dtype = keel_dtype{KEEL_DTYPE_BFLOAT, 16, 1};
  else if (precision != "fp32")
    throw keel_support::ConfigError(section.path_of("precision") + ": expected \"fp32\" or \"bf16\" (bf16 "
                                    "storage, fp32 arithmetic), found \"" + precision + "\"");
  s.op_profile = section.get<bool>("op_profile", false);
  section.finish();
  return s;
}

const char* threading_words(keel::cpu::GemmThreading t) {
  return t == keel::cpu::GemmThreading::kPartition ? "products split over the threads" : "products threaded by OpenBLAS";
}

// Every backend with the same thread count shares one measurement (taken with OpenBLAS's own
// threads, whatever gemm_threading says: see blas.h). 1024-squares reach the same GFLOP/s as
// 2048-squares on 2 cores (39.8 vs 39.4) in 0.4 s instead of 3 s, which every `keel run` and
// `keel validate` pays at start (backend.peak_tflops skips it).
double measured_peak_flops(int threads) {
  static std::mutex mutex;
  static std::map<int, double> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(threads);
  if (it != cache.end()) return it->second;
  return cache[threads] = keel::cpu::measure_sgemm_flops(1024, 5);
}

// --- lifetime and configuration ---

keel_status validate_config(const keel_host* host, const char* config_json, const char* json_path) {
  return keel_support::guard(host, kSource, [&] { parse_settings(config_json, json_path); });
}

keel_status create(const keel_host* host, const keel_backend_create_args* args, void** out_backend) {
  return keel_support::guard(host, kSource, [&] {
    require(host != nullptr && args != nullptr && out_backend != nullptr, "create: NULL argument");
    const Settings s = parse_settings(args->config_json, args->json_path);
    std::string note;
    keel::cpu::load_blas(s.openblas_coretype, &note);
    if (!note.empty()) host->log(KEEL_LOG_WARN, kSource, note.c_str());
    keel::cpu::set_gemm_threading(s.gemm_threading);
    static std::once_flag said_once;  // once a process: a notebook makes many trainers
    if (s.gemm_threading == keel::cpu::GemmThreading::kPartition && keel::cpu::blas_loaded_before_keel())
      std::call_once(said_once, [&] {
        host->log(KEEL_LOG_INFO, kSource,
                "OpenBLAS was loaded before Keel (by NumPy or torch): its products in this process now run on one "
                "thread each, since Keel splits its own over the threads (backend.gemm_threading \"openblas\" "
                "keeps OpenBLAS's threads)");
      });
    keel::cpu::set_num_threads(s.threads);
    const int threads = keel::cpu::num_threads();
    double peak = s.peak_tflops * 1e12;
    if (peak == 0.0) {
      peak = measured_peak_flops(threads);
      keel_logf(host, KEEL_LOG_INFO, kSource, "%d threads, OpenBLAS kernels %s, %s, measured sgemm peak %.1f GFLOP/s",
                threads, keel::cpu::blas_corename().c_str(), threading_words(s.gemm_threading), peak / 1e9);
    } else {
      keel_logf(host, KEEL_LOG_INFO, kSource, "%d threads, OpenBLAS kernels %s, %s, configured peak %.1f GFLOP/s",
                threads, keel::cpu::blas_corename().c_str(), threading_words(s.gemm_threading), peak / 1e9);
    }
    auto* created = new CpuBackend{host, threads, peak, s.compute_dtype};
    if (s.op_profile) created->profile = std::make_unique<OpProfile>();
    *out_backend = created;
  });
}

// Not under run(): the profile it would time is deleted here, after its table is logged.
void destroy(void* backend) {
  auto* cpu = static_cast<CpuBackend*>(backend);
  keel_support::guard(cpu ? cpu->host : nullptr, kSource, [&] {
    if (cpu && cpu->profile) {
      cpu->host->log(KEEL_LOG_INFO, kSource, "op profile of this backend (all calls since it was created):");
      for (const std::string& line : cpu->profile->table(cpu->peak_flops_per_s))
        cpu->host->log(KEEL_LOG_INFO, kSource, line.c_str());
    }
    delete cpu;
  });
}

keel_status device(void* backend, keel_device* out_device) {
  return run(backend, [&] {
    require(out_device != nullptr, "device: out_device is NULL");
    *out_device = keel_device{KEEL_DEVICE_CPU, 0};
  });
}

keel_status peak_flops(void* backend, double* out_flops_per_s) {
  return run(backend, [&] {
    require(out_flops_per_s != nullptr, "peak_flops: output is NULL");
    *out_flops_per_s = static_cast<CpuBackend*>(backend)->peak_flops_per_s;
  });
}

// --- memory ---

keel_status alloc(void* backend, size_t bytes, void** out_ptr) {
  return run(backend, [&] {
    require(out_ptr != nullptr, "alloc: out_ptr is NULL");
    size_t rounded = 0;
    void* ptr = allocate_aligned(bytes, &rounded, "alloc");
    keel::cpu::zero_fill(ptr, rounded);
    *out_ptr = ptr;
  });
}

void free_memory(void* backend, void* ptr) {
  run(backend, [&] { std::free(ptr); });
}

keel_status copy(void* backend, void* dst, const void* src, size_t bytes, int32_t direction) {
  return run(backend, [&] {
    require_copy_direction(direction, "copy");
    require(bytes == 0 || (dst && src), "copy: NULL pointer");
    count_work(0.0, 2.0 * bytes);
    if (bytes) std::memmove(dst, src, bytes);  // memmove: a caller may copy within one buffer
  });
}

keel_status fill_zero(void* backend, void* ptr, size_t bytes) {
  return run(backend, [&] {
    require(bytes == 0 || ptr, "fill_zero: NULL pointer");
    count_work(0.0, static_cast<double>(bytes));
    if (bytes) keel::cpu::zero_fill(ptr, bytes);
  });
}

keel_status synchronize(void* backend) {
  return run(backend, [] {});  // every op has finished when it returns
}

// --- ops ---

keel_status matmul_forward(void* backend, float* out, const float* inp, const float* weight, const float* bias,
                           int64_t N, int64_t IC, int64_t OC) {
  return run(backend, [&] {
    require_sizes({N, IC, OC}, "matmul_forward");
    count_work(2.0 * N * IC * OC, 4.0 * (N * IC + OC * IC + N * OC + (bias ? OC : 0)));
    keel::cpu::matmul_forward(out, inp, weight, bias, N, IC, OC);
  });
}

keel_status matmul_backward(void* backend, float* dinp, float* dweight, float* dbias, const float* dout,
                            const float* inp, const float* weight, int64_t N, int64_t IC, int64_t OC) {
  return run(backend, [&] {
    require_sizes({N, IC, OC}, "matmul_backward");
    count_work(2.0 * N * IC * OC * ((dinp ? 1 : 0) + (dweight ? 1 : 0)),
               4.0 * (N * OC + (dweight ? N * IC + 2 * OC * IC : 0) + (dinp ? OC * IC + 2 * N * IC : 0) +
                      (dbias ? 2 * OC : 0)));
    keel::cpu::matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
  });
}

keel_status layernorm_forward(void* backend, float* out, float* mean, float* rstd, const float* inp,
                              const float* weight, const float* bias, int64_t N, int64_t C) {
  return run(backend, [&] {
    require_sizes({N, C}, "layernorm_forward");
    keel::cpu::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
  });
}

keel_status layernorm_backward(void* backend, float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, const float* mean, const float* rstd,
                               int64_t N, int64_t C) {
  return run(backend, [&] {
    require_sizes({N, C}, "layernorm_backward");
    keel::cpu::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  });
}

// Returns -1 (with the error set) for an impossible shape: the slot has no status to return.
int64_t attention_saved_floats(void* backend, int64_t B, int64_t T, int64_t C, int64_t NH) {
  int64_t floats = -1;
  run(backend, [&] {
    require_attention_shape(B, T, C, NH, "attention_saved_floats");
    floats = keel::cpu::attention_saved_floats(B, T, C, NH);
  });
  return floats;
}

keel_status attention_forward(void* backend, float* out, float* saved, const float* qkv, int64_t B, int64_t T,
                              int64_t C, int64_t NH) {
  return run(backend, [&] {
    require_attention_shape(B, T, C, NH, "attention_forward");
    keel::cpu::attention_forward(out, saved, qkv, B, T, C, NH, NH);
  });
}

keel_status attention_backward(void* backend, float* dqkv, const float* dout, const float* qkv, const float* saved,
                               int64_t B, int64_t T, int64_t C, int64_t NH) {
  return run(backend, [&] {
    require_attention_shape(B, T, C, NH, "attention_backward");
    keel::cpu::attention_backward(dqkv, dout, qkv, saved, B, T, C, NH, NH);
  });
}

keel_status gelu_forward(void* backend, float* out, const float* inp, int64_t n) {
  return run(backend, [&] {
    require_sizes({n}, "gelu_forward");
    keel::cpu::gelu_forward(out, inp, n);
  });
}

keel_status gelu_backward(void* backend, float* dinp, const float* inp, const float* dout, int64_t n) {
  return run(backend, [&] {
    require_sizes({n}, "gelu_backward");
    keel::cpu::gelu_backward(dinp, inp, dout, n);
  });
}

keel_status add(void* backend, float* out, const float* a, const float* b, int64_t n) {
  return run(backend, [&] {
    require_sizes({n}, "add");
    keel::cpu::add(out, a, b, n);
  });
}

keel_status accumulate(void* backend, float* dst, const float* src, int64_t n) {
  return run(backend, [&] {
    require_sizes({n}, "accumulate");
    keel::cpu::accumulate(dst, src, n);
  });
}

keel_status scale(void* backend, float* x, float alpha, int64_t n) {
  return run(backend, [&] {
    require_sizes({n}, "scale");
    keel::cpu::scale(x, alpha, n);
  });
}

keel_status embedding_forward(void* backend, float* out, const int32_t* tokens, const float* wte, const float* wpe,
                              int64_t B, int64_t T, int64_t C) {
  return run(backend, [&] {
    require_sizes({B, T, C}, "embedding_forward");
    require_tokens(tokens, B * T, "embedding_forward");
    keel::cpu::embedding_forward(out, tokens, wte, wpe, B, T, C);
  });
}

keel_status embedding_backward(void* backend, float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                               int64_t B, int64_t T, int64_t C) {
  return run(backend, [&] {
    require_sizes({B, T, C}, "embedding_backward");
    require_tokens(tokens, B * T, "embedding_backward");
    keel::cpu::embedding_backward(dwte, dwpe, dout, tokens, B, T, C);
  });
}

void require_targets(const int32_t* targets, int64_t N, int64_t V, int64_t Vp, const char* op) {
  require_sizes({N, V, Vp}, op);
  require(V > 0 && V <= Vp, std::string(op) + ": need 0 < V <= Vp, found V = " + std::to_string(V) +
                                ", Vp = " + std::to_string(Vp));
  for (int64_t n = 0; n < N; ++n)
    require(targets[n] < V, std::string(op) + ": target " + std::to_string(targets[n]) + " at row " +
                                std::to_string(n) + " is not below V = " + std::to_string(V));
}

keel_status crossentropy_forward(void* backend, float* losses, float* probs, const float* logits,
                                 const int32_t* targets, int64_t N, int64_t V, int64_t Vp) {
  return run(backend, [&] {
    require_targets(targets, N, V, Vp, "crossentropy_forward");
    keel::cpu::crossentropy_forward(losses, probs, logits, targets, N, V, Vp);
  });
}

keel_status crossentropy_backward(void* backend, float* dlogits, const float* probs, const int32_t* targets,
                                  float dloss, int64_t N, int64_t V, int64_t Vp) {
  return run(backend, [&] {
    require_targets(targets, N, V, Vp, "crossentropy_backward");
    keel::cpu::crossentropy_backward(dlogits, probs, targets, dloss, N, V, Vp);
  });
}

keel_status sum_squares(void* backend, const float* x, int64_t n, double* out_host) {
  return run(backend, [&] {
    require_sizes({n}, "sum_squares");
    require(out_host != nullptr, "sum_squares: out_host is NULL");
    *out_host = keel::cpu::sum_squares(x, n);
  });
}

// --- 0.6: the vocabulary split over tensor-parallel ranks ---

keel_status embedding_rows_forward(void* backend, float* out, const int32_t* tokens, const float* wte_rows,
                                   const float* wpe, int64_t B, int64_t T, int64_t C, int64_t row_begin,
                                   int64_t rows) {
  return run(backend, [&] {
    require_sizes({B, T, C}, "embedding_rows_forward");
    require_row_block(row_begin, rows, "embedding_rows_forward", "row_begin", "rows");
    require_tokens(tokens, B * T, "embedding_rows_forward");
    keel::cpu::embedding_rows_forward(out, tokens, wte_rows, wpe, B, T, C, row_begin, rows);
  });
}

keel_status embedding_rows_backward(void* backend, float* dwte_rows, float* dwpe, const float* dout,
                                    const int32_t* tokens, int64_t B, int64_t T, int64_t C, int64_t row_begin,
                                    int64_t rows) {
  return run(backend, [&] {
    require_sizes({B, T, C}, "embedding_rows_backward");
    require_row_block(row_begin, rows, "embedding_rows_backward", "row_begin", "rows");
    require_tokens(tokens, B * T, "embedding_rows_backward");
    keel::cpu::embedding_rows_backward(dwte_rows, dwpe, dout, tokens, B, T, C, row_begin, rows);
  });
}

keel_status crossentropy_shard_stats(void* backend, float* stats, const float* logits, const int32_t* targets,
                                     int64_t N, int64_t col_begin, int64_t valid_cols, int64_t cols) {
  return run(backend, [&] {
    require_column_block(N, col_begin, valid_cols, cols, "crossentropy_shard_stats");
    keel::cpu::crossentropy_shard_stats(stats, logits, targets, N, col_begin, valid_cols, cols);
  });
}

keel_status crossentropy_shard_backward(void* backend, float* dlogits, const float* logits, const float* lse,
                                        const int32_t* targets, float dloss, int64_t N, int64_t col_begin,
                                        int64_t valid_cols, int64_t cols) {
  return run(backend, [&] {
    require_column_block(N, col_begin, valid_cols, cols, "crossentropy_shard_backward");
    keel::cpu::crossentropy_shard_backward(dlogits, logits, lse, targets, dloss, N, col_begin, valid_cols, cols);
  });
}

keel_backend_api make_api() {
  keel_backend_api api{};
  api.struct_size = sizeof(keel_backend_api);
  KEEL_FILL_BACKEND_SLOTS(api, KEEL_BACKEND_SLOTS_0_1);
  KEEL_FILL_BACKEND_SLOTS(api, KEEL_BACKEND_SLOTS_0_6);
  fill_queue_slots(api);  // 0.8
  fill_dt_slots(api);
  fill_optimizer_slots(api);
  fill_llama_slots(api);
  fill_decode_slots(api);
  fill_moe_slots(api);  // 0.19
  fill_block_attention_slots(api);
  fill_quant_slots(api);
  fill_dropout_slots(api);
  return api;
}

}  // namespace

extern "C" KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) {
  static const keel_backend_api api = make_api();
  static const keel_plugin_info infos[] = {
      keel_support::plugin_info(KEEL_KIND_BACKEND, "cpu", "0.1.0", &api, "CPU backend: OpenMP kernels, OpenBLAS sgemm, fp32 or bf16 storage")};
  static const keel_plugin_list list = keel_support::plugin_list(infos);
  return &list;
}
