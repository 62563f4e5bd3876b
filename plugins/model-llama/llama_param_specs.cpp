// The llama model's parameter list under Hugging Face's names and, under tensor parallelism, each
// parameter's piece on this rank (Megatron's split: column-parallel q, k, v, gate and up by
// output rows, row-parallel o and down by input columns, the vocabulary by rows): every piece is
// one box of the global tensor, so checkpoints reshard across tp. A column-parallel projection's
// bias is split with it; down_proj's bias is whole on every rank. Also the tp preconditions, and
// under pipeline parallelism only this rank's chunks' parameters (plus, when the head is tied,
// the last stage's copy of the embedding).
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "llama_model.hpp"

namespace keel_llama {

using keel_support::StatusError;

void LlamaModel::check_tensor_parallel(const keel_model_create_args& args) {
  tp_ = TpRegions(args, ops_, config_.d_model);
  const int64_t P = tp_.size(), D = config_.head_dim();
  const int64_t NH = config_.n_head, NKV = config_.n_kv_head, F = config_.ffn_hidden;
  const int64_t Vp = config_.padded_vocab_size;
  share_.heads = NH / P;
  share_.kv_heads = NKV / P;
  share_.q_width = share_.heads * D;
  share_.kv_width = share_.kv_heads * D;
  share_.qkv_width = share_.q_width + 2 * share_.kv_width;
  share_.hidden = F / P;
  share_.vocab = tp_.vocab_shard(Vp, config_.vocab_size);
  if (P == 1) return;
  const std::string at = " at parallel.tp = " + std::to_string(P);
  auto refuse = [](const std::string& what) { throw StatusError(KEEL_ERR_INVALID_CONFIG, what); };
  // Key/value heads are split, never replicated: a rank holds NKV/tp of them and the NH/NKV query
  // heads of each, so both head counts divide evenly.
  if (NKV % P != 0)
    refuse("model.n_kv_head (" + std::to_string(NKV) + ") must be a multiple of the tensor-parallel size" + at +
           ": each rank holds n_kv_head/tp key/value heads with their query heads (Keel splits key/value heads "
           "and does not replicate them)");
  if (F % P != 0)
    refuse("model.ffn_hidden (" + std::to_string(F) + ") must be a multiple of the tensor-parallel size" + at);
  if (Vp % P != 0)
    refuse("the padded vocabulary (" + std::to_string(Vp) + ", model.vocab_size " + std::to_string(config_.vocab_size) +
           " rounded up to a multiple of 128) must be a multiple of the tensor-parallel size" + at);
  if (tp_.sequence_parallel() && config_.max_seq_len % P != 0)
    refuse("model.seq_len (" + std::to_string(config_.max_seq_len) + ") must be a multiple of the tensor-parallel "
           "size with parallel.sequence_parallel" + at + ": each rank holds seq_len/tp of it");
  tp_.connect(args, "the llama model");
}

void LlamaModel::build_param_specs() {
  const int64_t L = config_.n_layer, C = config_.d_model, V = config_.vocab_size, Vp = config_.padded_vocab_size;
  const int64_t Cq = int64_t(config_.n_head) * config_.head_dim(), Ckv = int64_t(config_.n_kv_head) * config_.head_dim();
  const int64_t F = config_.ffn_hidden;
  const uint32_t no_decay = KEEL_PARAM_NO_WEIGHT_DECAY;
  // transformers' LlamaPreTrainedModel init: N(0, 0.02) for every matrix, norms at one.
  const float std = 0.02f;
  using Pending = keel_support::NamedSpec;
  std::vector<Pending> pending;
  auto add = [&](std::string name, int32_t layer, std::initializer_list<int64_t> shape, uint32_t flags, int32_t init,
                 int64_t init_rows = -1, int32_t tp_dim = -1) {
    keel_param_spec spec = keel_support::make_spec(nullptr, layer, shape, flags, init,
                                                   init == KEEL_INIT_NORMAL ? std : 0.0f, init_rows);
    keel_support::split_for_tp(spec, tp_dim, tp_.size(), tp_.rank());
    pending.push_back({std::move(name), spec});
  };
  const int32_t rows = 0, columns = 1;
  // The embedding's padded rows stay zero; tied, it is the head too.
  add("model.embed_tokens.weight", 0, {Vp, C}, tied() ? KEEL_PARAM_TIED : 0, KEEL_INIT_NORMAL, V, rows);
  for (int64_t i = 0; i < L; ++i) {
    const int32_t layer = static_cast<int32_t>(1 + i);
    const std::string h = "model.layers." + std::to_string(i) + ".";
    add(h + "input_layernorm.weight", layer, {C}, no_decay, KEEL_INIT_ONES);
    add(h + "self_attn.q_proj.weight", layer, {Cq, C}, 0, KEEL_INIT_NORMAL, -1, rows);
    add(h + "self_attn.k_proj.weight", layer, {Ckv, C}, 0, KEEL_INIT_NORMAL, -1, rows);
    add(h + "self_attn.v_proj.weight", layer, {Ckv, C}, 0, KEEL_INIT_NORMAL, -1, rows);
    add(h + "self_attn.o_proj.weight", layer, {C, Cq}, 0, KEEL_INIT_NORMAL, -1, columns);
    add(h + "post_attention_layernorm.weight", layer, {C}, no_decay, KEEL_INIT_ONES);
    const bool sparse = config_.moe.sparse(i);  // llama_moe.hpp: a sparse layer's tensors
    if (!sparse) {
      add(h + "mlp.gate_proj.weight", layer, {F, C}, 0, KEEL_INIT_NORMAL, -1, rows);
      add(h + "mlp.up_proj.weight", layer, {F, C}, 0, KEEL_INIT_NORMAL, -1, rows);
      add(h + "mlp.down_proj.weight", layer, {C, F}, 0, KEEL_INIT_NORMAL, -1, columns);
    } else {
      for (const MoeTensor& t : sparse_->shared_expert_tensors(h)) add(t.name, layer, {t.rows, t.cols}, 0, KEEL_INIT_NORMAL);
    }
    // Biases after the weights (block_slot_ says where): zero, as transformers initializes them,
    // split with their column-parallel projection; down_proj's is replicated, added by one rank.
    if (config_.attention_bias) {
      add(h + "self_attn.q_proj.bias", layer, {Cq}, no_decay, KEEL_INIT_ZEROS, -1, rows);
      add(h + "self_attn.k_proj.bias", layer, {Ckv}, no_decay, KEEL_INIT_ZEROS, -1, rows);
      add(h + "self_attn.v_proj.bias", layer, {Ckv}, no_decay, KEEL_INIT_ZEROS, -1, rows);
    }
    if (config_.mlp_bias) {
      add(h + "mlp.gate_proj.bias", layer, {F}, no_decay, KEEL_INIT_ZEROS, -1, rows);
      add(h + "mlp.up_proj.bias", layer, {F}, no_decay, KEEL_INIT_ZEROS, -1, rows);
      add(h + "mlp.down_proj.bias", layer, {C}, no_decay, KEEL_INIT_ZEROS);
    }
    if (sparse)
      for (const MoeTensor& t : sparse_->routed_tensors(h))
        add(t.name, layer, {t.rows, t.cols}, t.expert ? uint32_t(KEEL_PARAM_EXPERT) : 0u, KEEL_INIT_NORMAL);
    if (config_.lora.enabled()) {  // every layer of a kind has the same targets
      std::vector<keel_support::LoraTarget> targets = add_lora_specs(pending, layer);
      if (lora_targets_[sparse ? 1 : 0].empty()) lora_targets_[sparse ? 1 : 0] = std::move(targets);
    }
  }
  int32_t slot = DOWN_W + 1;
  for (int t = Q_B; t < BLOCK_TENSORS; ++t) {
    const bool held = t <= V_B ? config_.attention_bias : config_.mlp_bias;
    block_slot_[t] = held ? slot++ : -1;
  }
  add("model.norm.weight", static_cast<int32_t>(L + 1), {C}, no_decay, KEEL_INIT_ONES);
  if (!tied()) add("lm_head.weight", static_cast<int32_t>(L + 1), {Vp, C}, 0, KEEL_INIT_NORMAL, V, rows);
  // Under LoRA the base is frozen; QLoRA keeps the blocks' projections and experts in NF4, not the
  // routers (bitsandbytes quantizes every nn.Linear but the head).
  keel_support::freeze_base(config_.lora, pending, [](const std::string& name) {
    return name.rfind("model.layers.", 0) == 0 &&
           keel_support::ends_with_any(name, {"_proj.weight", ".w1.weight", ".w2.weight", ".w3.weight"});
  });

  // flops_per_token's N: every matrix a token is multiplied by (the head with its V real rows),
  // not the embedding lookup unless it doubles as the head.
  matmul_params_ = 0;
  for (const auto& p : pending) {
    if (p.name.size() > 5 && p.name.compare(p.name.size() - 5, 5, ".bias") == 0) continue;  // added, not multiplied
    if (p.name.find(".lora_") != std::string::npos) continue;  // folded into their weight once per layer use
    const bool vocabulary = p.name == "model.embed_tokens.weight" || p.name == "lm_head.weight";
    if (p.name == "model.embed_tokens.weight" && !tied()) continue;
    // A token passes through n_experts_per_token of each sparse layer's n_experts experts, of which
    // this rank lists E/ep: a token's flops count the whole model's.
    const double active = !(p.spec.flags & KEEL_PARAM_EXPERT)
                              ? 1.0
                              : double(config_.moe.n_experts_per_token) / double(sparse_->local_experts());
    matmul_params_ += active * (vocabulary ? double(V) * C : double(keel_support::element_count(p.spec)));
  }
  std::vector<Pending> mine;
  for (auto& p : pending) {
    const int32_t layer = p.spec.layer;
    if (layer == 0 && plan_.holds_embedding()) {
      if (tied() && plan_.pp_size() > 1) p.spec.flags |= KEEL_PARAM_STAGE_TIED;  // the head's copy follows it
      mine.push_back(std::move(p));
    } else if (layer == 0 && tied() && plan_.holds_wte_copy()) {
      p.spec.flags |= KEEL_PARAM_STAGE_TIED | KEEL_PARAM_STAGE_COPY;
      mine.push_back(std::move(p));
    } else if (layer >= 1 && layer <= L ? plan_.holds_block(layer - 1) : layer == L + 1 && plan_.holds_head()) {
      mine.push_back(std::move(p));
    }
  }
  specs_.assign(std::move(mine), config_.n_layer + 2);
}

// A decoder layer's adapters, after its other tensors: for each weight the config targets (by its
// module, the name's last part before ".weight", as PEFT matches target_modules: q_proj, an
// expert's w1, a router's gate) PEFT's lora_A (r, in), drawn as PEFT's "gaussian" init draws it
// (N(0, 1/r)), and lora_B (out, r), zero, so the adapted model starts as the base. A
// column-parallel weight's B is split by rows with it, a row-parallel one's A by columns
// (keel_support/model/lora.hpp); an expert's factors are expert tensors too (params.h
// KEEL_PARAM_EXPERT: held by its rank alone). Returns the layer's targets.
std::vector<keel_support::LoraTarget> LlamaModel::add_lora_specs(std::vector<keel_support::NamedSpec>& pending,
                                                                 int32_t layer) {
  const int64_t r = config_.lora.r;
  const std::string tail = ".weight";
  std::vector<size_t> weights;  // the layer's targeted weights, as indices into pending
  size_t index = 0;             // the next tensor's index in the layer
  for (size_t p = 0; p < pending.size(); ++p) {
    if (pending[p].spec.layer != layer) continue;
    ++index;
    const std::string& name = pending[p].name;
    if (pending[p].spec.ndim != 2 || name.size() <= tail.size() ||
        name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
      continue;
    const std::string path = name.substr(0, name.size() - tail.size());
    const std::string module = path.substr(path.rfind('.') + 1);
    if (!config_.lora.targets(module)) continue;
    weights.push_back(p);
  }
  std::vector<keel_support::LoraTarget> targets;
  for (const size_t p : weights) {
    const keel_param_spec w = pending[p].spec;  // a copy: pending grows below
    const std::string path = pending[p].name.substr(0, pending[p].name.size() - tail.size());
    size_t slot = 0;  // the weight's index in the layer
    for (size_t q = 0; q < p; ++q) slot += pending[q].spec.layer == layer ? 1 : 0;
    const uint32_t expert = w.flags & KEEL_PARAM_EXPERT;
    const bool rows_split = w.local_shape[0] != w.global_shape[0], columns_split = w.local_shape[1] != w.global_shape[1];
    if (tp_.size() > 1 && rows_split == columns_split)  // a replicated target's factors would be summed over tp
      throw std::logic_error("add_lora_specs: " + pending[p].name + " is split over tp in neither or both dimensions");
    keel_param_spec a = keel_support::make_spec(nullptr, layer, {r, w.global_shape[1]}, expert, KEEL_INIT_NORMAL,
                                                float(1.0 / double(r)));
    keel_param_spec b = keel_support::make_spec(nullptr, layer, {w.global_shape[0], r}, expert, KEEL_INIT_ZEROS, 0.0f);
    keel_support::split_for_tp(a, columns_split ? 1 : -1, tp_.size(), tp_.rank());
    keel_support::split_for_tp(b, rows_split ? 0 : -1, tp_.size(), tp_.rank());
    keel_support::LoraTarget target;
    target.weight = slot;
    target.a = index;
    target.b = index + 1;
    target.out = b.local_shape[0];
    target.in = a.local_shape[1];
    target.column_parallel = !columns_split;
    targets.push_back(target);
    pending.push_back({path + ".lora_A.weight", a});
    pending.push_back({path + ".lora_B.weight", b});
    index += 2;
  }
  return targets;
}

}  // namespace keel_llama
