/* The embedding API: what an application (the keel CLI, Python, Rust, Julia, SWIG) calls on
   the core. Exported by libkeel-core. Every function returns a keel_status (or documents its
   value), leaves its outputs untouched on error, and sets the calling thread's message for
   keel_last_error(). Threading: distinct trainers may be used from distinct threads at once;
   one trainer from one thread at a time. Ownership is stated on each function. */
#ifndef KEEL_EMBED_H
#define KEEL_EMBED_H

#include "keel/plugin.h"
#include "keel/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define KEEL_API __declspec(dllexport)
#else
#define KEEL_API __attribute__((visibility("default")))
#endif

typedef struct keel_trainer keel_trainer;

typedef struct keel_step_metrics {
  size_t struct_size;
  int64_t step;          /* optimizer steps done, after this one */
  float loss;            /* mean training loss over the step's micro-batches */
  float lr;
  float grad_norm;       /* before clipping */
  double tokens_per_s;
  double mfu;            /* fraction of the backend's peak */
  double step_ms;
  /* --- appended in 0.13 --- */
  double val_loss;          /* this step's validation loss; NaN unless the step evaluated */
  int64_t tokens;           /* tokens trained so far, over every data-parallel rank */
  double data_ms, forward_ms, backward_ms, optimizer_ms;  /* this step's phases (host wall time) */
  const char* checkpoint;   /* the folder this step saved to (with async saves, being written), or
                               NULL; owned by the trainer, valid until its next step */
  /* --- appended in 0.19 --- */
  const char* model_json;   /* the model's own metrics of the step (model.h step_metrics), combined
                               over data parallelism, as a JSON object of name: value ("{}" when
                               the model reports none), or NULL before a step; owned by the
                               trainer, valid until its next step */
} keel_step_metrics;

/* The calling thread's last error message; "" if none. Valid until the thread's next Keel call. */
KEEL_API const char* keel_last_error(void);
/* Adds one plugin library by path ahead of every search folder. */
KEEL_API keel_status keel_register_plugin_library(const char* path);
/* Builds a trainer from a JSON config file or JSON text; the caller destroys it. */
KEEL_API keel_status keel_trainer_create_from_file(const char* path, keel_trainer** out_trainer);
KEEL_API keel_status keel_trainer_create_from_json(const char* json_text, keel_trainer** out_trainer);
KEEL_API void keel_trainer_destroy(keel_trainer* trainer);
/* One optimizer step (all micro-batches of the accumulation). */
KEEL_API keel_status keel_trainer_step(keel_trainer* trainer, keel_step_metrics* out_metrics);
/* Mean validation loss over the configured number of validation batches. */
KEEL_API keel_status keel_trainer_evaluate(keel_trainer* trainer, float* out_val_loss);

/* --- appended in 0.3 --- */

/* What a keel_step_callback returns to stop as an interrupt (the caller's Ctrl-C): with the
   config's train.checkpoint.on_interrupt the step is then saved (appended in 0.13). */
#define KEEL_STEP_INTERRUPTED 2
/* keel_trainer_train's `steps` that trains up to the config's train.steps (appended in 0.13). */
#define KEEL_TRAIN_TO_CONFIGURED_STEPS (-1)

/* Called after each step of keel_trainer_train with that step's metrics (valid for the call);
   return 0 to go on, non-zero to stop after this step (KEEL_STEP_INTERRUPTED: an interrupt).
   Runs on the thread that called train. */
typedef int32_t (*keel_step_callback)(const keel_step_metrics* metrics, void* user_data);
/* `steps` optimizer steps (fewer if the callback stops them), or KEEL_TRAIN_TO_CONFIGURED_STEPS:
   up to the config's train.steps (none when the trainer is there already); callback may be NULL. */
KEEL_API keel_status keel_trainer_train(keel_trainer* trainer, int64_t steps, keel_step_callback callback,
                                        void* user_data);
