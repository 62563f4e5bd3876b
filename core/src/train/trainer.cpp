// The training step of docs/architecture.md §3 for one rank: for each micro-batch of the accumulation,
// forward and backward through the strategy's access table; then the global gradient norm,
// the clip factor, the scheduled learning rate and the strategy's step.
#include "train/trainer.h"

#include <keel_support/piece_box.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <cmath>

#include <keel_support/json_section.hpp>

#include "host/errors.h"
#include "host/log.h"
#include "host/param_init.h"
#include "interop/huggingface.h"
#include "train/batch_geometry.h"
#include "train/lr_schedule.h"

namespace keel {

std::string shard_token_out_of_range(const TokenSource& source, int32_t vocabulary);  // data/token_shards.cpp

Trainer::Trainer(RunConfig config, TrainerData data) : config_(std::move(config)) {
  plugins_.create(config_);
  const BatchGeometry batches =
      check_batch_geometry(config_, plugins_.dp_size, plugins_.tp_size, plugins_.model_info.max_seq_len);
  seq_len_ = batches.seq_len;
  accumulation_steps_ = batches.micro_steps;
  if (!config_.model_init_from.empty()) import_huggingface(*this, config_.model_init_from);  // model.init_from
  pipeline_ = std::make_unique<PipelineRunner>(plugins_, config_);
  pipeline_->check_microbatches(accumulation_steps());  // a schedule that cannot run this step fails now
  if (!plugins_.data && data == TrainerData::open) open_builtin_data();
  check_plugin(plugins_.model->flops_per_token(plugins_.model_obj, seq_len_, &flops_per_token_), "model flops_per_token");
  check_plugin(plugins_.backend->peak_flops(plugins_.backend_obj, &peak_flops_), "backend peak_flops");
}

void Trainer::open_builtin_data() {
  const keel_model_info& info = plugins_.model_info;
  data_ = open_data(config_.data);
  for (const auto& source : {data_.train, data_.val}) {
    if (source->max_token() >= info.vocab_size) {
      std::string where = shard_token_out_of_range(*source, info.vocab_size);
      throw KeelError(KEEL_ERR_INVALID_CONFIG, (where.empty() ? source->describe() : where) +
                                                   ": token id is not below the model's vocabulary (model.vocab_size " +
                                                   std::to_string(info.vocab_size) + ")");
    }
  }
  SamplerOptions options{seq_len_, config_.train.seed, true};
  options.dp_rank = plugins_.dp_rank;  // ranks read disjoint samples
  options.dp_size = plugins_.dp_size;
  train_sampler_ = std::make_unique<BatchSampler>(data_.train, options);
}

void Trainer::require_data() const {
  if (!train_sampler_)
    throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "this trainer was built without data (TrainerData::none, as keel export does)");
}

Batch Trainer::plugin_batch(int32_t split) {
  Batch batch;
  batch.batch = config_.data.micro_batch;
  batch.seq_len = seq_len_;
  batch.tokens.resize(size_t(batch.batch) * seq_len_);
  batch.targets.resize(batch.tokens.size());
  check_plugin(plugins_.data->next_batch(plugins_.data_obj, split, batch.batch, seq_len_, batch.tokens.data(),
                                         batch.targets.data()),
               "data source '" + config_.data_plugin.plugin + "' next_batch");
  return batch;
}

nlohmann::json Trainer::data_state() const {
  // A plugin source's position is its own; such a run resumes with the source restarted.
  if (plugins_.data) return {{"plugin", config_.data_plugin.plugin}, {"resumable", false}};
  require_data();
  return train_sampler_->state();
}

Trainer::~Trainer() = default;

StepResult Trainer::train_step() {
  const auto start = std::chrono::steady_clock::now();
  std::vector<Batch> micro_batches;
  if (!plugins_.data) require_data();
  for (int32_t m = 0; m < accumulation_steps(); ++m)
    micro_batches.push_back(plugins_.data ? plugin_batch(KEEL_SPLIT_TRAIN) : train_sampler_->next(config_.data.micro_batch));
  const double data_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  StepResult result = train_step_on(micro_batches);
  result.data_seconds += data_seconds;
  result.step_seconds += data_seconds;
  return result;
}

