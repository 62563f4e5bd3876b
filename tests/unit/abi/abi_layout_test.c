/* The ABI promise, checked at compile time: every shipped field of every table and argument
   struct stays at the offset it had when it shipped (x86-64, LP64). A change that moves a field
   breaks this build; appending a field does not (sizes are checked as lower bounds).
   The numbers were frozen from the headers of each minor (0.1, then the fields and structs 0.2
   to 0.8 appended); the compatibility tests (tests/abi) build plugins of each older release, and a major
   release starts a new frozen set, never edited afterwards. Compiled as C, so the headers stay C. */
#include <keel/keel.h>

#include <stddef.h>
#include <stdio.h>

#define KEEL_ASSERT_OFFSET(type, field, offset) \
  _Static_assert(offsetof(type, field) == (offset), #type "." #field " moved: the ABI only appends")
#define KEEL_ASSERT_SIZE(type, size) \
  _Static_assert(sizeof(type) >= (size), #type " shrank: the ABI only appends")

KEEL_ASSERT_SIZE(keel_comm_counters, 120);
KEEL_ASSERT_OFFSET(keel_comm_counters, struct_size, 0);
KEEL_ASSERT_OFFSET(keel_comm_counters, calls, 8);
KEEL_ASSERT_OFFSET(keel_comm_counters, bytes, 64);
KEEL_ASSERT_SIZE(keel_comm_api, 136);
KEEL_ASSERT_OFFSET(keel_comm_api, struct_size, 0);
KEEL_ASSERT_OFFSET(keel_comm_api, validate_config, 8);
KEEL_ASSERT_OFFSET(keel_comm_api, create_world, 16);
KEEL_ASSERT_OFFSET(keel_comm_api, destroy, 24);
KEEL_ASSERT_OFFSET(keel_comm_api, rank, 32);
KEEL_ASSERT_OFFSET(keel_comm_api, size, 40);
KEEL_ASSERT_OFFSET(keel_comm_api, split, 48);
KEEL_ASSERT_OFFSET(keel_comm_api, all_reduce, 56);
KEEL_ASSERT_OFFSET(keel_comm_api, reduce_scatter, 64);
KEEL_ASSERT_OFFSET(keel_comm_api, all_gather, 72);
KEEL_ASSERT_OFFSET(keel_comm_api, broadcast, 80);
KEEL_ASSERT_OFFSET(keel_comm_api, send, 88);
KEEL_ASSERT_OFFSET(keel_comm_api, recv, 96);
KEEL_ASSERT_OFFSET(keel_comm_api, barrier, 104);
KEEL_ASSERT_OFFSET(keel_comm_api, wait, 112);
KEEL_ASSERT_OFFSET(keel_comm_api, counters, 120);
KEEL_ASSERT_OFFSET(keel_comm_api, abort_world, 128);
KEEL_ASSERT_SIZE(keel_data_api, 48);
KEEL_ASSERT_OFFSET(keel_data_api, struct_size, 0);
KEEL_ASSERT_OFFSET(keel_data_api, validate_config, 8);
KEEL_ASSERT_OFFSET(keel_data_api, create, 16);
KEEL_ASSERT_OFFSET(keel_data_api, destroy, 24);
KEEL_ASSERT_OFFSET(keel_data_api, next_batch, 32);
KEEL_ASSERT_OFFSET(keel_data_api, reset_split, 40);
KEEL_ASSERT_OFFSET(keel_data_api, save_position, 48);  /* 0.16 */
KEEL_ASSERT_OFFSET(keel_data_api, restore_position, 56);
KEEL_ASSERT_SIZE(keel_device, 8);
KEEL_ASSERT_OFFSET(keel_device, device_type, 0);
KEEL_ASSERT_OFFSET(keel_device, device_id, 4);
KEEL_ASSERT_SIZE(keel_dtype, 4);
KEEL_ASSERT_OFFSET(keel_dtype, code, 0);
KEEL_ASSERT_OFFSET(keel_dtype, bits, 1);
KEEL_ASSERT_OFFSET(keel_dtype, lanes, 2);
KEEL_ASSERT_SIZE(keel_tensor, 64);
KEEL_ASSERT_OFFSET(keel_tensor, data, 0);
KEEL_ASSERT_OFFSET(keel_tensor, device, 8);
KEEL_ASSERT_OFFSET(keel_tensor, ndim, 16);
KEEL_ASSERT_OFFSET(keel_tensor, dtype, 20);
KEEL_ASSERT_OFFSET(keel_tensor, shape, 24);
KEEL_ASSERT_OFFSET(keel_tensor, byte_offset, 56);
KEEL_ASSERT_SIZE(keel_param_spec, 120);
KEEL_ASSERT_OFFSET(keel_param_spec, struct_size, 0);
KEEL_ASSERT_OFFSET(keel_param_spec, name, 8);
KEEL_ASSERT_OFFSET(keel_param_spec, layer, 16);
KEEL_ASSERT_OFFSET(keel_param_spec, ndim, 20);
KEEL_ASSERT_OFFSET(keel_param_spec, global_shape, 24);
KEEL_ASSERT_OFFSET(keel_param_spec, tp_dim, 56);
KEEL_ASSERT_OFFSET(keel_param_spec, local_shape, 64);
KEEL_ASSERT_OFFSET(keel_param_spec, flags, 96);
KEEL_ASSERT_OFFSET(keel_param_spec, init, 100);
KEEL_ASSERT_OFFSET(keel_param_spec, init_std, 104);
KEEL_ASSERT_OFFSET(keel_param_spec, init_rows, 112);
KEEL_ASSERT_OFFSET(keel_param_spec, local_offset, 120);  /* 0.6 */
KEEL_ASSERT_SIZE(keel_param_access, 32);
KEEL_ASSERT_OFFSET(keel_param_access, struct_size, 0);
KEEL_ASSERT_OFFSET(keel_param_access, ctx, 8);
KEEL_ASSERT_OFFSET(keel_param_access, acquire, 16);
KEEL_ASSERT_OFFSET(keel_param_access, release, 24);
KEEL_ASSERT_SIZE(keel_host, 48);
KEEL_ASSERT_OFFSET(keel_host, struct_size, 0);
KEEL_ASSERT_OFFSET(keel_host, abi_major, 8);
KEEL_ASSERT_OFFSET(keel_host, abi_minor, 12);
KEEL_ASSERT_OFFSET(keel_host, set_error, 16);
KEEL_ASSERT_OFFSET(keel_host, log, 24);
KEEL_ASSERT_OFFSET(keel_host, init_param, 32);
KEEL_ASSERT_OFFSET(keel_host, last_error, 40);
KEEL_ASSERT_OFFSET(keel_host, init_piece, 48);  /* 0.6 */
KEEL_ASSERT_SIZE(keel_backend_create_args, 24);
KEEL_ASSERT_OFFSET(keel_backend_create_args, struct_size, 0);
KEEL_ASSERT_OFFSET(keel_backend_create_args, config_json, 8);
KEEL_ASSERT_OFFSET(keel_backend_create_args, json_path, 16);
KEEL_ASSERT_SIZE(keel_backend_api, 224);
KEEL_ASSERT_OFFSET(keel_backend_api, struct_size, 0);
KEEL_ASSERT_OFFSET(keel_backend_api, validate_config, 8);
KEEL_ASSERT_OFFSET(keel_backend_api, create, 16);
KEEL_ASSERT_OFFSET(keel_backend_api, destroy, 24);
KEEL_ASSERT_OFFSET(keel_backend_api, device, 32);
KEEL_ASSERT_OFFSET(keel_backend_api, peak_flops, 40);
KEEL_ASSERT_OFFSET(keel_backend_api, alloc, 48);
KEEL_ASSERT_OFFSET(keel_backend_api, free_memory, 56);
KEEL_ASSERT_OFFSET(keel_backend_api, copy, 64);
KEEL_ASSERT_OFFSET(keel_backend_api, fill_zero, 72);
KEEL_ASSERT_OFFSET(keel_backend_api, synchronize, 80);
KEEL_ASSERT_OFFSET(keel_backend_api, matmul_forward, 88);
KEEL_ASSERT_OFFSET(keel_backend_api, matmul_backward, 96);
KEEL_ASSERT_OFFSET(keel_backend_api, layernorm_forward, 104);
KEEL_ASSERT_OFFSET(keel_backend_api, layernorm_backward, 112);
KEEL_ASSERT_OFFSET(keel_backend_api, attention_saved_floats, 120);
KEEL_ASSERT_OFFSET(keel_backend_api, attention_forward, 128);
KEEL_ASSERT_OFFSET(keel_backend_api, attention_backward, 136);
KEEL_ASSERT_OFFSET(keel_backend_api, gelu_forward, 144);
KEEL_ASSERT_OFFSET(keel_backend_api, gelu_backward, 152);
KEEL_ASSERT_OFFSET(keel_backend_api, add, 160);
KEEL_ASSERT_OFFSET(keel_backend_api, accumulate, 168);
KEEL_ASSERT_OFFSET(keel_backend_api, scale, 176);
KEEL_ASSERT_OFFSET(keel_backend_api, embedding_forward, 184);
KEEL_ASSERT_OFFSET(keel_backend_api, embedding_backward, 192);
KEEL_ASSERT_OFFSET(keel_backend_api, crossentropy_forward, 200);
KEEL_ASSERT_OFFSET(keel_backend_api, crossentropy_backward, 208);
KEEL_ASSERT_OFFSET(keel_backend_api, sum_squares, 216);
KEEL_ASSERT_OFFSET(keel_backend_api, embedding_rows_forward, 224);  /* 0.6 */
KEEL_ASSERT_OFFSET(keel_backend_api, embedding_rows_backward, 232);
KEEL_ASSERT_OFFSET(keel_backend_api, crossentropy_shard_stats, 240);
KEEL_ASSERT_OFFSET(keel_backend_api, crossentropy_shard_backward, 248);
KEEL_ASSERT_SIZE(keel_model_create_args, 48);
KEEL_ASSERT_OFFSET(keel_model_create_args, struct_size, 0);
KEEL_ASSERT_OFFSET(keel_model_create_args, config_json, 8);
KEEL_ASSERT_OFFSET(keel_model_create_args, json_path, 16);
KEEL_ASSERT_OFFSET(keel_model_create_args, backend, 24);
KEEL_ASSERT_OFFSET(keel_model_create_args, backend_obj, 32);
KEEL_ASSERT_OFFSET(keel_model_create_args, tp_rank, 40);
KEEL_ASSERT_OFFSET(keel_model_create_args, tp_size, 44);
KEEL_ASSERT_OFFSET(keel_model_create_args, tp_comm, 48);  /* 0.6 */
KEEL_ASSERT_OFFSET(keel_model_create_args, tp_comm_obj, 56);
KEEL_ASSERT_OFFSET(keel_model_create_args, sequence_parallel, 64);
KEEL_ASSERT_SIZE(keel_model_info, 40);
KEEL_ASSERT_OFFSET(keel_model_info, struct_size, 0);
KEEL_ASSERT_OFFSET(keel_model_info, params, 8);
KEEL_ASSERT_OFFSET(keel_model_info, n_params, 16);
KEEL_ASSERT_OFFSET(keel_model_info, n_layers, 24);
KEEL_ASSERT_OFFSET(keel_model_info, vocab_size, 28);
KEEL_ASSERT_OFFSET(keel_model_info, padded_vocab_size, 32);
KEEL_ASSERT_OFFSET(keel_model_info, max_seq_len, 36);
KEEL_ASSERT_SIZE(keel_forward_args, 64);
KEEL_ASSERT_OFFSET(keel_forward_args, struct_size, 0);
KEEL_ASSERT_OFFSET(keel_forward_args, access, 8);
KEEL_ASSERT_OFFSET(keel_forward_args, microbatch, 16);
KEEL_ASSERT_OFFSET(keel_forward_args, batch, 20);
KEEL_ASSERT_OFFSET(keel_forward_args, seq_len, 24);
KEEL_ASSERT_OFFSET(keel_forward_args, tokens, 32);
KEEL_ASSERT_OFFSET(keel_forward_args, targets, 40);
KEEL_ASSERT_OFFSET(keel_forward_args, loss, 48);
KEEL_ASSERT_OFFSET(keel_forward_args, logits, 56);
KEEL_ASSERT_SIZE(keel_backward_args, 24);
KEEL_ASSERT_OFFSET(keel_backward_args, struct_size, 0);
KEEL_ASSERT_OFFSET(keel_backward_args, access, 8);
KEEL_ASSERT_OFFSET(keel_backward_args, microbatch, 16);
KEEL_ASSERT_OFFSET(keel_backward_args, loss_scale, 20);
KEEL_ASSERT_SIZE(keel_external_tensor, 32);
KEEL_ASSERT_OFFSET(keel_external_tensor, struct_size, 0);
KEEL_ASSERT_OFFSET(keel_external_tensor, name, 8);
KEEL_ASSERT_OFFSET(keel_external_tensor, transpose, 16);
KEEL_ASSERT_OFFSET(keel_external_tensor, rows, 24);
KEEL_ASSERT_OFFSET(keel_external_tensor, flatten, 32);  /* 0.6 */
KEEL_ASSERT_OFFSET(keel_external_tensor, reserved, 36);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_external_tensor, merge_leading, 40);  /* 0.19 */
KEEL_ASSERT_SIZE(keel_model_api, 80);
KEEL_ASSERT_OFFSET(keel_model_api, struct_size, 0);
KEEL_ASSERT_OFFSET(keel_model_api, validate_config, 8);
KEEL_ASSERT_OFFSET(keel_model_api, create, 16);
KEEL_ASSERT_OFFSET(keel_model_api, destroy, 24);
KEEL_ASSERT_OFFSET(keel_model_api, describe, 32);
KEEL_ASSERT_OFFSET(keel_model_api, flops_per_token, 40);
KEEL_ASSERT_OFFSET(keel_model_api, forward, 48);
KEEL_ASSERT_OFFSET(keel_model_api, backward, 56);
KEEL_ASSERT_OFFSET(keel_model_api, external_name, 64);
KEEL_ASSERT_OFFSET(keel_model_api, external_config, 72);
KEEL_ASSERT_SIZE(keel_optimizer_info, 24);
KEEL_ASSERT_OFFSET(keel_optimizer_info, struct_size, 0);
KEEL_ASSERT_OFFSET(keel_optimizer_info, n_state_slots, 8);
KEEL_ASSERT_OFFSET(keel_optimizer_info, base_lr, 12);
KEEL_ASSERT_OFFSET(keel_optimizer_info, decay_flags, 16);
KEEL_ASSERT_OFFSET(keel_optimizer_info, flags, 20);  /* 0.12 */
KEEL_ASSERT_SIZE(keel_optimizer_step_args, 72);
KEEL_ASSERT_OFFSET(keel_optimizer_step_args, struct_size, 0);
KEEL_ASSERT_OFFSET(keel_optimizer_step_args, device, 8);
KEEL_ASSERT_OFFSET(keel_optimizer_step_args, params, 16);
KEEL_ASSERT_OFFSET(keel_optimizer_step_args, grads, 24);
KEEL_ASSERT_OFFSET(keel_optimizer_step_args, state, 32);
KEEL_ASSERT_OFFSET(keel_optimizer_step_args, n, 40);
KEEL_ASSERT_OFFSET(keel_optimizer_step_args, lr, 48);
KEEL_ASSERT_OFFSET(keel_optimizer_step_args, grad_scale, 52);
KEEL_ASSERT_OFFSET(keel_optimizer_step_args, step, 56);
KEEL_ASSERT_OFFSET(keel_optimizer_step_args, apply_weight_decay, 64);
KEEL_ASSERT_OFFSET(keel_optimizer_step_args, packed_state, 88);  /* 0.12 */
KEEL_ASSERT_OFFSET(keel_optimizer_step_args, range, 96);
KEEL_ASSERT_SIZE(keel_optimizer_range, 32);  /* 0.12 */
KEEL_ASSERT_OFFSET(keel_optimizer_range, struct_size, 0);
KEEL_ASSERT_OFFSET(keel_optimizer_range, n, 8);
KEEL_ASSERT_OFFSET(keel_optimizer_range, spec, 16);
KEEL_ASSERT_OFFSET(keel_optimizer_range, offset, 24);
KEEL_ASSERT_SIZE(keel_optimizer_api, 48);
KEEL_ASSERT_OFFSET(keel_optimizer_api, struct_size, 0);
KEEL_ASSERT_OFFSET(keel_optimizer_api, validate_config, 8);
KEEL_ASSERT_OFFSET(keel_optimizer_api, create, 16);
KEEL_ASSERT_OFFSET(keel_optimizer_api, destroy, 24);
KEEL_ASSERT_OFFSET(keel_optimizer_api, describe, 32);
KEEL_ASSERT_OFFSET(keel_optimizer_api, step, 40);
KEEL_ASSERT_OFFSET(keel_optimizer_api, packed_state_bytes, 48);  /* 0.12 */
KEEL_ASSERT_OFFSET(keel_optimizer_api, pack_state, 56);
KEEL_ASSERT_OFFSET(keel_optimizer_api, unpack_state, 64);
KEEL_ASSERT_SIZE(keel_strategy_create_args, 112);
KEEL_ASSERT_OFFSET(keel_strategy_create_args, struct_size, 0);
KEEL_ASSERT_OFFSET(keel_strategy_create_args, config_json, 8);
KEEL_ASSERT_OFFSET(keel_strategy_create_args, json_path, 16);
KEEL_ASSERT_OFFSET(keel_strategy_create_args, backend, 24);
KEEL_ASSERT_OFFSET(keel_strategy_create_args, backend_obj, 32);
KEEL_ASSERT_OFFSET(keel_strategy_create_args, optimizer, 40);
KEEL_ASSERT_OFFSET(keel_strategy_create_args, optimizer_obj, 48);
KEEL_ASSERT_OFFSET(keel_strategy_create_args, params, 56);
KEEL_ASSERT_OFFSET(keel_strategy_create_args, n_params, 64);
KEEL_ASSERT_OFFSET(keel_strategy_create_args, n_layers, 72);
KEEL_ASSERT_OFFSET(keel_strategy_create_args, seed, 80);
KEEL_ASSERT_OFFSET(keel_strategy_create_args, dp_comm, 88);
KEEL_ASSERT_OFFSET(keel_strategy_create_args, dp_comm_obj, 96);
KEEL_ASSERT_OFFSET(keel_strategy_create_args, dp_rank, 104);
KEEL_ASSERT_OFFSET(keel_strategy_create_args, dp_size, 108);
KEEL_ASSERT_OFFSET(keel_strategy_create_args, tp_rank, 112);  /* 0.6 */
KEEL_ASSERT_OFFSET(keel_strategy_create_args, tp_size, 116);
KEEL_ASSERT_SIZE(keel_strategy_info, 48);
KEEL_ASSERT_OFFSET(keel_strategy_info, struct_size, 0);
KEEL_ASSERT_OFFSET(keel_strategy_info, params_resident, 8);
KEEL_ASSERT_OFFSET(keel_strategy_info, reserved, 12);
KEEL_ASSERT_OFFSET(keel_strategy_info, param_bytes, 16);
KEEL_ASSERT_OFFSET(keel_strategy_info, grad_bytes, 24);
KEEL_ASSERT_OFFSET(keel_strategy_info, state_bytes, 32);
KEEL_ASSERT_OFFSET(keel_strategy_info, holds_whole, 40);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_strategy_info, dp_levels, 44);
KEEL_ASSERT_SIZE(keel_strategy_step_args, 24);
KEEL_ASSERT_OFFSET(keel_strategy_step_args, struct_size, 0);
KEEL_ASSERT_OFFSET(keel_strategy_step_args, lr, 8);
KEEL_ASSERT_OFFSET(keel_strategy_step_args, grad_scale, 12);
KEEL_ASSERT_OFFSET(keel_strategy_step_args, step, 16);
KEEL_ASSERT_SIZE(keel_strategy_api, 184);
KEEL_ASSERT_OFFSET(keel_strategy_api, struct_size, 0);
KEEL_ASSERT_OFFSET(keel_strategy_api, validate_config, 8);
KEEL_ASSERT_OFFSET(keel_strategy_api, create, 16);
KEEL_ASSERT_OFFSET(keel_strategy_api, destroy, 24);
KEEL_ASSERT_OFFSET(keel_strategy_api, param_access, 32);
KEEL_ASSERT_OFFSET(keel_strategy_api, begin_microbatch, 40);
KEEL_ASSERT_OFFSET(keel_strategy_api, zero_grads, 48);
KEEL_ASSERT_OFFSET(keel_strategy_api, grad_sq_norm, 56);
KEEL_ASSERT_OFFSET(keel_strategy_api, step, 64);
KEEL_ASSERT_OFFSET(keel_strategy_api, read_param, 72);
KEEL_ASSERT_OFFSET(keel_strategy_api, write_param, 80);
KEEL_ASSERT_OFFSET(keel_strategy_api, read_grad, 88);
KEEL_ASSERT_OFFSET(keel_strategy_api, read_state, 96);
KEEL_ASSERT_OFFSET(keel_strategy_api, write_state, 104);
KEEL_ASSERT_OFFSET(keel_strategy_api, owned_range, 112);
KEEL_ASSERT_OFFSET(keel_strategy_api, describe, 120);
KEEL_ASSERT_OFFSET(keel_strategy_api, own_state_count, 128);  /* 0.5 */
KEEL_ASSERT_OFFSET(keel_strategy_api, own_state_info, 136);
KEEL_ASSERT_OFFSET(keel_strategy_api, read_own_state, 144);
KEEL_ASSERT_OFFSET(keel_strategy_api, write_own_state, 152);
KEEL_ASSERT_OFFSET(keel_strategy_api, local_grad_sq_norm, 160); /* 0.11 */
KEEL_ASSERT_OFFSET(keel_strategy_api, independent_replicas, 168); /* 0.14 */
KEEL_ASSERT_OFFSET(keel_strategy_api, sync_reached, 176);
KEEL_ASSERT_SIZE(keel_plugin_info, 56);
KEEL_ASSERT_OFFSET(keel_plugin_info, struct_size, 0);
KEEL_ASSERT_OFFSET(keel_plugin_info, kind, 8);
KEEL_ASSERT_OFFSET(keel_plugin_info, name, 16);
KEEL_ASSERT_OFFSET(keel_plugin_info, version, 24);
KEEL_ASSERT_OFFSET(keel_plugin_info, abi_major, 32);
KEEL_ASSERT_OFFSET(keel_plugin_info, abi_minor, 36);
KEEL_ASSERT_OFFSET(keel_plugin_info, api, 40);
KEEL_ASSERT_OFFSET(keel_plugin_info, description, 48);
KEEL_ASSERT_SIZE(keel_plugin_list, 32);
KEEL_ASSERT_OFFSET(keel_plugin_list, struct_size, 0);
KEEL_ASSERT_OFFSET(keel_plugin_list, abi_major, 8);
KEEL_ASSERT_OFFSET(keel_plugin_list, abi_minor, 12);
KEEL_ASSERT_OFFSET(keel_plugin_list, count, 16);
KEEL_ASSERT_OFFSET(keel_plugin_list, plugins, 24);
KEEL_ASSERT_SIZE(keel_step_metrics, 112);
KEEL_ASSERT_OFFSET(keel_step_metrics, struct_size, 0);
KEEL_ASSERT_OFFSET(keel_step_metrics, step, 8);
KEEL_ASSERT_OFFSET(keel_step_metrics, loss, 16);
KEEL_ASSERT_OFFSET(keel_step_metrics, lr, 20);
KEEL_ASSERT_OFFSET(keel_step_metrics, grad_norm, 24);
KEEL_ASSERT_OFFSET(keel_step_metrics, tokens_per_s, 32);
KEEL_ASSERT_OFFSET(keel_step_metrics, mfu, 40);
KEEL_ASSERT_OFFSET(keel_step_metrics, step_ms, 48);
KEEL_ASSERT_OFFSET(keel_step_metrics, val_loss, 56);  /* 0.13 */
KEEL_ASSERT_OFFSET(keel_step_metrics, tokens, 64);  /* 0.13 */
KEEL_ASSERT_OFFSET(keel_step_metrics, data_ms, 72);  /* 0.13 */
KEEL_ASSERT_OFFSET(keel_step_metrics, forward_ms, 80);  /* 0.13 */
KEEL_ASSERT_OFFSET(keel_step_metrics, backward_ms, 88);  /* 0.13 */
KEEL_ASSERT_OFFSET(keel_step_metrics, optimizer_ms, 96);  /* 0.13 */
KEEL_ASSERT_OFFSET(keel_step_metrics, checkpoint, 104);  /* 0.13 */
KEEL_ASSERT_SIZE(keel_param_info, 56);
KEEL_ASSERT_OFFSET(keel_param_info, struct_size, 0);
KEEL_ASSERT_OFFSET(keel_param_info, name, 8);
KEEL_ASSERT_OFFSET(keel_param_info, ndim, 16);
KEEL_ASSERT_OFFSET(keel_param_info, shape, 24);
KEEL_ASSERT_SIZE(keel_plugin_description, 32);
KEEL_ASSERT_OFFSET(keel_plugin_description, struct_size, 0);
KEEL_ASSERT_OFFSET(keel_plugin_description, info, 8);
KEEL_ASSERT_OFFSET(keel_plugin_description, kind_name, 16);
KEEL_ASSERT_OFFSET(keel_plugin_description, path, 24);

