// cuBLASLt calls for the fully connected layer. cuBLASLt is column-major; a row-major (R,C)
// buffer is a column-major (C,R) one, so out(N,OC) = inp · weightᵀ is computed as the
// column-major outᵀ(OC,N) = weightᵀ(OC,IC) · inpᵀ(IC,N): A = weight read transposed, B = inp.
// The bias epilogue adds bias(OC) along D's rows, which are out's columns, as wanted; the GELU
// epilogue (GELU_AUX_BIAS) writes the pre-activation to the aux buffer and GELU of it to out.
// Where an epilogue cannot be used (GELU with OC not a multiple of 8, or no algorithm offered),
// the bias is broadcast first, the product added onto it (beta 1), and gelu.cu applied after.
// Compute is fp32 (CUBLAS_COMPUTE_32F); fp32 inputs may use TF32 when the backend allows it.
// The weight gradient reads dt inputs and accumulates into fp32 (Ctype fp32, beta 1), so
// micro-batches add up without rounding to bf16. dbias is a fixed-order column sum (reduce.cu)
// rather than the BGRADB epilogue, which overwrites where the ABI asks to accumulate.
#include "cuda/matmul.h"

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

namespace keel::cuda {
namespace {

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuBLASLt ") + what + ": " + cublasLtGetStatusString(status));
}

cudaDataType_t data_type(Elem e) { return e == Elem::bf16 ? CUDA_R_16BF : CUDA_R_32F; }

// RAII owners of the descriptors one call makes.
struct Desc {
  cublasLtMatmulDesc_t desc = nullptr;
  ~Desc() {
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};
struct Layout {
  cublasLtMatrixLayout_t layout = nullptr;
  Layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld) {
    check(cublasLtMatrixLayoutCreate(&layout, type, rows, cols, ld), "cublasLtMatrixLayoutCreate");
  }
  ~Layout() {
    if (layout) cublasLtMatrixLayoutDestroy(layout);
  }
};
struct Preference {
  cublasLtMatmulPreference_t pref = nullptr;
  ~Preference() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
  }
};

// The largest power of two, up to 256, that divides the address.
uint32_t alignment_bytes(const void* ptr) {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment >>= 1;
  return alignment;
}

// One column-major product D(m,n) = alpha op(A) op(B) + beta C, C = D. `ab` is A's and B's type,
// `cd` C's and D's. The epilogue, with its bias and aux pointers, is set by the caller on `desc`.
struct Gemm {
  bool transa, transb;
  int64_t m, n, k;
  const void* a;
  int64_t lda;
  const void* b;
  int64_t ldb;
  void* d;
  int64_t ldd;
  float beta;
};

// Queues the product; false (nothing queued) when cuBLASLt has no algorithm for these types
// and this epilogue, so the caller can fall back to a plainer one.
bool try_gemm(const Matmul& mm, Elem ab, cudaDataType_t cd, const Gemm& g, Desc& desc) {
  const cudaDataType_t ab_type = data_type(ab);
  const Layout a(ab_type, g.transa ? g.k : g.m, g.transa ? g.m : g.k, g.lda);
  const Layout b(ab_type, g.transb ? g.n : g.k, g.transb ? g.k : g.n, g.ldb);
  const Layout d(cd, g.m, g.n, g.ldd);
  const cublasOperation_t opa = g.transa ? CUBLAS_OP_T : CUBLAS_OP_N, opb = g.transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(desc.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)), "set TRANSA");
  check(cublasLtMatmulDescSetAttribute(desc.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)), "set TRANSB");
  Preference pref;
  check(cublasLtMatmulPreferenceCreate(&pref.pref), "cublasLtMatmulPreferenceCreate");
  check(cublasLtMatmulPreferenceSetAttribute(pref.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &mm.workspace_bytes,
                                             sizeof(mm.workspace_bytes)),
        "set MAX_WORKSPACE_BYTES");
  // The heuristic assumes 256-byte aligned matrices unless told otherwise; a caller may hand a
  // slice of a larger buffer, so it is told each pointer's actual alignment.
  const std::pair<cublasLtMatmulPreferenceAttributes_t, const void*> aligned[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, g.a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, g.b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, g.d},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, g.d}};
  for (const auto& [attribute, ptr] : aligned) {
    const uint32_t alignment = alignment_bytes(ptr);
    check(cublasLtMatmulPreferenceSetAttribute(pref.pref, attribute, &alignment, sizeof(alignment)),
          "set MIN_ALIGNMENT");
  }
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  const cublasStatus_t searched = cublasLtMatmulAlgoGetHeuristic(mm.handle, desc.desc, a.layout, b.layout, d.layout,
                                                                 d.layout, pref.pref, 1, &heuristic, &found);
  if (searched == CUBLAS_STATUS_NOT_SUPPORTED || (searched == CUBLAS_STATUS_SUCCESS && found == 0)) return false;
  check(searched, "cublasLtMatmulAlgoGetHeuristic");
  const float alpha = 1.0f;
  check(cublasLtMatmul(mm.handle, desc.desc, &alpha, g.a, a.layout, g.b, b.layout, &g.beta, g.d, d.layout, g.d,
                       d.layout, &heuristic.algo, mm.workspace, mm.workspace_bytes, mm.stream),
        "cublasLtMatmul");
  return true;
}