StepResult Trainer::train_step_on(const std::vector<Batch>& micro_batches) {
  using clock = std::chrono::steady_clock;
  auto seconds_since = [](clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); };
  const auto start = clock::now();
  auto* strategy = plugins_.strategy;
  void* s = plugins_.strategy_obj;
  StepResult result;
  check_plugin(strategy->zero_grads(s), "strategy zero_grads");
  PipelineTimes times;
  // The loss lives on the stage holding the last chunk; the pipeline's sum hands it to every stage.
  result.loss = sum_over_pp(pipeline_->train(micro_batches, times));
  result.forward_seconds = times.forward_seconds;
  result.backward_seconds = times.backward_seconds;
  result.pipeline_wait_seconds = times.receive_seconds;
  result.peak_in_flight = times.peak_in_flight;
  for (const Batch& batch : micro_batches) result.tokens += int64_t(batch.batch) * batch.seq_len;
  // Every rank reports the same loss: the mean over the data-parallel group's samples.
  if (plugins_.dp_size > 1) {
    result.loss = sum_over_ranks(result.loss) / plugins_.dp_size;
    result.tokens *= plugins_.dp_size;
  }
  const auto optimizer_start = clock::now();
  double sum_squares = 0;
  check_plugin(strategy->grad_sq_norm(s, &sum_squares), "strategy grad_sq_norm");
  // The strategy counted tp-replicated parameters on tp rank 0 only (strategy.h): summing over
  // the tp group counts each distinct gradient once.
  sum_squares = sum_over_pp(sum_over_tp(sum_squares));  // each stage counted its own parameters
  result.grad_norm = std::sqrt(sum_squares);
  result.lr = plugins_.optimizer_info.base_lr * lr_multiplier(config_.lr_schedule, step_, config_.train.steps);
  if (!std::isfinite(result.loss) || !std::isfinite(result.grad_norm)) {
    // The parameters are untouched: a skipped step leaves the model as it was, and a stopped run
    // keeps its last checkpoint, which was written from finite state.
    const std::string what = "step " + std::to_string(step_ + 1) + ": the " +
                             (std::isfinite(result.loss) ? "gradient norm" : "loss") + " is not finite (loss " +
                             std::to_string(result.loss) + ", grad_norm " + std::to_string(result.grad_norm) + ")";
    if (config_.train.on_nonfinite == "stop")
      throw KeelError(KEEL_ERR_NONFINITE, what + "; stopping (train.on_nonfinite = \"stop\"). Lower optimizer.lr, "
                                               "set train.grad_clip, or resume from the last checkpoint");
    log_warn(what + "; the update is skipped (train.on_nonfinite = \"skip\")");
    result.skipped = true;
  } else {
    const double clip = config_.train.grad_clip;
    const double grad_scale = clip > 0 && result.grad_norm > clip ? clip / (result.grad_norm + 1e-6) : 1.0;
    keel_strategy_step_args step_args{sizeof(step_args), float(result.lr), float(grad_scale), step_ + 1};
    check_plugin(strategy->step(s, &step_args), "strategy step");
  }
  check_plugin(plugins_.backend->synchronize(plugins_.backend_obj), "backend synchronize");
  result.optimizer_seconds = seconds_since(optimizer_start);
  result.step = ++step_;
  tokens_seen_ += result.tokens;
  result.step_seconds = seconds_since(start);
  return result;
}

double Trainer::evaluate() {
  std::unique_ptr<BatchSampler> val_sampler;
  if (!plugins_.data) require_data();
  if (!plugins_.data) val_sampler = std::make_unique<BatchSampler>(data_.val, SamplerOptions{seq_len_, config_.train.seed, false});
  else if (plugins_.data->reset_split)
    check_plugin(plugins_.data->reset_split(plugins_.data_obj, KEEL_SPLIT_VALIDATION), "data source reset_split");
  double total = 0;
  const int32_t batches = config_.data.val_batches;
  for (int32_t i = 0; i < batches; ++i) {
    Batch batch = val_sampler ? val_sampler->next(config_.data.micro_batch) : plugin_batch(KEEL_SPLIT_VALIDATION);
    total += pipeline_->forward_only(batch, true, nullptr);
  }
  return sum_over_pp(total) / batches;
}

double Trainer::forward_backward(const Batch& batch) {
  check_plugin(plugins_.strategy->zero_grads(plugins_.strategy_obj), "strategy zero_grads");
  PipelineTimes times;
  return sum_over_pp(pipeline_->train({batch}, times));
}

