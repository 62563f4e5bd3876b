// The training step of docs/architecture.md §3 for one rank: for each micro-batch of the accumulation,
// forward and backward through the strategy's access table; then the global gradient norm,
// the clip factor, the scheduled learning rate and the strategy's step.
#include "train/trainer.h"

#include <keel_support/common/dropout_mask.hpp>

#include <keel_support/common/piece_box.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <cmath>
#include <exception>

#include <keel_support/common/json_section.hpp>

#include "host/errors.h"
#include "host/log.h"
#include "mesh/collectives.h"
#include "train/batch_geometry.h"
#include "train/context_slice.h"
#include "train/lr_schedule.h"

namespace keel {



Trainer::Trainer(RunConfig config, TrainerData data, ParameterImport import_init_from) : config_(std::move(config)) {
  plugins_.create(config_);
  const BatchGeometry batches =
      check_batch_geometry(config_, mesh().layout().data_replicas(), mesh().layout().tp, plugins_.model_info.max_seq_len);
  seq_len_ = batches.seq_len;
  accumulation_steps_ = batches.micro_steps;
  if (config_.data.batch_schedule.enabled) {
    if (mesh().layout().dp < 2)
      throw KeelError(KEEL_ERR_INVALID_CONFIG, config_.file + ": data.batch_schedule: follows the gradient noise scale, "
                                               "which compares each data-parallel rank's gradient with the group's mean; "
                                               "it needs at least 2 data-parallel ranks (this run has 1)");
    batch_schedule_ = std::make_unique<BatchSchedule>(config_.data.batch_schedule, config_.data.global_batch);
    RunConfig largest = config_;
    largest.data.global_batch = batch_schedule_->largest();  // the batch it may reach must fit too
    check_batch_geometry(largest, mesh().layout().data_replicas(), mesh().layout().tp, plugins_.model_info.max_seq_len);
  }
  if (!config_.model_init_from.empty()) {  // model.init_from
    if (!import_init_from)
      throw KeelError(KEEL_ERR_INTERNAL, config_.file + ": model.init_from is set but this trainer was built without an "
                                                       "importer (pass import_huggingface to Trainer)");
    import_init_from(parameters_, config_.model_init_from);
  }
  pipeline_ = std::make_unique<PipelineRunner>(plugins_, config_);
  pipeline_->check_microbatches(accumulation_steps());  // a schedule that cannot run this step fails now
  if (!plugins_.data && data == TrainerData::open) open_builtin_data();
  check_independent_replicas();
  if (independent_replicas_ && mesh().layout().cp > 1)
    throw KeelError(KEEL_ERR_INVALID_CONFIG, config_.file + ": parallel.cp: replicas that step on their own (" +
                                                 config_.strategy.json_path + ".plugin '" + config_.strategy.plugin +
                                                 "') do not combine with context parallelism yet; run at parallel.cp 1");
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
  // Data replicas read disjoint samples; the ranks of a context-parallel block read the same ones.
  options.dp_rank = mesh().layout().data_replica(mesh().position());
  options.dp_size = mesh().layout().data_replicas();
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

std::vector<Batch> Trainer::plugin_batches(int32_t split, int32_t count) {
  std::vector<Batch> batches;
  std::exception_ptr failure;
  try {
    for (int32_t i = 0; i < count; ++i) batches.push_back(plugin_batch(split));
  } catch (...) {
    failure = std::current_exception();
  }
  // Replicas training on their own make no collective between syncs: a failure there ends the
  // run as any failing plugin does.
  if (independent_replicas_ && split == KEEL_SPLIT_TRAIN) {
    if (failure) std::rethrow_exception(failure);
    return batches;
  }
  rethrow_if_any_failed(mesh().world, failure, KEEL_ERR_IO,
                        "data source '" + config_.data_plugin.plugin + "' failed on another rank (its message says why)");
  return batches;
}

nlohmann::json Trainer::data_state() const {
  // A plugin source's position is its own: each rank's goes beside the manifest's run fields
  // (data_positions), or the source restarts on resume.
  if (plugins_.data) return {{"plugin", config_.data_plugin.plugin}, {"resumable", data_plugin_resumes()}};
  require_data();
  // Replicas that step on their own stand at different places: the run's position is past every
  // sample any of them took, so a resume in another layout repeats none (replica_position keeps
  // each one's own).
  return independent_replicas_ ? train_sampler_->state_at(furthest_samples_taken_) : train_sampler_->state();
}

Trainer::~Trainer() = default;

StepResult Trainer::train_step() { return independent_replicas_ ? train_interval() : train_one_step(); }

StepResult Trainer::train_one_step() {
  const auto start = std::chrono::steady_clock::now();
  std::vector<Batch> micro_batches;
  if (plugins_.data) {
    micro_batches = plugin_batches(KEEL_SPLIT_TRAIN, accumulation_steps());
  } else {
    require_data();
    for (int32_t m = 0; m < accumulation_steps(); ++m) micro_batches.push_back(train_sampler_->next(config_.data.micro_batch));
  }
  const double data_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  StepResult result = train_step_on(micro_batches);
  result.data_seconds += data_seconds;
  result.step_seconds += data_seconds;
  return result;
}

StepResult Trainer::train_step_on(const std::vector<Batch>& micro_batches) {
  forward_backward_on(micro_batches);
  return optimizer_step();
}

double Trainer::forward_backward_on(const std::vector<Batch>& micro_batches, bool callers_batches) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  pending_step_.reset();
  pending_sq_norm_.reset();
  if (callers_batches && batch_schedule_)
    throw KeelError(KEEL_ERR_INVALID_CONFIG, config_.file + ": data.batch_schedule grows the configured batch by the "
                                             "noise scale; a step on your own batches cannot follow it (remove "
                                             "data.batch_schedule)");
  pipeline_->check_microbatches(int32_t(micro_batches.size()));
  check_plugin(plugins_.strategy->zero_grads(plugins_.strategy_obj), "strategy zero_grads");
  StepResult result;
  PipelineTimes times;
  // The loss lives on the stage holding the last chunk; the pipeline's sum hands it to every stage.
  // Under context parallelism each rank runs its chunks of the micro-batches; the weights count
  // the targets it holds, against the whole group's.
  std::vector<Batch> mine;
  for (const Batch& batch : micro_batches) mine.push_back(my_chunks(batch));
  result.loss = sum_in_rank_order(mesh().pipeline, pipeline_->train(mine, times, learned_weights(mine), dropout_step_seed()));
  result.forward_seconds = times.forward_seconds;
  result.backward_seconds = times.backward_seconds;
  result.pipeline_wait_seconds = times.receive_seconds;
  result.peak_in_flight = times.peak_in_flight;
  for (const Batch& batch : mine) result.tokens += int64_t(batch.batch) * batch.seq_len;
  // Every rank reports the same loss: the mean over the data-parallel group's samples (replicas
  // stepping on their own agree theirs at the interval's end instead).
  if (const CommGroup& dp = mesh().core_dp; !dp.alone() && !independent_replicas_) {
    result.loss = sum_in_rank_order(dp, result.loss) / dp.size;
    result.tokens *= dp.size;
  }
  pending_tallies_ = model_step_tallies();
  result.model_metrics = read_model_metrics(plugins_.model, plugins_.model_obj);
  if (!independent_replicas_ && model_reports_metrics(plugins_.model))  // every rank has the same model plugin
    result.model_metrics = combine_model_metrics(mesh().core_dp, result.model_metrics);
  if (callers_batches) {  // every rank's reduction ends here (grad_sq_norm is collective)
    double sum_squares = 0;
    check_plugin(plugins_.strategy->grad_sq_norm(plugins_.strategy_obj, &sum_squares), "strategy grad_sq_norm");
    pending_sq_norm_ = sum_squares;
  }
  result.step_seconds = std::chrono::duration<double>(clock::now() - start).count();
  pending_step_ = result;
  return result.loss;
}

// Each micro-batch's share of the step's objective when some targets are not learned (-1: a
// prompt's token, padding): the objective is the mean over every learned target of the step on
// every data-parallel rank, as Hugging Face's labels of -100 give, so micro-batch m weighs
// dp · learned_m / learned_total (the strategy's mean over dp divides by dp again). With every
// target learned that is 1/n, and the step is left exactly as before: empty.
std::vector<float> Trainer::learned_weights(const std::vector<Batch>& micro_batches) const {
  std::vector<double> learned;
  double total = 0, all = 0;
  for (const Batch& b : micro_batches) {
    learned.push_back(double(std::count_if(b.targets.begin(), b.targets.end(), [](int32_t t) { return t >= 0; })));
    total += learned.back();
    all += double(b.targets.size());
  }
  const CommGroup& dp = mesh().core_dp;
  const bool across_dp = !dp.alone() && !independent_replicas_;
  const int32_t replicas = across_dp ? dp.size : 1;
  const double sums[2] = {total, all};
  const std::vector<double> global =
      across_dp ? sum_in_rank_order(dp, std::vector<double>(sums, sums + 2)) : std::vector<double>(sums, sums + 2);
  if (global[0] == global[1]) return {};
  if (global[0] == 0) log_warn("no target of this step is learned (every one is -1): the step changes nothing");
  std::vector<float> weights;
  for (double count : learned) weights.push_back(global[0] > 0 ? float(double(replicas) * count / global[0]) : 0.0f);
  return weights;
}

// The model's tallies of the step (model.h step_tallies), summed over the data-parallel group so
// that every replica moves its rule-driven state alike. Replicas that step on their own make no
// data-parallel collective in a step, so a model that tallies is refused there.
std::vector<double> Trainer::model_step_tallies() {
  std::vector<double> tallies = model_state_.step_tallies();
  if (tallies.empty()) return tallies;  // the same on every rank: the same model and config
  if (independent_replicas_)
    throw KeelError(KEEL_ERR_INVALID_CONFIG, config_.file + ": model '" + config_.model.plugin + "' sums its step "
                                             "tallies (loss-free balancing) over the data-parallel group every step, "
                                             "which replicas that step on their own (parallel.strategy " +
                                             config_.strategy.plugin + ") never do; turn one of them off");
  return sum_in_rank_order(mesh().core_dp, tallies);
}

StepResult Trainer::optimizer_step() {
  using clock = std::chrono::steady_clock;
  auto seconds_since = [](clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); };
  if (!pending_step_)
    throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "an optimizer step needs the gradients of a forward_backward first (each "
                                               "update consumes them)");
  StepResult result = *pending_step_;
  const std::optional<double> finished_sq_norm = pending_sq_norm_;
  pending_step_.reset();
  pending_sq_norm_.reset();
  auto* strategy = plugins_.strategy;
  void* s = plugins_.strategy_obj;
  const auto optimizer_start = clock::now();
  double sum_squares = finished_sq_norm.value_or(0.0);
  if (!finished_sq_norm) check_plugin(strategy->grad_sq_norm(s, &sum_squares), "strategy grad_sq_norm");
  // The strategy counted tp-replicated parameters on tp rank 0 only (strategy.h): summing over
  // the tp group counts each distinct gradient once.
  // Each stage counted its own parameters.
  sum_squares = sum_in_rank_order(mesh().pipeline, sum_in_rank_order(mesh().core_tp, sum_squares));
  result.grad_norm = std::sqrt(sum_squares);
  result.global_batch = batch_schedule_ ? batch_schedule_->global_batch() : config_.data.global_batch;
  result.noise_scale = independent_replicas_ || finished_sq_norm ? NAN : update_noise_scale(sum_squares);
  if (batch_schedule_ && noise_scale_checked_ && !noise_scale_)
    throw KeelError(KEEL_ERR_INVALID_CONFIG, config_.file + ": data.batch_schedule: follows the gradient noise scale, "
                                             "which strategy " + config_.strategy.plugin + " cannot give (the log above "
                                             "says why); use ddp or zero stage 1, or remove data.batch_schedule");
  result.lr = plugins_.optimizer_info.base_lr * lr_multiplier(config_.lr_schedule, step_ + steps_since_sync_, config_.train.steps) *
              (batch_schedule_ ? batch_schedule_->lr_factor() : 1.0);
  if (!std::isfinite(result.loss) || !std::isfinite(result.grad_norm)) {
    // The parameters are untouched: a skipped step leaves the model as it was, and a stopped run
    // keeps its last checkpoint, which was written from finite state.
    const std::string what = "step " + std::to_string(replica_step_ + 1) + ": the " +
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
    keel_strategy_step_args step_args{sizeof(step_args), float(result.lr), float(grad_scale), replica_step_ + 1};
    check_plugin(strategy->step(s, &step_args), "strategy step");
  }
  model_state_.end_step(pending_tallies_, !result.skipped);
  pending_tallies_.clear();
  check_plugin(plugins_.backend->synchronize(plugins_.backend_obj), "backend synchronize");
  result.optimizer_seconds = seconds_since(optimizer_start);
  result.step = ++replica_step_;
  if (independent_replicas_) {
    ++steps_since_sync_;
  } else {
    step_ = replica_step_;
    tokens_seen_ += result.tokens;
  }
  if (batch_schedule_) follow_batch_schedule(result.noise_scale);
  result.step_seconds += result.optimizer_seconds;
  return result;
}

