// Groups layers into all-reduce buckets (see gradient_buckets.hpp).
#include "gradient_buckets.hpp"

#include <algorithm>

namespace keel_ddp {
namespace {

using keel_support::ElementRange;

// Sorts and merges touching runs, so a bucket of neighbouring layers is one all_reduce.
std::vector<ElementRange> merge_regions(std::vector<ElementRange> regions) {
  std::sort(regions.begin(), regions.end(), [](const ElementRange& a, const ElementRange& b) { return a.begin < b.begin; });
  std::vector<ElementRange> merged;
  for (const ElementRange& r : regions) {
    if (!merged.empty() && merged.back().end == r.begin)
      merged.back().end = r.end;
    else
      merged.push_back(r);
  }
  return merged;
}

}  // namespace

GradientBuckets plan_gradient_buckets(const keel_support::StoreLayout& layout, uint64_t bucket_bytes) {
  GradientBuckets plan;
  plan.bucket_of_layer.assign(layout.layers.size(), -1);
  GradientBucket open;
  auto close = [&] {
    if (open.layers.empty()) return;
    open.regions = merge_regions(std::move(open.regions));
    plan.buckets.push_back(std::move(open));
    open = GradientBucket{};
  };
  for (size_t l = layout.layers.size(); l-- > 0;) {
    const keel_support::LayerPlace& layer = layout.layers[l];
    if (layer.numel == 0) continue;
    plan.bucket_of_layer[l] = static_cast<int32_t>(plan.buckets.size());
    open.layers.push_back(static_cast<int32_t>(l));
    // With one shard a layer's region is its parameters, back to back, unpadded.
    open.regions.push_back({layer.full_offset, layer.full_offset + layer.numel});
    open.elements += layer.numel;
    if (static_cast<uint64_t>(open.elements) * sizeof(float) >= bucket_bytes) close();
  }
  close();
  return plan;
}

}  // namespace keel_ddp