std::vector<float> Trainer::logits(const std::vector<int32_t>& tokens, int32_t batch, int32_t seq_len) {
  Batch input;
  input.batch = batch;
  input.seq_len = seq_len;
  input.tokens = tokens;
  const float* device_logits = nullptr;
  pipeline_->forward_only(input, false, &device_logits);
  std::vector<float> out(size_t(batch) * seq_len * plugins_.model_info.padded_vocab_size);
  if (device_logits)
    check_plugin(plugins_.backend->copy(plugins_.backend_obj, out.data(), device_logits, out.size() * sizeof(float),
                                        KEEL_COPY_DEVICE_TO_HOST),
                 "copying logits");
  // Under pipeline parallelism only the last stage has them: it hands them to every stage, so
  // sampling and the bindings see the same rows on every rank.
  if (plugins_.pp_size > 1)
    check_plugin(plugins_.comm->broadcast(plugins_.pp_obj, out.data(), out.size(), keel_dtype{KEEL_DTYPE_FLOAT, 32, 1},
                                          plugins_.pp_size - 1, nullptr),
                 "comm broadcast (logits over the pipeline group)");
  return out;
}

std::vector<int32_t> Trainer::sample(const std::vector<int32_t>& prompt, int32_t count, uint64_t seed,
                                     double sampling_temperature) {
  // A fixed window of seq_len tokens, left-aligned and padded: causal attention makes the
  // logits at the last real position independent of the padding after it.
  std::vector<int32_t> context = prompt.empty() ? std::vector<int32_t>{0} : prompt;
  std::vector<int32_t> generated;
  const int32_t vocab = plugins_.model_info.vocab_size, padded = plugins_.model_info.padded_vocab_size;
  const double temperature = std::max(sampling_temperature, 1e-6);
  const uint64_t key = mix64(seed ^ 0x73616D706C65ull);
  for (int32_t i = 0; i < count; ++i) {
    const size_t keep = std::min<size_t>(context.size(), size_t(seq_len_));
    std::vector<int32_t> window(context.end() - keep, context.end());
    const size_t last = window.size() - 1;
    window.resize(seq_len_, 0);
    std::vector<float> all = logits(window, 1, seq_len_);
    const float* row = all.data() + last * padded;
    double max_logit = row[0];
    for (int32_t v = 1; v < vocab; ++v) max_logit = std::max<double>(max_logit, row[v]);
    std::vector<double> weights(vocab);
    double total = 0;
    for (int32_t v = 0; v < vocab; ++v) total += weights[v] = std::exp((row[v] - max_logit) / temperature);
    double pick = uniform_open01(key, uint64_t(i)) * total;
    int32_t token = vocab - 1;
    for (int32_t v = 0; v < vocab; ++v)
      if ((pick -= weights[v]) <= 0) { token = v; break; }
    context.push_back(token);
    generated.push_back(token);
  }
  return generated;
}

int64_t Trainer::numel(size_t index) const {
  const keel_param_spec& spec = plugins_.model_info.params[index];
  int64_t n = 1;
  for (int32_t d = 0; d < spec.ndim; ++d) n *= spec.local_shape[d];
  return n;
}

int64_t Trainer::global_numel(size_t index) const {
  const keel_param_spec& spec = plugins_.model_info.params[index];
  int64_t n = 1;
  for (int32_t d = 0; d < spec.ndim; ++d) n *= spec.global_shape[d];
  return n;
}

void Trainer::require_whole(size_t index, const char* what) const {
  if (numel(index) != global_numel(index))
    throw KeelError(KEEL_ERR_UNIMPLEMENTED,
                    std::string(what) + " of " + model_info().params[index].name + ": the parameter is split over the " +
                        std::to_string(plugins_.tp_size) + " tensor-parallel ranks; this rank holds a piece, and a "
                        "whole tensor would need every rank to take part. Save a checkpoint and `keel export` it "
                        "to read whole tensors");
}

std::vector<float> Trainer::read_param(size_t index) {
  require_whole(index, "reading the value");
  std::vector<float> out(numel(index));
  check_plugin(plugins_.strategy->read_param(plugins_.strategy_obj, index, 0, int64_t(out.size()), out.data()),
               "strategy read_param");
  return out;
}

