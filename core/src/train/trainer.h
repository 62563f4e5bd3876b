// One training run: the plugins, the data, the step counter. The CLI, the embedding API and
// the test probe all drive training through this class.
#pragma once

#include <keel/embed.h>

#include <memory>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "data/token_source.h"
#include "train/pipeline_runner.h"
#include "train/plugin_instances.h"

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
};

// Whether a trainer opens the configured data: keel export reads a checkpoint only, and must
// work after the run's data is gone.
enum class TrainerData { open, none };

class Trainer {
 public:
  explicit Trainer(RunConfig config, TrainerData data = TrainerData::open);
  ~Trainer();

  // One optimizer step on the next batches from the training data.
  StepResult train_step();
  // One optimizer step on the given micro-batches (each (B,T)); the probe and bindings use it.
  StepResult train_step_on(const std::vector<Batch>& micro_batches);
  // Mean loss over data.val_batches validation batches (the same batches every time).
  double evaluate();
  // Forward and backward of one batch with loss_scale 1 after zeroing gradients; returns the loss.
  double forward_backward(const Batch& batch);
  // Logits (B,T,Vp) of an inference forward, copied to the host.
  std::vector<float> logits(const std::vector<int32_t>& tokens, int32_t batch, int32_t seq_len);
  // Generates `count` tokens after `prompt`, sampling at `temperature` (0: greedy).
  std::vector<int32_t> sample(const std::vector<int32_t>& prompt, int32_t count, uint64_t seed, double temperature);

  // Whole tensors, for the bindings and export. Reading refuses a parameter split over tp ranks
  // (a whole tensor would need every rank); writing takes the whole tensor on every rank, and
  // each keeps its piece.
  std::vector<float> read_param(size_t index);
  std::vector<float> read_grad(size_t index);
  void write_param(size_t index, const std::vector<float>& values);
  // Optimizer state slot `slot` of parameter `index` (whole tensor), for checkpoints.
  std::vector<float> read_state(int32_t slot, size_t index);
  void write_state(int32_t slot, size_t index, const std::vector<float>& values);
  // How parameter `index` appears in an external format ("huggingface"); throws KeelError
  // (KEEL_ERR_UNIMPLEMENTED) when the model does not know the format.
  keel_external_tensor external_tensor(const std::string& format, size_t index);
  std::string external_config(const std::string& format);
  int64_t numel(size_t index) const;         // of this rank's piece (the whole tensor at tp 1)
  int64_t global_numel(size_t index) const;  // of the whole tensor
  // The index of parameter `name`; throws KeelError (KEEL_ERR_NOT_FOUND) with a suggestion.
  size_t param_index(const std::string& name) const;
  // Parameter `index` in the strategy's own memory (zero-copy), as its forward acquire gives it.
  keel_tensor param_tensor(size_t index);

  // The resumable position of a run: optimizer steps, tokens trained, data position.
  int64_t tokens_seen() const { return tokens_seen_; }
  nlohmann::json data_state() const;
  void restore_position(int64_t step, int64_t tokens_seen, const nlohmann::json& data_state);

  const RunConfig& config() const { return config_; }
  const keel_model_info& model_info() const { return plugins_.model_info; }
  const keel_optimizer_info& optimizer_info() const { return plugins_.optimizer_info; }
  int64_t step() const { return step_; }
  int32_t seq_len() const { return seq_len_; }
  int32_t accumulation_steps() const { return accumulation_steps_; }
  // Where this process stands in the mesh.
  int32_t world_rank() const { return plugins_.world_rank; }
  int32_t world_size() const { return plugins_.world_size; }
  int32_t dp_size() const { return plugins_.dp_size; }
  int32_t dp_rank() const { return plugins_.dp_rank; }
  int32_t tp_rank() const { return plugins_.tp_rank; }
  int32_t tp_size() const { return plugins_.tp_size; }
  int32_t pp_rank() const { return plugins_.pp_rank; }
  int32_t pp_size() const { return plugins_.pp_size; }
  // A failing rank ends every rank with its reason (no-op on one rank).
  void abort_all_ranks(const std::string& reason) { plugins_.abort_all_ranks(reason); }
  // Collective over every rank of the world: waits for all of them (no-op on one rank). The
  // core's calls on the world communicator come from its training thread only.
  void barrier();
  // Sum of one double per rank, in rank order so every rank agrees: over the data-parallel group
  // (the loss), the tensor-parallel group (the gradient norm), or the world (checkpoints).
  double sum_over_ranks(double value);
  double sum_over_tp(double value);
  double sum_over_pp(double value);
  double sum_over_world(double value);
  // Every rank's string in world rank order (for checkpoint manifests).
  std::vector<std::string> gather_strings(const std::string& mine);
  // This rank's persistent strategy memory and the dp group's communication counters.
  keel_strategy_info strategy_info();
  // The strategy's own per-rank arrays (strategy.h, ABI 0.5); none from an older strategy.
  struct OwnStateArray {
    std::string name;
    int64_t count = 0;
  };
  std::vector<OwnStateArray> strategy_own_state();
  std::vector<float> read_own_state(int32_t index, int64_t count);
  void write_own_state(int32_t index, const std::vector<float>& values);
  // The strategy's data-parallel communicator, or the model's tensor-parallel one (zeros where
  // there is none).
  enum class CommGroup { strategy_dp, model_tp, pipeline };
  keel_comm_counters comm_counters(CommGroup group = CommGroup::strategy_dp);
  // The offload tier's totals since it was created; nullopt without an "offload" section.
  std::optional<keel_offload_counters> offload_counters() const { return plugins_.offload_counters(); }
  // The global flat range of parameter `index` (kind -1) or its state slot this rank holds.
  std::pair<int64_t, int64_t> owned_range(int32_t kind, size_t index);
  std::vector<float> read_range(int32_t kind, size_t index, int64_t begin, int64_t end);
  void write_range(int32_t kind, size_t index, int64_t begin, const std::vector<float>& values);
  double flops_per_token() const { return flops_per_token_; }
  double peak_flops() const { return peak_flops_; }  // of this rank's backend
  // MFU of the whole run: global tokens/s against the peak of every data-parallel rank.
  double mfu(double global_tokens_per_s) const {
    return flops_per_token_ * global_tokens_per_s / (peak_flops_ * plugins_.world_size);
  }

 private:
  void open_builtin_data();
  void require_data() const;  // throws KeelError when built with TrainerData::none
  Batch plugin_batch(int32_t split);

  RunConfig config_;
  double sum_over(void* comm, int32_t size, double value, const char* what);
  void require_whole(size_t index, const char* what) const;
  PluginInstances plugins_;
  std::unique_ptr<PipelineRunner> pipeline_;
  DataSplits data_;
  std::unique_ptr<BatchSampler> train_sampler_;
  int32_t seq_len_ = 0;
  int32_t accumulation_steps_ = 0;  // micro-batches per step on each data-parallel rank (batch_geometry.h)
  int64_t step_ = 0;
  int64_t tokens_seen_ = 0;
  double flops_per_token_ = 0, peak_flops_ = 0;
};

}  // namespace keel
