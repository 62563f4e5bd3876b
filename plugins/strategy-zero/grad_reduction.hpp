// Gradient memory and its data-parallel reduction, for every stage. After the reduction this
// rank's chunk of each layer holds the MEAN over ranks of the gradients accumulated there (with
// hybrid sharding, over every group's ranks: each reduced chunk is also summed across the
// replica groups, on the thread that reduced it, before it is scaled):
//   stage 1: the model accumulates into a persistent full buffer; finish_reduction (the first
//            grad_sq_norm or step of the accumulation) reduce_scatters each layer into this
//            rank's chunk of that buffer, scaled by 1/dp_size.
//   stage 2/3: only the chunks are persistent; each backward pass gets a zeroed full-size
//            buffer per layer at its first acquire, and at the layer's final release its sum
//            over ranks is scaled by 1/dp_size and ADDED to the chunk, then the buffer is freed.
//            Every micro-batch reduces this way, so the chunk accumulates the mean of each
//            micro-batch's sum: Σ_m (1/N) Σ_r g(r,m) = the mean of the accumulated gradients.
//            On several ranks that reduce_scatter runs on a communication thread (CommWorker)
//            while the backward goes on with the layers below (docs/architecture.md §3, step 4); the
//            training thread scales and adds each finished chunk in submission order, so the
//            sums are the same bits as a blocking reduction. The worker has a communicator of
//            its own, split from the group, because stage 3 gathers parameters on the training
//            thread meanwhile (comm.h: one thread per communicator).
// Pipeline parallelism: a STAGE_TIED gradient is summed over the embedding group before its
// data-parallel reduction, once per step at finish_reduction (keel_support/strategy/stage_tied_grads.hpp
// says why not at the release). In stages 2/3 a layer holding one therefore keeps its full
// buffer over the step's micro-batches and is reduced there, after the sum, instead of at each
// final release.
//   offload.gradients (stages 2/3): the chunks live in the offload tier; each reduced layer is
//            added to its chunk there (read, add, write back behind while the backward goes on:
//            the same additions, so micro-batches accumulate to the same bits), and the norm
//            reads each chunk back.
// The norm sums Σ g² one layer's chunk at a time, so both homes add the same partial sums.
#pragma once

#include <keel_support/strategy/comm_worker.hpp>

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include <keel_support/common/backend_ops.hpp>
#include <keel_support/strategy/stage_tied_grads.hpp>
#include <keel_support/strategy/store_layout.hpp>
#include <keel_support/strategy/sum_squares_batch.hpp>
#include <keel_support/strategy/tier_home.hpp>

#include "dp_group.hpp"

namespace keel_zero {

class GradReduction {
 public:
  // overlap false: stages 2/3 reduce each layer on the calling thread at its final release.
  // `persistent` is the parameter store's gradient array (full in stage 1, chunks in 2/3), or
  // NULL when `tier` holds the chunks (stages 2/3). `tied` (the store's) says which layers wait
  // for the sum over the pipeline stages.
  GradReduction(const keel_host* host, int32_t stage, bool overlap, const keel_support::StoreLayout& layout,
                const keel_support::StageTiedGrads& tied, DataParallelGroup& group, keel_support::BackendOps backend,
                float* persistent, keel_support::TierHome* tier = nullptr);
  ~GradReduction();
  GradReduction(const GradReduction&) = delete;
  GradReduction& operator=(const GradReduction&) = delete;

  // The layer's full padded gradient region for a backward pass to accumulate into.
  float* open_layer(int32_t layer);
  // The layer's gradients are final for this backward pass (stage 2/3: reduced and freed).
  void close_layer(int32_t layer);
  bool is_open(int32_t layer) const { return open_[size_t(layer)]; }
  bool has_open_layer(int32_t* out_layer) const;
  // Stage 1's persistent full region of the layer; NULL in stages 2/3, which keep none.
  float* resident_layer(int32_t layer) const;

  // Makes every owned chunk hold the mean gradient; only the first call per accumulation
  // communicates (stage 1, the STAGE_TIED sum and the layers waiting for it), and no layer may be open.
  void finish_reduction();
  // Waits for the layers in flight and adds them to their chunks (stages 2/3), so the chunks
  // hold every released layer's reduction.
  void settle();
  // This rank's chunk of the layer (in the full buffer for stage 1, else in the shard buffer);
  // resident chunks only.
  float* owned_chunk(int32_t layer) const;
  // Σ g² over this rank's chunks (padding is zero and adds nothing), counting only the
  // parameters whose `counted` entry is set (tensor parallelism: replicated ones on tp rank 0);
  // read back from the backend once.
  double local_sum_squares(const std::vector<char>& counted) const;
  // Starts a new accumulation: every persistent gradient is zeroed.
  void zero();
  // Stage 1 only: Σ g² over the parameters `counted` marks of this rank's full gradients as they
  // were just before the reduction (strategy.h local_grad_sq_norm), taken by finish_reduction;
  // NaN in stages 2/3, which reduce each layer as its backward finishes. `counted` outlives this.
  void measure_local_norm(const std::vector<char>* counted) { local_counted_ = counted; }
  double local_before_reduction() const { return local_before_; }


 private:
  const keel_host* host_;
  const int32_t stage_;
  const bool overlap_;
  const keel_support::StoreLayout& layout_;
  const keel_support::StageTiedGrads& tied_;
  DataParallelGroup& group_;
  keel_support::BackendOps backend_;
  float* persistent_;  // the store's; outlives this object
  keel_support::TierHome* tier_;  // the store's, when the chunks live in the offload tier
  bool host_backend_ = true;      // the backend's memory is host memory (tier spans are used in place)
  std::vector<keel_support::BackendBuffer> transient_;  // stage 2/3: per open layer
  std::vector<bool> open_;
  bool reduced_ = false;
  const std::vector<char>* local_counted_ = nullptr;
  double local_before_ = __builtin_nan("");

  // A layer's reduce_scatter handed to the worker: its full buffer (read by the worker) and
  // the chunk it receives, both kept alive until the training thread has added the chunk.
  struct InFlight {
    int32_t layer;
    keel_support::BackendBuffer full;
    keel_support::BackendBuffer reduced;
    uint64_t ticket;
  };
  void add_finished(bool wait);
  // Reduces a layer's full buffer into its chunk on this thread (scaled by 1/dp_size, added).
  void reduce_now(int32_t layer, const float* full);
  void sum_tied_over_stages();
  void reduce_layers_waiting_for_tied_sum();
  // Adds a reduced chunk (backend memory) to the layer's persistent chunk, wherever it lives.
  void add_to_chunk(int32_t layer, const float* reduced);
  // Queues Σ g² over `runs` (layer-flat ranges inside the layer's chunk) of the layer's persistent
  // chunk into `sum`; an offloaded chunk is staged through `staging` (grown on first use).
  void chunk_sum_squares(int32_t layer, const std::vector<keel_support::ElementRange>& runs,
                         keel_support::SumSquaresBatch& sum, keel_support::BackendBuffer& staging) const;
  int64_t max_chunk_elements() const;
  void start_worker();
  void* worker_comm_ = nullptr;      // split from the group; destroyed last
  void* worker_replicas_ = nullptr;  // split from the replicas' communicator (hybrid sharding), likewise
  std::deque<InFlight> in_flight_;
  std::unique_ptr<keel_support::CommWorker> worker_;  // declared last: joined before the buffers it reads go
};

}  // namespace keel_zero
