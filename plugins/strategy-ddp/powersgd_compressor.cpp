// PowerSGD's step (see powersgd_compressor.hpp) on host copies of the gradients. Each product
// element is one thread's sum in a fixed order, so the bits do not depend on the thread count;
// the sums run in double, as the orthonormalisation does.
#include "powersgd_compressor.hpp"

#include <keel_support/common/backend_buffer.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

namespace keel_ddp {
namespace {

// Standard normal values from one seed, the same on every rank (Box-Muller on mt19937_64's bits,
// so no library's distribution decides them).
void fill_normal(float* out, int64_t n, uint64_t seed) {
  std::mt19937_64 bits(seed ^ 0x705e5dULL);
  const double two_pi = 6.283185307179586;
  for (int64_t i = 0; i < n; ++i) {
    const double u1 = (double(bits() >> 11) + 1.0) * 0x1.0p-53, u2 = double(bits() >> 11) * 0x1.0p-53;
    out[i] = float(std::sqrt(-2.0 * std::log(u1)) * std::cos(two_pi * u2));
  }
}

uint64_t mix(uint64_t h, uint64_t value) { return (h ^ value) * 0x100000001b3ULL; }

uint64_t name_hash(const char* name) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const char* c = name; c && *c; ++c) h = mix(h, uint64_t(static_cast<unsigned char>(*c)));
  return h;
}

bool all_finite(const std::vector<float>& values) {
  for (float v : values)
    if (!std::isfinite(v)) return false;
  return true;
}

// A Q column that came out zero (the summed M had less rank than r this step) would stay zero
// under warm starts and freeze that direction: it is drawn again, from the matrix's seed and the
// bits of Q's other columns, which every rank holds alike and a checkpoint keeps.
void redraw_vanished_columns(float* q, int64_t cols, int64_t rank, uint64_t seed) {
  for (int64_t k = 0; k < rank; ++k) {
    bool zero = true;
    for (int64_t j = 0; j < cols && zero; ++j) zero = q[j * rank + k] == 0.0f;
    if (!zero) continue;
    uint64_t h = mix(seed, uint64_t(k));
    for (int64_t e = 0; e < cols * rank; ++e) {
      uint32_t word;
      std::memcpy(&word, &q[e], sizeof word);
      h = mix(h, word);
    }
    std::vector<float> column(static_cast<size_t>(cols));
    fill_normal(column.data(), cols, h);
    for (int64_t j = 0; j < cols; ++j) q[j * rank + k] = column[size_t(j)];
  }
}

// p (rows × rank) = m (rows × cols) q (cols × rank).
void multiply(const float* m, const float* q, float* p, int64_t rows, int64_t cols, int64_t rank) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < rows; ++i) {
    double acc[64] = {};
    for (int64_t k0 = 0; k0 < rank; k0 += 64) {
      const int64_t kn = std::min<int64_t>(64, rank - k0);
      std::fill(acc, acc + kn, 0.0);
      for (int64_t j = 0; j < cols; ++j) {
        const double mij = m[i * cols + j];
        const float* qj = q + j * rank + k0;
        for (int64_t k = 0; k < kn; ++k) acc[k] += mij * qj[k];
      }
      for (int64_t k = 0; k < kn; ++k) p[i * rank + k0 + k] = float(acc[k]);
    }
  }
}

// q (cols × rank) = mᵀ (cols × rows) p (rows × rank); each thread owns a range of q's rows.
void multiply_transposed(const float* m, const float* p, float* q, int64_t rows, int64_t cols, int64_t rank) {
  std::vector<double> acc(size_t(cols * rank), 0.0);
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t block = 0; block < (cols + 255) / 256; ++block) {
      const int64_t j0 = block * 256, j1 = std::min<int64_t>(cols, j0 + 256);
      for (int64_t i = 0; i < rows; ++i) {
        const float* pi = p + i * rank;
        for (int64_t j = j0; j < j1; ++j) {
          const double mij = m[i * cols + j];
          double* aj = acc.data() + j * rank;
          for (int64_t k = 0; k < rank; ++k) aj[k] += mij * pi[k];
        }
      }
    }
  }
  for (size_t e = 0; e < acc.size(); ++e) q[e] = float(acc[e]);
}

