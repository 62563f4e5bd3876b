// Top-k sparsification with error feedback (Stich et al., 2018; Lin et al.'s deep gradient
// compression without its momentum correction): per gradient bucket, each rank adds what it left
// unsent before, keeps the k = ratio × elements entries largest in magnitude, sends them as
// (index, value) pairs by all_gather, and remembers the rest for the next step. Where k pairs
// would cost at least as much as the bucket itself (2k ≥ elements) the selected entries travel
// densely through the same all_reduce as ddp's, so ratio 1.0 is ddp bit for bit.
#pragma once

#include "gradient_compressor.hpp"

namespace keel_ddp {

class TopkCompressor : public GradientCompressor {
 public:
  TopkCompressor(double ratio, int64_t grad_elements);
  void reduce_mean(const keel_support::ParamStore& store, const GradientBuckets& buckets,
                   const DataParallelGroup& group) override;
  void commit() override { residual_ = staged_residual_; }
  std::vector<CompressorArray> own_arrays() override { return {{"topk.residual", &residual_}}; }
  std::string describe(const keel_support::ParamStore& store) const override;

  // Entries kept of a bucket of `elements`: at least one.
  int64_t kept(int64_t elements) const;

 private:
  void reduce_bucket(const keel_support::ParamStore& store, const GradientBucket& bucket, const DataParallelGroup& group);

  double ratio_;
  std::vector<float> residual_;         // over the gradient array: what this rank has not sent yet
  std::vector<float> staged_residual_;  // this step's, kept once the step is taken
  std::vector<float> staged_;           // one bucket: gradient + residual
};

// The positions of the k entries of `values` largest in magnitude, ascending; ties go to the
// lower position, so every rank and every run picks the same ones. NaN counts as the largest, so
// a non-finite gradient is sent and every rank sees it.
std::vector<int32_t> largest_magnitudes(const std::vector<float>& values, int64_t k);

}  // namespace keel_ddp
