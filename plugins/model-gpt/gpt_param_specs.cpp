// GPT-2's parameter list and, under tensor parallelism, each parameter's piece on this rank
// (Megatron's split): the box local_offset + local_shape of the global tensor. qkv is declared
// (3, C, C) so that a split of dim 1 is one box holding the q, k and v rows of this rank's heads,
// which is exactly the (3C/tp, C) matmul weight attention wants; its flat order is that of the
// (3C, C) matrix, so init and tp-1 numerics do not depend on the declaration.
// Under pipeline parallelism a rank declares only its chunks' parameters (keel_support/model/chunk_plan.hpp), with
// the whole model's names and layer ids; the last chunk's rank adds its copy of wte for the lm_head.
#include "gpt_model.hpp"

#include <algorithm>
#include <cmath>

namespace keel_gpt {

void GptModel::build_param_specs() {
  const int64_t L = config_.n_layer, C = config_.d_model, V = config_.vocab_size;
  const int64_t Vp = config_.padded_vocab_size, maxT = config_.max_seq_len;
  const uint32_t no_decay = KEEL_PARAM_NO_WEIGHT_DECAY;
  // GPT-2's init: N(0, 0.02), and residual-stream output projections scaled by 1/sqrt(2L).
  const float std = 0.02f, residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(L));

  using Pending = keel_support::NamedSpec;
  std::vector<Pending> pending;
  // tp_dim: the dimension split over the tp group (-1: replicated); at tp 1 the piece is whole.
  auto add = [&](std::string name, int32_t layer, std::initializer_list<int64_t> shape, uint32_t flags,
                 int32_t init, float init_std, int64_t init_rows = -1, int32_t tp_dim = -1) {
    keel_param_spec spec = keel_support::make_spec(nullptr, layer, shape, flags, init, init_std, init_rows);
    keel_support::split_for_tp(spec, tp_dim, tp_.size(), tp_.rank());
    pending.push_back({std::move(name), spec});
  };
  const int32_t rows = 0, columns = 1;  // tp_dim of column-parallel (output rows) and row-parallel weights

  // Layer 0: embeddings. wte's padded rows stay zero; wte is also the lm_head (tied).
  add("wte", 0, {Vp, C}, KEEL_PARAM_TIED, KEEL_INIT_NORMAL, std, V, rows);  // vocabulary-parallel
  add("wpe", 0, {maxT, C}, no_decay, KEEL_INIT_NORMAL, std);
  for (int64_t i = 0; i < L; ++i) {
    const int32_t layer = static_cast<int32_t>(1 + i);
    const std::string h = "h." + std::to_string(i) + ".";
    add(h + "ln_1.weight", layer, {C}, no_decay, KEEL_INIT_ONES, 0);
    add(h + "ln_1.bias", layer, {C}, no_decay, KEEL_INIT_ZEROS, 0);
    add(h + "attn.qkv.weight", layer, {3, C, C}, 0, KEEL_INIT_NORMAL, std, -1, 1);  // column-parallel by head
    add(h + "attn.qkv.bias", layer, {3, C}, no_decay, KEEL_INIT_ZEROS, 0, -1, 1);
    add(h + "attn.proj.weight", layer, {C, C}, 0, KEEL_INIT_NORMAL, residual_std, -1, columns);  // row-parallel
    add(h + "attn.proj.bias", layer, {C}, no_decay, KEEL_INIT_ZEROS, 0);
    add(h + "ln_2.weight", layer, {C}, no_decay, KEEL_INIT_ONES, 0);
    add(h + "ln_2.bias", layer, {C}, no_decay, KEEL_INIT_ZEROS, 0);
    add(h + "mlp.fc.weight", layer, {4 * C, C}, 0, KEEL_INIT_NORMAL, std, -1, rows);  // column-parallel
    add(h + "mlp.fc.bias", layer, {4 * C}, no_decay, KEEL_INIT_ZEROS, 0, -1, rows);
    add(h + "mlp.proj.weight", layer, {C, 4 * C}, 0, KEEL_INIT_NORMAL, residual_std, -1, columns);  // row-parallel
    add(h + "mlp.proj.bias", layer, {C}, no_decay, KEEL_INIT_ZEROS, 0);
    if (config_.lora.enabled()) add_lora_specs(pending, h, layer, i == 0);
  }
  add("ln_f.weight", static_cast<int32_t>(L + 1), {C}, no_decay, KEEL_INIT_ONES, 0);
  add("ln_f.bias", static_cast<int32_t>(L + 1), {C}, no_decay, KEEL_INIT_ZEROS, 0);