// m (rows × cols) = p (rows × rank) qᵀ (rank × cols).
void multiply_back(const float* p, const float* q, float* m, int64_t rows, int64_t cols, int64_t rank) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      double sum = 0.0;
      for (int64_t k = 0; k < rank; ++k) sum += double(p[i * rank + k]) * double(q[j * rank + k]);
      m[i * cols + j] = float(sum);
    }
}

}  // namespace

void orthonormalise_columns(float* p, int64_t rows, int64_t rank) {
  std::vector<double> a(size_t(rows * rank));
  for (size_t e = 0; e < a.size(); ++e) a[e] = p[e];
  std::vector<char> vanished(size_t(rank), 0);
  for (int64_t k = 0; k < rank; ++k) {
    double original = 0.0;
    for (int64_t i = 0; i < rows; ++i) original += a[size_t(i * rank + k)] * a[size_t(i * rank + k)];
    for (int pass = 0; pass < 2; ++pass)  // twice is enough (Giraud et al., 2005)
      for (int64_t c = 0; c < k; ++c) {
        if (vanished[size_t(c)]) continue;
        double dot = 0.0;
        for (int64_t i = 0; i < rows; ++i) dot += a[size_t(i * rank + c)] * a[size_t(i * rank + k)];
        for (int64_t i = 0; i < rows; ++i) a[size_t(i * rank + k)] -= dot * a[size_t(i * rank + c)];
      }
    double norm = 0.0;
    for (int64_t i = 0; i < rows; ++i) norm += a[size_t(i * rank + k)] * a[size_t(i * rank + k)];
    // A column inside the span of the earlier ones (or zero) adds no direction.
    if (!(norm > 1e-24 * original) || norm == 0.0) {
      vanished[size_t(k)] = 1;
      for (int64_t i = 0; i < rows; ++i) a[size_t(i * rank + k)] = 0.0;
      continue;
    }
    const double inverse = 1.0 / std::sqrt(norm);
    for (int64_t i = 0; i < rows; ++i) a[size_t(i * rank + k)] *= inverse;
  }
  for (size_t e = 0; e < a.size(); ++e) p[e] = float(a[e]);
}

PowerSgdCompressor::PowerSgdCompressor(const keel_support::ParamStore& store, int32_t rank, uint64_t seed)
    : residual_(size_t(store.grad_elements()), 0.0f), rank_(rank) {
  int64_t q_elements = 0;
  for (size_t i = 0; i < store.n_params(); ++i) {
    const keel_param_spec& spec = store.spec(i);
    const int64_t numel = store.layout().params[i].numel;
    const int64_t rows = spec.ndim >= 2 ? spec.local_shape[0] : numel;
    const int64_t cols = rows > 0 ? numel / rows : 0;
    if (spec.ndim < 2 || rows < 2 || cols < 2) {
      vectors_.push_back(i);
      vector_elements_ += numel;
      continue;
    }
    const int64_t r = std::min<int64_t>({rank, rows, cols});
    matrices_.push_back(Matrix{i, mix(seed, name_hash(spec.name)), rows, cols, r, q_elements, p_elements_});
    q_elements += cols * r;
    p_elements_ += rows * r;
  }
  q_.resize(size_t(q_elements));
  for (const Matrix& x : matrices_) fill_normal(q_.data() + x.q_offset, x.cols * x.rank, x.seed);
  staged_residual_ = residual_;
  staged_q_ = q_;
}

std::string PowerSgdCompressor::describe(const keel_support::ParamStore& store) const {
  int64_t matrix_elements = 0, q_elements = int64_t(q_.size());
  for (const Matrix& m : matrices_) matrix_elements += m.rows * m.cols;
  const int64_t sent = p_elements_ + q_elements + vector_elements_;
  const int64_t whole = matrix_elements + vector_elements_;
  char line[200];
  std::snprintf(line, sizeof line, "PowerSGD: %zu matrices as factors of rank min(%d, rows, cols), %zu vectors whole: "
                "%lld of %lld gradient values sent per step (%.1f× fewer)", matrices_.size(), int(rank_),
                vectors_.size(), (long long)sent,
                (long long)whole, sent > 0 ? double(whole) / double(sent) : 1.0);
  (void)store;
  return line;
}

