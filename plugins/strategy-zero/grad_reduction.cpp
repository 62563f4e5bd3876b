// Gradient buffers and their reduce_scatter into this rank's chunks (see grad_reduction.hpp).
// The 1/dp_size scaling runs on each reduced chunk before it is stored or added, so the stored
// value is always a mean and read_grad never shows a half-scaled sum.
#include "grad_reduction.hpp"

#include <algorithm>
#include <string>
#include <utility>

namespace keel_zero {

using keel_support::StatusError;

GradReduction::GradReduction(const keel_host* host, int32_t stage, bool overlap, const keel_support::StoreLayout& layout,
                             const keel_support::StageTiedGrads& tied, DataParallelGroup& group,
                             keel_support::BackendOps backend, float* persistent, keel_support::TierHome* tier)
    : host_(host), stage_(stage), overlap_(overlap), layout_(layout), tied_(tied), group_(group), backend_(backend),
      persistent_(persistent), tier_(tier), transient_(layout.layers.size()), open_(layout.layers.size(), false) {
  host_backend_ = backend.device().device_type == KEEL_DEVICE_CPU;
}

void GradReduction::add_to_chunk(int32_t layer, const float* reduced) {
  const int64_t chunk = layout_.layers[size_t(layer)].chunk;
  if (!tier_) return backend_.accumulate(owned_chunk(layer), reduced, chunk);
  keel_support::TierHome::Span span = tier_->read_span(layout_.layers[size_t(layer)].shard_offset, chunk);
  if (host_backend_) {
    backend_.accumulate(span.at, reduced, chunk);
  } else {  // through backend memory: the backend's own addition, as when resident
    keel_support::BackendBuffer staging = backend_.alloc_floats(chunk);
    backend_.copy(staging.floats(), span.at, chunk, KEEL_COPY_HOST_TO_DEVICE);
    backend_.accumulate(staging.floats(), reduced, chunk);
    backend_.copy(span.at, staging.floats(), chunk, KEEL_COPY_DEVICE_TO_HOST);
  }
  tier_->write_span_behind(std::move(span));  // lands while the backward goes on below
}

void GradReduction::chunk_sum_squares(int32_t layer, const std::vector<keel_support::ElementRange>& runs,
                                      keel_support::SumSquaresBatch& sum, keel_support::BackendBuffer& staging) const {
  const int64_t chunk = layout_.layers[size_t(layer)].chunk;
  const int64_t chunk_begin = layout_.owned_chunk(layer).begin;
  if (chunk == 0 || runs.empty()) return;
  if (!tier_) {
    for (const keel_support::ElementRange& run : runs) sum.add(owned_chunk(layer) + run.begin - chunk_begin, run.count());
    return;
  }
  keel_support::TierHome::Span span = tier_->read_span(layout_.layers[size_t(layer)].shard_offset, chunk);
  const float* data = span.at;
  if (!host_backend_) {
    // One staging buffer for every chunk: the synchronous copy into it waits for the sums
    // queued on the previous chunk (backend.h ordering).
    if (staging.bytes() < size_t(chunk) * sizeof(float)) staging = backend_.alloc_floats(max_chunk_elements());
    backend_.copy(staging.floats(), span.at, chunk, KEEL_COPY_HOST_TO_DEVICE);
    data = staging.floats();
  }
  for (const keel_support::ElementRange& run : runs) sum.add(data + run.begin - chunk_begin, run.count());
}

int64_t GradReduction::max_chunk_elements() const {
  int64_t most = 0;
  for (const keel_support::LayerPlace& place : layout_.layers) most = std::max(most, place.chunk);
  return most;
}

// At the first reduction, not in the constructor: creating a strategy does not communicate
// (tests create every rank's on one thread), while every rank reaches its first final release.
void GradReduction::start_worker() {
  worker_comm_ = group_.split_communicator();
  worker_replicas_ = group_.split_replicas_communicator();
  worker_ = std::make_unique<keel_support::CommWorker>(host_, group_.comm_api(), worker_comm_);
}

GradReduction::~GradReduction() {
  worker_.reset();  // joined: nothing reads the buffers or the communicator any more
  in_flight_.clear();
  if (worker_comm_) group_.comm_api()->destroy(worker_comm_);
  if (worker_replicas_) group_.replicas_api()->destroy(worker_replicas_);
}

float* GradReduction::open_layer(int32_t layer) {
  if (reduced_)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT,
                      "acquire: layer " + std::to_string(layer) + " is acquired for backward after this "
                      "accumulation's gradients were reduced (grad_sq_norm or step); call zero_grads first");
  open_[size_t(layer)] = true;
  if (stage_ == 1) return resident_layer(layer);
  keel_support::BackendBuffer& buffer = transient_[size_t(layer)];
  if (!buffer.get()) buffer = backend_.alloc_floats(layout_.padded(layer));  // zero-filled
  return buffer.floats();
}

