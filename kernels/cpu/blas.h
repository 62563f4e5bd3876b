// OpenBLAS, loaded at run time. The library is dlopen'ed rather than linked because OpenBLAS
// picks its kernels (OPENBLAS_CORETYPE) and sizes its blocking (OPENBLAS_L2_SIZE) from the
// environment in its library constructor, and the machines we run on preset both for another
// CPU, which costs AVX-512 machines about 40% of a training step. Loading it ourselves lets
// load_blas() apply a policy to those variables first.
#pragma once

#include <cstdint>
#include <string>

namespace keel::cpu {

// Loads OpenBLAS once per process (later calls return at once) after applying `coretype_policy`:
//   "auto" - unset OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE so OpenBLAS detects the CPU itself
//            (and say so in *log_line when either was preset);
//   "env"  - leave the environment alone;
//   other  - set OPENBLAS_CORETYPE to that value (e.g. "SkylakeX").
// If OpenBLAS was already loaded by someone else, the policy cannot apply; *log_line says so
// when the environment holds presets, with what to do.
// *log_line (may be NULL) receives one line worth logging, or "" when there is nothing to say.
// Throws std::runtime_error naming the library and the package to install when loading fails.
void load_blas(const std::string& coretype_policy, std::string* log_line);

// The kernel set OpenBLAS picked ("SkylakeX", "Haswell", ...), or "unknown".
std::string blas_corename();

// Whether OpenBLAS was already in the process when load_blas() ran (loaded by NumPy or torch).
bool blas_loaded_before_keel();

// Who threads a product.
//   kPartition: keel cuts C into one block per OpenMP thread (gemm_partition.h) and each thread
//               makes a single-threaded BLAS call; OpenBLAS's own pool stays idle. The default:
//               one pool of threads for every kernel (docs/cpu-speed.md §2 has the measurements).
//               If something else loaded OpenBLAS first (NumPy, torch), its products in this
//               process run single-threaded too, since the library is shared.
//   kLibrary:   one call, threaded by OpenBLAS's own pool (Debian's OpenBLAS is the pthread
//               build), as before. Its workers and OpenMP's spin-wait for each other's cores.
// Both give the same bits with Debian's OpenBLAS 0.3.21: each element is summed over the whole K
// by one kernel call either way. The threading, like the thread count, is the process's: set
// them before ops run (a backend's create does), never while another thread runs products.
enum class GemmThreading { kPartition, kLibrary };
void set_gemm_threading(GemmThreading threading);
GemmThreading gemm_threading();

// Threads for OpenMP regions and for products (see GemmThreading). 0 restores the default:
// OpenMP's initial maximum (OMP_NUM_THREADS or all cores).
void set_num_threads(int threads);
int num_threads();

// Row-major single-precision GEMM: C(M,N) = alpha * op(A) · op(B) + beta * C, as cblas_sgemm
// with CblasRowMajor, threaded as gemm_threading() says (called inside a parallel region, it
// runs on the calling thread). Throws std::logic_error if load_blas() has not been called, and
// std::invalid_argument for a size or leading dimension OpenBLAS would refuse (checked here: a
// block's call could not see it).
void sgemm(bool transpose_a, bool transpose_b, int64_t M, int64_t N, int64_t K, float alpha,
           const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// Best sgemm throughput over `repeats` timed runs of an n×n×n product after two warm-up runs,
// in FLOP/s, with OpenBLAS's own threads whatever gemm_threading() says (as NumPy measures it):
// the MFU denominator when no peak is configured, and what the benchmarks compare against. A
// peak is measured on large square products (n = 2048 at start-up), where the kernels run at
// their best; smaller ones understate it.
double measure_sgemm_flops(int64_t n, int repeats);

// While alive, OpenBLAS runs single-threaded, so each OpenMP thread can issue its own small
// sgemm (attention per head) without the pool serialising them (under kPartition it already
// is). Throws std::logic_error if load_blas() has not been called, so callers learn it before
// entering a parallel region.
class BlasSingleThreaded {
 public:
  BlasSingleThreaded();
  ~BlasSingleThreaded();
  BlasSingleThreaded(const BlasSingleThreaded&) = delete;
  BlasSingleThreaded& operator=(const BlasSingleThreaded&) = delete;
};

}  // namespace keel::cpu
