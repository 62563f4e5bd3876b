// Run-time loading of OpenBLAS and the thin sgemm wrapper every kernel goes through.
// See blas.h for why OpenBLAS is dlopen'ed instead of linked.
#include "cpu/blas.h"

#include "cpu/gemm_partition.h"

#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <vector>

namespace keel::cpu {
namespace {

using sgemm_fn = CblasSgemm;  // gemm_partition.h
using set_threads_fn = void (*)(int);
using corename_fn = char* (*)();

struct Blas {
  std::mutex mutex;
  void* handle = nullptr;
  sgemm_fn sgemm = nullptr;
  set_threads_fn set_threads = nullptr;  // absent from BLAS libraries other than OpenBLAS
  corename_fn corename = nullptr;
  int default_threads = 0;  // OpenMP's maximum before we changed it
  int threads = 0;          // OpenMP's team, and the threads a product may use
  int library_threads = 0;  // what OpenBLAS's own pool was told
  GemmThreading threading = GemmThreading::kPartition;
  bool loaded_before = false;  // someone else dlopen'ed OpenBLAS first
};
Blas& blas() {
  static Blas instance;
  return instance;
}

const char* const kLibraryNames[] = {"libopenblas.so.0", "libopenblas.so"};

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// The variables OpenBLAS reads when it is loaded: the kernel set, and the cache size its
// blocking is tuned for. Either one preset for another CPU slows every product.
const char* const kPresetVariables[] = {"OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"};

// "OPENBLAS_CORETYPE=Haswell OPENBLAS_L2_SIZE=262144", or "" when neither is set.
std::string presets_in_environment() {
  std::string out;
  for (const char* name : kPresetVariables) {
    const char* value = std::getenv(name);
    if (value && *value) out += std::string(out.empty() ? "" : " ") + name + "=" + value;
  }
  return out;
}

// Applies the policy to the environment before OpenBLAS is loaded; returns a line worth
// logging, or "".
std::string apply_coretype_policy(const std::string& policy) {
  if (policy == "env") return "";
  if (policy != "auto") {
    setenv("OPENBLAS_CORETYPE", policy.c_str(), 1);
    return "";
  }
  // "auto": OpenBLAS detects the CPU and sizes its blocking itself. Measured on GPT-2 124M
  // (B4 T64, 2 threads, AVX-512 machine): both unset 1.51 s/step; only the core type unset,
  // the L2 size kept, 2.23 s; both presets kept 2.51 s. A half-measure is no measure.
  const std::string presets = presets_in_environment();
  if (presets.empty()) return "";
  for (const char* name : kPresetVariables) unsetenv(name);
  return presets + " were preset: unsetting them so OpenBLAS picks the kernels and blocking for this CPU (to "
                   "keep them, set \"openblas_coretype\": \"env\" in the backend section)";
}

// OpenBLAS's pool: idle (one thread) when keel splits the products, the team's size otherwise.
void apply_library_threads(Blas& b) {
  const int wanted = b.threading == GemmThreading::kPartition ? 1 : b.threads;
  if (b.set_threads && b.library_threads != wanted) b.set_threads(wanted);
  b.library_threads = wanted;
}

// OpenBLAS's symbol `name`, or the same under the "scipy_" prefix of PyPI's scipy-openblas32
// build (what the Python wheel installs), or NULL.
template <typename Fn>
Fn symbol(void* handle, const char* name) {
  if (void* plain = dlsym(handle, name)) return reinterpret_cast<Fn>(plain);
  return reinterpret_cast<Fn>(dlsym(handle, (std::string("scipy_") + name).c_str()));
}

// The file KEEL_OPENBLAS_LIBRARY names, when set (the Python package points it at PyPI's
// scipy-openblas32, so a wheel needs no system OpenBLAS and uses the one it installed), else the
// system's. Appends each failure to `errors`.
void* open_library(std::string& errors) {
  if (const char* chosen = std::getenv("KEEL_OPENBLAS_LIBRARY"); chosen && *chosen) {
    if (void* handle = dlopen(chosen, RTLD_NOW | RTLD_LOCAL)) return handle;
    errors += std::string("KEEL_OPENBLAS_LIBRARY: ") + dlerror();
  }
  for (const char* name : kLibraryNames) {
    if (void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return handle;
    errors += std::string(errors.empty() ? "" : "; ") + dlerror();
  }
  return nullptr;
}

int checked_int(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX)
    throw std::invalid_argument(std::string("sgemm: ") + what + " = " + std::to_string(v) +
                                " does not fit OpenBLAS's 32-bit integers");
  return static_cast<int>(v);
}

void check_leading(int64_t ld, int64_t row_length, const char* what) {
  if (ld < std::max<int64_t>(1, row_length))
    throw std::invalid_argument(std::string("sgemm: ") + what + " = " + std::to_string(ld) +
                                " is shorter than a stored row of " + std::to_string(row_length));
}

}  // namespace

void load_blas(const std::string& coretype_policy, std::string* log_line) {
  Blas& b = blas();
  std::lock_guard<std::mutex> lock(b.mutex);
  if (log_line) log_line->clear();
  if (b.handle) return;

  void* handle = nullptr;
  std::string note;
  for (const char* name : kLibraryNames) {
    handle = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (handle) break;
  }
  const bool loaded_before = handle != nullptr;
  if (handle) {
    // Someone loaded OpenBLAS first (in Python: NumPy or torch). It read the environment then;
    // only presets make that worth a word.
    const std::string presets = presets_in_environment();
    if (coretype_policy != "env" && !presets.empty())
      note = "OpenBLAS was already loaded in this process (in Python, by NumPy or torch) with " + presets +
             ", so \"openblas_coretype\": \"" + coretype_policy +
             "\" cannot apply and sgemm may run far below this CPU's peak; unset those variables before "
             "starting the process (export -n, or env -u) for the best kernels";
  } else {
    note = apply_coretype_policy(coretype_policy);
    std::string errors;
    handle = open_library(errors);
    if (!handle)
      throw std::runtime_error("cannot load OpenBLAS (libopenblas.so.0): " + errors +
                               ". Install it: apt-get install libopenblas0, or pip install scipy-openblas32 and "
                               "set KEEL_OPENBLAS_LIBRARY to its lib/libscipy_openblas.so");
  }
  auto sgemm = symbol<sgemm_fn>(handle, "cblas_sgemm");
  if (!sgemm) throw std::runtime_error("the loaded OpenBLAS has no cblas_sgemm symbol");
  b.sgemm = sgemm;
  b.set_threads = symbol<set_threads_fn>(handle, "openblas_set_num_threads");
  b.corename = symbol<corename_fn>(handle, "openblas_get_corename");
  b.default_threads = omp_get_max_threads();
  b.threads = b.default_threads;
  b.library_threads = -1;  // unknown until told: OpenBLAS sized its pool from the environment
  b.handle = handle;
  b.loaded_before = loaded_before;
  apply_library_threads(b);
  if (log_line) *log_line = note;
}

bool blas_loaded_before_keel() { return blas().loaded_before; }

std::string blas_corename() {
  Blas& b = blas();
  if (!b.corename) return "unknown";
  const char* name = b.corename();
  return name ? name : "unknown";
}

void set_num_threads(int threads) {
  Blas& b = blas();
  if (!b.handle) throw std::logic_error("keel::cpu::set_num_threads before load_blas()");
  const int n = threads > 0 ? threads : b.default_threads;
  omp_set_num_threads(n);
  b.threads = n;
  apply_library_threads(b);
}

void set_gemm_threading(GemmThreading threading) {
  Blas& b = blas();
  b.threading = threading;
  if (b.handle) apply_library_threads(b);
}

GemmThreading gemm_threading() { return blas().threading; }

int num_threads() { return blas().handle ? blas().threads : omp_get_max_threads(); }

void sgemm(bool transpose_a, bool transpose_b, int64_t M, int64_t N, int64_t K, float alpha,
           const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const Blas& b = blas();
  sgemm_fn fn = b.sgemm;
  if (!fn) throw std::logic_error("keel::cpu::sgemm before keel::cpu::load_blas()");
  if (M == 0 || N == 0) return;
  // Checked once for the whole product: a block's sizes are no larger, and a throw inside the
  // parallel region would terminate.
  const int m = checked_int(M, "M"), n = checked_int(N, "N"), k = checked_int(K, "K");
  const int lda_ = checked_int(lda, "lda"), ldb_ = checked_int(ldb, "ldb"), ldc_ = checked_int(ldc, "ldc");
  // Row-major: op(A) is M×K, stored K×M when transposed; op(B) is K×N, stored N×K when transposed.
  check_leading(lda, transpose_a ? M : K, "lda");
  check_leading(ldb, transpose_b ? K : N, "ldb");
  check_leading(ldc, N, "ldc");
  const GemmGrid grid = b.threading == GemmThreading::kPartition && !omp_in_parallel()
                            ? choose_gemm_grid(M, N, K, b.threads)
                            : GemmGrid{};
  if (grid.blocks() == 1) {
    fn(kCblasRowMajor, transpose_a ? kCblasTrans : kCblasNoTrans, transpose_b ? kCblasTrans : kCblasNoTrans, m, n, k,
       alpha, A, lda_, B, ldb_, beta, C, ldc_);
    return;
  }
  sgemm_by_blocks(fn, grid, transpose_a, transpose_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

double measure_sgemm_flops(int64_t n, int repeats) {
  // The library's own threading, as NumPy and PyTorch run it: on large squares it is the better
  // of the two (shared packing), so the peak is the machine's, whichever way keel threads.
  const GemmThreading chosen = gemm_threading();
  set_gemm_threading(GemmThreading::kLibrary);
  struct Restore {
    GemmThreading threading;
    ~Restore() { set_gemm_threading(threading); }
  } restore{chosen};
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  for (int warm_up = 0; warm_up < 2; ++warm_up)  // pages touched, thread pool started, clocks up
    sgemm(false, true, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  double best_s = 1e30;
  for (int i = 0; i < repeats; ++i) {
    auto start = std::chrono::steady_clock::now();
    sgemm(false, true, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    best_s = std::min(best_s, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return 2.0 * n * n * n / best_s;
}

BlasSingleThreaded::BlasSingleThreaded() {
  // Checked here, before the caller's parallel region, where a throw would terminate.
  if (!blas().sgemm) throw std::logic_error("keel::cpu::sgemm before keel::cpu::load_blas()");
  if (blas().set_threads && blas().library_threads != 1) blas().set_threads(1);
}
BlasSingleThreaded::~BlasSingleThreaded() {
  if (blas().set_threads && blas().library_threads != 1) blas().set_threads(blas().library_threads);
}

}  // namespace keel::cpu