// As try_gemm, for products every cuBLASLt supports (no epilogue): throws when there is none.
void run_gemm(const Matmul& mm, Elem ab, cudaDataType_t cd, const Gemm& g, Desc& desc) {
  if (!try_gemm(mm, ab, cd, g, desc))
    throw std::runtime_error("cuBLASLt has no algorithm for a " + std::to_string(g.m) + "x" + std::to_string(g.n) +
                             "x" + std::to_string(g.k) + " matmul with these types");
}

void make_desc(const Matmul& mm, Elem ab, Desc& desc) {
  const cublasComputeType_t compute =
      ab == Elem::f32 && mm.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  check(cublasLtMatmulDescCreate(&desc.desc, compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
}

void set_epilogue(Desc& desc, cublasLtEpilogue_t epilogue) {
  check(cublasLtMatmulDescSetAttribute(desc.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)),
        "set EPILOGUE");
}

// out (or gelu_pre and out) in one cuBLASLt call with the bias or GELU epilogue; false when
// that epilogue cannot be used here: GELU's aux buffer needs a leading dimension (OC) divisible
// by 8, and cuBLASLt may offer no algorithm for an epilogue at some types.
bool matmul_forward_fused(const Matmul& mm, Elem e, void* out, void* gelu_pre, const void* bias, const Gemm& product) {
  if (gelu_pre && product.m % 8 != 0) return false;
  Desc desc;
  make_desc(mm, e, desc);
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  if (gelu_pre) {
    epilogue = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    const int64_t aux_ld = product.m;
    check(cublasLtMatmulDescSetAttribute(desc.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &gelu_pre,
                                         sizeof(gelu_pre)),
          "set EPILOGUE_AUX_POINTER");
    check(cublasLtMatmulDescSetAttribute(desc.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)),
          "set EPILOGUE_AUX_LD");
  } else if (bias) {
    epilogue = CUBLASLT_EPILOGUE_BIAS;
  }
  if (bias)
    check(cublasLtMatmulDescSetAttribute(desc.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
          "set BIAS_POINTER");
  set_epilogue(desc, epilogue);
  Gemm g = product;
  g.d = out;
  return try_gemm(mm, e, data_type(e), g, desc);
}

}  // namespace

void matmul_forward(const Matmul& mm, Elem e, void* out, void* gelu_pre, const void* inp, const void* weight,
                    const void* bias, int64_t N, int64_t IC, int64_t OC) {
  if (N == 0 || OC == 0) return;
  if (gelu_pre && !mm.gelu_epilogue) {
    matmul_forward(mm, e, gelu_pre, nullptr, inp, weight, bias, N, IC, OC);
    gelu_forward(e, out, gelu_pre, N * OC, mm.stream);
    return;
  }
  // outᵀ(OC,N) = weightᵀ · inpᵀ: A = weight as column-major (IC,OC) read transposed, B = inp as (IC,N).
  Gemm product{true, false, OC, N, IC, weight, IC, inp, IC, nullptr, OC, 0.0f};
  if (IC > 0 && matmul_forward_fused(mm, e, out, gelu_pre, bias, product)) return;
  // Unfused: the bias broadcast into the pre-activation, the product added to it, then GELU.
  product.d = gelu_pre ? gelu_pre : out;
  fill_rows(e, product.d, bias, N, OC, mm.stream);
  if (IC > 0) {
    product.beta = 1.0f;
    Desc desc;
    make_desc(mm, e, desc);
    run_gemm(mm, e, data_type(e), product, desc);
  }
  if (gelu_pre) gelu_forward(e, out, gelu_pre, N * OC, mm.stream);
}

void matmul_backward(const Matmul& mm, Elem e, void* dinp, float* dweight, float* dbias, const void* dout,
                     const void* inp, const void* weight, int64_t N, int64_t IC, int64_t OC, float* bias_scratch) {
  if (N == 0) return;
  if (dinp && OC > 0 && IC > 0) {
    // dinpᵀ(IC,N) += weightᵀ-as-stored (IC,OC) · doutᵀ(OC,N)
    Desc desc;
    make_desc(mm, e, desc);
    run_gemm(mm, e, data_type(e), Gemm{false, false, IC, N, OC, weight, IC, dout, OC, dinp, IC, 1.0f}, desc);
  }
  if (dweight && OC > 0 && IC > 0) {
    // dweight as column-major (IC,OC) += inpᵀ(IC,N) · (doutᵀ(OC,N))ᵀ, into fp32
    Desc desc;
    make_desc(mm, e, desc);
    run_gemm(mm, e, CUDA_R_32F, Gemm{false, true, IC, OC, N, inp, IC, dout, OC, dweight, IC, 1.0f}, desc);
  }
  if (dbias) column_sum(e, dbias, dout, N, OC, bias_scratch, mm.stream);
}

}  // namespace keel::cuda