/* The metrics of the last step (zeros before the first). */
KEEL_API keel_status keel_trainer_last_metrics(keel_trainer* trainer, keel_step_metrics* out_metrics);
/* Saves a checkpoint under root_dir (root_dir/step-N, then root_dir/latest), keeping the newest
   `keep`. 0.13: root_dir NULL with keep 0 saves where a run would, to the config's
   train.checkpoint.dir keeping train.checkpoint.keep. */
KEEL_API keel_status keel_trainer_save(keel_trainer* trainer, const char* root_dir, int32_t keep);
/* Loads a checkpoint: a step folder, or a root whose `latest` names one. 0.13: "latest" (when
   no folder of that name is in the working directory) is the newest checkpoint of the config's
   train.checkpoint.dir, as `keel run --resume latest` takes it. */
KEEL_API keel_status keel_trainer_load(keel_trainer* trainer, const char* checkpoint_path);

typedef struct keel_param_info {
  size_t struct_size;
  const char* name;               /* owned by the trainer, valid for its life */
  int32_t ndim;
  int64_t shape[KEEL_MAX_DIMS];   /* global shape */
} keel_param_info;

KEEL_API keel_status keel_trainer_param_count(keel_trainer* trainer, size_t* out_count);
/* The caller sets out_info->struct_size. */
KEEL_API keel_status keel_trainer_param_info(keel_trainer* trainer, size_t index, keel_param_info* out_info);
/* The live parameter `name` as a descriptor of the strategy's own memory (zero-copy): valid
   until the trainer's next step, train, load or destroy; writes through it change the model.
   KEEL_ERR_UNIMPLEMENTED when the strategy does not keep whole parameters resident (use read). */
KEEL_API keel_status keel_trainer_param_tensor(keel_trainer* trainer, const char* name, keel_tensor* out_tensor);
/* Copies parameter `name` (count must equal its element count) to or from host memory. */
KEEL_API keel_status keel_trainer_read_param(keel_trainer* trainer, const char* name, float* dst, size_t count);
KEEL_API keel_status keel_trainer_write_param(keel_trainer* trainer, const char* name, const float* src, size_t count);

/* Plugins the loader found (discovering the search folders on first call). The info's strings
   and table live as long as the process; `path` is the library file ("" for in-process). */
typedef struct keel_plugin_description {
  size_t struct_size;
  const keel_plugin_info* info;
  const char* kind_name;          /* "backend", "model", ... */
  const char* path;
} keel_plugin_description;
KEEL_API keel_status keel_plugin_count(size_t* out_count);
/* The caller sets out->struct_size. */
KEEL_API keel_status keel_plugin_describe(size_t index, keel_plugin_description* out);
/* Adds a plugin implemented in this process (a binding's Python optimizer or data source).
   `info`, its strings and its table must stay valid for the rest of the process. It is
   checked like a library's entry and refused with a message on a duplicate name. */
KEEL_API keel_status keel_register_plugin(const keel_plugin_info* info);

/* --- appended in 0.5 --- */

/* Like keel_register_plugin, but a plugin of the same kind and name that is already registered
   (a library's, or an earlier in-process one) is replaced for trainers created afterwards;
   trainers made before keep the plugin they were made with. keel_register_plugin refuses such
   a name, naming who provides it. */
KEEL_API keel_status keel_register_plugin_replace(const keel_plugin_info* info);
/* The model's true vocabulary size (without padding): the last dimension of keel_trainer_logits. */
KEEL_API keel_status keel_trainer_vocab_size(keel_trainer* trainer, int32_t* out_vocab_size);
/* The longest sequence keel_trainer_logits takes: the run's data seq_len. */
KEEL_API keel_status keel_trainer_context_length(keel_trainer* trainer, int32_t* out_seq_len);
/* Logits of an inference forward of `tokens` ((batch, seq_len) row-major, each in [0, vocab),
   1 <= seq_len <= the context length) into out_logits ((batch, seq_len, vocab) row-major with
   the true vocabulary; `count` must be batch * seq_len * vocab). Under mpirun every rank must
   call it with the same arguments: a sharding strategy gathers parameters over the group. */
KEEL_API keel_status keel_trainer_logits(keel_trainer* trainer, const int32_t* tokens, int32_t batch, int32_t seq_len,
                                         float* out_logits, size_t count);