// The strategy's local norm (strategy.h 0.11) against the reduced one: B_small is a rank's share
// of the global batch, B_big the whole of it. A strategy that cannot say is asked once.
double Trainer::update_noise_scale(double reduced_sum_squares) {
  const CommGroup& dp = mesh().core_dp;
  auto* strategy = plugins_.strategy;
  if (dp.alone() || (noise_scale_checked_ && !noise_scale_)) return NAN;
  if (!noise_scale_checked_) {
    noise_scale_checked_ = true;
    if (mesh().layout().cp > 1) {  // a rank's gradient comes from chunks of sequences others also hold
      log_info("no gradient noise scale under context parallelism: the ranks of a cp block see chunks of the same "
               "sequences, not independent samples");
      return NAN;
    }
    if (!KEEL_HAS_SLOT(strategy, local_grad_sq_norm)) {
      log_info("no gradient noise scale: strategy " + config_.strategy.plugin + " does not report its local gradient "
               "norm (strategy.h local_grad_sq_norm, ABI 0.11)");
      return NAN;
    }
  }
  double local = 0;
  const keel_status status = strategy->local_grad_sq_norm(plugins_.strategy_obj, &local);
  if (status == KEEL_ERR_UNIMPLEMENTED) {  // the same answer on every rank: the same strategy
    noise_scale_.reset();
    log_info(std::string("no gradient noise scale: ") + last_error());
    return NAN;
  }
  check_plugin(status, "strategy local_grad_sq_norm");
  if (!noise_scale_) noise_scale_ = std::make_unique<NoiseScale>();
  local = sum_in_rank_order(mesh().pipeline, sum_in_rank_order(mesh().core_tp, local));
  const double small_sq = sum_in_rank_order(dp, local) / dp.size;
  const double b_big = double(batch_schedule_ ? batch_schedule_->global_batch() : config_.data.global_batch);
  const double b_small = b_big / dp.size;
  return noise_scale_->add(small_sq, b_small, reduced_sum_squares, b_big);
}

