// The executor of a pipeline schedule (schedule.h, docs/parallelism.md §5): one rank's action
// list for an optimizer step run through the model chunk by chunk, with activations and their
// gradients moved over the pipeline group and the strategy told, before each backward, whether
// it is the chunk's last. Sends are issued without waiting (completed at the end of the step);
// receives complete before the action that reads them, as the schedule simulator assumes. At
// pp 1 every schedule is forward m, backward m: the executor is the whole training loop, so
// there is one way to run a step.
#pragma once

#include <keel/keel.h>

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "config/run_config.h"
#include "data/token_source.h"
#include "train/plugin_instances.h"

namespace keel {

struct PipelineTimes {
  double forward_seconds = 0;   // in the model's forward calls
  double backward_seconds = 0;  // in the model's backward calls
  double receive_seconds = 0;   // waiting for a peer's activation or gradient
  int32_t peak_in_flight = 0;   // most (micro-batch, chunk) forwards whose backward had not yet run:
                                // the activation sets the model held at once
};

class PipelineRunner {
 public:
  PipelineRunner(PluginInstances& plugins, const RunConfig& config);
  ~PipelineRunner();
  PipelineRunner(const PipelineRunner&) = delete;
  PipelineRunner& operator=(const PipelineRunner&) = delete;

  // Refuses (KeelError naming parallel.schedule and the numbers) a step of `microbatches` the
  // schedule cannot run; called at start-up so a bad combination fails before the first step.
  void check_microbatches(int32_t microbatches);
  // The schedule's forwards and backwards of the micro-batches, each backward scaled by 1/n, or
  // by weights[m] when given (one per micro-batch: some targets not learned). Returns Σ loss ×
  // that scale over the micro-batches whose last chunk ran on this rank (0 elsewhere).
  // `dropout_seed`: the step's (dropout_step_seed); each micro-batch's forward gets its own from it
  // (model.h keel_forward_args.dropout_seed); 0: no dropout.
  double train(const std::vector<Batch>& micro_batches, PipelineTimes& times, std::vector<float> weights = {},
               uint64_t dropout_seed = 0);
  // One forward through every chunk in model order (evaluation, inference). Returns the loss on
  // the rank holding the last chunk (0 elsewhere, or without targets); *logits is that rank's
  // (B,T,Vp) in backend memory, valid until the model's next call, and NULL on other ranks.
  double forward_only(const Batch& batch, bool with_targets, const float** logits);
  bool holds_last_chunk() const { return chunks_ - 1 == last_local_chunk_; }
  int32_t chunks() const { return chunks_; }

 private:
  using Key = std::pair<int32_t, int32_t>;  // (micro-batch, chunk)
  struct DeviceBatch {
    int32_t* tokens = nullptr;
    int32_t* targets = nullptr;
    int32_t* positions = nullptr;  // a packed batch's (model.h 0.19)
    bool packed = false;
    size_t capacity = 0;
  };
  struct PendingSend {
    keel_comm_request* request;
    float* buffer;
  };

  const std::vector<keel_schedule_action>& actions_for(int32_t microbatches);
  void upload(size_t slot, const Batch& batch);
  void forward_chunk(const keel_schedule_action& action, int32_t n, bool with_targets, double* loss, const float** logits);
  void backward_chunk(const keel_schedule_action& action, int32_t n);
  void send(float* buffer, int32_t peer_stage, int32_t microbatch, int32_t chunk, bool gradient);
  float* receive(int32_t peer_stage, int32_t microbatch, int32_t chunk, bool gradient, PipelineTimes* times);
  void finish_sends();
  float* take(std::map<Key, float*>& from, Key key, const char* what);
  float* io_buffer();
  void give_back(float* buffer);
  int64_t io_numel() const { return io_numel_; }
  uint64_t dropout_seed_of(int32_t microbatch) const;
  void set_shape(int32_t batch, int32_t seq_len);
  void clear_device_loss();
  double read_device_loss(double host_loss) const;

  PluginInstances& plugins_;
  const RunConfig& config_;
  const CommGroup& pipeline_;  // this rank's pipeline group (the mesh's)
  int32_t stage_ = 0, stages_ = 1;  // this rank's pipeline stage, of pp
  int32_t chunks_ = 1;
  int32_t last_local_chunk_ = 0;  // the highest chunk on this rank
  std::map<int32_t, std::vector<keel_schedule_action>> lists_;  // by micro-batch count
  std::vector<DeviceBatch> device_batches_;  // one per micro-batch of a step
  std::vector<float> weights_;               // the step's per-micro-batch scales; empty: 1/n each
  uint64_t dropout_seed_ = 0;                // the step's dropout seed; 0 outside train()
  float weight_of(int32_t microbatch, int32_t n) const {
    return weights_.empty() ? 1.0f / float(n) : weights_.at(size_t(microbatch));
  }
  int32_t batch_ = 0, seq_len_ = 0;
  int64_t io_numel_ = 0;                     // elements of one chunk-boundary activation
  std::vector<float*> free_buffers_;         // of io_numel_ floats, backend memory
  std::vector<float*> all_buffers_;
  std::map<Key, float*> outgoing_activations_, incoming_activations_, outgoing_gradients_, incoming_gradients_;
  std::vector<PendingSend> pending_sends_;
  // A model of ABI 0.8 adds the step's loss here, in backend memory, read once per step
  // (model.h loss_sum); an older one returns each micro-batch's loss on the host.
  bool device_loss_ = false;
  int32_t model_abi_minor_ = 0;  // the minor the model plugin was built against
  float* step_loss_ = nullptr;
  keel_dtype io_dtype_{KEEL_DTYPE_FLOAT, 32, 1};  // of the activations chunks hand on
};

}  // namespace keel
