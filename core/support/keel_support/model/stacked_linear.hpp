// Several projections of one input run as one matmul (installed for third-party models): q|k|v,
// gate|up, a mixture-of-experts expert's w1|w3. Each projection stays its own tensor (Hugging
// Face's layout, so import, export and tensor-parallel pieces move whole tensors); StackedLinear
// copies their weights (and biases) into one scratch matrix at the compute type for the matmul,
// and in the backward hands each tensor its rows of the stacked fp32 gradient. Parts are stacked
// in the order given, so the output's columns are part 0's, then part 1's, and so on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "keel_support/common/abi_guard.hpp"
#include "keel_support/common/backend_buffer.hpp"
#include "keel_support/common/backend_ops.hpp"
#include "keel_support/model/carver.hpp"
#include "keel_support/model/compute_ops.hpp"

namespace keel_support {

class StackedLinear {
 public:
  StackedLinear() = default;
  // `part_rows[i]`: part i's output rows (its weight is (part_rows[i], in_features), row-major);
  // `with_bias`: every part has a bias of part_rows[i] elements. Allocates the scratch once:
  // the stacked weight and bias at the compute type, their gradients in fp32.
  StackedLinear(const ComputeOps& ops, int64_t in_features, std::vector<int64_t> part_rows, bool with_bias)
      : ops_(ops), in_(in_features), rows_(std::move(part_rows)), with_bias_(with_bias) {
    if (in_ <= 0 || rows_.empty())
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "StackedLinear: needs in_features > 0 and at least one part, found " +
                                                       std::to_string(in_) + " and " + std::to_string(rows_.size()));
    for (int64_t rows : rows_) {
      if (rows <= 0)
        throw StatusError(KEEL_ERR_INVALID_ARGUMENT,
                          "StackedLinear: every part needs rows > 0, found " + std::to_string(rows));
      out_ += rows;
    }
    memory_ = ops_.backend().alloc_bytes(carve(nullptr));
    carve(static_cast<char*>(memory_.get()));
  }

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }  // the sum of the parts' rows
  size_t parts() const { return rows_.size(); }
  bool with_bias() const { return with_bias_; }
  Elems weight() const { return weight_; }  // (out_features, in_features) at the compute type
  Elems bias() const { return bias_; }      // (out_features), empty without biases

  // Copies each part's weight (and, with biases, its bias) into the stacked scratch; call it
  // whenever the parameters may have changed (once per layer use).
  void stack(const std::vector<Elems>& weights, const std::vector<Elems>& biases = {}) {
    check_count(weights.size(), "weights");
    check_bias_count(biases.size(), "biases");
    int64_t row = 0;
    for (size_t i = 0; i < rows_.size(); row += rows_[i++]) {
      ops_.copy(weight_ + row * in_, weights[i], rows_[i] * in_);
      if (with_bias_) ops_.copy(bias_ + row, biases[i], rows_[i]);
    }
  }

  // out(N,out_features) = inp(N,in_features) · Wᵀ + b, with the weights last stacked.
  void forward(Elems out, Elems inp, int64_t N) const { ops_.matmul_forward(out, inp, weight_, bias_, N, in_, out_); }

  // dinp(N,in) += dout(N,out) · W where dinp is given (empty: a weight-only backward). With
  // `dweights` (one fp32 gradient per part, (rows_i, in)) each part's weight gradient is ADDED to
  // its buffer, and with biases `dbiases` likewise; both empty: the input gradient only (a split
  // backward's INPUT part).
  void backward(Elems dinp, Elems dout, Elems inp, int64_t N, const std::vector<float*>& dweights = {},
                const std::vector<float*>& dbiases = {}) {
    const BackendOps& be = ops_.backend();
    // A NULL buffer is a part with no gradient (frozen, params.h KEEL_PARAM_FROZEN): skipped; all
    // NULL, the weight-gradient matmul is left out.
    bool weight_grads = false;
    for (float* g : dweights) weight_grads = weight_grads || g != nullptr;
    for (float* g : dbiases) weight_grads = weight_grads || g != nullptr;
    if (weight_grads) {
      check_count(dweights.size(), "weight gradients");
      check_bias_count(dbiases.size(), "bias gradients");
      KEEL_OP(be, fill_zero, dweight_, size_t(out_ * in_) * sizeof(float));
      if (with_bias_) KEEL_OP(be, fill_zero, dbias_, size_t(out_) * sizeof(float));
    } else if (dbiases.size() && dweights.size() == 0) {
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "StackedLinear::backward: bias gradients without weight gradients");
    }
    ops_.matmul_backward(dinp, weight_grads ? dweight_ : nullptr, weight_grads && with_bias_ ? dbias_ : nullptr, dout,
                         inp, weight_, N, in_, out_);
    if (!weight_grads) return;
    int64_t row = 0;  // each part's rows of the stacked gradient, in stacking order
    for (size_t i = 0; i < rows_.size(); ++i) {
      if (dweights[i]) KEEL_OP(be, accumulate, dweights[i], dweight_ + row * in_, rows_[i] * in_);
      if (with_bias_ && dbiases[i]) KEEL_OP(be, accumulate, dbiases[i], dbias_ + row, rows_[i]);
      row += rows_[i];
    }
  }

 private:
  size_t carve(char* base) {
    Carver take(base);
    weight_ = ops_.at(take.take<char>(int64_t(ops_.bytes(out_ * in_))));
    bias_ = with_bias_ ? ops_.at(take.take<char>(int64_t(ops_.bytes(out_)))) : Elems();
    dweight_ = take.take<float>(out_ * in_);
    dbias_ = with_bias_ ? take.take<float>(out_) : nullptr;
    return take.used();
  }
  void check_count(size_t given, const char* what) const {
    if (given != rows_.size())
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string("StackedLinear: ") + std::to_string(given) + " " + what +
                                                       " for a stack of " + std::to_string(rows_.size()) + " parts");
  }

  void check_bias_count(size_t given, const char* what) const {
    if (given != (with_bias_ ? rows_.size() : 0))
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string("StackedLinear: ") + std::to_string(given) + " " + what +
                                                       " for a stack of " + std::to_string(rows_.size()) + " parts " +
                                                       (with_bias_ ? "with" : "without") + " biases");
  }

  ComputeOps ops_;
  int64_t in_ = 0, out_ = 0;
  std::vector<int64_t> rows_;
  bool with_bias_ = false;
  BackendBuffer memory_;
  Elems weight_, bias_;  // (out,in), (out) at the compute type
  float* dweight_ = nullptr;
  float* dbias_ = nullptr;
};

}  // namespace keel_support