void Trainer::write_param(size_t index, const std::vector<float>& values) {
  if (int64_t(values.size()) != global_numel(index))
    throw KeelError(KEEL_ERR_INVALID_ARGUMENT, std::string("parameter ") + model_info().params[index].name + " has " +
                                                   std::to_string(global_numel(index)) + " elements, not " +
                                                   std::to_string(values.size()));
  // Every rank is handed the whole tensor and keeps its own piece of it.
  const keel_param_spec& spec = model_info().params[index];
  std::vector<float> piece;
  const std::vector<float>* mine = &values;
  if (numel(index) != global_numel(index)) {
    piece.resize(size_t(numel(index)));
    keel_support::copy_overlap(keel_support::PieceBox::whole(spec.ndim, spec.global_shape), 0, global_numel(index),
                               values.data(), keel_support::PieceBox::of_spec(spec), 0, numel(index), piece.data());
    mine = &piece;
  }
  check_plugin(plugins_.strategy->write_param(plugins_.strategy_obj, index, 0, int64_t(mine->size()), mine->data()),
               "strategy write_param");
}

std::vector<float> Trainer::read_state(int32_t slot, size_t index) {
  if (!KEEL_HAS_SLOT(plugins_.strategy, read_state))
    throw KeelError(KEEL_ERR_UNIMPLEMENTED, "strategy '" + config_.strategy.plugin +
                                                "' does not implement read_state, so its optimizer state cannot be checkpointed");
  std::vector<float> out(numel(index));
  check_plugin(plugins_.strategy->read_state(plugins_.strategy_obj, slot, index, 0, int64_t(out.size()), out.data()),
               "strategy read_state");
  return out;
}

void Trainer::write_state(int32_t slot, size_t index, const std::vector<float>& values) {
  if (!KEEL_HAS_SLOT(plugins_.strategy, write_state))
    throw KeelError(KEEL_ERR_UNIMPLEMENTED, "strategy '" + config_.strategy.plugin +
                                                "' does not implement write_state, so optimizer state cannot be restored");
  check_plugin(plugins_.strategy->write_state(plugins_.strategy_obj, slot, index, 0, int64_t(values.size()), values.data()),
               "strategy write_state");
}

keel_external_tensor Trainer::external_tensor(const std::string& format, size_t index) {
  if (!KEEL_HAS_SLOT(plugins_.model, external_name))
    throw KeelError(KEEL_ERR_UNIMPLEMENTED, "model '" + config_.model.plugin + "' has no external formats");
  keel_external_tensor out{};
  out.struct_size = sizeof(out);
  check_plugin(plugins_.model->external_name(plugins_.model_obj, format.c_str(), index, &out),
               "model '" + config_.model.plugin + "' external_name(" + format + ")");
  return out;
}

std::string Trainer::external_config(const std::string& format) {
  if (!KEEL_HAS_SLOT(plugins_.model, external_config))
    throw KeelError(KEEL_ERR_UNIMPLEMENTED, "model '" + config_.model.plugin + "' has no external formats");
  const char* json = nullptr;
  check_plugin(plugins_.model->external_config(plugins_.model_obj, format.c_str(), &json),
               "model '" + config_.model.plugin + "' external_config(" + format + ")");
  return json ? json : "{}";
}

void Trainer::barrier() {
  if (plugins_.world_obj && plugins_.world_size > 1) check_plugin(plugins_.comm->barrier(plugins_.world_obj), "comm barrier");
}

// Sums one double per rank of `comm` (size ranks): all-gather, then add in rank order, so every
// rank gets the same bits whatever the reduction tree.
double Trainer::sum_over(void* comm, int32_t size, double value, const char* what) {
  if (!comm || size == 1) return value;
  std::vector<double> all(static_cast<size_t>(size));
  check_plugin(plugins_.comm->all_gather(comm, &value, all.data(), 1, keel_dtype{KEEL_DTYPE_FLOAT, 64, 1}, nullptr),
               std::string("comm all_gather (") + what + ")");
  double total = 0;
  for (double v : all) total += v;
  return total;
}

double Trainer::sum_over_ranks(double value) { return sum_over(plugins_.core_dp_obj, plugins_.dp_size, value, "data-parallel group"); }
double Trainer::sum_over_tp(double value) { return sum_over(plugins_.core_tp_obj, plugins_.tp_size, value, "tensor-parallel group"); }
double Trainer::sum_over_pp(double value) { return sum_over(plugins_.pp_obj, plugins_.pp_size, value, "pipeline group"); }
double Trainer::sum_over_world(double value) { return sum_over(plugins_.world_obj, plugins_.world_size, value, "world"); }

