// The backend table of a plugin, filled from one list: keel/backend.h's slots named once here, in
// groups as the ABI added them, so a backend fills a group with one line instead of one
// assignment per slot (the cpu and cuda backends each wrote the same sixty). A backend defines
// each slot of a group as a function of the slot's name, in the scope where it fills the group:
//
//   keel_backend_api make_api() {
//     keel_backend_api api{};
//     api.struct_size = sizeof(keel_backend_api);
//     KEEL_FILL_BACKEND_SLOTS(api, KEEL_BACKEND_SLOTS_0_1);   // validate_config ... sum_squares
//     KEEL_FILL_BACKEND_SLOTS(api, KEEL_BACKEND_SLOTS_0_9);   // the Llama ops, if it has them
//     api.attention_decode_dt = attention_decode_dt;           // a single optional slot, by hand
//     return api;
//   }
//
// A group is all or nothing: a backend that lacks one of its functions does not compile (the
// compiler names the missing function). A slot a backend leaves NULL is one it does not fill.
// Macros because the functions are found by name where the backend defines them, which no
// template can see.
#pragma once

#include <keel/backend.h>

#include <cstddef>

// 0.1: the lifecycle, memory and the fp32 ops of a GPT-2-style model.
#define KEEL_BACKEND_SLOTS_0_1(SLOT)                                                                          \
  SLOT(validate_config) SLOT(create) SLOT(destroy) SLOT(device) SLOT(peak_flops) SLOT(alloc) SLOT(free_memory) \
  SLOT(copy) SLOT(fill_zero) SLOT(synchronize) SLOT(matmul_forward) SLOT(matmul_backward)                     \
  SLOT(layernorm_forward) SLOT(layernorm_backward) SLOT(attention_saved_floats) SLOT(attention_forward)       \
  SLOT(attention_backward) SLOT(gelu_forward) SLOT(gelu_backward) SLOT(add) SLOT(accumulate) SLOT(scale)     \
  SLOT(embedding_forward) SLOT(embedding_backward) SLOT(crossentropy_forward) SLOT(crossentropy_backward)    \
  SLOT(sum_squares)

// 0.6: the vocabulary split over tensor-parallel ranks.
#define KEEL_BACKEND_SLOTS_0_6(SLOT) \
  SLOT(embedding_rows_forward) SLOT(embedding_rows_backward) SLOT(crossentropy_shard_stats) SLOT(crossentropy_shard_backward)

// 0.8, the device-true contract, in three groups: the queue, events and host memory ...
#define KEEL_BACKEND_QUEUE_SLOTS_0_8(SLOT)                                                                       \
  SLOT(probe) SLOT(compute_dtype) SLOT(queue) SLOT(event_create) SLOT(event_destroy) SLOT(event_record)          \
  SLOT(event_wait) SLOT(event_synchronize) SLOT(alloc_host) SLOT(free_host) SLOT(copy_async) SLOT(convert)

// ... the ops at the compute type ...
#define KEEL_BACKEND_DT_SLOTS_0_8(SLOT)                                                                          \
  SLOT(matmul_forward_dt) SLOT(matmul_backward_dt) SLOT(layernorm_forward_dt) SLOT(layernorm_backward_dt)       \
  SLOT(attention_saved_bytes) SLOT(attention_forward_dt) SLOT(attention_backward_dt) SLOT(gelu_forward_dt)      \
  SLOT(gelu_backward_dt) SLOT(add_dt) SLOT(accumulate_dt) SLOT(scale_dt) SLOT(embedding_forward_dt)             \
  SLOT(embedding_backward_dt) SLOT(embedding_rows_forward_dt) SLOT(embedding_rows_backward_dt)                  \
  SLOT(crossentropy_stats_dt) SLOT(crossentropy_combine) SLOT(crossentropy_backward_dt) SLOT(sum_squares_dt)

// ... and the fused optimizer updates on backend memory.
#define KEEL_BACKEND_OPTIMIZER_SLOTS_0_8(SLOT) SLOT(adamw_update) SLOT(sgd_update)

// 0.9: the Llama family's ops.
#define KEEL_BACKEND_SLOTS_0_9(SLOT)                                                                              \
  SLOT(rmsnorm_forward_dt) SLOT(rmsnorm_backward_dt) SLOT(rope_forward_dt) SLOT(rope_backward_dt)                 \
  SLOT(swiglu_forward_dt) SLOT(swiglu_backward_dt) SLOT(attention_gqa_saved_bytes) SLOT(attention_gqa_forward_dt) \
  SLOT(attention_gqa_backward_dt)