void GradReduction::close_layer(int32_t layer) {
  open_[size_t(layer)] = false;
  if (stage_ == 1) return;
  if (tied_.holds_tied(layer)) return;  // keeps accumulating; reduced after the sum over the stages
  keel_support::BackendBuffer buffer = std::move(transient_[size_t(layer)]);
  const int64_t chunk = layout_.layers[size_t(layer)].chunk;
  if (chunk == 0) return;
  if (group_.size() == 1 || !overlap_) {  // (one rank per group: the replicas' sum on this thread)
    reduce_now(layer, buffer.floats());
    return;
  }
  if (!worker_) start_worker();
  backend_.synchronize();  // the backward's writes must land before another thread sends them
  InFlight job{layer, std::move(buffer), backend_.alloc_floats(chunk), 0};
  const float* send = job.full.floats();
  float* recv = job.reduced.floats();
  job.ticket = worker_->submit(
      [send, recv, chunk, replicas = group_.replicas_api(), across = worker_replicas_](const keel_comm_api* comm,
                                                                                       void* comm_obj) {
        const keel_dtype fp32{KEEL_DTYPE_FLOAT, 32, 1};
        const keel_status status = comm->reduce_scatter(comm_obj, send, recv, size_t(chunk), fp32, KEEL_REDUCE_SUM,
                                                        nullptr);
        if (status != KEEL_OK || !across) return status;
        return replicas->all_reduce(across, recv, recv, size_t(chunk), fp32, KEEL_REDUCE_SUM, nullptr);
      },
      "data-parallel reduce_scatter of layer " + std::to_string(layer) + "'s gradients");
  in_flight_.push_back(std::move(job));
  add_finished(false);  // frees what the worker is done with, so at most a few layers are held
}

// Scales each finished chunk by 1/dp_size and adds it, oldest first: the same order, and so
// the same bits, as reducing each layer on the spot.
void GradReduction::add_finished(bool wait) {
  if (!worker_) return;
  if (wait) worker_->wait_all();  // throws the worker's failure: the chunks are incomplete
  const uint64_t finished = worker_->finished();
  while (!in_flight_.empty() && in_flight_.front().ticket <= finished) {
    InFlight& job = in_flight_.front();
    const int64_t chunk = layout_.layers[size_t(job.layer)].chunk;
    backend_.scale(job.reduced.floats(), 1.0f / float(group_.total_size()), chunk);
    add_to_chunk(job.layer, job.reduced.floats());
    in_flight_.pop_front();
  }
}

void GradReduction::settle() {
  add_finished(true);
  if (tier_) tier_->settle_writes();  // a failed write behind shows here at the latest
}

void GradReduction::reduce_now(int32_t layer, const float* full) {
  const int64_t chunk = layout_.layers[size_t(layer)].chunk;
  if (chunk == 0) return;
  if (group_.total_size() == 1) {  // its own sum is the mean
    add_to_chunk(layer, full + layout_.owned_chunk(layer).begin);
    return;
  }
  group_.reduce_scatter_sum(full, group_.scratch(), chunk);
  group_.sum_across_replicas(group_.scratch(), chunk);
  backend_.scale(group_.scratch(), 1.0f / float(group_.total_size()), chunk);
  add_to_chunk(layer, group_.scratch());
}

// Stage 1 sums in its persistent full buffer; stages 2/3 in the full buffers their tied layers
// kept (a tied layer no backward touched this step contributes zeros: the other stage's
// all_reduce still needs its partner).
void GradReduction::sum_tied_over_stages() {
  if (!tied_.active()) return;
  if (stage_ == 1) {
    tied_.sum_over_stages([&](size_t index) { return persistent_ + layout_.full_position(index, 0); });
    return;
  }
  for (size_t l = 0; l < layout_.layers.size(); ++l)
    if (tied_.holds_tied(int32_t(l)) && !transient_[l].get()) transient_[l] = backend_.alloc_floats(layout_.padded(int32_t(l)));
  tied_.sum_over_stages([&](size_t index) {
    const keel_support::ParamPlace& place = layout_.params[index];
    return transient_[size_t(place.layer)].floats() + place.offset_in_layer;
  });
}