/* struct_size comes first in every table and argument struct (rule 3). */
#define KEEL_ASSERT_SIZE_FIRST(type) _Static_assert(offsetof(type, struct_size) == 0, #type ": struct_size must be first")
KEEL_ASSERT_SIZE_FIRST(keel_param_spec);
KEEL_ASSERT_SIZE_FIRST(keel_param_access);
KEEL_ASSERT_SIZE_FIRST(keel_host);
KEEL_ASSERT_SIZE_FIRST(keel_backend_create_args);
KEEL_ASSERT_SIZE_FIRST(keel_backend_api);
KEEL_ASSERT_SIZE_FIRST(keel_model_create_args);
KEEL_ASSERT_SIZE_FIRST(keel_model_info);
KEEL_ASSERT_SIZE_FIRST(keel_forward_args);
KEEL_ASSERT_SIZE_FIRST(keel_backward_args);
KEEL_ASSERT_SIZE_FIRST(keel_model_api);
KEEL_ASSERT_SIZE_FIRST(keel_optimizer_info);
KEEL_ASSERT_SIZE_FIRST(keel_optimizer_step_args);
KEEL_ASSERT_SIZE_FIRST(keel_optimizer_api);
KEEL_ASSERT_SIZE_FIRST(keel_strategy_create_args);
KEEL_ASSERT_SIZE_FIRST(keel_strategy_step_args);
KEEL_ASSERT_SIZE_FIRST(keel_strategy_api);
KEEL_ASSERT_SIZE_FIRST(keel_plugin_info);
KEEL_ASSERT_SIZE_FIRST(keel_plugin_list);
KEEL_ASSERT_SIZE_FIRST(keel_step_metrics);
KEEL_ASSERT_SIZE_FIRST(keel_external_tensor);
KEEL_ASSERT_SIZE_FIRST(keel_data_api);
KEEL_ASSERT_SIZE_FIRST(keel_param_info);
KEEL_ASSERT_SIZE_FIRST(keel_plugin_description);
KEEL_ASSERT_SIZE_FIRST(keel_comm_api);
KEEL_ASSERT_SIZE_FIRST(keel_comm_counters);
KEEL_ASSERT_SIZE_FIRST(keel_strategy_info);

