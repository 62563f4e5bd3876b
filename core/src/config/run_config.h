// One run's configuration: the JSON file, its --set overrides, and the core's typed view of
// the sections it owns (data, train, lr_schedule, parallel). Plugin sections stay JSON and are
// validated by their plugins.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace keel {

struct PluginSection {
  std::string plugin;     // the "plugin" value
  nlohmann::json json;    // the whole section, "plugin" included
  std::string json_path;  // "model", "parallel.strategy", ...
};

struct LrScheduleConfig {
  int64_t warmup_steps = 0;
  std::string decay = "cosine";  // cosine | linear | constant
  double min_lr_ratio = 0.1;     // the floor, as a fraction of the peak
  int64_t decay_steps = 0;       // 0: until train.steps
};

// data.batch_schedule: the global batch doubles (by accumulation) while the gradient noise scale
// allows, up to max_global_batch (train/batch_schedule.h).
struct BatchScheduleConfig {
  bool enabled = false;            // the key is present
  int32_t max_global_batch = 0;    // required: the largest global batch it may reach
  int64_t check_every = 50;        // steps between decisions
  std::string lr_rule = "sqrt";    // the learning rate × sqrt(B/B0) ("sqrt") or × B/B0 ("linear")
};

struct DataConfig {
  std::string source = "text";   // text: the embedded byte-level corpus; shards: llm.c token files
  std::string text_root;         // "" → the Python standard library of this machine
  int64_t text_max_bytes = 8 << 20;
  double val_fraction = 0.1;
  std::string train_pattern, val_pattern;  // globs, for source "shards"
  int32_t seq_len = 0;           // 0 → the model's max_seq_len
  int32_t micro_batch = 4;
  int32_t global_batch = 0;      // 0 → micro_batch (one micro-step per optimizer step)
  int32_t val_batches = 8;
  BatchScheduleConfig batch_schedule;
};

struct CheckpointConfig {
  std::string dir;               // "" → runs/<config name>/checkpoints
  int64_t every = 0;             // steps between saves; 0: only at the end of the run
  int32_t keep = 3;              // complete checkpoints kept; older ones are deleted
  // Copy the state to host memory on the training thread and write, fsync and publish it on a
  // background thread while training goes on (session/async_checkpoint.h); the next save waits
  // for the previous one.
  bool async = false;
  // Save at the step where Ctrl-C or SIGTERM stopped the run (the Python binding: a
  // KeyboardInterrupt in train()), unless that step was just saved.
  bool on_interrupt = false;
};

struct TrainConfig {
  int64_t steps = 100;
  uint64_t seed = 1337;
  double grad_clip = 1.0;        // 0 disables clipping
  int64_t log_every = 10;
  int64_t eval_every = 0;        // 0: only at the end
  std::string metrics_path;      // "" → runs/<config name>/metrics.jsonl
  int32_t sample_tokens = 0;     // bytes generated after training (0: none)
  std::string sample_prompt = "\n";
  double sample_temperature = 0.8;
  std::string tensorboard_dir;   // "" → runs/<config name>/tb; "none" turns it off
  std::string on_nonfinite = "stop";  // stop | skip: what a NaN/Inf loss or gradient norm does
  CheckpointConfig checkpoint;
};

// "offload" (docs/offload.md): a tier outside backend memory for some of the strategy's arrays.
// Absent: no tier (tier.plugin ""). tier.json is the section less the core's keys (plugin and
// the three booleans), as the tier plugin receives it.
struct OffloadConfig {
  PluginSection tier;
  bool optimizer_state = true;  // offload.optimizer_state: the optimizer's moments
  bool params = false;          // offload.params: the fp32 parameter shards (ZeRO-Infinity)
  bool gradients = false;       // offload.gradients: the reduced gradient shards
  bool enabled() const { return !tier.plugin.empty(); }
  uint32_t arrays() const;      // the KEEL_OFFLOAD_* bits of the three booleans
};

struct RunConfig {
  std::string file;              // where it came from ("<json>" for text)
  std::string name;              // the file's stem, for default output folders
  nlohmann::json json;           // after overrides
  PluginSection model, optimizer, backend, strategy;
  PluginSection comm;            // "comm": {"plugin": "mpi"}: how ranks talk (default mpi)
  bool comm_explicit = false;    // the config named a comm section (else a missing plugin means one rank)
  PluginSection data_plugin;     // "data": {"plugin": ...}: a data-kind plugin instead of the
                                 // built-in sources (plugin "" when absent); it gets the data
                                 // section less the core's batch keys
  std::string model_init_from;   // model.init_from: a Hugging Face-layout safetensors file, read by
                                 // the core (and removed from the section the model plugin sees)
  LrScheduleConfig lr_schedule;
  DataConfig data;
  TrainConfig train;
  std::vector<std::string> plugin_path;
  // The mesh (docs/parallelism.md §1): tp × dp × pp ranks, tp fastest; dp = world / (tp · pp).
  int32_t tp = 1, pp = 1;
  // parallel.ep: ranks of the data-parallel group that split each sparse layer's experts
  // (docs/architecture.md §4); it must divide dp, which mesh_layout.cpp checks against the world.
  int32_t ep = 1;
  // parallel.cp: ranks of the data-parallel group that split each sequence (context parallelism,
  // docs/parallelism.md §6a); it must divide dp, which mesh_layout.cpp checks against the world.
  int32_t cp = 1;
  bool cp_all_gather = false;  // parallel.cp_exchange "all_gather" (else "ring")
  bool sequence_parallel = false;  // parallel.sequence_parallel (Megatron's), with tp > 1
  // parallel.dp_groups: the data-parallel group's inner level (docs/parallelism.md §8): the ranks of
  // one host, of one site, or N consecutive dp ranks; the core splits the dp group into those
  // groups and the groups across them, and the strategy reduces (ddp), shards (zero) or
  // synchronises (diloco) inside and exchanges across. kFlat: one level, as before.
  enum class DpGroups { kFlat, kHost, kSite, kRanks };
  DpGroups dp_groups = DpGroups::kFlat;
  int32_t dp_group_ranks = 0;  // kRanks: N
  // parallel.sites: {"site": ["host", ...]}: which site each host is in (keel launch writes it from
  // its hosts file's site= labels). Empty: every host in one site.
  std::vector<std::pair<std::string, std::string>> site_of_host;  // (host, site)
  // Pipeline parallelism (docs/parallelism.md §5): the schedule plugin ("1f1b" by default, also at
  // pp 1, where every schedule is forward m then backward m), the chunks per rank, and an explicit
  // placement of the model's blocks (pp · virtual_stages counts; empty: an even split).
  PluginSection schedule;
  int32_t virtual_stages = 1;
  std::vector<int32_t> layers_per_stage;
  OffloadConfig offload;

  // Reads and checks everything the core owns; throws KeelError(KEEL_ERR_INVALID_CONFIG)
  // with "<file>: <json path>: <problem>".
  static RunConfig from_file(const std::string& path, const std::vector<std::string>& overrides = {});
  static RunConfig from_json_text(const std::string& text, const std::string& origin = "<json>",
                                  const std::vector<std::string>& overrides = {});
};

// Applies "a.b.c=value" (value parsed as JSON, else taken as a string) to a config object.
void apply_override(nlohmann::json& config, const std::string& assignment);

}  // namespace keel
