// One training run: the plugins, the data, the step counter. The CLI, the embedding API and
// the test probe all drive training through this class.
#pragma once

#include <keel/embed.h>

#include <cmath>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "data/token_source.h"
#include "train/pipeline_runner.h"
#include "train/model_metrics.h"
#include "train/model_state.h"
#include "train/model_parameters.h"
#include "train/batch_schedule.h"
#include "train/noise_scale.h"
#include "train/plugin_instances.h"
#include "train/run_position.h"
#include "train/run_state_view.h"
#include "train/strategy_state.h"

namespace keel {

struct StepResult {
  int64_t step = 0;          // optimizer steps done after this one
  double loss = 0;           // mean over the accumulation's micro-batches
  double lr = 0;
  double grad_norm = 0;      // before clipping
  double step_seconds = 0;
  int64_t tokens = 0;        // tokens trained in this step
  // Wall time of each phase of this step, in seconds.
  double data_seconds = 0, forward_seconds = 0, backward_seconds = 0, optimizer_seconds = 0;
  double pipeline_wait_seconds = 0;  // waiting for a pipeline neighbour's activation or gradient
  int32_t peak_in_flight = 0;        // micro-batch activation sets held at once on this rank
  bool skipped = false;      // non-finite loss or gradient norm with train.on_nonfinite = "skip"
  double noise_scale = NAN;  // the smoothed gradient noise scale in sequences (noise_scale.h); NaN: none
  int32_t global_batch = 0;  // sequences this step took over every data-parallel rank
  // With independent replicas (A-EDiT) a "step" is one sync interval: each replica's steps in it,
  // in dp rank order (empty otherwise).
  std::vector<int64_t> replica_steps;
  // The model's own metrics of the step (model.h step_metrics), combined over the data-parallel
  // group (with independent replicas: this replica's own); empty when the model reports none.
  std::vector<ModelMetric> model_metrics;
};

// Whether a trainer opens the configured data: keel export reads a checkpoint only, and must
// work after the run's data is gone.
enum class TrainerData { open, none };

// How model.init_from's weights reach the parameters: the caller hands in the importer
// (interop/huggingface.h's import_huggingface), so train/ names no file format above it.
// It runs inside the constructor, after the parameters exist and before the data opens,
// so a bad init_from is refused before any data error.
using ParameterImport = void (*)(ModelParameters& params, const std::string& init_from);

class Trainer final {
 public:
  explicit Trainer(RunConfig config, TrainerData data = TrainerData::open, ParameterImport import_init_from = nullptr);
  ~Trainer();

  // One optimizer step on the next batches from the training data; with independent replicas
  // (strategy.h 0.14), one sync interval of this replica's steps, agreed with every rank
  // (replica_interval.cpp).
  StepResult train_step();
  // One optimizer step on the given micro-batches (each (B,T)): forward_backward_on, then
  // optimizer_step. The probe and the embedding API's own-batch calls use them.
  StepResult train_step_on(const std::vector<Batch>& micro_batches);
  // The first half: gradients of the micro-batches from zero, the loss the step will report
  // (the data-parallel mean). `callers_batches` (the embedding API's own-batch calls) also
  // finishes the strategy's reduction now, so the gradients are readable by name before the
  // update, and keeps the step out of the noise scale (its batch is not the configured one).
  double forward_backward_on(const std::vector<Batch>& micro_batches, bool callers_batches = false);
  // The second half: the gradient norm, clipping, the scheduled learning rate and the
  // strategy's step. Throws KeelError when no forward_backward_on's gradients are waiting.
  StepResult optimizer_step();
  bool gradients_pending() const { return pending_step_.has_value(); }
  // Mean loss over data.val_batches validation batches (the same batches every time).
  double evaluate();
  // Forward and backward of one batch with loss_scale 1 after zeroing gradients; returns the loss.
  double forward_backward(const Batch& batch);
  // Logits (B,T,Vp) of an inference forward, copied to the host.
  std::vector<float> logits(const std::vector<int32_t>& tokens, int32_t batch, int32_t seq_len);
  // The plugins this run made (generation's cached decoder drives the model's decode slots).
  PluginInstances& plugins() { return plugins_; }
  // The parameters as whole tensors, zero-copy views and external names (model_parameters.h).
  ModelParameters& parameters() { return parameters_; }

  int64_t step() const { return step_; }
  int64_t tokens_seen() const { return tokens_seen_; }
  // Where the run stands, for a checkpoint (run_position.h). Collective: a data source that cannot
  // say where it stands (a Python state_dict that is not JSON) fails it on every rank alike.
  RunPosition position() const;
  // Goes on from a checkpoint's position (load_checkpoint's, after its parameters and state are
  // in): step, tokens seen, data position, each replica's and each rank's, statistics. Collective;
  // throws KeelError naming position.where when a field is malformed or belongs to another source.
  void resume_at(const SavedPosition& position);
  // Whether the strategy's replicas step on their own between syncs (strategy.h 0.14).
  bool independent_replicas() const { return independent_replicas_; }
  // The seed of this step's dropout masks (model.h keel_forward_args.dropout_seed), from the run's
  // seed, the step and the data-parallel replica: a resumed run draws the masks it would have.
  uint64_t dropout_step_seed() const;
  // This rank's chunks of `batch` under context parallelism (context_slice.h); the batch at cp 1.
  Batch my_chunks(const Batch& batch) const;
  // The strategy's ranges and own arrays, and its memory figures.
  StrategyState& strategy_state() { return strategy_state_; }
  const StrategyState& strategy_state() const { return strategy_state_; }
  // All a checkpoint reads from and writes into this run, besides its position.
  RunStateView state_view();