void Trainer::set_global_batch(int32_t global_batch) {
  const int32_t micro_steps =
      int32_t(global_batch / (int64_t(config_.data.micro_batch) * mesh().layout().data_replicas()));
  pipeline_->check_microbatches(micro_steps);
  accumulation_steps_ = micro_steps;
}

void Trainer::follow_batch_schedule(double noise_scale) {
  if (!batch_schedule_->after_step(step_, noise_scale)) return;
  set_global_batch(batch_schedule_->global_batch());
  log_info("data.batch_schedule: the noise scale is " + std::to_string(int64_t(noise_scale)) +
           " sequences after step " + std::to_string(step_) + ": the global batch grows to " +
           std::to_string(batch_schedule_->global_batch()) + " (" + std::to_string(accumulation_steps_) +
           " micro-batches per rank), the learning rate × " + std::to_string(batch_schedule_->lr_factor()));
}

nlohmann::json Trainer::statistics_state() const {
  nlohmann::json state = nlohmann::json::object();
  if (noise_scale_) state["noise_scale"] = noise_scale_->state();
  if (batch_schedule_) state["batch_schedule"] = batch_schedule_->state();
  return state.empty() ? nlohmann::json() : state;
}

// A checkpoint's statistics are untrusted: each is checked where it is restored.
void Trainer::restore_statistics(const nlohmann::json& state, const std::string& where) {
  if (state.is_null()) return;
  if (!state.is_object()) throw KeelError(KEEL_ERR_IO, where + ": statistics: expected an object");
  if (state.contains("noise_scale")) {
    if (!noise_scale_) noise_scale_ = std::make_unique<NoiseScale>();
    noise_scale_->restore(state.at("noise_scale"), where + ": statistics");
  }
  if (batch_schedule_ && state.contains("batch_schedule")) {
    batch_schedule_->restore(state.at("batch_schedule"), where + ": statistics");
    set_global_batch(batch_schedule_->global_batch());
  }
}

