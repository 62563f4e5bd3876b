// Runs a schedule's action list through the model, the strategy and the pipeline group.
#include "train/pipeline_runner.h"

#include <keel_support/common/dropout_mask.hpp>

#include <algorithm>
#include <chrono>
#include <string>

#include "host/errors.h"
#include "host/host_table.h"
#include "loader/plugin_registry.h"

#include <keel_support/model/compute_ops.hpp>
#include "train/schedule_lists.h"

namespace keel {
namespace {


double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

PipelineRunner::PipelineRunner(PluginInstances& plugins, const RunConfig& config)
    : plugins_(plugins), config_(config), pipeline_(plugins.mesh.stage_io), stage_(plugins.mesh.position().pp),
      stages_(plugins.mesh.layout().pp) {
  chunks_ = stages_ * plugins_.mesh.layout().virtual_stages;
  last_local_chunk_ = stage_ + (plugins_.mesh.layout().virtual_stages - 1) * stages_;
  model_abi_minor_ = PluginRegistry::instance().find(KEEL_KIND_MODEL, config.model.plugin).info.abi_minor;
  device_loss_ = model_abi_minor_ >= 8;
  // Activations travel at the compute type (model.h 0.8: fp32 for a model built before it).
  if (device_loss_) io_dtype_ = keel_support::compute_dtype_of({plugins_.backend, plugins_.backend_obj});
  if (device_loss_)
    check_plugin(plugins_.backend->alloc(plugins_.backend_obj, sizeof(float), reinterpret_cast<void**>(&step_loss_)),
                 "backend alloc (the step's loss)");
}

PipelineRunner::~PipelineRunner() {
  auto* backend = plugins_.backend;
  void* be = plugins_.backend_obj;
  // Sends are pending here only after an error ended a step: the run is ending, and waiting for
  // a peer that may never receive could hang. Their buffers are left to the process's exit.
  for (float* buffer : all_buffers_) {
    const bool in_flight = std::any_of(pending_sends_.begin(), pending_sends_.end(),
                                       [&](const PendingSend& pending) { return pending.buffer == buffer; });
    if (!in_flight) backend->free_memory(be, buffer);
  }
  for (auto& batch : device_batches_) {
    if (batch.tokens) backend->free_memory(be, batch.tokens);
    if (batch.targets) backend->free_memory(be, batch.targets);
    if (batch.positions) backend->free_memory(be, batch.positions);
  }
  if (step_loss_) backend->free_memory(be, step_loss_);
}

void PipelineRunner::clear_device_loss() {
  if (device_loss_) check_plugin(plugins_.backend->fill_zero(plugins_.backend_obj, step_loss_, sizeof(float)),
                                 "backend fill_zero (the step's loss)");
}

// The step's one read of its loss (a synchronisation point on a device backend).
double PipelineRunner::read_device_loss(double host_loss) const {
  if (!device_loss_ || !holds_last_chunk()) return host_loss;
  float loss = 0.0f;
  check_plugin(plugins_.backend->copy(plugins_.backend_obj, &loss, step_loss_, sizeof(float), KEEL_COPY_DEVICE_TO_HOST),
               "backend copy (the step's loss)");
  return double(loss);
}

void PipelineRunner::check_microbatches(int32_t microbatches) { actions_for(microbatches); }

const std::vector<keel_schedule_action>& PipelineRunner::actions_for(int32_t microbatches) {
  auto found = lists_.find(microbatches);
  if (found != lists_.end()) return found->second;
  // Every stage's list is built and checked together, so a schedule that would hang or train
  // wrong fails here, on every rank alike, before the first step.
  keel_support::ScheduleLists all =
      build_checked_schedule(config_, plugins_.schedule, plugins_.mesh.layout().dp, microbatches);
  return lists_.emplace(microbatches, std::move(all[size_t(stage_)])).first->second;
}

void PipelineRunner::set_shape(int32_t batch, int32_t seq_len) {
  if (batch == batch_ && seq_len == seq_len_) return;
  if (!outgoing_activations_.empty() || !incoming_activations_.empty() || !outgoing_gradients_.empty() ||
      !incoming_gradients_.empty() || !pending_sends_.empty())
    throw KeelError(KEEL_ERR_INTERNAL, "pipeline: the batch shape changed with transfers in flight");
  for (float* buffer : all_buffers_) plugins_.backend->free_memory(plugins_.backend_obj, buffer);
  all_buffers_.clear();
  free_buffers_.clear();
  batch_ = batch;
  seq_len_ = seq_len;
  io_numel_ = 0;
  if (chunks_ > 1)
    check_plugin(plugins_.model->stage_io_numel(plugins_.model_obj, batch, seq_len, &io_numel_), "model stage_io_numel");
}

float* PipelineRunner::io_buffer() {
  if (!free_buffers_.empty()) {
    float* buffer = free_buffers_.back();
    free_buffers_.pop_back();
    return buffer;
  }
  void* memory = nullptr;
  check_plugin(plugins_.backend->alloc(plugins_.backend_obj, size_t(io_numel_) * size_t(io_dtype_.bits / 8), &memory),
               "backend alloc (a pipeline activation of " + std::to_string(io_numel_) + " elements)");
  all_buffers_.push_back(static_cast<float*>(memory));
  return static_cast<float*>(memory);
}

void PipelineRunner::give_back(float* buffer) {
  if (buffer) free_buffers_.push_back(buffer);
}

float* PipelineRunner::take(std::map<Key, float*>& from, Key key, const char* what) {
  auto found = from.find(key);
  if (found == from.end())
    throw KeelError(KEEL_ERR_INTERNAL, "parallel.schedule.plugin '" + config_.schedule.plugin + "': stage " +
                                           std::to_string(stage_) + " needs the " + what + " of micro-batch " +
                                           std::to_string(key.first) + ", chunk " + std::to_string(key.second) +
                                           " before the action that provides it");
  float* buffer = found->second;
  from.erase(found);
  return buffer;
}

void PipelineRunner::upload(size_t slot, const Batch& batch) {
  if (device_batches_.size() <= slot) device_batches_.resize(slot + 1);
  DeviceBatch& device = device_batches_[slot];
  auto* backend = plugins_.backend;
  void* be = plugins_.backend_obj;
  const size_t count = batch.tokens.size();
  if (count > device.capacity) {
    if (device.tokens) backend->free_memory(be, device.tokens);
    if (device.targets) backend->free_memory(be, device.targets);
    if (device.positions) backend->free_memory(be, device.positions);
    device.tokens = device.targets = device.positions = nullptr;
    device.capacity = 0;
    check_plugin(backend->alloc(be, count * sizeof(int32_t), reinterpret_cast<void**>(&device.tokens)), "backend alloc");
    check_plugin(backend->alloc(be, count * sizeof(int32_t), reinterpret_cast<void**>(&device.targets)), "backend alloc");
    check_plugin(backend->alloc(be, count * sizeof(int32_t), reinterpret_cast<void**>(&device.positions)),
                 "backend alloc");
    device.capacity = count;
  }
  check_plugin(backend->copy(be, device.tokens, batch.tokens.data(), count * sizeof(int32_t), KEEL_COPY_HOST_TO_DEVICE),
               "copying tokens to the backend");
  if (!batch.targets.empty())
    check_plugin(backend->copy(be, device.targets, batch.targets.data(), count * sizeof(int32_t), KEEL_COPY_HOST_TO_DEVICE),
                 "copying targets to the backend");
  device.packed = !batch.positions.empty();
  if (device.packed) {
    // A model built before 0.19 would not see the positions and would attend across documents.
    if (model_abi_minor_ < 19)
      throw KeelError(KEEL_ERR_INVALID_CONFIG, "the data is packed (several documents per sample), but model '" +
                                                   config_.model.plugin + "' was built against ABI 0." +
                                                   std::to_string(model_abi_minor_) + ", before packed batches "
                                                   "(0.19): prepare the data unpacked");
    check_plugin(backend->copy(be, device.positions, batch.positions.data(), count * sizeof(int32_t),
                               KEEL_COPY_HOST_TO_DEVICE),
                 "copying positions to the backend");
  }
}

void PipelineRunner::send(float* buffer, int32_t peer_stage, int32_t microbatch, int32_t chunk, bool gradient) {
  keel_comm_request* request = nullptr;
  check_plugin(pipeline_.comm->send(pipeline_.obj, buffer, size_t(io_numel_), io_dtype_, peer_stage,
                                   pipeline_message_tag(microbatch, chunk, gradient), &request),
               std::string("pipeline send of the ") + (gradient ? "gradient" : "activation") + " of micro-batch " +
                   std::to_string(microbatch) + ", chunk " + std::to_string(chunk) + " to stage " +
                   std::to_string(peer_stage));
  pending_sends_.push_back({request, buffer});
}

float* PipelineRunner::receive(int32_t peer_stage, int32_t microbatch, int32_t chunk, bool gradient, PipelineTimes* times) {
  float* buffer = io_buffer();
  const auto start = std::chrono::steady_clock::now();
  check_plugin(pipeline_.comm->recv(pipeline_.obj, buffer, size_t(io_numel_), io_dtype_, peer_stage,
                                   pipeline_message_tag(microbatch, chunk, gradient), nullptr),
               std::string("pipeline receive of the ") + (gradient ? "gradient" : "activation") + " of micro-batch " +
                   std::to_string(microbatch) + ", chunk " + std::to_string(chunk) + " from stage " +
                   std::to_string(peer_stage));
  if (times) times->receive_seconds += seconds_since(start);
  return buffer;
}

void PipelineRunner::finish_sends() {
  for (auto& pending : pending_sends_) {
    keel_comm_request* request = pending.request;
    pending.request = nullptr;
    check_plugin(pipeline_.comm->wait(pipeline_.obj, request), "pipeline send completion");
    give_back(pending.buffer);
  }
  pending_sends_.clear();
}

void PipelineRunner::forward_chunk(const keel_schedule_action& action, int32_t n, bool with_targets, double* loss,
                                   const float** logits) {
  const Key key{action.microbatch, action.chunk};
  const DeviceBatch& device = device_batches_.at(size_t(action.microbatch));
  keel_forward_args args{};
  args.struct_size = sizeof(args);
  args.access = &plugins_.access;
  args.microbatch = action.microbatch;
  args.batch = batch_;
  args.seq_len = seq_len_;
  args.tokens = device.tokens;
  args.targets = with_targets ? device.targets : nullptr;
  args.positions = device.packed ? device.positions : nullptr;
  args.dropout_seed = with_targets ? dropout_seed_of(action.microbatch) : 0;
  args.chunk = action.chunk;
  float* input = action.chunk > 0 ? take(incoming_activations_, key, "input activation") : nullptr;
  args.input = input;
  float* output = action.chunk < chunks_ - 1 ? io_buffer() : nullptr;
  args.output = output;
  if (device_loss_ && with_targets) {
    args.loss_sum = step_loss_;
    args.loss_weight = weight_of(action.microbatch, n);
  }
  const keel_status status = plugins_.model->forward(plugins_.model_obj, &args);
  try {
    check_plugin(status, "model '" + config_.model.plugin + "' forward (micro-batch " + std::to_string(action.microbatch) +
                             ", chunk " + std::to_string(action.chunk) + ")");
  } catch (const KeelError& e) {
    // The first forward sizes the activations: when they do not fit and nobody chose the sequence
    // length (a Hub folder's max_position_embeddings can be 131072), say which key to set.
    if (e.code != KEEL_ERR_OUT_OF_MEMORY || config_.data.seq_len > 0) throw;
    throw KeelError(e.code, std::string(e.what()) + "; data.seq_len is unset, so each sequence is the model's maximum, " +
                                std::to_string(seq_len_) + " tokens (model.seq_len" +
                                (config_.model_init_from.empty() ? "" : ", from model.init_from's config.json") +
                                "): set data.seq_len to the length you train on");
  }
  give_back(input);
  if (output) outgoing_activations_[{action.microbatch, action.chunk + 1}] = output;
  if (action.chunk == chunks_ - 1) {
    if (with_targets && !device_loss_) *loss += double(args.loss) * (weights_.empty() ? 1.0 / n : weights_[size_t(action.microbatch)]);
    if (logits) *logits = args.logits;
  }
}

void PipelineRunner::backward_chunk(const keel_schedule_action& action, int32_t n) {
  const Key key{action.microbatch, action.chunk};
  keel_backward_args args{};
  args.struct_size = sizeof(args);
  args.access = &plugins_.access;
  args.microbatch = action.microbatch;
  args.loss_scale = weight_of(action.microbatch, n);
  args.chunk = action.chunk;
  args.part = action.kind == KEEL_ACTION_BACKWARD_INPUT    ? KEEL_BACKWARD_INPUT
              : action.kind == KEEL_ACTION_BACKWARD_WEIGHT ? KEEL_BACKWARD_WEIGHT
                                                           : KEEL_BACKWARD_FULL;
  // The weight half reads nothing from the neighbours: the input half consumed the output's
  // gradient and produced the input's.
  const bool moves_gradients = args.part != KEEL_BACKWARD_WEIGHT;
  float* output_grad =
      moves_gradients && action.chunk < chunks_ - 1 ? take(incoming_gradients_, key, "output gradient") : nullptr;
  float* input_grad = moves_gradients && action.chunk > 0 ? io_buffer() : nullptr;
  args.output_grad = output_grad;
  args.input_grad = input_grad;
  // strategy.h: begin_microbatch comes right before each backward that writes weight gradients,
  // with is_last on the chunk's last one, so a strategy reduces a layer once it is complete.
  if (args.part != KEEL_BACKWARD_INPUT)
    check_plugin(plugins_.strategy->begin_microbatch(plugins_.strategy_obj, action.microbatch,
                                                     (action.flags & KEEL_ACTION_LAST_FOR_CHUNK) ? 1 : 0),
                 "strategy begin_microbatch");
  check_plugin(plugins_.model->backward(plugins_.model_obj, &args),
               "model '" + config_.model.plugin + "' backward (micro-batch " + std::to_string(action.microbatch) +
                   ", chunk " + std::to_string(action.chunk) + ")");
  give_back(output_grad);
  if (input_grad) outgoing_gradients_[{action.microbatch, action.chunk - 1}] = input_grad;
}

uint64_t PipelineRunner::dropout_seed_of(int32_t microbatch) const {
  if (!dropout_seed_) return 0;
  return keel_support::splitmix64(dropout_seed_ ^ uint64_t(uint32_t(microbatch))) | 1;  // never 0: "no dropout"
}

double PipelineRunner::train(const std::vector<Batch>& micro_batches, PipelineTimes& times, std::vector<float> weights,
                             uint64_t dropout_seed) {
  const int32_t n = int32_t(micro_batches.size());
  if (n == 0) throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "a training step needs at least one micro-batch");
  if (!weights.empty() && weights.size() != micro_batches.size())
    throw KeelError(KEEL_ERR_INTERNAL, std::to_string(weights.size()) + " loss weights for " + std::to_string(n) +
                                           " micro-batches");
  weights_ = std::move(weights);
  set_shape(micro_batches[0].batch, micro_batches[0].seq_len);
  for (int32_t m = 0; m < n; ++m) {
    if (micro_batches[m].batch != batch_ || micro_batches[m].seq_len != seq_len_)
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "micro-batch " + std::to_string(m) + " is (" +
                                                     std::to_string(micro_batches[m].batch) + ", " +
                                                     std::to_string(micro_batches[m].seq_len) + "), the step's first is (" +
                                                     std::to_string(batch_) + ", " + std::to_string(seq_len_) + ")");
    upload(size_t(m), micro_batches[m]);
  }
  double loss = 0;
  clear_device_loss();
  dropout_seed_ = dropout_seed;
  struct ClearSeed {  // forward_only after this step draws no masks, whatever this step threw
    uint64_t& seed;
    ~ClearSeed() { seed = 0; }
  } clear_seed{dropout_seed_};
  int32_t in_flight = 0;
  for (const keel_schedule_action& action : actions_for(n)) {
    const auto start = std::chrono::steady_clock::now();
    switch (action.kind) {
      case KEEL_ACTION_FORWARD:
        forward_chunk(action, n, true, &loss, nullptr);
        times.forward_seconds += seconds_since(start);
        times.peak_in_flight = std::max(times.peak_in_flight, ++in_flight);
        break;
      case KEEL_ACTION_BACKWARD:
      case KEEL_ACTION_BACKWARD_INPUT:
      case KEEL_ACTION_BACKWARD_WEIGHT:
        backward_chunk(action, n);
        times.backward_seconds += seconds_since(start);
        // A split backward frees the micro-batch's activations with its weight half.
        if (action.kind != KEEL_ACTION_BACKWARD_INPUT) --in_flight;
        break;
      case KEEL_ACTION_SEND_ACTIVATION:
        send(take(outgoing_activations_, {action.microbatch, action.chunk}, "activation to send"), action.peer_stage,
             action.microbatch, action.chunk, false);
        break;
      case KEEL_ACTION_RECV_ACTIVATION:
        incoming_activations_[{action.microbatch, action.chunk}] =
            receive(action.peer_stage, action.microbatch, action.chunk, false, &times);
        break;
      case KEEL_ACTION_SEND_GRADIENT:
        send(take(outgoing_gradients_, {action.microbatch, action.chunk}, "gradient to send"), action.peer_stage,
             action.microbatch, action.chunk, true);
        break;
      case KEEL_ACTION_RECV_GRADIENT:
        incoming_gradients_[{action.microbatch, action.chunk}] =
            receive(action.peer_stage, action.microbatch, action.chunk, true, &times);
        break;
    }
  }
  finish_sends();
  if (!outgoing_activations_.empty() || !incoming_activations_.empty() || !outgoing_gradients_.empty() ||
      !incoming_gradients_.empty())
    throw KeelError(KEEL_ERR_INTERNAL, "parallel.schedule.plugin '" + config_.schedule.plugin + "': stage " +
                                           std::to_string(stage_) +
                                           " ended the step with activations or gradients never sent or consumed");
  return read_device_loss(loss);
}

double PipelineRunner::forward_only(const Batch& batch, bool with_targets, const float** logits) {
  weights_.clear();  // one batch's own mean
  set_shape(batch.batch, batch.seq_len);
  upload(0, batch);
  double loss = 0;
  clear_device_loss();
  if (logits) *logits = nullptr;
  // Chunk order is a valid schedule of one forward: each rank receives, runs and sends on.
  for (int32_t chunk = stage_; chunk < chunks_; chunk += stages_) {
    const int32_t previous = (chunk - 1 + stages_) % stages_;
    if (chunk > 0) incoming_activations_[{0, chunk}] = receive(previous, 0, chunk, false, nullptr);
    keel_schedule_action action{KEEL_ACTION_FORWARD, 0, chunk, -1, 0};
    forward_chunk(action, 1, with_targets, &loss, logits);
    if (chunk < chunks_ - 1)
      send(take(outgoing_activations_, {0, chunk + 1}, "activation to send"), (chunk + 1) % stages_, 0,
           chunk + 1, false);
  }
  finish_sends();
  return with_targets ? read_device_loss(loss) : 0.0;
}

}  // namespace keel
