/* The ABI version of these headers. A plugin records the version it was built against in
   its entry; the core refuses another major and never calls a slot newer than the plugin's
   minor. Changes only append (fields, slots, kinds, values, each marked "appended in 0.N"), within
   0.x as after 1.0: a plugin built against an older minor keeps loading, and one built against
   a newer minor than the core's is refused. The minor moves once per release (a git tag, vX.Y),
   not per change: everything appended between two releases shares the open minor. Keel's tests
   prove old plugins: an optimizer and a strategy that declare an older minor and pass its struct
   sizes (the KEEL_*_SIZE(m) macros), and the same built against 0.18's headers, kept frozen.
   0.1: backend, model, optimizer, strategy kinds.
   0.2: strategy read_state/write_state (checkpoints); model external_name/external_config (export).
   0.3: the data kind (data.h); the embedding API completed for bindings (embed.h).
   0.4: the comm kind (comm.h).
   0.5: a strategy's own per-rank state in checkpoints (strategy.h own_state_*).
   0.6: tensor parallelism: a parameter's piece is a box (params.h local_offset); the model gets
        its tp communicator, the strategy its tp position (read/write ranges are piece-local);
        host init_piece; vocabulary-sharded embedding and cross-entropy backend ops.
   0.7: pipeline parallelism: the schedule kind (schedule.h); the model runs a chunk of its
        layers on an activation (model.h stage fields); begin_microbatch precedes each backward
        and says whether it is the chunk's last; parameters tied across stages (params.h); the
        offload kind (offload.h) and the strategy's tier.
   0.8: device-true contracts: the backend's queue, events, host staging memory and element
        types (backend.h *_dt ops, fused cross-entropy and optimizer updates); the model adds its
        loss in backend memory; communicators created on a backend and their reach (comm.h);
        optimizers handed the backend (optimizer.h).
   0.9: the Llama family's backend ops: RMSNorm, rotary position embedding, SwiGLU and
        grouped-query attention (backend.h).
   0.10: a model completes its config from an external format's (model.h complete_config): a
        Hugging Face folder's config.json gives the dimensions model.init_from leaves out.
   0.11: a strategy reports this rank's gradient norm before the data-parallel reduction
        (strategy.h local_grad_sq_norm), from which the core estimates the gradient noise scale.
   0.12: optimizers with packed state and per-tensor calls (optimizer.h flags, range,
        packed_state_bytes, pack_state, unpack_state): 8-bit AdamW and Adafactor.
   0.13: the embedding API's step metrics carry the step's validation loss, tokens so far, phase
        times and the checkpoint it saved (embed.h keel_step_metrics); train runs to the config's
        train.steps (KEEL_TRAIN_TO_CONFIGURED_STEPS); a callback stops as an interrupt
        (KEEL_STEP_INTERRUPTED, saving under train.checkpoint.on_interrupt); load takes "latest"
        and save a NULL root (the config's checkpoint folder).
   0.14: replicas that step on their own between syncs (strategy.h independent_replicas,
        sync_reached): A-EDiT, whose replicas sync on time, each after its own number of steps;
        your own loop on your own batches (embed.h keel_trainer_forward_backward, read_grad,
        optimizer_step, step_on).
   0.15: Hugging Face export and import of a live trainer (embed.h keel_trainer_export_hf,
        keel_trainer_load_hf).
   0.16: a data source saves and restores its position through checkpoints (data.h
        save_position, restore_position), so a run fed by a plugin resumes mid-stream.
   0.17: a parameter read whole under every layout, every rank taking part (embed.h
        keel_trainer_gather_param).
   0.18: generation with a key/value cache in the backend's memory (backend.h
        attention_decode_dt; model.h decode_reset, decode).
   0.19: generation token by token to a callback that may stop it (embed.h
        keel_trainer_generate_each: end-of-text tokens, stop strings, Ctrl-C, no count-sized
        buffer); types.h KEEL_ERR_MISSING_FILE, so a binding tells a missing file by its status;
        comm.h all_to_all_v (per-peer counts, for expert parallelism) and its counters;
        backend.h a mixture-of-experts layer's ops (moe_route, moe_permute_*, grouped_matmul_*);
        strategy.h keel_strategy_info.holds_whole; embed.h keel_tokenizer_* (encode and decode
        through Keel's tokenizer) and keel_step_metrics.model_json; model.h step_metrics (named
        per-step metrics a model reports, combined over data parallelism); expert parallelism: model.h
        ep_rank, ep_size, ep_comm and params.h KEEL_PARAM_EXPERT; model.h step_tallies, end_step and
        own_state_* (state a model moves by a rule once per step, in checkpoints: loss-free
        balancing); params.h KEEL_PARAM_FROZEN (a tensor that does not train: LoRA's base,
        held by the core apart from the strategy); packed batches: model.h
        keel_forward_args.positions, backend.h attention over blocks with document boundaries
        and statistics (keel_attention_args, attention_block_*) and rope_at_*; QLoRA's base:
        params.h KEEL_PARAM_NF4, backend.h nf4_dequantize_dt; quantization-aware training's
        backend.h fake_quantize_dt and fake_quantize_tokens_dt; LoRA's adapter dropout: backend.h
        dropout_dt and model.h keel_forward_args.dropout_seed; context parallelism's backend.h
        attention_merge_dt. 0.19 is the open
        minor (no release tag yet): this wave's appends share it. */
#ifndef KEEL_VERSION_H
#define KEEL_VERSION_H

#define KEEL_ABI_VERSION_MAJOR 0
#define KEEL_ABI_VERSION_MINOR 19

#endif