// 0.18: decoding with a key/value cache (optional).
#define KEEL_BACKEND_SLOTS_0_18(SLOT) SLOT(attention_decode_dt)

// 0.19: a mixture-of-experts layer's routing, permutation and grouped matmul (optional).
#define KEEL_BACKEND_MOE_SLOTS_0_19(SLOT)                                                                    \
  SLOT(moe_route) SLOT(moe_route_backward) SLOT(moe_permute_plan) SLOT(moe_permute_dt) SLOT(moe_unpermute_dt) \
  SLOT(moe_unpermute_scale_backward_dt) SLOT(grouped_matmul_forward_dt) SLOT(grouped_matmul_backward_dt)

// 0.19: attention over blocks with document boundaries and rope at given positions (optional:
// packed batches; context parallelism's blocks).
#define KEEL_BACKEND_BLOCK_ATTENTION_SLOTS_0_19(SLOT) \
  SLOT(attention_block_forward) SLOT(attention_block_backward) SLOT(rope_at_forward_dt) SLOT(rope_at_backward_dt)

// 0.19: QLoRA's base dequantized; quantization-aware training's fake quantization (optional).
#define KEEL_BACKEND_QUANT_SLOTS_0_19(SLOT) SLOT(nf4_dequantize_dt) SLOT(fake_quantize_dt) SLOT(fake_quantize_tokens_dt)

// 0.19: LoRA's adapter dropout, a mask from a counter-based hash (optional).
#define KEEL_BACKEND_DROPOUT_SLOTS_0_19(SLOT) SLOT(dropout_dt)

// 0.19: context parallelism's merge of two partial attentions by their statistics, and its copy
// of strided rows (optional).
#define KEEL_BACKEND_ATTENTION_MERGE_SLOTS_0_19(SLOT) SLOT(attention_merge_dt) SLOT(copy_rows_dt)

// Sets every slot of GROUP in `table` to the function of the same name in scope.
#define KEEL_FILL_BACKEND_SLOTS(table, GROUP)     \
  do {                                            \
    keel_backend_api& keel_filled_table_ = table; \
    GROUP(KEEL_BACKEND_SLOT_FROM_SCOPE_)          \
  } while (0)
#define KEEL_BACKEND_SLOT_FROM_SCOPE_(name) keel_filled_table_.name = name;

namespace keel_support::backend_slots_detail {
#define KEEL_BACKEND_COUNT_SLOT_(name) +1
constexpr size_t kListedSlots = 0 KEEL_BACKEND_SLOTS_0_1(KEEL_BACKEND_COUNT_SLOT_)
    KEEL_BACKEND_SLOTS_0_6(KEEL_BACKEND_COUNT_SLOT_) KEEL_BACKEND_QUEUE_SLOTS_0_8(KEEL_BACKEND_COUNT_SLOT_)
        KEEL_BACKEND_DT_SLOTS_0_8(KEEL_BACKEND_COUNT_SLOT_) KEEL_BACKEND_OPTIMIZER_SLOTS_0_8(KEEL_BACKEND_COUNT_SLOT_)
            KEEL_BACKEND_SLOTS_0_9(KEEL_BACKEND_COUNT_SLOT_) KEEL_BACKEND_SLOTS_0_18(KEEL_BACKEND_COUNT_SLOT_)
                KEEL_BACKEND_MOE_SLOTS_0_19(KEEL_BACKEND_COUNT_SLOT_)
                    KEEL_BACKEND_BLOCK_ATTENTION_SLOTS_0_19(KEEL_BACKEND_COUNT_SLOT_)
                        KEEL_BACKEND_QUANT_SLOTS_0_19(KEEL_BACKEND_COUNT_SLOT_)
                            KEEL_BACKEND_DROPOUT_SLOTS_0_19(KEEL_BACKEND_COUNT_SLOT_)
                                KEEL_BACKEND_ATTENTION_MERGE_SLOTS_0_19(KEEL_BACKEND_COUNT_SLOT_);
#undef KEEL_BACKEND_COUNT_SLOT_
// The groups list every slot: a slot appended to keel/backend.h goes into a group here (a new
// one for a new minor), so no backend misses it for want of a line.
static_assert(sizeof(size_t) + kListedSlots * sizeof(void (*)()) == sizeof(keel_backend_api),
              "keel_backend_api has a slot that no KEEL_BACKEND_*SLOTS* group lists");
}  // namespace keel_support::backend_slots_detail