/* Generates `count` tokens after `prompt` (prompt_length tokens, may be 0) into out_tokens
   (room for `count`), as `keel run` samples: softmax at `temperature` (negative: the config's
   train.sample_temperature), seeded by `seed`, so the same seed gives the same tokens. Under
   mpirun every rank must call it with the same arguments. */
KEEL_API keel_status keel_trainer_generate(keel_trainer* trainer, const int32_t* prompt, size_t prompt_length,
                                           int32_t count, double temperature, uint64_t seed, int32_t* out_tokens);

/* --- appended in 0.14 --- */

/* Your own loop, on your own batches: `tokens` and `targets` are (batch, seq_len) row-major token
   ids in [0, vocab), targets[i] the id position i should predict, or -1 where nothing is learned
   (a prompt's token, padding: the loss is the mean over the learned targets of the whole step,
   every rank's, as Hugging Face's labels of -100 give; since 0.19); seq_len is the run's data
   seq_len, and batch at most data.micro_batch rows or a multiple of it (split into micro-batches
   of that many). Every rank calls: under data parallelism each passes its own share, of the
   same number of rows; the tensor- and pipeline-parallel ranks of one replica pass the same rows.
   The ranks compare their batches first, so a bad one on any rank fails every rank alike.
   forward_backward: the gradients of the batch from zero, and the loss the step will report (the
   data-parallel mean); they stay readable with read_grad until optimizer_step consumes them
   (another forward_backward, a step or a load drops them). optimizer_step: the update from them, as a
   step makes it (gradient norm, train.grad_clip, the scheduled learning rate, the strategy), and
   the step's metrics. step_on: both at once. Not with a strategy whose replicas step on their
   own (strategy.h 0.14): KEEL_ERR_UNIMPLEMENTED. */
KEEL_API keel_status keel_trainer_forward_backward(keel_trainer* trainer, const int32_t* tokens, const int32_t* targets,
                                                   int32_t batch, int32_t seq_len, float* out_loss);
/* Parameter `name`'s gradient from the last forward_backward as the update will see it, into
   host memory (count: its element count): at one data-parallel rank any strategy's; at more,
   only a strategy's that says it holds gradients whole (strategy.h 0.19
   KEEL_STRATEGY_HOLDS_WHOLE_GRADS: ddp's data-parallel mean, diloco's or edit's replica's own),
   others refused (ZeRO holds reduced pieces, topk and powersgd compress); a tensor split by
   tensor parallelism is refused as read_param refuses it. */
KEEL_API keel_status keel_trainer_read_grad(keel_trainer* trainer, const char* name, float* dst, size_t count);
KEEL_API keel_status keel_trainer_optimizer_step(keel_trainer* trainer, keel_step_metrics* out_metrics);
KEEL_API keel_status keel_trainer_step_on(keel_trainer* trainer, const int32_t* tokens, const int32_t* targets,
                                          int32_t batch, int32_t seq_len, keel_step_metrics* out_metrics);
/* verbose 1 (the default): keel_trainer_train prints the run's header, progress and notes on
   stdout as `keel run` does; 0: nothing there (the metrics file and TensorBoard events are
   written either way, warnings and errors still reach stderr). From the next train call. */
KEEL_API keel_status keel_trainer_set_verbose(keel_trainer* trainer, int32_t verbose);
/* The least severe log line the process prints on stderr from now on, for every trainer and
   plugin: 0 debug, 1 info, 2 warn, 3 error (keel/host.h's KEEL_LOG_*); the default is the
   KEEL_LOG_LEVEL variable's, else info. */
KEEL_API keel_status keel_set_log_level(int32_t level);

/* --- appended in 0.15 --- */

