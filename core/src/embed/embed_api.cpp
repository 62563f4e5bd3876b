// The embedding API (abi/keel/embed.h): C entry points over Trainer and the plugin registry.
// Exceptions stop here and become a status code plus the thread's last error; outputs are
// written only after everything that can fail has succeeded.
#include <keel/embed.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "checkpoint/checkpoint.h"
#include "embed/embed_call.h"
#include "generate/gathered_param.h"
#include "generate/sampling.h"
#include "host/errors.h"
#include "host/log.h"
#include "interop/hf_tokenizer_files.h"
#include "interop/huggingface.h"
#include "loader/plugin_registry.h"
#include "mesh/collectives.h"
#include "session/run_session.h"
#include "train/trainer.h"

namespace {
// What keel_trainer_train prints goes through this: to stdout while the trainer is verbose, nowhere
// otherwise, so keel_trainer_set_verbose takes effect without remaking the session (whose
// metrics and event files stay open).
class SwitchableOutput : public std::streambuf {
 public:
  bool on = true;

 protected:
  int overflow(int c) override { return on && c != EOF ? std::cout.rdbuf()->sputc(char(c)) : (c == EOF ? 0 : c); }
  std::streamsize xsputn(const char* s, std::streamsize n) override { return on ? std::cout.rdbuf()->sputn(s, n) : n; }
  int sync() override { return on ? std::cout.rdbuf()->pubsync() : 0; }
};
}  // namespace

struct keel_trainer {
  // Declared first so it outlives the session that writes to it.
  SwitchableOutput output_buffer;
  std::ostream output{&output_buffer};
  std::unique_ptr<keel::Trainer> trainer;
  keel_step_metrics last{};
  // What keel_trainer_train reports through (progress on stdout, metrics, TensorBoard), made
  // by its first call and kept, so successive calls write one metrics file.
  std::unique_ptr<keel::RunSession> session;
  std::string last_checkpoint;  // what last.checkpoint points into
  std::string last_model_json;  // what last.model_json points into
  bool kv_cache = true;         // whether generation uses the model's key/value cache (keel_trainer_set_kv_cache)
};