std::vector<std::string> Trainer::gather_strings(const std::string& mine) {
  if (!plugins_.world_obj || plugins_.world_size == 1) return {mine};
  // Strings travel as int32 words, padded to the longest, so a comm plugin needs no byte type.
  const keel_dtype i32{KEEL_DTYPE_INT, 32, 1};
  const size_t n = size_t(plugins_.world_size);
  int32_t length = int32_t(mine.size());
  std::vector<int32_t> lengths(n);
  check_plugin(plugins_.comm->all_gather(plugins_.world_obj, &length, lengths.data(), 1, i32, nullptr), "comm all_gather");
  const size_t words = (size_t(*std::max_element(lengths.begin(), lengths.end())) + 3) / 4;
  std::vector<int32_t> padded(words, 0), all(words * n, 0);
  std::memcpy(padded.data(), mine.data(), mine.size());
  if (words > 0)
    check_plugin(plugins_.comm->all_gather(plugins_.world_obj, padded.data(), all.data(), words, i32, nullptr),
                 "comm all_gather");
  std::vector<std::string> out;
  for (size_t r = 0; r < n; ++r)
    out.emplace_back(reinterpret_cast<const char*>(all.data() + r * words), size_t(lengths[r]));
  return out;
}

keel_strategy_info Trainer::strategy_info() {
  keel_strategy_info info{};
  info.struct_size = sizeof(info);
  if (KEEL_HAS_SLOT(plugins_.strategy, describe))
    check_plugin(plugins_.strategy->describe(plugins_.strategy_obj, &info), "strategy describe");
  return info;
}

std::vector<Trainer::OwnStateArray> Trainer::strategy_own_state() {
  auto* s = plugins_.strategy;
  if (!KEEL_HAS_SLOT(s, own_state_count) || !s->own_state_count) return {};
  const std::string who = "strategy '" + config_.strategy.plugin + "' ";
  if (!KEEL_HAS_SLOT(s, write_own_state) || !s->own_state_info || !s->read_own_state || !s->write_own_state)
    throw KeelError(KEEL_ERR_UNIMPLEMENTED, who + "implements own_state_count but not all of own_state_info, "
                                                  "read_own_state and write_own_state");
  int32_t count = 0;
  check_plugin(s->own_state_count(plugins_.strategy_obj, &count), who + "own_state_count");
  if (count < 0 || count > 1024)
    throw KeelError(KEEL_ERR_INVALID_ARGUMENT, who + "reports " + std::to_string(count) + " own state arrays (0..1024)");
  std::vector<OwnStateArray> arrays;
  for (int32_t i = 0; i < count; ++i) {
    const char* name = nullptr;
    int64_t elements = -1;
    check_plugin(s->own_state_info(plugins_.strategy_obj, i, &name, &elements), who + "own_state_info");
    const std::string text = name ? name : "";
    const bool plain = !text.empty() && text.size() <= 128 &&
                       std::all_of(text.begin(), text.end(), [](char c) { return std::isalnum((unsigned char)c) || c == '_' || c == '.' || c == '-'; });
    if (!plain || elements < 0 || elements > (int64_t(1) << 40))
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, who + "own state array " + std::to_string(i) + " is named \"" + text +
                                                     "\" with " + std::to_string(elements) + " elements; expected a "
                                                     "name of letters, digits, '_', '.', '-' and 0..2^40 elements");
    arrays.push_back({text, elements});
  }
  return arrays;
}

std::vector<float> Trainer::read_own_state(int32_t index, int64_t count) {
  std::vector<float> out(static_cast<size_t>(count));
  check_plugin(plugins_.strategy->read_own_state(plugins_.strategy_obj, index, out.data()), "strategy read_own_state");
  return out;
}

void Trainer::write_own_state(int32_t index, const std::vector<float>& values) {
  check_plugin(plugins_.strategy->write_own_state(plugins_.strategy_obj, index, values.data()),
               "strategy write_own_state");
}

keel_comm_counters Trainer::comm_counters(CommGroup group) {
  keel_comm_counters counters{};
  counters.struct_size = sizeof(counters);
  void* comm = group == CommGroup::strategy_dp ? plugins_.dp_obj
               : group == CommGroup::model_tp    ? plugins_.tp_obj
                                                 : plugins_.pp_obj;
  if (comm) check_plugin(plugins_.comm->counters(comm, &counters), "comm counters");
  return counters;
}

std::pair<int64_t, int64_t> Trainer::owned_range(int32_t kind, size_t index) {
  // A strategy without the 0.4 slot holds everything, as every single-rank strategy does.
  if (!KEEL_HAS_SLOT(plugins_.strategy, owned_range)) return {0, numel(index)};
  int64_t begin = 0, end = 0;
  check_plugin(plugins_.strategy->owned_range(plugins_.strategy_obj, kind, index, &begin, &end), "strategy owned_range");
  return {begin, end};
}