/* Hugging Face interop for a live trainer. export_hf writes folder/model.safetensors (the model's
   external names and layouts, F32) and folder/config.json, as `keel export` writes them from a
   checkpoint. load_hf sets every parameter the model names externally from a safetensors file or
   a Hugging Face folder, as model.init_from does (names, transposes and padding undone; a missing,
   extra or misshapen tensor is an error naming it, and nothing is written then). Every rank
   calls both; rank 0 writes the files. Both need each rank to hold whole parameters: any
   strategy at one rank, at more one that says it does (strategy.h 0.19
   KEEL_STRATEGY_HOLDS_WHOLE_PARAMS: ddp, topk, powersgd, diloco, edit), with tp and pp 1;
   elsewhere KEEL_ERR_UNIMPLEMENTED (save a checkpoint and `keel export` it). */
KEEL_API keel_status keel_trainer_export_hf(keel_trainer* trainer, const char* folder);
KEEL_API keel_status keel_trainer_load_hf(keel_trainer* trainer, const char* path);
/* keel_trainer_generate, sampling at each position only among the `top_k` most likely tokens
   (0: all) that also form the smallest set, most likely first, whose probability reaches `top_p`
   (in (0, 1]; 1: all), renormalised. top_k 0 and top_p 1 is keel_trainer_generate exactly. */
KEEL_API keel_status keel_trainer_generate_top(keel_trainer* trainer, const int32_t* prompt, size_t prompt_length,
                                               int32_t count, double temperature, int32_t top_k, double top_p,
                                               uint64_t seed, int32_t* out_tokens);

/* --- appended in 0.17 --- */

/* Parameter `name` whole, whatever the layout: under tensor parallelism, ZeRO shards and
   pipeline stages each rank holds a part, and every rank gets the whole tensor. Collective over
   every rank: each calls it with the same name (and the same dst NULL-ness). Writes the global
   shape to out_shape (KEEL_MAX_DIMS entries) and *out_ndim. With dst NULL only the shape moves
   (ask for it first, then again with room); otherwise count must equal the element count.
   Replicas that differ between syncs (diloco, edit) give the lowest rank's values.
   KEEL_ERR_NOT_FOUND on every rank when no rank has the parameter. */
KEEL_API keel_status keel_trainer_gather_param(keel_trainer* trainer, const char* name, float* dst, size_t count,
                                               int64_t* out_shape, int32_t* out_ndim);

/* --- appended in 0.18 --- */

/* Whether generation uses the model's key/value cache (model.h decode; 1, the default) or runs
   the whole window at every token (0), as Hugging Face's use_cache. Both give the same tokens to
   rounding; a model, layout or backend without the cache runs whole windows either way. */
KEEL_API keel_status keel_trainer_set_kv_cache(keel_trainer* trainer, int32_t enabled);

/* --- appended in 0.19 --- */

/* Hands generated token number `index` (from 0) to the caller as soon as it is drawn. Returns 0
   to go on, nonzero to stop after this token (an end-of-text token, a stop string, Ctrl-C). */
typedef int32_t (*keel_token_callback)(void* user, int32_t token, int64_t index);

/* keel_trainer_generate_top, token by token: each token goes to on_token as it is drawn, and
   generation ends after max_count tokens or when on_token asks (nothing is sized by max_count,
   which may be any count >= 0). Under mpirun every rank calls it with the same arguments; each
   rank's on_token sees every token, and when any rank's asks to stop, every rank stops after the
   same token. *out_count (may be NULL): the tokens generated. The tokens equal
   keel_trainer_generate_top's for the same arguments. */
KEEL_API keel_status keel_trainer_generate_each(keel_trainer* trainer, const int32_t* prompt, size_t prompt_length,
                                                int64_t max_count, double temperature, int32_t top_k, double top_p,
                                                uint64_t seed, keel_token_callback on_token, void* user,
                                                int64_t* out_count);

/* keel_trainer_forward_backward and keel_trainer_step_on on a packed batch of your own:
   `positions` ((batch, seq_len) row-major; NULL: one sequence per row, as the calls without it)
   holds each token's place in its document, 0 where a document starts and one more per token
   after, as Hugging Face's position_ids of packed rows: every row starts at 0, and each position
   is 0 or the one before plus 1. Attention stays inside each document and positions restart
   (model.h keel_forward_args.positions); so that no target crosses into the next document, a
   target whose next position is 0 must be -1 (refused, naming it, otherwise). A model built
   before 0.19 is refused a packed batch. */