double Trainer::evaluate() {
  std::unique_ptr<BatchSampler> val_sampler;
  if (!plugins_.data) require_data();
  if (!plugins_.data) val_sampler = std::make_unique<BatchSampler>(data_.val, SamplerOptions{seq_len_, config_.train.seed, false});
  else if (plugins_.data->reset_split)
    check_plugin(plugins_.data->reset_split(plugins_.data_obj, KEEL_SPLIT_VALIDATION), "data source reset_split");
  double total = 0;
  const int32_t batches = config_.data.val_batches;
  const std::vector<Batch> from_plugin = val_sampler ? std::vector<Batch>() : plugin_batches(KEEL_SPLIT_VALIDATION, batches);
  const CommGroup& cp = mesh().core_cp;
  for (int32_t i = 0; i < batches; ++i) {
    const Batch mine = my_chunks(val_sampler ? val_sampler->next(config_.data.micro_batch) : from_plugin[size_t(i)]);
    const double loss = pipeline_->forward_only(mine, true, nullptr);
    if (cp.alone()) {
      total += loss;
      continue;
    }
    // A cp block's mean over every learned target: each rank's mean weighted by the targets it holds.
    const double learned = double(std::count_if(mine.targets.begin(), mine.targets.end(), [](int32_t t) { return t >= 0; }));
    const std::vector<double> sums = sum_in_rank_order(cp, std::vector<double>{loss * learned, learned});
    total += sums[1] > 0 ? sums[0] / sums[1] : 0.0;
  }
  return sum_in_rank_order(mesh().pipeline, total) / batches;
}

