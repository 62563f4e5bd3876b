// PowerSGD (Vogels et al., 2019): each gradient matrix M (its first dimension by the rest) is
// sent as two thin factors instead of itself. One power-iteration step per optimizer step:
// P = M Q summed over ranks and orthonormalised, Q = Mᵀ P averaged over ranks, and P Qᵀ stands
// in for the mean of M. Q is warm-started from the previous step; what P Qᵀ misses of this
// rank's M is fed back into the next step (error feedback). Vectors (biases, norm gains) are
// all-reduced whole, as in the paper. At full rank (rank ≥ the smaller side) P spans the summed
// matrix's columns, so P Qᵀ is the mean up to rounding: ddp within 1e-5.
#pragma once

#include "gradient_compressor.hpp"

namespace keel_ddp {

class PowerSgdCompressor : public GradientCompressor {
 public:
  PowerSgdCompressor(const keel_support::ParamStore& store, int32_t rank, uint64_t seed);
  void reduce_mean(const keel_support::ParamStore& store, const GradientBuckets& buckets,
                   const DataParallelGroup& group) override;
  void commit() override {
    residual_ = staged_residual_;
    q_ = staged_q_;
  }
  std::vector<CompressorArray> own_arrays() override {
    return {{"powersgd.residual", &residual_}, {"powersgd.q", &q_}};
  }
  std::string describe(const keel_support::ParamStore& store) const override;

 private:
  // A gradient compressed as rows × cols with factors of `rank` columns.
  struct Matrix {
    size_t param;
    uint64_t seed;     // Q's draws: the run's seed and the parameter's name, so copies agree
    int64_t rows, cols, rank;
    int64_t q_offset;  // into q_: cols × rank, row-major
    int64_t p_offset;  // into the P message: rows × rank
  };
  std::vector<Matrix> matrices_;
  std::vector<size_t> vectors_;  // parameters all-reduced whole
  int64_t p_elements_ = 0, vector_elements_ = 0;
  std::vector<float> residual_;  // over the gradient array
  std::vector<float> q_;         // every matrix's Q, back to back
  std::vector<float> staged_residual_, staged_q_;  // this step's, kept once the step is taken
  int32_t rank_ = 0;             // as configured; each matrix's is at most its smaller side
};

// Orthonormalises the columns of the rows × rank row-major matrix in place (modified
// Gram-Schmidt, twice, in double); a column that vanishes stays zero.
void orthonormalise_columns(float* p, int64_t rows, int64_t rank);

}  // namespace keel_ddp
