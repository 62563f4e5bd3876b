// Which layers' gradients are all-reduced together (docs/architecture.md §3: reduction overlaps the rest
// of the backward). Layers are taken from the last to the first, the order backward finishes
// them, and coalesce until a bucket holds at least bucket_bytes; a layer never splits, and a
// layer without parameters joins no bucket. Pure bookkeeping over the store's layout.
#pragma once

#include <keel_support/strategy/store_layout.hpp>

#include <cstdint>
#include <vector>

namespace keel_ddp {

struct GradientBucket {
  std::vector<int32_t> layers;                        // descending
  std::vector<keel_support::ElementRange> regions;    // maximal runs of the gradient array, ascending
  int64_t elements = 0;
};

struct GradientBuckets {
  std::vector<GradientBucket> buckets;
  std::vector<int32_t> bucket_of_layer;  // per layer; -1 for a layer without gradients
};

GradientBuckets plan_gradient_buckets(const keel_support::StoreLayout& layout, uint64_t bucket_bytes);

}  // namespace keel_ddp