void GradReduction::reduce_layers_waiting_for_tied_sum() {
  if (stage_ == 1) return;
  for (size_t l = 0; l < layout_.layers.size(); ++l) {
    if (!tied_.holds_tied(int32_t(l))) continue;
    keel_support::BackendBuffer buffer = std::move(transient_[l]);
    reduce_now(int32_t(l), buffer.floats());
  }
}

bool GradReduction::has_open_layer(int32_t* out_layer) const {
  for (size_t l = 0; l < open_.size(); ++l)
    if (open_[l]) {
      *out_layer = int32_t(l);
      return true;
    }
  return false;
}

float* GradReduction::resident_layer(int32_t layer) const {
  if (stage_ != 1) return nullptr;
  return persistent_ + layout_.layers[size_t(layer)].full_offset;
}

void GradReduction::finish_reduction() {
  int32_t open_layer = -1;
  if (has_open_layer(&open_layer))
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "layer " + std::to_string(open_layer) +
                                                     " was acquired for backward but never released with "
                                                     "grads_final = 1; its gradients are incomplete");
  if (reduced_) return;
  settle();
  sum_tied_over_stages();
  reduce_layers_waiting_for_tied_sum();
  reduced_ = true;
  if (stage_ == 1 && local_counted_) {
    keel_support::SumSquaresBatch sum(backend_);
    for (size_t index = 0; index < layout_.params.size(); ++index)
      if ((*local_counted_)[index]) sum.add(persistent_ + layout_.full_position(index, 0), layout_.params[index].numel);
    local_before_ = sum.total();
  }
  if (stage_ != 1 || group_.total_size() == 1) return;  // stages 2/3 reduced at each final release
  for (size_t l = 0; l < layout_.layers.size(); ++l) {
    const int32_t layer = int32_t(l);
    const int64_t chunk = layout_.layers[l].chunk;
    if (chunk == 0) continue;
    group_.reduce_scatter_sum(resident_layer(layer), group_.scratch(), chunk);
    group_.sum_across_replicas(group_.scratch(), chunk);
    backend_.scale(group_.scratch(), 1.0f / float(group_.total_size()), chunk);
    backend_.copy(owned_chunk(layer), group_.scratch(), chunk);
  }
}

float* GradReduction::owned_chunk(int32_t layer) const {
  const keel_support::LayerPlace& shards = layout_.layers[size_t(layer)];
  if (stage_ == 1) return persistent_ + shards.full_offset + layout_.owned_chunk(layer).begin;
  return persistent_ + shards.shard_offset;
}

double GradReduction::local_sum_squares(const std::vector<char>& counted) const {
  const bool every_param = std::all_of(counted.begin(), counted.end(), [](char c) { return c != 0; });
  keel_support::SumSquaresBatch sum(backend_);
  keel_support::BackendBuffer staging;  // offloaded chunks on a device backend
  if (every_param) {  // one call per chunk, as at tp 1
    for (size_t l = 0; l < layout_.layers.size(); ++l)
      chunk_sum_squares(int32_t(l), {layout_.owned_chunk(int32_t(l))}, sum, staging);
    return sum.total();
  }
  // One call per maximal run of counted parameters' owned parts within each chunk.
  for (size_t l = 0; l < layout_.layers.size(); ++l) {
    std::vector<keel_support::ElementRange> runs;
    keel_support::ElementRange run;
    auto flush = [&] {
      if (!run.empty()) runs.push_back(run);
      run = keel_support::ElementRange{};
    };
    for (size_t index : layout_.layers[l].param_indices) {
      const keel_support::ElementRange part = layout_.owned_part(index);
      if (part.empty()) continue;
      const int64_t offset = layout_.params[index].offset_in_layer;
      const keel_support::ElementRange in_layer{offset + part.begin, offset + part.end};
      if (!counted[index]) {
        flush();
        continue;
      }
      if (!run.empty() && run.end == in_layer.begin)
        run.end = in_layer.end;
      else {
        flush();
        run = in_layer;
      }
    }
    flush();
    chunk_sum_squares(int32_t(l), runs, sum, staging);
  }
  return sum.total();
}

void GradReduction::zero() {
  if (worker_) worker_->wait_idle();  // nothing may still write into the chunks
  in_flight_.clear();
  if (stage_ != 1)  // a tied layer's buffer kept from an accumulation that never finished
    for (size_t l = 0; l < layout_.layers.size(); ++l)
      if (tied_.holds_tied(int32_t(l))) transient_[l] = keel_support::BackendBuffer();
  if (tier_) tier_->fill_zero();
  else backend_.fill_zero(persistent_, stage_ == 1 ? layout_.full_elements : layout_.shard_elements);
  reduced_ = false;
}

}  // namespace keel_zero