KEEL_API keel_status keel_trainer_forward_backward_packed(keel_trainer* trainer, const int32_t* tokens,
                                                          const int32_t* targets, const int32_t* positions,
                                                          int32_t batch, int32_t seq_len, float* out_loss);
KEEL_API keel_status keel_trainer_step_on_packed(keel_trainer* trainer, const int32_t* tokens, const int32_t* targets,
                                                 const int32_t* positions, int32_t batch, int32_t seq_len,
                                                 keel_step_metrics* out_metrics);

/* keel_trainer_export_hf, then `tokenizer` (a tokenizer.json, or a folder holding one with its
   tokenizer_config.json and special_tokens_map.json; NULL: none) copied beside the weights, and
   its end- and start-of-text ids written as config.json's and generation_config.json's
   bos/eos/pad, so transformers' generate stops at its end of text. A role naming no token of the
   tokenizer, or an id outside the model's vocabulary, is refused naming the file, and nothing of
   the tokenizer is written then. As `keel export --tokenizer`. */
KEEL_API keel_status keel_trainer_export_hf_tokenizer(keel_trainer* trainer, const char* folder, const char* tokenizer);

/* A tokenizer, as `keel prepare-data --tokenizer` reads one: text to ids and ids back to text
   (Python's keel.Tokenizer, generate's str prompts). Threading: distinct tokenizers may be used
   from distinct threads at once; one tokenizer from one thread at a time. */
typedef struct keel_tokenizer keel_tokenizer;

/* Opens `spec`: "bytes" (token = byte, vocabulary 256) or the path of a Hugging Face
   tokenizer.json of the kinds docs/data.md lists, refused naming the file and the JSON path of
   what Keel does not implement. The caller destroys it. */
KEEL_API keel_status keel_tokenizer_open(const char* spec, keel_tokenizer** out_tokenizer);
KEEL_API void keel_tokenizer_destroy(keel_tokenizer* tokenizer);
/* One past the largest id it produces, added tokens included. */
KEEL_API keel_status keel_tokenizer_vocab_size(keel_tokenizer* tokenizer, int64_t* out_vocab_size);
/* The ids of `text` (length bytes; UTF-8 for a tokenizer.json, any bytes for "bytes"), as the
   tokenizers library's encode without the post-processor's special tokens. *out_ids is owned by
   the tokenizer and valid until its next encode, decode or destroy. */
KEEL_API keel_status keel_tokenizer_encode(keel_tokenizer* tokenizer, const char* text, size_t length,
                                           const int32_t** out_ids, size_t* out_count);
/* The text of `ids` (count of them), as the tokenizers library's decode: each id's token, the
   special added tokens left out when skip_special is nonzero, through the file's decoder
   (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace; another is refused by name with
   KEEL_ERR_UNIMPLEMENTED). UTF-8, invalid sequences as U+FFFD; "bytes" gives the bytes as they
   are. An id with no token is refused naming it and its index. *out_text (*out_length bytes,
   then a NUL) is owned by the tokenizer and valid until its next encode, decode or destroy. */
KEEL_API keel_status keel_tokenizer_decode(keel_tokenizer* tokenizer, const int32_t* ids, size_t count,
                                           int32_t skip_special, const char** out_text, size_t* out_length);
/* The id of `token` (an added token's content or a token of the model's vocabulary, UTF-8);
   KEEL_ERR_NOT_FOUND when it has none. */
KEEL_API keel_status keel_tokenizer_token_id(keel_tokenizer* tokenizer, const char* token, int32_t* out_id);
/* The token whose id is `id` (*out_token: owned by the tokenizer, valid until its next call),
   and *out_special (may be NULL): 1 for a special added token, else 0; KEEL_ERR_NOT_FOUND when
   no token has the id. */
KEEL_API keel_status keel_tokenizer_token(keel_tokenizer* tokenizer, int32_t id, const char** out_token,
                                          int32_t* out_special);

#ifdef __cplusplus
}
#endif
#endif