void PowerSgdCompressor::reduce_mean(const keel_support::ParamStore& store, const GradientBuckets& /*buckets*/,
                                     const DataParallelGroup& group) {
  const keel_support::BackendOps& backend = store.backend();
  const int64_t total = store.grad_elements();
  std::vector<float> m(static_cast<size_t>(total));
  backend.copy(m.data(), store.grads(), total, KEEL_COPY_DEVICE_TO_HOST);
  auto grad_at = [&](size_t param) { return store.grad_element(param, 0) - store.grads(); };

  // Message 1: every matrix's P = (M + residual) Q, then every vector whole.
  std::vector<float> first(static_cast<size_t>(p_elements_ + vector_elements_));
  for (const Matrix& x : matrices_) {
    float* mx = m.data() + grad_at(x.param);
    const float* rx = residual_.data() + grad_at(x.param);
    for (int64_t e = 0; e < x.rows * x.cols; ++e) mx[e] += rx[e];
    multiply(mx, q_.data() + x.q_offset, first.data() + x.p_offset, x.rows, x.cols, x.rank);
  }
  // A non-finite input on any rank makes the sums non-finite on every rank: the gradients are
  // then left non-finite for the core to skip or stop, and nothing staged is kept.
  auto give_up = [&] {
    std::fill(m.begin(), m.end(), NAN);
    backend.copy(store.grads(), m.data(), total, KEEL_COPY_HOST_TO_DEVICE);
  };
  int64_t at = p_elements_;
  for (size_t v : vectors_) {
    const int64_t numel = store.layout().params[v].numel;
    std::copy_n(m.data() + grad_at(v), numel, first.data() + at);
    at += numel;
  }
  keel_support::BackendBuffer wire(backend.api, backend.obj, std::max(first.size(), q_.size()) * sizeof(float));
  auto all_reduce = [&](std::vector<float>& values) {
    if (values.empty()) return;
    backend.copy(wire.floats(), values.data(), int64_t(values.size()), KEEL_COPY_HOST_TO_DEVICE);
    group.all_reduce_sum(wire.get(), values.size(), kFloat32);
    backend.copy(values.data(), wire.floats(), int64_t(values.size()), KEEL_COPY_DEVICE_TO_HOST);
  };
  all_reduce(first);
  if (!all_finite(first)) return give_up();

  // Message 2: Q = Mᵀ P with P orthonormal, averaged.
  for (const Matrix& x : matrices_) {
    orthonormalise_columns(first.data() + x.p_offset, x.rows, x.rank);
    multiply_transposed(m.data() + grad_at(x.param), first.data() + x.p_offset, staged_q_.data() + x.q_offset, x.rows,
                        x.cols, x.rank);
  }
  all_reduce(staged_q_);
  if (!all_finite(staged_q_)) return give_up();
  const float inverse = 1.0f / float(group.size);
  for (float& value : staged_q_) value *= inverse;

  // P Qᵀ is the mean; what it misses of this rank's M is kept for the next step.
  std::vector<float> approximation;
  for (const Matrix& x : matrices_) {
    float* mx = m.data() + grad_at(x.param);
    float* rx = staged_residual_.data() + grad_at(x.param);
    approximation.resize(size_t(x.rows * x.cols));
    multiply_back(first.data() + x.p_offset, staged_q_.data() + x.q_offset, approximation.data(), x.rows, x.cols, x.rank);
    for (int64_t e = 0; e < x.rows * x.cols; ++e) {
      rx[e] = mx[e] - approximation[size_t(e)];
      mx[e] = approximation[size_t(e)];
    }
  }
  at = p_elements_;
  for (size_t v : vectors_) {
    const int64_t numel = store.layout().params[v].numel;
    float* dst = m.data() + grad_at(v);
    for (int64_t e = 0; e < numel; ++e) dst[e] = first[size_t(at + e)] * inverse;
    at += numel;
  }
  backend.copy(store.grads(), m.data(), total, KEEL_COPY_HOST_TO_DEVICE);
  // The next step's warm start: Q with any vanished column drawn again.
  for (const Matrix& x : matrices_) redraw_vanished_columns(staged_q_.data() + x.q_offset, x.cols, x.rank, x.seed);
}

}  // namespace keel_ddp