namespace {

using keel::embed::embed_call;
using keel::embed::require;

// The step callback's answer every rank of `world` acts on: stop if any rank's callback asked
// to, as an interrupt if any asked for that (one small sum per step on more than one rank), so
// no rank leaves the loop, or saves, while another waits in the next step's collectives.
int32_t agreed_answer(const keel::CommGroup& world, int32_t mine) {
  if (world.alone()) return mine;
  const double votes = keel::sum_in_rank_order(world, (mine == KEEL_STEP_INTERRUPTED ? 1024.0 : 0.0) + (mine ? 1.0 : 0.0));
  if (votes >= 1024.0) return KEEL_STEP_INTERRUPTED;
  return votes > 0 ? (mine ? mine : 1) : 0;
}

// Before a trainer's first step (or right after a load): its step count and tokens, nothing
// measured, no validation loss.
keel_step_metrics no_metrics_yet(const keel::Trainer& t) {
  keel_step_metrics m{};
  m.struct_size = sizeof(keel_step_metrics);
  m.step = t.step();
  m.val_loss = std::nan("");
  m.tokens = t.tokens_seen();
  return m;
}

// A step's metrics; no validation loss and no checkpoint until the caller sets them.
keel_step_metrics to_metrics(const keel::Trainer& t, const keel::StepResult& r) {
  const double tokens_per_s = r.tokens / std::max(r.step_seconds, 1e-9);
  keel_step_metrics m{};
  m.struct_size = sizeof(keel_step_metrics);
  m.step = r.step;
  m.loss = float(r.loss);
  m.lr = float(r.lr);
  m.grad_norm = float(r.grad_norm);
  m.tokens_per_s = tokens_per_s;
  m.mfu = t.mfu(tokens_per_s);
  m.step_ms = 1e3 * r.step_seconds;
  m.val_loss = std::nan("");
  m.tokens = t.tokens_seen();
  m.data_ms = 1e3 * r.data_seconds;
  m.forward_ms = 1e3 * r.forward_seconds;
  m.backward_ms = 1e3 * r.backward_seconds;
  m.optimizer_ms = 1e3 * r.optimizer_seconds;
  m.checkpoint = nullptr;
  return m;
}

// A finished step's metrics, kept by the trainer: model_json points into its own string.
void keep_metrics(keel_trainer* trainer, const keel::StepResult& r) {
  trainer->last = to_metrics(*trainer->trainer, r);
  nlohmann::json model = nlohmann::json::object();
  for (const keel::ModelMetric& m : r.model_metrics) model[m.name] = m.value;
  trainer->last_model_json = model.dump();
  trainer->last.model_json = trainer->last_model_json.c_str();
}

// The caller's own batch as the step's micro-batches: rows of data.seq_len tokens (the shapes
// the model trains on), split every data.micro_batch rows; token and target ids in the vocabulary.
// Every rank checks its own, then all compare notes in one collective, so a bad batch on one
// rank stops every rank with its reason (rather than leaving the others in a collective), and
// ranks whose shares differ in rows (data parallelism) or content (the tp and pipeline ranks of
// one replica) are refused before they could split into unequal collectives.
std::vector<keel::Batch> own_micro_batches(const keel::Trainer& t, const char* fn, const int32_t* tokens,
                                           const int32_t* targets, int32_t batch, int32_t seq_len,
                                           const int32_t* positions = nullptr) {
  require(tokens && targets, (std::string(fn) + ": tokens and targets must not be NULL").c_str());
  if (t.independent_replicas())
    throw keel::KeelError(KEEL_ERR_UNIMPLEMENTED, std::string(fn) + ": strategy " + t.config().strategy.plugin +
                                                      " steps each replica on its own data between syncs (A-EDiT); "
                                                      "train it with step() or train()");
  const int32_t micro = t.config().data.micro_batch, context = t.seq_len(), vocab = t.model_info().vocab_size;
  std::string problem;
  if (seq_len != context || batch < 1 || (batch > micro && batch % micro != 0) || batch > (1 << 20))
    problem = "the batch is (" + std::to_string(batch) + ", " + std::to_string(seq_len) + "); expected rows of "
              "data.seq_len = " + std::to_string(context) + " tokens, and up to data.micro_batch = " +
              std::to_string(micro) + " rows or a multiple of it (this rank's share of the step)";
  uint64_t digest = 1469598103934665603ull;  // FNV-1a over the ids: tp and pipeline peers pass the same rows
  for (const int32_t* ids : {tokens, targets})
    for (size_t i = 0; problem.empty() && i < size_t(batch) * size_t(seq_len); ++i) {
      // A target of -1 is not learned (a prompt's token, padding); the loss is the mean over the rest.
      if ((ids[i] < 0 && !(ids == targets && ids[i] == -1)) || ids[i] >= vocab)
        problem = std::string(ids == tokens ? "token" : "target") + " " + std::to_string(ids[i]) + " at flat index " +
                  std::to_string(i) + " is outside the vocabulary [0, " + std::to_string(vocab) + ")" +
                  (ids == targets ? " (a target of -1 is not learned)" : "");
      digest = (digest ^ uint32_t(ids[i])) * 1099511628211ull;
    }
  // A packed batch's positions (embed.h 0.19): each row from 0, each position 0 or one more than
  // the one before, and no target learned across a document's start.
  for (size_t i = 0; positions && problem.empty() && i < size_t(batch) * size_t(seq_len); ++i) {
    const size_t column = i % size_t(seq_len);
    const bool restart = positions[i] == 0;
    if (!restart && (column == 0 || positions[i] != positions[i - 1] + 1))
      problem = "position " + std::to_string(positions[i]) + " at flat index " + std::to_string(i) + " (row " +
                std::to_string(i / size_t(seq_len)) + ", column " + std::to_string(column) + ") " +
                (column == 0 ? "starts a row: a row starts a document, at 0"
                             : "follows " + std::to_string(positions[i - 1]) + ": a position is 0 (a document "
                                                                               "starts) or the one before plus 1");
    else if (restart && column > 0 && targets[i - 1] != -1)
      problem = "target " + std::to_string(targets[i - 1]) + " at flat index " + std::to_string(i - 1) +
                " predicts the first token of the next document (position 0 at " + std::to_string(i) +
                "): a target across documents must be -1";
    digest = (digest ^ uint32_t(positions[i])) * 1099511628211ull;
  }
  const keel::CommGroup& world = t.mesh().world;
  // The ranks of one data replica pass the same rows: tensor and pipeline parallel ranks, and the
  // ranks of a context-parallel block, which each take their chunks of those rows.
  const nlohmann::json mine = {{"dp", t.mesh().layout().data_replica(t.mesh().position())},
                               {"rows", batch},
                               {"digest", std::to_string(digest)},
                               {"problem", problem}};
  const std::vector<std::string> notes = keel::gather_strings(world, mine.dump());
  for (size_t r = 0; r < notes.size(); ++r) {
    const nlohmann::json note = nlohmann::json::parse(notes[r]);
    const std::string rank = world.size > 1 ? " (rank " + std::to_string(r) + ")" : "";
    if (!note["problem"].get<std::string>().empty())
      throw keel::KeelError(KEEL_ERR_INVALID_ARGUMENT, std::string(fn) + rank + ": " + note["problem"].get<std::string>());
    if (note["rows"] != mine["rows"])
      throw keel::KeelError(KEEL_ERR_INVALID_ARGUMENT, std::string(fn) + ": rank " + std::to_string(r) + " passed " +
                                                           note["rows"].dump() + " rows and rank " +
                                                           std::to_string(world.rank) + " " + mine["rows"].dump() +
                                                           ": every rank passes the same number of rows");
    if (note["dp"] == mine["dp"] && note["digest"] != mine["digest"])
      throw keel::KeelError(KEEL_ERR_INVALID_ARGUMENT, std::string(fn) + ": ranks " + std::to_string(r) + " and " +
                                                           std::to_string(world.rank) + " hold one replica (tensor, "
                                                           "pipeline or context parallel) but passed different rows: "
                                                           "they must pass the same ones");
  }
  std::vector<keel::Batch> micro_batches;
  for (int32_t first = 0; first < batch; first += micro) {
    keel::Batch b;
    b.batch = std::min(micro, batch - first);
    b.seq_len = seq_len;
    const size_t begin = size_t(first) * seq_len, end = begin + size_t(b.batch) * seq_len;
    b.tokens.assign(tokens + begin, tokens + end);
    b.targets.assign(targets + begin, targets + end);
    if (positions) b.positions.assign(positions + begin, positions + end);
    micro_batches.push_back(std::move(b));
  }
  return micro_batches;
}

// Whether the strategy says it holds `what` (KEEL_STRATEGY_HOLDS_* bits; strategy.h 0.19) on each
// data-parallel rank whole; at one data-parallel rank every strategy holds everything.
bool strategy_holds_whole(const keel::Trainer& t, uint32_t what) {
  return t.mesh().layout().dp == 1 || (t.strategy_state().info().holds_whole & what) == what;
}

// Hugging Face export and import read and write whole tensors on each rank, with no collective.
void require_whole_parameters(const keel::Trainer& t, const char* fn) {
  const keel::MeshLayout& layout = t.mesh().layout();
  if (layout.tp == 1 && layout.pp == 1 && layout.ep == 1 && strategy_holds_whole(t, KEEL_STRATEGY_HOLDS_WHOLE_PARAMS))
    return;
  throw keel::KeelError(KEEL_ERR_UNIMPLEMENTED,
                        std::string(fn) + ": this run splits its parameters (tp " + std::to_string(layout.tp) + ", pp " +
                            std::to_string(layout.pp) + ", ep " + std::to_string(layout.ep) + ", strategy " +
                            t.config().strategy.plugin + " at " + std::to_string(layout.dp) +
                            " data-parallel ranks); each rank needs whole ones (tp, pp and ep 1, and a strategy that "
                            "keeps every parameter whole on each rank, such as ddp, or one rank). Save a checkpoint "
                            "and `keel export` it, or set model.init_from");
}

// read_grad hands out a gradient whole and as the update saw it only where the strategy says it
// holds one (ddp's mean, a local-SGD replica's own); others hold a reduced piece (ZeRO) or a
// compressed or partly reduced gradient (topk, powersgd).
void require_readable_gradients(const keel::Trainer& t) {
  if (strategy_holds_whole(t, KEEL_STRATEGY_HOLDS_WHOLE_GRADS)) return;
  throw keel::KeelError(KEEL_ERR_UNIMPLEMENTED, "keel_trainer_read_grad: strategy " + t.config().strategy.plugin +
                                                    " at " + std::to_string(t.mesh().layout().dp) +
                                                    " data-parallel ranks holds no whole gradient as its update saw "
                                                    "it (it reduces in pieces or compresses); read gradients under "
                                                    "a strategy that holds them whole, such as ddp, or at one rank");
}

// Copies a struct into a caller's that may be older (shorter) than ours: the fields that fit
// in the caller's struct_size, never its struct_size itself.
template <typename T>
void copy_versioned(const T& from, T* to) {
  if (to->struct_size < sizeof(size_t))
    throw keel::KeelError(KEEL_ERR_INVALID_ARGUMENT, "the output struct's struct_size is not set");
  const size_t size = std::min(to->struct_size, sizeof(T));
  std::memcpy(reinterpret_cast<char*>(to) + sizeof(size_t), reinterpret_cast<const char*>(&from) + sizeof(size_t),
              size - sizeof(size_t));
}

}  // namespace