  const RunConfig& config() const { return config_; }
  const keel_model_info& model_info() const { return plugins_.model_info; }
  const keel_optimizer_info& optimizer_info() const { return plugins_.optimizer_info; }
  int32_t seq_len() const { return seq_len_; }
  int32_t accumulation_steps() const { return accumulation_steps_; }
  // Where this process stands in the pp × dp × tp mesh, and the groups' communicators for the
  // collectives of mesh/collectives.h.
  const Mesh& mesh() const { return plugins_.mesh; }
  // A failing rank ends every rank with its reason (no-op on one rank).
  void abort_all_ranks(const std::exception& failure) { plugins_.abort_all_ranks(failure); }
  // The offload tier's totals since it was created; nullopt without an "offload" section.
  std::optional<keel_offload_counters> offload_counters() const { return plugins_.offload_counters(); }
  double flops_per_token() const { return flops_per_token_; }
  double peak_flops() const { return peak_flops_; }  // of this rank's backend
  // MFU of the whole run: global tokens/s against the peak of every data-parallel rank.
  double mfu(double global_tokens_per_s) const {
    return flops_per_token_ * global_tokens_per_s / (peak_flops_ * plugins_.mesh.world.size);
  }

 private:
  // The pieces of position() and resume_at().
  nlohmann::json data_state() const;
  void restore_position(int64_t step, int64_t tokens_seen, const nlohmann::json& data_state);
  nlohmann::json replica_position() const;  // replica_interval.cpp
  void restore_replica_positions(const nlohmann::json& positions, bool same_ranks, const std::string& where);
  std::string data_position() const;  // data_position.cpp
  void restore_data_positions(const nlohmann::json& positions, bool same_layout, const std::string& where);
  nlohmann::json statistics_state() const;
  void restore_statistics(const nlohmann::json& state, const std::string& where);
  void open_builtin_data();
  bool data_plugin_resumes() const;
  void restart_train_split(const std::string& why);  // warns, then resets the plugin's train split
  // `count` batches of `split` from the data plugin; a failure on any rank fails every rank.
  std::vector<Batch> plugin_batches(int32_t split, int32_t count);  // the data plugin has save_position and restore_position (0.16)
  void require_data() const;  // throws KeelError when built with TrainerData::none
  Batch plugin_batch(int32_t split);
  StepResult train_one_step();
  StepResult train_interval();
  void check_independent_replicas();  // asks the strategy; refuses what cannot run so
  std::vector<double> model_step_tallies();

  RunConfig config_;
  PluginInstances plugins_;
  StrategyState strategy_state_{plugins_, config_.strategy.plugin};
  ModelState model_state_{plugins_, config_.model.plugin};
  ModelParameters parameters_{plugins_, config_};
  std::unique_ptr<PipelineRunner> pipeline_;
  std::vector<float> learned_weights(const std::vector<Batch>& micro_batches) const;
  DataSplits data_;
  std::unique_ptr<BatchSampler> train_sampler_;
  int32_t seq_len_ = 0;
  int32_t accumulation_steps_ = 0;  // micro-batches per step on each data-parallel rank (batch_geometry.h)
  int64_t step_ = 0;          // the run's step (with independent replicas: agreed at each sync)
  int64_t replica_step_ = 0;  // this replica's own steps
  int64_t steps_since_sync_ = 0;  // independent replicas: this replica's steps in the open interval
  int64_t tokens_seen_ = 0;
  std::optional<StepResult> pending_step_;  // forward_backward_on's, until optimizer_step
  std::optional<double> pending_sq_norm_;   // its finished reduction's Σ g², for callers' batches
  std::vector<double> pending_tallies_;     // its model tallies summed over dp, for end_step (model_state.h)
  bool independent_replicas_ = false;
  int64_t furthest_samples_taken_ = 0;  // independent replicas: the most samples any replica took
  // The gradient noise scale, while the strategy reports its local norms (dp > 1).
  std::unique_ptr<NoiseScale> noise_scale_;
  double update_noise_scale(double reduced_sum_squares);
  // data.batch_schedule, when configured: the global batch of the next step.
  std::unique_ptr<BatchSchedule> batch_schedule_;
  void set_global_batch(int32_t global_batch);
  void follow_batch_schedule(double noise_scale);
  bool noise_scale_checked_ = false;
  double flops_per_token_ = 0, peak_flops_ = 0;
};

}  // namespace keel