uint64_t Trainer::dropout_step_seed() const {
  using keel_support::splitmix64;
  const uint64_t step = uint64_t(independent_replicas_ ? replica_step_ : step_);
  const uint64_t run = splitmix64(uint64_t(config_.train.seed) ^ 0x6B65656C64726F70ull);  // "keeldrop"
  return splitmix64(splitmix64(run ^ step) ^ uint64_t(mesh().layout().data_replica(mesh().position())));
}

double Trainer::forward_backward(const Batch& batch) {
  pending_step_.reset();  // these gradients (loss scale 1, no reduction over dp) are not for a step
  pending_sq_norm_.reset();
  check_plugin(plugins_.strategy->zero_grads(plugins_.strategy_obj), "strategy zero_grads");
  PipelineTimes times;
  return sum_in_rank_order(mesh().pipeline, pipeline_->train({my_chunks(batch)}, times, {}, dropout_step_seed()));
}

Batch Trainer::my_chunks(const Batch& batch) const {
  return context_slice(batch, mesh().layout().cp_rank(mesh().position()), mesh().layout().cp);
}

std::vector<float> Trainer::logits(const std::vector<int32_t>& tokens, int32_t batch, int32_t seq_len) {
  if (mesh().layout().cp > 1)
    throw KeelError(KEEL_ERR_UNIMPLEMENTED, config_.file + ": parallel.cp: logits of whole sequences (inference, "
                                                 "sampling, generation) are not gathered over the context-parallel "
                                                 "ranks yet; run them at parallel.cp 1");
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
  broadcast_floats(mesh().pipeline, out, mesh().pipeline.size - 1);
  return out;
}

RunStateView Trainer::state_view() {
  return {config_, plugins_.model_info, plugins_.optimizer_info.n_state_slots, mesh(), strategy_state_, model_state_};
}

RunPosition Trainer::position() const {
  RunPosition position;
  // First, before any other collective: the data source's own position, agreed across ranks.
  std::exception_ptr failure;
  try {
    position.data_position = data_position();
  } catch (...) {
    failure = std::current_exception();
  }
  rethrow_if_any_failed(mesh().world, failure, KEEL_ERR_IO,
                        "checkpoint not saved: another rank's data source could not save its position (its message "
                        "says why)");
  position.step = step_;
  position.tokens_seen = tokens_seen_;
  position.data_state = data_state();
  position.statistics = statistics_state();
  position.replica_position = replica_position();
  return position;
}

void Trainer::resume_at(const SavedPosition& position) {
  try {
    restore_position(position.step, position.tokens_seen, position.data_state);
  } catch (const KeelError& e) {
    throw KeelError(e.code, position.where + ": data_state: " + e.what());
  }
  restore_replica_positions(position.replica_positions, position.same_ranks, position.where);
  restore_data_positions(position.data_positions, position.same_layout, position.where);
  restore_statistics(position.statistics, position.where);
}

void Trainer::restore_position(int64_t step, int64_t tokens_seen, const nlohmann::json& data_state) {
  pending_step_.reset();  // gradients of the weights before the load apply to nothing after it
  pending_sq_norm_.reset();
  step_ = replica_step_ = step;
  tokens_seen_ = tokens_seen;
  if (plugins_.data || data_state.contains("plugin")) {
    if (!(plugins_.data && data_state.value("plugin", "") == config_.data_plugin.plugin))
      throw KeelError(KEEL_ERR_INVALID_CONFIG, "the checkpoint's data position belongs to another data source (" +
                                                   data_state.dump() + ")");
    return;  // restore_data_positions hands the source its place, or says it restarts
  }
  require_data();
  train_sampler_->restore(data_state);
  furthest_samples_taken_ = train_sampler_->samples_taken();
}

}  // namespace keel