extern "C" {

KEEL_API const char* keel_last_error(void) { return keel::last_error(); }

KEEL_API keel_status keel_register_plugin_library(const char* path) {
  return embed_call([&] { keel::PluginRegistry::instance().register_library(path ? path : ""); });
}

KEEL_API keel_status keel_trainer_create_from_file(const char* path, keel_trainer** out_trainer) {
  return embed_call([&] {
    require(path && out_trainer, "keel_trainer_create_from_file: path and out_trainer must not be NULL");
    auto trainer = std::make_unique<keel::Trainer>(keel::RunConfig::from_file(path), keel::TrainerData::open,
                                                   keel::import_huggingface);
    const keel_step_metrics none = no_metrics_yet(*trainer);
    *out_trainer = new keel_trainer;
    (*out_trainer)->trainer = std::move(trainer);
    (*out_trainer)->last = none;
  });
}

KEEL_API keel_status keel_trainer_create_from_json(const char* json_text, keel_trainer** out_trainer) {
  return embed_call([&] {
    require(json_text && out_trainer, "keel_trainer_create_from_json: json_text and out_trainer must not be NULL");
    auto trainer = std::make_unique<keel::Trainer>(keel::RunConfig::from_json_text(json_text), keel::TrainerData::open,
                                                   keel::import_huggingface);
    const keel_step_metrics none = no_metrics_yet(*trainer);
    *out_trainer = new keel_trainer;
    (*out_trainer)->trainer = std::move(trainer);
    (*out_trainer)->last = none;
  });
}

KEEL_API void keel_trainer_destroy(keel_trainer* trainer) { delete trainer; }

KEEL_API keel_status keel_trainer_step(keel_trainer* trainer, keel_step_metrics* out) {
  return embed_call([&] {
    require(trainer, "keel_trainer_step: trainer is NULL");
    keep_metrics(trainer, trainer->trainer->train_step());
    if (out) copy_versioned(trainer->last, out);
  });
}

namespace {

// keel_trainer_forward_backward(_packed) and keel_trainer_step_on(_packed), `fn` naming the one called.
keel_status forward_backward_call(const char* fn, keel_trainer* trainer, const int32_t* tokens, const int32_t* targets,
                                  const int32_t* positions, int32_t batch, int32_t seq_len, float* out_loss) {
  return embed_call([&] {
    require(trainer && out_loss, (std::string(fn) + ": trainer and out_loss must not be NULL").c_str());
    keel::Trainer& t = *trainer->trainer;
    *out_loss = float(t.forward_backward_on(own_micro_batches(t, fn, tokens, targets, batch, seq_len, positions), true));
  });
}

keel_status step_on_call(const char* fn, keel_trainer* trainer, const int32_t* tokens, const int32_t* targets,
                         const int32_t* positions, int32_t batch, int32_t seq_len, keel_step_metrics* out) {
  return embed_call([&] {
    require(trainer, (std::string(fn) + ": trainer is NULL").c_str());
    keel::Trainer& t = *trainer->trainer;
    t.forward_backward_on(own_micro_batches(t, fn, tokens, targets, batch, seq_len, positions), true);
    keep_metrics(trainer, t.optimizer_step());
    if (out) copy_versioned(trainer->last, out);
  });
}

}  // namespace

KEEL_API keel_status keel_trainer_forward_backward(keel_trainer* trainer, const int32_t* tokens, const int32_t* targets,
                                                   int32_t batch, int32_t seq_len, float* out_loss) {
  return forward_backward_call("keel_trainer_forward_backward", trainer, tokens, targets, nullptr, batch, seq_len,
                               out_loss);
}

KEEL_API keel_status keel_trainer_read_grad(keel_trainer* trainer, const char* name, float* dst, size_t count) {
  return embed_call([&] {
    require(trainer && name && dst, "keel_trainer_read_grad: trainer, name and dst must not be NULL");
    keel::Trainer& t = *trainer->trainer;
    if (!t.gradients_pending())
      throw keel::KeelError(KEEL_ERR_INVALID_ARGUMENT, "keel_trainer_read_grad: no gradients to read: they exist "
                                                       "between keel_trainer_forward_backward and the update");
    require_readable_gradients(t);
    const size_t index = t.parameters().param_index(name);
    if (int64_t(count) != t.parameters().global_numel(index))
      throw keel::KeelError(KEEL_ERR_INVALID_ARGUMENT, std::string("parameter ") + name + " has " +
                                                           std::to_string(t.parameters().global_numel(index)) +
                                                           " elements, not " + std::to_string(count));
    const std::vector<float> values = t.parameters().read_grad(index);
    std::memcpy(dst, values.data(), count * sizeof(float));
  });
}

KEEL_API keel_status keel_trainer_optimizer_step(keel_trainer* trainer, keel_step_metrics* out) {
  return embed_call([&] {
    require(trainer, "keel_trainer_optimizer_step: trainer is NULL");
    if (!trainer->trainer->gradients_pending())
      throw keel::KeelError(KEEL_ERR_INVALID_ARGUMENT, "keel_trainer_optimizer_step: no gradients to apply: call "
                                                       "keel_trainer_forward_backward first (each update consumes them)");
    keep_metrics(trainer, trainer->trainer->optimizer_step());
    if (out) copy_versioned(trainer->last, out);
  });
}

KEEL_API keel_status keel_trainer_step_on(keel_trainer* trainer, const int32_t* tokens, const int32_t* targets,
                                          int32_t batch, int32_t seq_len, keel_step_metrics* out) {
  return step_on_call("keel_trainer_step_on", trainer, tokens, targets, nullptr, batch, seq_len, out);
}

KEEL_API keel_status keel_trainer_forward_backward_packed(keel_trainer* trainer, const int32_t* tokens,
                                                          const int32_t* targets, const int32_t* positions,
                                                          int32_t batch, int32_t seq_len, float* out_loss) {
  return forward_backward_call("keel_trainer_forward_backward_packed", trainer, tokens, targets, positions, batch,
                               seq_len, out_loss);
}

KEEL_API keel_status keel_trainer_step_on_packed(keel_trainer* trainer, const int32_t* tokens, const int32_t* targets,
                                                 const int32_t* positions, int32_t batch, int32_t seq_len,
                                                 keel_step_metrics* out) {
  return step_on_call("keel_trainer_step_on_packed", trainer, tokens, targets, positions, batch, seq_len, out);
}

KEEL_API keel_status keel_trainer_evaluate(keel_trainer* trainer, float* out_val_loss) {
  return embed_call([&] {
    require(trainer && out_val_loss, "keel_trainer_evaluate: trainer and out_val_loss must not be NULL");
    *out_val_loss = float(trainer->trainer->evaluate());
  });
}

KEEL_API keel_status keel_trainer_train(keel_trainer* trainer, int64_t steps, keel_step_callback callback,
                                        void* user_data) {
  return embed_call([&] {
    require(trainer && (steps >= 0 || steps == KEEL_TRAIN_TO_CONFIGURED_STEPS),
            "keel_trainer_train: trainer is NULL, or steps is negative (KEEL_TRAIN_TO_CONFIGURED_STEPS aside)");
    keel::Trainer& t = *trainer->trainer;
    if (steps == KEEL_TRAIN_TO_CONFIGURED_STEPS) steps = std::max<int64_t>(0, t.config().train.steps - t.step());
    // A trainer that has stepped already (or was loaded from a checkpoint) continues its metrics file.
    if (!trainer->session)
      trainer->session = std::make_unique<keel::RunSession>(t, trainer->output, t.step() > 0);
    keel::RunSlice slice;
    slice.until_step = t.step() + steps;
    slice.ends_run = false;  // the caller saves (keel_trainer_save) and generates when it wants to
    int32_t answer = 0;
    bool saved = false;  // the last step saved (its checkpoint.every)
    slice.after_step = [&](const keel::StepResult& result, const keel::StepOutcome& outcome) {
      saved = !outcome.checkpoint.empty();
      keep_metrics(trainer, result);
      if (outcome.val_loss) trainer->last.val_loss = *outcome.val_loss;
      trainer->last_checkpoint = outcome.checkpoint;
      trainer->last.checkpoint = outcome.checkpoint.empty() ? nullptr : trainer->last_checkpoint.c_str();
      answer = callback ? callback(&trainer->last, user_data) : 0;
      answer = agreed_answer(t.mesh().world, answer);
      return answer != 0;
    };
    trainer->session->run(slice);
    // An interrupt (the callback's KEEL_STEP_INTERRUPTED: Ctrl-C in the caller's language) saves
    // the step it stopped after where the config asks, unless the run has just saved it; every
    // rank agreed on the answer, so every rank takes part.
    const keel::CheckpointConfig& checkpoint = t.config().train.checkpoint;
    if (answer == KEEL_STEP_INTERRUPTED && checkpoint.on_interrupt && !saved && t.step() > 0) {
      trainer->last_checkpoint = keel::save_checkpoint(t.state_view(), t.position(), checkpoint.dir, checkpoint.keep);
      trainer->last.checkpoint = trainer->last_checkpoint.c_str();
    }
  });
}

KEEL_API keel_status keel_trainer_set_verbose(keel_trainer* trainer, int32_t verbose) {
  return embed_call([&] {
    require(trainer && (verbose == 0 || verbose == 1), "keel_trainer_set_verbose: trainer is NULL, or verbose is not 0 or 1");
    trainer->output.flush();
    trainer->output_buffer.on = verbose == 1;
  });
}

KEEL_API keel_status keel_trainer_set_kv_cache(keel_trainer* trainer, int32_t enabled) {
  return embed_call([&] {
    require(trainer && (enabled == 0 || enabled == 1),
            "keel_trainer_set_kv_cache: trainer is NULL, or enabled is not 0 or 1");
    trainer->kv_cache = enabled == 1;
  });
}

KEEL_API keel_status keel_set_log_level(int32_t level) {
  return embed_call([&] {
    require(level >= KEEL_LOG_DEBUG && level <= KEEL_LOG_ERROR,
            "keel_set_log_level: level is not one of KEEL_LOG_DEBUG, _INFO, _WARN, _ERROR");
    keel::set_log_threshold(level);
  });
}

namespace {

// keel_trainer_export_hf(_tokenizer): rank 0 writes; its outcome reaches every rank, so all return alike.
keel_status export_hf_call(const char* fn, keel_trainer* trainer, const char* folder, const char* tokenizer) {
  return embed_call([&] {
    require(trainer && folder && *folder, (std::string(fn) + ": trainer is NULL, or folder is NULL or empty").c_str());
    keel::Trainer& t = *trainer->trainer;
    require_whole_parameters(t, fn);
    std::string failure;
    keel_status code = KEEL_ERR_IO;
    if (t.mesh().world.rank == 0) {
      try {
        keel::export_huggingface(t.parameters(), (std::filesystem::path(folder) / "model.safetensors").string());
        if (tokenizer) keel::attach_hf_tokenizer(folder, tokenizer);
      } catch (const keel::KeelError& e) {
        failure = e.what();
        code = e.code;
      } catch (const std::exception& e) {
        failure = e.what();
      }
    }
    const int64_t outcome = keel::broadcast_int64(t.mesh().world, failure.empty() ? 0 : int64_t(code), 0);
    if (outcome != 0)
      throw keel::KeelError(keel_status(outcome),
                            failure.empty() ? std::string(fn) + ": rank 0 could not write " + folder +
                                                  " (its message says why)"
                                            : failure);
  });
}

}  // namespace

KEEL_API keel_status keel_trainer_export_hf(keel_trainer* trainer, const char* folder) {
  return export_hf_call("keel_trainer_export_hf", trainer, folder, nullptr);
}

KEEL_API keel_status keel_trainer_export_hf_tokenizer(keel_trainer* trainer, const char* folder, const char* tokenizer) {
  return export_hf_call("keel_trainer_export_hf_tokenizer", trainer, folder, tokenizer);
}

KEEL_API keel_status keel_trainer_load_hf(keel_trainer* trainer, const char* path) {
  return embed_call([&] {
    require(trainer && path && *path, "keel_trainer_load_hf: trainer is NULL, or path is NULL or empty");
    keel::Trainer& t = *trainer->trainer;
    require_whole_parameters(t, "keel_trainer_load_hf");
    keel::import_huggingface(t.parameters(), path);  // collective: every rank calls, as the ABI says
  });
}

KEEL_API keel_status keel_trainer_last_metrics(keel_trainer* trainer, keel_step_metrics* out) {
  return embed_call([&] {
    require(trainer && out, "keel_trainer_last_metrics: trainer and out must not be NULL");
    copy_versioned(trainer->last, out);
  });
}

KEEL_API keel_status keel_trainer_save(keel_trainer* trainer, const char* root_dir, int32_t keep) {
  return embed_call([&] {
    // root_dir NULL and keep 0: the config's train.checkpoint.dir and .keep, where a run saves.
    require(trainer && ((root_dir && keep > 0) || (!root_dir && keep == 0)),
            "keel_trainer_save: trainer is NULL, or keep < 1 with a root_dir, or keep not 0 without one");
    keel::Trainer& t = *trainer->trainer;
    const keel::CheckpointConfig& configured = t.config().train.checkpoint;
    keel::save_checkpoint(t.state_view(), t.position(), root_dir ? root_dir : configured.dir,
                          keep > 0 ? keep : configured.keep);
  });
}

KEEL_API keel_status keel_trainer_load(keel_trainer* trainer, const char* checkpoint_path) {
  return embed_call([&] {
    require(trainer && checkpoint_path, "keel_trainer_load: trainer and checkpoint_path must not be NULL");
    // The next train() starts a new session from the loaded step (its metrics trimmed to it);
    // the old one first finishes any checkpoint it is writing in the background.
    trainer->session.reset();
    // "latest", unless a folder of that name is here: the newest checkpoint of the config's
    // train.checkpoint.dir, as `keel run --resume latest` takes it.
    std::error_code error;
    const bool config_latest = std::string(checkpoint_path) == "latest" && !std::filesystem::exists("latest", error);
    const std::string where = config_latest ? trainer->trainer->config().train.checkpoint.dir : checkpoint_path;
    keel::Trainer& t = *trainer->trainer;
    t.resume_at(keel::load_checkpoint(t.state_view(), keel::resolve_checkpoint(where)));
    // The last step is now the checkpoint's: its count, and no metrics measured yet.
    trainer->last = no_metrics_yet(*trainer->trainer);
  });
}

KEEL_API keel_status keel_trainer_param_count(keel_trainer* trainer, size_t* out_count) {
  return embed_call([&] {
    require(trainer && out_count, "keel_trainer_param_count: trainer and out_count must not be NULL");
    *out_count = trainer->trainer->model_info().n_params;
  });
}

KEEL_API keel_status keel_trainer_param_info(keel_trainer* trainer, size_t index, keel_param_info* out) {
  return embed_call([&] {
    require(trainer && out, "keel_trainer_param_info: trainer and out must not be NULL");
    const keel_model_info& info = trainer->trainer->model_info();
    if (index >= info.n_params)
      throw keel::KeelError(KEEL_ERR_INVALID_ARGUMENT, "keel_trainer_param_info: index " + std::to_string(index) +
                                                           " is outside [0, " + std::to_string(info.n_params) + ")");
    keel_param_info result{};
    result.struct_size = sizeof(result);
    result.name = info.params[index].name;
    result.ndim = info.params[index].ndim;
    for (int32_t d = 0; d < KEEL_MAX_DIMS; ++d) result.shape[d] = d < result.ndim ? info.params[index].global_shape[d] : 0;
    copy_versioned(result, out);
  });
}

KEEL_API keel_status keel_trainer_param_tensor(keel_trainer* trainer, const char* name, keel_tensor* out_tensor) {
  return embed_call([&] {
    require(trainer && name && out_tensor, "keel_trainer_param_tensor: trainer, name and out_tensor must not be NULL");
    keel::Trainer& t = *trainer->trainer;
    const size_t index = t.parameters().param_index(name);
    keel_tensor tensor = t.parameters().param_tensor(index);
    const keel_param_spec& spec = t.model_info().params[index];
    for (int32_t d = 0; d < spec.ndim; ++d)
      if (spec.local_shape[d] != spec.global_shape[d])
        throw keel::KeelError(KEEL_ERR_UNIMPLEMENTED, std::string("parameter ") + name +
                                                          " is sharded on this rank: read it with keel_trainer_read_param");
    *out_tensor = tensor;
  });
}

KEEL_API keel_status keel_trainer_read_param(keel_trainer* trainer, const char* name, float* dst, size_t count) {
  return embed_call([&] {
    require(trainer && name && dst, "keel_trainer_read_param: trainer, name and dst must not be NULL");
    keel::Trainer& t = *trainer->trainer;
    const size_t index = t.parameters().param_index(name);
    if (int64_t(count) != t.parameters().global_numel(index))
      throw keel::KeelError(KEEL_ERR_INVALID_ARGUMENT, std::string("parameter ") + name + " has " +
                                                           std::to_string(t.parameters().global_numel(index)) + " elements, not " +
                                                           std::to_string(count));
    std::vector<float> values = t.parameters().read_param(index);
    std::memcpy(dst, values.data(), count * sizeof(float));
  });
}

KEEL_API keel_status keel_trainer_gather_param(keel_trainer* trainer, const char* name, float* dst, size_t count,
                                               int64_t* out_shape, int32_t* out_ndim) {
  return embed_call([&] {
    require(trainer && name && out_shape && out_ndim,
            "keel_trainer_gather_param: trainer, name, out_shape and out_ndim must not be NULL");
    const keel::GatheredParam whole = keel::gather_param(*trainer->trainer, name, dst != nullptr);
    *out_ndim = int32_t(whole.shape.size());
    std::copy(whole.shape.begin(), whole.shape.end(), out_shape);
    if (!dst) return;
    if (count != whole.values.size())
      throw keel::KeelError(KEEL_ERR_INVALID_ARGUMENT, std::string("parameter ") + name + " has " +
                                                           std::to_string(whole.values.size()) + " elements, not " +
                                                           std::to_string(count));
    std::memcpy(dst, whole.values.data(), count * sizeof(float));
  });
}

KEEL_API keel_status keel_trainer_write_param(keel_trainer* trainer, const char* name, const float* src, size_t count) {
  return embed_call([&] {
    require(trainer && name && src, "keel_trainer_write_param: trainer, name and src must not be NULL");
    keel::Trainer& t = *trainer->trainer;
    t.parameters().write_param(t.parameters().param_index(name), std::vector<float>(src, src + count));
  });
}

KEEL_API keel_status keel_plugin_count(size_t* out_count) {
  return embed_call([&] {
    require(out_count, "keel_plugin_count: out_count is NULL");
    *out_count = keel::PluginRegistry::instance().count();
  });
}

KEEL_API keel_status keel_plugin_describe(size_t index, keel_plugin_description* out) {
  return embed_call([&] {
    require(out, "keel_plugin_describe: out is NULL");
    const keel::LoadedPlugin& plugin = keel::PluginRegistry::instance().at(index);
    keel_plugin_description result{sizeof(result), &plugin.info, keel::kind_name(plugin.info.kind), plugin.path.c_str()};
    copy_versioned(result, out);
  });
}

KEEL_API keel_status keel_register_plugin(const keel_plugin_info* info) {
  return embed_call([&] {
    require(info, "keel_register_plugin: info is NULL");
    keel::PluginRegistry::instance().register_in_process(*info);
  });
}

/* --- appended in 0.5 --- */

KEEL_API keel_status keel_register_plugin_replace(const keel_plugin_info* info) {
  return embed_call([&] {
    require(info, "keel_register_plugin_replace: info is NULL");
    keel::PluginRegistry::instance().register_in_process(*info, true);
  });
}

KEEL_API keel_status keel_trainer_vocab_size(keel_trainer* trainer, int32_t* out_vocab_size) {
  return embed_call([&] {
    require(trainer && out_vocab_size, "keel_trainer_vocab_size: trainer and out_vocab_size must not be NULL");
    *out_vocab_size = trainer->trainer->model_info().vocab_size;
  });
}

KEEL_API keel_status keel_trainer_context_length(keel_trainer* trainer, int32_t* out_seq_len) {
  return embed_call([&] {
    require(trainer && out_seq_len, "keel_trainer_context_length: trainer and out_seq_len must not be NULL");
    *out_seq_len = trainer->trainer->seq_len();
  });
}

KEEL_API keel_status keel_trainer_logits(keel_trainer* trainer, const int32_t* tokens, int32_t batch, int32_t seq_len,
                                         float* out_logits, size_t count) {
  return embed_call([&] {
    require(trainer && tokens && out_logits, "keel_trainer_logits: trainer, tokens and out_logits must not be NULL");
    keel::Trainer& t = *trainer->trainer;
    const int32_t vocab = t.model_info().vocab_size, padded = t.model_info().padded_vocab_size;
    const int32_t context = t.seq_len();
    if (batch < 1 || seq_len < 1 || seq_len > context)
      throw keel::KeelError(KEEL_ERR_INVALID_ARGUMENT,
                            "keel_trainer_logits: tokens are (" + std::to_string(batch) + ", " + std::to_string(seq_len) +
                                "); expected at least one row of 1 to " + std::to_string(context) +
                                " tokens (data.seq_len)");
    if (count != size_t(batch) * size_t(seq_len) * size_t(vocab))
      throw keel::KeelError(KEEL_ERR_INVALID_ARGUMENT, "keel_trainer_logits: count is " + std::to_string(count) +
                                                           "; expected batch * seq_len * vocab = " +
                                                           std::to_string(size_t(batch) * seq_len * vocab));
    for (size_t i = 0; i < size_t(batch) * seq_len; ++i)
      if (tokens[i] < 0 || tokens[i] >= vocab)
        throw keel::KeelError(KEEL_ERR_INVALID_ARGUMENT, "keel_trainer_logits: token " + std::to_string(tokens[i]) +
                                                             " at flat index " + std::to_string(i) +
                                                             " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    // The model runs on the shapes it trains on: rows of data.seq_len (padded after the real
    // tokens; causal attention keeps the real positions' logits independent of the padding),
    // at most data.micro_batch rows per forward.
    const int32_t rows_per_forward = std::max(1, t.config().data.micro_batch);
    std::vector<float> result(count);
    for (int32_t first = 0; first < batch; first += rows_per_forward) {
      const int32_t rows = std::min(rows_per_forward, batch - first);
      std::vector<int32_t> window(size_t(rows) * context, 0);
      for (int32_t r = 0; r < rows; ++r)
        std::copy(tokens + size_t(first + r) * seq_len, tokens + size_t(first + r + 1) * seq_len,
                  window.begin() + size_t(r) * context);
      const std::vector<float> all = t.logits(window, rows, context);
      for (int32_t r = 0; r < rows; ++r)
        for (int32_t p = 0; p < seq_len; ++p)
          std::copy_n(all.data() + (size_t(r) * context + p) * padded, vocab,
                      result.data() + ((size_t(first + r)) * seq_len + p) * vocab);
    }
    std::memcpy(out_logits, result.data(), count * sizeof(float));
  });
}

KEEL_API keel_status keel_trainer_generate(keel_trainer* trainer, const int32_t* prompt, size_t prompt_length,
                                           int32_t count, double temperature, uint64_t seed, int32_t* out_tokens) {
  return keel_trainer_generate_top(trainer, prompt, prompt_length, count, temperature, 0, 1.0, seed, out_tokens);
}

namespace {

// The checks every generation entry makes of its arguments, naming the C function.
void check_own_generation_arguments(keel::Trainer& t, const int32_t* prompt, size_t prompt_length, int32_t top_k,
                                    double top_p) {
  if (top_k < 0 || !(top_p > 0 && top_p <= 1))
    throw keel::KeelError(KEEL_ERR_INVALID_ARGUMENT, "keel_trainer_generate: top_k must be >= 0 (0: all) and top_p "
                                                     "in (0, 1]; found top_k " + std::to_string(top_k) + ", top_p " +
                                                         std::to_string(top_p));
  const int32_t vocab = t.model_info().vocab_size;
  for (size_t i = 0; i < prompt_length; ++i)
    if (prompt[i] < 0 || prompt[i] >= vocab)
      throw keel::KeelError(KEEL_ERR_INVALID_ARGUMENT, "keel_trainer_generate: prompt token " +
                                                           std::to_string(prompt[i]) + " at index " + std::to_string(i) +
                                                           " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
}

// The same checks on every rank, and then one small sum over the world, so that when one rank's
// arguments are refused every rank raises instead of the others waiting in the first token's
// collectives for a rank that left: the refused rank with its reason, the others naming how many.
void check_generation_arguments(keel::Trainer& t, const int32_t* prompt, size_t prompt_length, int32_t top_k,
                                double top_p) {
  std::string refusal;
  try {
    check_own_generation_arguments(t, prompt, prompt_length, top_k, top_p);
  } catch (const keel::KeelError& e) {
    refusal = e.what();
  }
  const keel::CommGroup& world = t.mesh().world;
  const double refused_ranks = world.alone() ? 0.0 : keel::sum_in_rank_order(world, refusal.empty() ? 0.0 : 1.0);
  if (!refusal.empty()) throw keel::KeelError(KEEL_ERR_INVALID_ARGUMENT, refusal);
  if (refused_ranks > 0)
    throw keel::KeelError(KEEL_ERR_INVALID_ARGUMENT,
                          "keel_trainer_generate: " + std::to_string(int64_t(refused_ranks)) + " other rank(s) of " +
                              std::to_string(world.size) + " had their arguments refused (their errors say why); "
                              "every rank generates together, with the same arguments");
}

double temperature_or_config(const keel::Trainer& t, double temperature) {
  return temperature >= 0 ? temperature : t.config().train.sample_temperature;
}

}  // namespace

KEEL_API keel_status keel_trainer_generate_top(keel_trainer* trainer, const int32_t* prompt, size_t prompt_length,
                                               int32_t count, double temperature, int32_t top_k, double top_p,
                                               uint64_t seed, int32_t* out_tokens) {
  return embed_call([&] {
    require(trainer && (prompt || prompt_length == 0) && (out_tokens || count == 0) && count >= 0,
            "keel_trainer_generate: trainer is NULL, prompt or out_tokens is NULL, or count is negative");
    keel::Trainer& t = *trainer->trainer;
    check_generation_arguments(t, prompt, prompt_length, top_k, top_p);
    keel::sample_each(t, std::vector<int32_t>(prompt, prompt + prompt_length), count, seed,
                      temperature_or_config(t, temperature), top_k, top_p, trainer->kv_cache,
                      [&](int32_t token, int64_t index) {
                        out_tokens[index] = token;
                        return false;
                      });
  });
}

KEEL_API keel_status keel_trainer_generate_each(keel_trainer* trainer, const int32_t* prompt, size_t prompt_length,
                                                int64_t max_count, double temperature, int32_t top_k, double top_p,
                                                uint64_t seed, keel_token_callback on_token, void* user,
                                                int64_t* out_count) {
  return embed_call([&] {
    require(trainer && (prompt || prompt_length == 0) && on_token && max_count >= 0,
            "keel_trainer_generate_each: trainer or on_token is NULL, prompt is NULL with a length, or max_count is "
            "negative");
    keel::Trainer& t = *trainer->trainer;
    check_generation_arguments(t, prompt, prompt_length, top_k, top_p);
    if (out_count) *out_count = 0;
    const int64_t generated = keel::sample_each(
        t, std::vector<int32_t>(prompt, prompt + prompt_length), max_count, seed, temperature_or_config(t, temperature),
        top_k, top_p, trainer->kv_cache, [&](int32_t token, int64_t index) {
          if (out_count) *out_count = index + 1;
          return on_token(user, token, index) != 0;
        });
    if (out_count) *out_count = generated;
  });
}

}  // extern "C"