/* 0.7: pipeline parallelism */
KEEL_ASSERT_OFFSET(keel_model_create_args, pp_rank, 68);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_model_create_args, pp_size, 72);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_model_create_args, virtual_stages, 76);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_model_create_args, stage_blocks, 80);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_model_create_args, n_stage_blocks, 88);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_model_info, n_blocks, 40);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_model_info, reserved, 44);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_model_info, splits_sequences, 48);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_forward_args, chunk, 64);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_forward_args, input, 72);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_forward_args, output, 80);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_backward_args, chunk, 24);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_backward_args, output_grad, 32);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_backward_args, input_grad, 40);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_backward_args, part, 48);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_model_api, stage_io_numel, 80);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_model_api, splits_backward, 88);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_strategy_create_args, pp_rank, 120);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_strategy_create_args, pp_size, 124);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_strategy_create_args, embedding_comm, 128);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_strategy_create_args, embedding_comm_obj, 136);  /* 0.7 */
KEEL_ASSERT_SIZE(keel_schedule_action, 20);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_schedule_action, kind, 0);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_schedule_action, microbatch, 4);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_schedule_action, chunk, 8);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_schedule_action, peer_stage, 12);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_schedule_action, flags, 16);  /* 0.7 */
KEEL_ASSERT_SIZE(keel_schedule_shape, 24);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_schedule_shape, struct_size, 0);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_schedule_shape, stages, 8);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_schedule_shape, microbatches, 12);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_schedule_shape, stage, 16);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_schedule_shape, virtual_stages, 20);  /* 0.7 */
KEEL_ASSERT_SIZE(keel_schedule_api, 40);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_schedule_api, struct_size, 0);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_schedule_api, validate_config, 8);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_schedule_api, check_shape, 16);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_schedule_api, build, 24);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_schedule_api, splits_backward, 32);  /* 0.7 */

