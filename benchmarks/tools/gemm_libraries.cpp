// keel-gemm-libraries: the products of one GPT-2 124M training step (the twelve blocks' four
// linear layers and the classifier, forward and both backward products; attention's per-head
// products are left out) timed with each way of running sgemm this machine offers, in one
// process with the same threads (Keel issue 25):
//   openblas-threads     OpenBLAS threads each product with its own pool (gemm_threading "openblas")
//   openblas-blocks      keel splits each product over OpenMP threads, one single-threaded
//                        OpenBLAS call per block (gemm_threading "partition", the default)
//   blis-threads         BLIS built with OpenMP (Debian's libblis4-openmp), its own threading
//   blis-blocks          BLIS single-threaded (libblis4-serial) under keel's blocks
//   onednn               oneDNN's dnnl_sgemm (libdnnl2), its own OpenMP threading
//   mkl                  MKL's cblas_sgemm (--mkl PATH, e.g. the PyPI wheel's libmkl_rt.so.2)
// A library that is not installed is reported as absent, not timed. Each product is timed as the
// best of --repeats calls after one warm-up, each call followed, as in a training step, by a small
// OpenMP loop (an elementwise op over the step's activations, rows × 768 floats: the layer norms,
// GELUs and residual adds between the products); the loop's own time alone is reported too.
// Prints one JSON object per library per product kind; benchmarks/gemm_libraries.py runs it
// and prints the table.
#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "cpu/blas.h"
#include "cpu/gemm_partition.h"

namespace {

using keel::cpu::CblasSgemm;
using Gemm = std::function<void(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                                const float* B, int64_t ldb, float beta, float* C, int64_t ldc)>;

struct Product {
  const char* kind;  // forward, dinput, dweight
  int64_t M, N, K;
  bool ta, tb;
  int count;  // per training step
};

// The linear layers of GPT-2 124M (C 768, padded vocabulary 50304) at `rows` tokens.
std::vector<Product> step_products(int64_t rows) {
  const int64_t C = 768, V = 50304;
  struct Layer {
    int64_t in, out;
    int count;
  };
  const Layer layers[] = {{C, 3 * C, 12}, {C, C, 12}, {C, 4 * C, 12}, {4 * C, C, 12}, {C, V, 1}};
  std::vector<Product> out;
  for (const Layer& l : layers) {
    out.push_back({"forward", rows, l.out, l.in, false, true, l.count});   // y = x·Wᵀ
    out.push_back({"dinput", rows, l.in, l.out, false, false, l.count});   // dx = dy·W
    out.push_back({"dweight", l.out, l.in, rows, true, false, l.count});   // dW = dyᵀ·x
  }
  return out;
}

void* open_library(const char* path) { return path && *path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr; }

Gemm cblas_whole(CblasSgemm fn) {
  return [fn](bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
              int64_t ldb, float beta, float* C, int64_t ldc) {
    fn(keel::cpu::kCblasRowMajor, ta ? keel::cpu::kCblasTrans : keel::cpu::kCblasNoTrans,
       tb ? keel::cpu::kCblasTrans : keel::cpu::kCblasNoTrans, int(M), int(N), int(K), 1.0f, A, int(lda), B,
       int(ldb), beta, C, int(ldc));
  };
}

Gemm cblas_blocks(CblasSgemm fn, int threads) {
  return [fn, threads](bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                       const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    const keel::cpu::GemmGrid grid = keel::cpu::choose_gemm_grid(M, N, K, threads);
    keel::cpu::sgemm_by_blocks(fn, grid, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
  };
}

// The elementwise op between two products: the kernels' OpenMP threads wake, as in a step.
void op_between(std::vector<float>& activations) {
  float* x = activations.data();
  const int64_t n = static_cast<int64_t>(activations.size());
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * 0.5f + 1.0f;
}

double seconds(const std::function<void()>& run) {
  const auto start = std::chrono::steady_clock::now();
  run();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 256;
  int threads = 2, repeats = 5;
  std::string blis_openmp = "/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4";
  std::string blis_serial = "/usr/lib/x86_64-linux-gnu/blis-serial/libblis.so.4";
  std::string onednn = "libdnnl.so.2", mkl;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--rows") rows = std::atoll(value.c_str());
    else if (flag == "--threads") threads = std::atoi(value.c_str());
    else if (flag == "--repeats") repeats = std::atoi(value.c_str());
    else if (flag == "--blis-openmp") blis_openmp = value;
    else if (flag == "--blis-serial") blis_serial = value;
    else if (flag == "--onednn") onednn = value;
    else if (flag == "--mkl") mkl = value;
    else {
      std::fprintf(stderr, "usage: keel-gemm-libraries [--rows N] [--threads T] [--repeats R] [--blis-openmp SO] "
                           "[--blis-serial SO] [--onednn SO] [--mkl SO]\n");
      return 2;
    }
  }
  if (rows <= 0 || rows > (1 << 16) || threads <= 0 || threads > 1024 || repeats <= 0) {
    std::fprintf(stderr, "keel-gemm-libraries: --rows in 1..65536, --threads in 1..1024, --repeats >= 1\n");
    return 2;
  }

  keel::cpu::load_blas("auto", nullptr);
  keel::cpu::set_num_threads(threads);

  struct Way {
    std::string name;
    Gemm gemm;
    std::function<void()> before;  // sets the library's threading for this way
    std::string absent;            // why it is not timed
  };
  std::vector<Way> ways;
  ways.push_back({"openblas-threads",
                  [](bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                     int64_t ldb, float beta, float* C, int64_t ldc) {
                    keel::cpu::sgemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
                  },
                  [] { keel::cpu::set_gemm_threading(keel::cpu::GemmThreading::kLibrary); }, ""});
  ways.push_back({"openblas-blocks",
                  [](bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                     int64_t ldb, float beta, float* C, int64_t ldc) {
                    keel::cpu::sgemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
                  },
                  [] { keel::cpu::set_gemm_threading(keel::cpu::GemmThreading::kPartition); }, ""});
  if (void* lib = open_library(blis_openmp.c_str())) {
    auto fn = reinterpret_cast<CblasSgemm>(dlsym(lib, "cblas_sgemm"));
    auto set_threads = reinterpret_cast<void (*)(long)>(dlsym(lib, "bli_thread_set_num_threads"));
    ways.push_back({"blis-threads", cblas_whole(fn), [set_threads, threads] { if (set_threads) set_threads(threads); },
                    fn ? "" : "no cblas_sgemm"});
  } else {
    ways.push_back({"blis-threads", nullptr, nullptr, "not installed (apt-get install libblis4-openmp)"});
  }
  if (void* lib = open_library(blis_serial.c_str())) {
    auto fn = reinterpret_cast<CblasSgemm>(dlsym(lib, "cblas_sgemm"));
    ways.push_back({"blis-blocks", fn ? cblas_blocks(fn, threads) : nullptr, [] {}, fn ? "" : "no cblas_sgemm"});
  } else {
    ways.push_back({"blis-blocks", nullptr, nullptr, "not installed (apt-get install libblis4-serial)"});
  }
  if (void* lib = open_library(onednn.c_str())) {
    using DnnlSgemm = int (*)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                              int64_t, float, float*, int64_t);
    auto fn = reinterpret_cast<DnnlSgemm>(dlsym(lib, "dnnl_sgemm"));
    Gemm gemm = [fn](bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                     int64_t ldb, float beta, float* C, int64_t ldc) {
      fn(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);  // row-major, as cblas
    };
    ways.push_back({"onednn", fn ? gemm : nullptr, [threads] { omp_set_num_threads(threads); },
                    fn ? "" : "no dnnl_sgemm"});
  } else {
    ways.push_back({"onednn", nullptr, nullptr, "not installed (apt-get install libdnnl2)"});
  }
  if (void* lib = open_library(mkl.c_str())) {
    auto fn = reinterpret_cast<CblasSgemm>(dlsym(lib, "cblas_sgemm"));
    auto set_threads = reinterpret_cast<void (*)(int)>(dlsym(lib, "MKL_Set_Num_Threads"));
    ways.push_back({"mkl", fn ? cblas_whole(fn) : nullptr, [set_threads, threads] { if (set_threads) set_threads(threads); },
                    fn ? "" : "no cblas_sgemm"});
  } else {
    ways.push_back({"mkl", nullptr, nullptr, mkl.empty() ? "not given (--mkl PATH)" : "cannot load " + mkl});
  }

