// Top-k with error feedback (see topk_compressor.hpp). The selection runs on host copies of each
// bucket; the messages go through the data-parallel communicator in backend memory.
#include "topk_compressor.hpp"

#include <keel_support/common/backend_buffer.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>

namespace keel_ddp {
namespace {

constexpr keel_dtype kInt32 = {KEEL_DTYPE_INT, 32, 1};

}  // namespace

TopkCompressor::TopkCompressor(double ratio, int64_t grad_elements)
    : ratio_(ratio), residual_(size_t(grad_elements), 0.0f), staged_residual_(residual_) {}

int64_t TopkCompressor::kept(int64_t elements) const {
  const auto k = static_cast<int64_t>(std::llround(ratio_ * double(elements)));
  return std::clamp<int64_t>(k, 1, elements);
}

std::string TopkCompressor::describe(const keel_support::ParamStore& store) const {
  char line[160];
  std::snprintf(line, sizeof line, "top-k: %.4g of each bucket's gradients sent as (index, value) pairs, the rest "
                "fed back into the next step", ratio_);
  (void)store;
  return line;
}

std::vector<int32_t> largest_magnitudes(const std::vector<float>& values, int64_t k) {
  std::vector<int32_t> order(values.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = int32_t(i);
  auto magnitude = [&](int32_t i) {
    const float v = values[size_t(i)];
    return std::isnan(v) ? INFINITY : std::fabs(v);
  };
  auto larger = [&](int32_t a, int32_t b) {
    const float fa = magnitude(a), fb = magnitude(b);
    return fa > fb || (fa == fb && a < b);
  };
  if (k < int64_t(order.size())) std::nth_element(order.begin(), order.begin() + k, order.end(), larger);
  order.resize(size_t(k));
  std::sort(order.begin(), order.end());
  return order;
}

void TopkCompressor::reduce_mean(const keel_support::ParamStore& store, const GradientBuckets& buckets,
                                 const DataParallelGroup& group) {
  for (const GradientBucket& bucket : buckets.buckets) reduce_bucket(store, bucket, group);
  store.backend().scale(store.grads(), 1.0f / float(group.size), store.grad_elements());
}

// One bucket: stage gradient + residual on the host, choose, send, and write the sum back.
void TopkCompressor::reduce_bucket(const keel_support::ParamStore& store, const GradientBucket& bucket,
                                   const DataParallelGroup& group) {
  if (bucket.elements > INT32_MAX)
    throw keel_support::StatusError(KEEL_ERR_UNIMPLEMENTED, "top-k: a bucket of " + std::to_string(bucket.elements) +
                                                                " elements is past int32 positions; lower bucket_mb");
  const keel_support::BackendOps& backend = store.backend();
  staged_.resize(size_t(bucket.elements));
  int64_t at = 0;
  for (const keel_support::ElementRange& region : bucket.regions) {
    backend.copy(staged_.data() + at, store.grads() + region.begin, region.count(), KEEL_COPY_DEVICE_TO_HOST);
    for (int64_t i = 0; i < region.count(); ++i) staged_[size_t(at + i)] += residual_[size_t(region.begin + i)];
    at += region.count();
  }
  const int64_t k = kept(bucket.elements);
  const std::vector<int32_t> chosen = largest_magnitudes(staged_, k);
  // What stays behind: everything not chosen.
  std::vector<float> sent(chosen.size());
  for (size_t j = 0; j < chosen.size(); ++j) {
    sent[j] = staged_[size_t(chosen[j])];
    staged_[size_t(chosen[j])] = 0.0f;
  }
  at = 0;
  for (const keel_support::ElementRange& region : bucket.regions) {
    std::copy_n(staged_.data() + at, region.count(), staged_residual_.data() + region.begin);
    at += region.count();
  }
  std::fill(staged_.begin(), staged_.end(), 0.0f);
  if (2 * k >= bucket.elements) {
    // Dense: the chosen entries in place, zeros elsewhere, all-reduced region by region as ddp does.
    for (size_t j = 0; j < chosen.size(); ++j) staged_[size_t(chosen[j])] = sent[j];
    at = 0;
    for (const keel_support::ElementRange& region : bucket.regions) {
      backend.copy(store.grads() + region.begin, staged_.data() + at, region.count(), KEEL_COPY_HOST_TO_DEVICE);
      group.all_reduce_sum(store.grads() + region.begin, size_t(region.count()), kFloat32);
      at += region.count();
    }
    return;
  }
  // Sparse: every rank's k pairs to every rank, summed in rank order (the same on every rank).
  const size_t n = chosen.size(), all = n * size_t(group.size);
  keel_support::BackendBuffer message(backend.api, backend.obj, n * 8), gathered(backend.api, backend.obj, all * 8);
  char* send = static_cast<char*>(message.get());
  char* recv = static_cast<char*>(gathered.get());
  backend.copy_bytes(send, sent.data(), n * 4, KEEL_COPY_HOST_TO_DEVICE);
  backend.copy_bytes(send + n * 4, chosen.data(), n * 4, KEEL_COPY_HOST_TO_DEVICE);
  group.all_gather(send, recv, n, kFloat32);
  group.all_gather(send + n * 4, recv + all * 4, n, kInt32);
  std::vector<float> values(all);
  std::vector<int32_t> positions(all);
  backend.copy_bytes(values.data(), recv, all * 4, KEEL_COPY_DEVICE_TO_HOST);
  backend.copy_bytes(positions.data(), recv + all * 4, all * 4, KEEL_COPY_DEVICE_TO_HOST);
  for (size_t j = 0; j < all; ++j) {
    const int32_t position = positions[j];
    if (position < 0 || position >= bucket.elements)
      throw keel_support::StatusError(KEEL_ERR_INTERNAL, "top-k: a rank sent position " + std::to_string(position) +
                                                             " outside its bucket of " + std::to_string(bucket.elements));
    staged_[size_t(position)] += values[j];
  }
  at = 0;
  for (const keel_support::ElementRange& region : bucket.regions) {
    backend.copy(store.grads() + region.begin, staged_.data() + at, region.count(), KEEL_COPY_HOST_TO_DEVICE);
    at += region.count();
  }
}

}  // namespace keel_ddp