KEEL_ASSERT_OFFSET(keel_strategy_create_args, offload, 144);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_strategy_create_args, offload_obj, 152);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_strategy_create_args, offload_arrays, 160);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_strategy_create_args, reserved_0_19, 164);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_strategy_create_args, dp_inner_comm, 168);
KEEL_ASSERT_OFFSET(keel_strategy_create_args, dp_inner_comm_obj, 176);
KEEL_ASSERT_OFFSET(keel_strategy_create_args, dp_inner_rank, 184);
KEEL_ASSERT_OFFSET(keel_strategy_create_args, dp_inner_size, 188);
KEEL_ASSERT_OFFSET(keel_strategy_create_args, dp_outer_comm, 192);
KEEL_ASSERT_OFFSET(keel_strategy_create_args, dp_outer_comm_obj, 200);
KEEL_ASSERT_OFFSET(keel_strategy_create_args, dp_outer_rank, 208);
KEEL_ASSERT_OFFSET(keel_strategy_create_args, dp_outer_size, 212);
KEEL_ASSERT_SIZE(keel_strategy_create_args, 216);
KEEL_ASSERT_SIZE(keel_offload_create_args, 32);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_offload_create_args, struct_size, 0);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_offload_create_args, config_json, 8);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_offload_create_args, json_path, 16);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_offload_create_args, world_rank, 24);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_offload_create_args, device_backend, 28);  /* 0.7 */
KEEL_ASSERT_SIZE(keel_offload_info, 32);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_offload_info, struct_size, 0);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_offload_info, alignment_bytes, 8);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_offload_info, ideal_request_bytes, 16);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_offload_info, capacity_bytes, 24);  /* 0.7 */
KEEL_ASSERT_SIZE(keel_offload_counters, 40);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_offload_counters, struct_size, 0);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_offload_counters, bytes_read, 8);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_offload_counters, bytes_written, 16);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_offload_counters, requests_completed, 24);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_offload_counters, busy_seconds, 32);  /* 0.7 */
KEEL_ASSERT_SIZE(keel_offload_api, 104);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_offload_api, struct_size, 0);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_offload_api, validate_config, 8);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_offload_api, create, 16);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_offload_api, destroy, 24);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_offload_api, describe, 32);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_offload_api, add_extent, 40);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_offload_api, submit_write, 48);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_offload_api, submit_read, 56);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_offload_api, wait, 64);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_offload_api, wait_all, 72);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_offload_api, counters, 80);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_offload_api, alloc_buffer, 88);  /* 0.7 */
KEEL_ASSERT_OFFSET(keel_offload_api, free_buffer, 96);  /* 0.7 */