  // Under LoRA the base is frozen; QLoRA keeps the blocks' linear weights in NF4.
  keel_support::freeze_base(config_.lora, pending, [](const std::string& name) {
    return keel_support::ends_with_any(name, {".attn.qkv.weight", ".attn.proj.weight", ".mlp.fc.weight",
                                              ".mlp.proj.weight"});
  });

  // flops_per_token's N, from the whole model before it is cut into pipeline chunks.
  matmul_params_ = 0;
  for (const auto& p : pending) {
    if (p.name == "wpe") continue;
    if (p.name.find(".lora_") != std::string::npos) continue;  // folded into their weight once per layer use
    matmul_params_ += p.name == "wte" ? static_cast<double>(V) * C : static_cast<double>(keel_support::element_count(p.spec));
  }
  std::vector<Pending> mine;
  for (auto& p : pending) {
    const int32_t layer = p.spec.layer;
    if (layer == 0 && plan_.holds_embedding()) {
      if (p.name == "wte" && plan_.pp_size() > 1) p.spec.flags |= KEEL_PARAM_STAGE_TIED;  // the lm_head's copy follows it
      mine.push_back(std::move(p));
    } else if (layer == 0 && p.name == "wte" && plan_.holds_wte_copy()) {
      p.spec.flags |= KEEL_PARAM_STAGE_TIED | KEEL_PARAM_STAGE_COPY;
      mine.push_back(std::move(p));
    } else if (layer >= 1 && layer <= L ? plan_.holds_block(layer - 1) : layer == L + 1 && plan_.holds_head()) {
      mine.push_back(std::move(p));
    }
  }
  specs_.assign(std::move(mine), config_.n_layer + 2);
}

// A block's adapters, after its other tensors: for each targeted linear (in the block's order)
// PEFT's lora_A (r, in), drawn as PEFT's "gaussian" init draws it (N(0, 1/r)), and lora_B
// (out, r), zero, so the adapted model starts as the base. qkv's B is declared (3, C, r) like
// its weight, so that a tensor-parallel piece holds this rank's heads' rows; PEFT's (3C, r) is
// that with the leading dimensions merged. A column-parallel linear's B is split with its rows,
// a row-parallel one's A with its columns (keel_support/model/lora.hpp).
void GptModel::add_lora_specs(std::vector<keel_support::NamedSpec>& pending, const std::string& prefix, int32_t layer,
                              bool record_targets) {
  const int64_t C = config_.d_model, r = config_.lora.r;
  struct Linear {
    const char* module;
    const char* path;
    BlockTensor weight;
    int64_t out, in;
    bool column_parallel;
  };
  const Linear linears[] = {{"c_attn", "attn.qkv", QKV_W, 3 * C, C, true},
                            {"c_proj", "attn.proj", ATTPROJ_W, C, C, false},
                            {"c_fc", "mlp.fc", FC_W, 4 * C, C, true},
                            {"c_proj", "mlp.proj", FCPROJ_W, C, 4 * C, false}};
  size_t index = 0;
  for (const auto& p : pending) index += p.spec.layer == layer ? 1 : 0;
  for (const Linear& l : linears) {
    if (!config_.lora.targets(l.module)) continue;
    keel_param_spec a = keel_support::make_spec(nullptr, layer, {r, l.in}, 0, KEEL_INIT_NORMAL, float(1.0 / double(r)));
    keel_param_spec b = l.weight == QKV_W ? keel_support::make_spec(nullptr, layer, {3, C, r}, 0, KEEL_INIT_ZEROS, 0.0f)
                                          : keel_support::make_spec(nullptr, layer, {l.out, r}, 0, KEEL_INIT_ZEROS, 0.0f);
    keel_support::split_for_tp(a, l.column_parallel ? -1 : 1, tp_.size(), tp_.rank());
    keel_support::split_for_tp(b, l.column_parallel ? int32_t(b.ndim) - 2 : -1, tp_.size(), tp_.rank());
    if (record_targets) {
      keel_support::LoraTarget target;
      target.weight = size_t(l.weight);
      target.a = index;
      target.b = index + 1;
      target.out = b.local_shape[0] * (b.ndim == 3 ? b.local_shape[1] : 1);
      target.in = a.local_shape[1];
      target.column_parallel = l.column_parallel;
      lora_targets_.push_back(target);
    }
    pending.push_back({prefix + l.path + ".lora_A.weight", a});
    pending.push_back({prefix + l.path + ".lora_B.weight", b});
    index += 2;
  }
}

}  // namespace keel_gpt