std::vector<float> Trainer::read_range(int32_t kind, size_t index, int64_t begin, int64_t end) {
  std::vector<float> out(static_cast<size_t>(end - begin));
  if (out.empty()) return out;
  auto* s = plugins_.strategy;
  check_plugin(kind < 0 ? s->read_param(plugins_.strategy_obj, index, begin, end - begin, out.data())
                        : s->read_state(plugins_.strategy_obj, kind, index, begin, end - begin, out.data()),
               kind < 0 ? "strategy read_param" : "strategy read_state");
  return out;
}

void Trainer::write_range(int32_t kind, size_t index, int64_t begin, const std::vector<float>& values) {
  if (values.empty()) return;
  auto* s = plugins_.strategy;
  const int64_t count = int64_t(values.size());
  check_plugin(kind < 0 ? s->write_param(plugins_.strategy_obj, index, begin, count, values.data())
                        : s->write_state(plugins_.strategy_obj, kind, index, begin, count, values.data()),
               kind < 0 ? "strategy write_param" : "strategy write_state");
}

size_t Trainer::param_index(const std::string& name) const {
  const keel_model_info& info = plugins_.model_info;
  std::vector<std::string> names;
  for (size_t i = 0; i < info.n_params; ++i) {
    if (name == info.params[i].name) return i;
    names.push_back(info.params[i].name);
  }
  const std::string hint = keel_support::closest_match(name, names);
  throw KeelError(KEEL_ERR_NOT_FOUND, "model '" + config_.model.plugin + "' has no parameter \"" + name + "\"" +
                                          (hint.empty() ? "" : " (did you mean \"" + hint + "\"?)"));
}

keel_tensor Trainer::param_tensor(size_t index) {
  const keel_model_info& info = plugins_.model_info;
  // The view outlives the acquire below, so it is only valid where acquire hands out resident
  // memory. A strategy older than describe (ABI < 0.4) only ever ran on one rank, resident.
  const bool resident = KEEL_HAS_SLOT(plugins_.strategy, describe) ? strategy_info().params_resident != 0
                                                                     : plugins_.dp_size == 1;
  if (!resident)
    throw KeelError(KEEL_ERR_UNIMPLEMENTED,
                    std::string("parameter ") + info.params[index].name + ": no zero-copy view under strategy '" +
                        config_.strategy.plugin + "', which does not keep parameters resident (it gathers each "
                        "layer on demand and frees it after use, so a view would point at freed memory); save a "
                        "checkpoint and `keel export` it to read whole parameters");
  const int32_t layer = info.params[index].layer;
  size_t first = index, count = 0;
  while (first > 0 && info.params[first - 1].layer == layer) --first;
  for (size_t i = first; i < info.n_params && info.params[i].layer == layer; ++i) ++count;
  std::vector<keel_tensor> tensors(count);
  check_plugin(plugins_.access.acquire(plugins_.access.ctx, layer, KEEL_PHASE_FORWARD, tensors.data(), nullptr, count),
               "strategy acquire");
  check_plugin(plugins_.access.release(plugins_.access.ctx, layer, KEEL_PHASE_FORWARD, 0), "strategy release");
  return tensors[index - first];
}

void Trainer::restore_position(int64_t step, int64_t tokens_seen, const nlohmann::json& data_state) {
  step_ = step;
  tokens_seen_ = tokens_seen;
  if (plugins_.data || data_state.contains("plugin")) {
    if (!(plugins_.data && data_state.value("plugin", "") == config_.data_plugin.plugin))
      throw KeelError(KEEL_ERR_INVALID_CONFIG, "the checkpoint's data position belongs to another data source (" +
                                                   data_state.dump() + ")");
    log_warn("data source '" + config_.data_plugin.plugin + "' cannot resume mid-stream: it restarts from its beginning");
    return;
  }
  require_data();
  train_sampler_->restore(data_state);
}

std::vector<float> Trainer::read_grad(size_t index) {
  require_whole(index, "reading the gradient");
  std::vector<float> out(numel(index));
  check_plugin(plugins_.strategy->read_grad(plugins_.strategy_obj, index, 0, int64_t(out.size()), out.data()),
               "strategy read_grad");
  return out;
}

}  // namespace keel