KEEL_ASSERT_OFFSET(keel_backend_api, probe, 256);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, compute_dtype, 264);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, queue, 272);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, event_create, 280);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, event_destroy, 288);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, event_record, 296);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, event_wait, 304);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, event_synchronize, 312);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, alloc_host, 320);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, free_host, 328);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, copy_async, 336);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, convert, 344);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, matmul_forward_dt, 352);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, matmul_backward_dt, 360);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, layernorm_forward_dt, 368);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, layernorm_backward_dt, 376);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, attention_saved_bytes, 384);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, attention_forward_dt, 392);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, attention_backward_dt, 400);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, gelu_forward_dt, 408);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, gelu_backward_dt, 416);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, add_dt, 424);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, accumulate_dt, 432);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, scale_dt, 440);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, embedding_forward_dt, 448);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, embedding_backward_dt, 456);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, embedding_rows_forward_dt, 464);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, embedding_rows_backward_dt, 472);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, crossentropy_stats_dt, 480);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, crossentropy_combine, 488);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, crossentropy_backward_dt, 496);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, sum_squares_dt, 504);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, adamw_update, 512);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, sgd_update, 520);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_backend_api, rmsnorm_forward_dt, 528);  /* 0.9 */
KEEL_ASSERT_OFFSET(keel_backend_api, rmsnorm_backward_dt, 536);  /* 0.9 */
KEEL_ASSERT_OFFSET(keel_backend_api, rope_forward_dt, 544);  /* 0.9 */
KEEL_ASSERT_OFFSET(keel_backend_api, rope_backward_dt, 552);  /* 0.9 */
KEEL_ASSERT_OFFSET(keel_backend_api, swiglu_forward_dt, 560);  /* 0.9 */
KEEL_ASSERT_OFFSET(keel_backend_api, swiglu_backward_dt, 568);  /* 0.9 */
KEEL_ASSERT_OFFSET(keel_backend_api, attention_gqa_saved_bytes, 576);  /* 0.9 */
KEEL_ASSERT_OFFSET(keel_backend_api, attention_gqa_forward_dt, 584);  /* 0.9 */
KEEL_ASSERT_OFFSET(keel_backend_api, attention_gqa_backward_dt, 592);  /* 0.9 */
KEEL_ASSERT_OFFSET(keel_model_api, complete_config, 96);  /* 0.10 */
KEEL_ASSERT_OFFSET(keel_backend_api, attention_decode_dt, 600);  /* 0.18 */
/* 0.19 (open, no frozen copy: WAVE4 rule): status codes keep their values; the new one is appended. */
_Static_assert(KEEL_ERR_NONFINITE == 9 && KEEL_ERR_MISSING_FILE == 10, "keel_status values moved: the ABI only appends");
KEEL_ASSERT_OFFSET(keel_backend_api, moe_route, 608);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_backend_api, moe_route_backward, 616);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_backend_api, moe_permute_plan, 624);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_backend_api, moe_permute_dt, 632);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_backend_api, moe_unpermute_dt, 640);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_backend_api, moe_unpermute_scale_backward_dt, 648);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_backend_api, grouped_matmul_forward_dt, 656);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_backend_api, grouped_matmul_backward_dt, 664);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_backend_api, attention_block_forward, 672);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_backend_api, attention_block_backward, 680);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_backend_api, rope_at_forward_dt, 688);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_backend_api, rope_at_backward_dt, 696);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_backend_api, nf4_dequantize_dt, 704);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_backend_api, fake_quantize_dt, 712);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_backend_api, fake_quantize_tokens_dt, 720);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_backend_api, dropout_dt, 728);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_backend_api, attention_merge_dt, 736);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_backend_api, copy_rows_dt, 744);  /* 0.19 */
KEEL_ASSERT_SIZE(keel_backend_api, 752);
KEEL_ASSERT_SIZE_FIRST(keel_attention_args);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_attention_args, dt, 8);
KEEL_ASSERT_OFFSET(keel_attention_args, B, 16);
KEEL_ASSERT_OFFSET(keel_attention_args, Tq, 24);
KEEL_ASSERT_OFFSET(keel_attention_args, Tkv, 32);
KEEL_ASSERT_OFFSET(keel_attention_args, NH, 40);
KEEL_ASSERT_OFFSET(keel_attention_args, NKV, 48);
KEEL_ASSERT_OFFSET(keel_attention_args, hs, 56);
KEEL_ASSERT_OFFSET(keel_attention_args, q, 64);
KEEL_ASSERT_OFFSET(keel_attention_args, q_stride, 72);
KEEL_ASSERT_OFFSET(keel_attention_args, kv, 80);
KEEL_ASSERT_OFFSET(keel_attention_args, kv_stride, 88);
KEEL_ASSERT_OFFSET(keel_attention_args, out, 96);
KEEL_ASSERT_OFFSET(keel_attention_args, out_stride, 104);
KEEL_ASSERT_OFFSET(keel_attention_args, lse, 112);
KEEL_ASSERT_OFFSET(keel_attention_args, positions, 120);
KEEL_ASSERT_OFFSET(keel_attention_args, q_index0, 128);
KEEL_ASSERT_OFFSET(keel_attention_args, kv_index0, 136);
KEEL_ASSERT_OFFSET(keel_attention_args, dout, 144);
KEEL_ASSERT_OFFSET(keel_attention_args, dq, 152);
KEEL_ASSERT_OFFSET(keel_attention_args, dkv, 160);
KEEL_ASSERT_SIZE(keel_attention_args, 168);
_Static_assert(KEEL_ROUTE_SIGMOID == 1 && KEEL_ROUTE_NORMALIZE == 2, "moe_route's flag bits moved");
KEEL_ASSERT_OFFSET(keel_model_api, decode_reset, 104);
KEEL_ASSERT_OFFSET(keel_model_api, decode, 112);
KEEL_ASSERT_OFFSET(keel_model_api, step_metrics, 120);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_model_api, step_tallies, 128);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_model_api, end_step, 136);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_model_api, own_state_count, 144);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_model_api, own_state_info, 152);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_model_api, read_own_state, 160);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_model_api, write_own_state, 168);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_step_metrics, model_json, 112);  /* 0.19 */
KEEL_ASSERT_SIZE(keel_model_metric, 24);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_model_metric, name, 0);
KEEL_ASSERT_OFFSET(keel_model_metric, value, 8);
KEEL_ASSERT_OFFSET(keel_model_metric, combine, 16);
KEEL_ASSERT_OFFSET(keel_model_metric, reserved, 20);
_Static_assert(KEEL_METRIC_MEAN == 0 && KEEL_METRIC_MAX == 1 && KEEL_MODEL_METRICS_MAX == 64 &&
                   KEEL_MODEL_METRIC_NAME_MAX == 64, "model metric constants moved: the ABI only appends");