  const std::vector<Product> products = step_products(rows);
  int64_t largest_a = 0, largest_b = 0, largest_c = 0;
  for (const Product& p : products) {
    largest_a = std::max(largest_a, p.M * p.K);
    largest_b = std::max(largest_b, p.K * p.N);
    largest_c = std::max(largest_c, p.M * p.N);
  }
  std::vector<float> A(largest_a, 0.01f), B(largest_b, 0.02f), C(largest_c, 0.0f), activations(rows * 768, 1.0f);
  double between_s = 1e30;
  for (int r = 0; r < 20; ++r) between_s = std::min(between_s, seconds([&] { op_between(activations); }));
  for (const Way& way : ways) {
    if (!way.gemm) {
      std::printf("{\"way\": \"%s\", \"rows\": %lld, \"absent\": \"%s\"}\n", way.name.c_str(), (long long)rows,
                  way.absent.c_str());
      continue;
    }
    way.before();
    // The previous way's threads (OpenBLAS's pool sched_yields for a while after its last
    // product) must not share the cores with this one's.
    std::this_thread::sleep_for(std::chrono::seconds(1));
    for (const char* kind : {"forward", "dinput", "dweight"}) {
      double step_s = 0.0, flops = 0.0;
      for (const Product& p : products) {
        if (std::strcmp(p.kind, kind) != 0) continue;
        const int64_t lda = p.ta ? p.M : p.K, ldb = p.tb ? p.K : p.N;
        auto call = [&] {
          way.gemm(p.ta, p.tb, p.M, p.N, p.K, A.data(), lda, B.data(), ldb, 1.0f, C.data(), p.N);
          op_between(activations);
        };
        call();  // warm-up: packing buffers, the library's threads
        double best = 1e30;
        for (int r = 0; r < repeats; ++r) best = std::min(best, seconds(call));
        step_s += p.count * best;
        flops += p.count * 2.0 * p.M * p.N * p.K;
      }
      std::printf("{\"way\": \"%s\", \"rows\": %lld, \"kind\": \"%s\", \"step_s\": %.6f, \"gflops\": %.3f}\n",
                  way.name.c_str(), (long long)rows, kind, step_s, flops / step_s / 1e9);
      std::fflush(stdout);
    }
  }
  keel::cpu::set_gemm_threading(keel::cpu::GemmThreading::kPartition);
  int per_step = 0;
  for (const Product& p : products) per_step += p.count;
  std::printf("{\"peak_gflops\": %.3f, \"threads\": %d, \"openblas_kernels\": \"%s\", \"rows\": %lld, "
              "\"ops_between_s\": %.6f}\n",
              keel::cpu::measure_sgemm_flops(2048, 5) / 1e9, threads, keel::cpu::blas_corename().c_str(),
              (long long)rows, per_step * between_s);
  return 0;
}
