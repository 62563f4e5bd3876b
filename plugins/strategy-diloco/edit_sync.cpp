// EDiT's layer-wise sync (see diloco_strategy.hpp): when the forward first acquires a layer after
// an interval's end, the replicas exchange their pseudo-gradient norms for it, weigh themselves
// (pseudo_gradient_penalty.hpp), all-reduce their weighted pseudo-gradients, clip the average's
// norm, and take the outer step on that layer alone.
#include <keel/plugin.h>
#include <keel_support/common/abi_guard.hpp>
#include <keel_support/common/backend_buffer.hpp>

#include <chrono>
#include <cmath>
#include <vector>

#include "diloco_strategy.hpp"

namespace keel_diloco {

void Diloco::sync_pending_layers() {
  for (size_t l = 0; l < pending_.size(); ++l)
    if (pending_[l]) sync_layer(int32_t(l));
}

void Diloco::sync_layer(int32_t layer) {
  const auto started = std::chrono::steady_clock::now();
  struct CountAsSyncTime {  // A-EDiT: waiting here for slower replicas is not training time
    const std::chrono::steady_clock::time_point& started;
    double& total;
    ~CountAsSyncTime() { total += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(); }
  } count_as_sync{started, sync_seconds_in_step_};
  pending_[size_t(layer)] = 0;
  const keel_support::LayerPlace& place = store_.layout().layers[size_t(layer)];
  const int64_t begin = place.full_offset, n = place.numel;
  if (n == 0) return;
  const keel_support::BackendOps& backend = store_.backend();
  float* region = store_.params() + begin;
  std::vector<float> delta(static_cast<size_t>(n));
  backend.copy(delta.data(), region, n, KEEL_COPY_DEVICE_TO_HOST);
  double sum_squares = 0;
  for (int64_t e = 0; e < n; ++e) {
    delta[size_t(e)] = start_[size_t(begin + e)] - delta[size_t(e)];
    sum_squares += double(delta[size_t(e)]) * delta[size_t(e)];
  }
  std::vector<double> norms(size_t(dp_size_), std::sqrt(sum_squares));
  if (dp_size_ > 1) {
    keel_support::BackendBuffer mine(backend.api, backend.obj, sizeof(double)),
        all(backend.api, backend.obj, sizeof(double) * size_t(dp_size_));
    backend.copy_bytes(mine.get(), &norms[0], sizeof(double), KEEL_COPY_HOST_TO_DEVICE);
    keel_support::check_callee(dp_comm_->all_gather(dp_comm_obj_, mine.get(), all.get(), 1,
                                                    keel_dtype{KEEL_DTYPE_FLOAT, 64, 1}, nullptr),
                               ("comm all_gather of the pseudo-gradient norms of layer " + std::to_string(layer)).c_str());
    backend.copy_bytes(norms.data(), all.get(), sizeof(double) * size_t(dp_size_), KEEL_COPY_DEVICE_TO_HOST);
  }
  const std::vector<double> weights = replica_weights(norms, config_.penalty, statistics_[size_t(layer)]);
  // Σ w_r Δ_r over the replicas, formed in the layer's own parameter memory (overwritten by the
  // outer step's result below).
  const float weight = float(weights[size_t(dp_rank_)]);
  for (float& d : delta) d *= weight;
  if (dp_size_ > 1) {
    backend.copy(region, delta.data(), n, KEEL_COPY_HOST_TO_DEVICE);
    keel_support::check_callee(dp_comm_->all_reduce(dp_comm_obj_, region, region, size_t(n),
                                                    keel_dtype{KEEL_DTYPE_FLOAT, 32, 1}, KEEL_REDUCE_SUM, nullptr),
                               ("comm all_reduce of the pseudo-gradients of layer " + std::to_string(layer)).c_str());
    backend.copy(delta.data(), region, n, KEEL_COPY_DEVICE_TO_HOST);
  }
  if (config_.clip_norm > 0) {
    double norm = 0;
    for (float d : delta) norm += double(d) * d;
    norm = std::sqrt(norm);
    if (norm > config_.clip_norm) {
      const float scale = float(config_.clip_norm / norm);
      for (float& d : delta) d *= scale;
    }
  }
  outer_update(begin, begin + n, delta.data());
}

}  // namespace keel_diloco