_Static_assert(KEEL_COMM_OP_COUNT == 7 && KEEL_COMM_ALL_TO_ALL == 7, "comm counter indices moved: the ABI only appends");
KEEL_ASSERT_OFFSET(keel_comm_counters, all_to_all_calls, 120);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_comm_counters, all_to_all_bytes, 128);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_comm_api, all_to_all_v, 152);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_model_create_args, ep_rank, 92);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_model_create_args, ep_size, 96);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_model_create_args, ep_comm, 104);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_model_create_args, ep_comm_obj, 112);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_model_create_args, cp_rank, 120);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_model_create_args, cp_size, 124);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_model_create_args, cp_comm, 128);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_model_create_args, cp_comm_obj, 136);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_model_create_args, cp_all_gather, 144);  /* 0.19 */
KEEL_ASSERT_SIZE(keel_model_create_args, 152);
_Static_assert(KEEL_PARAM_STAGE_COPY == 8 && KEEL_PARAM_EXPERT == 16 && KEEL_PARAM_FROZEN == 32 && KEEL_PARAM_NF4 == 64, "parameter flags moved: the ABI only appends");
KEEL_ASSERT_OFFSET(keel_comm_api, create_world_on, 136);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_comm_api, reaches, 144);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_optimizer_step_args, backend, 72);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_optimizer_step_args, backend_obj, 80);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_forward_args, loss_sum, 88);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_forward_args, loss_weight, 96);  /* 0.8 */
KEEL_ASSERT_OFFSET(keel_forward_args, positions, 104);  /* 0.19 */
KEEL_ASSERT_OFFSET(keel_forward_args, dropout_seed, 112);  /* 0.19 */

int main(void) {
  /* The checks above ran in the compiler; this line reports the version they cover. */
  printf("ABI %d.%d layout checks compiled\n", KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR);
  return KEEL_ABI_VERSION_MAJOR == 0 && KEEL_ABI_VERSION_MINOR == 19 ? 0 : 1;
}
