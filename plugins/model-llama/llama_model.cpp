// The llama model's activations and forward pass, layer by layer as transformers' LlamaModel
// runs it (pre-norm RMSNorm, rope on q and k, grouped-query attention, SwiGLU), every op
// delegated to the backend and every parameter borrowed from the strategy for exactly as long as
// its layer runs. The backward is llama_backward.cpp.
#include "llama_model.hpp"

#include <algorithm>
#include <cstddef>

namespace keel_llama {

using keel_support::Carver;
using keel_support::StatusError;

LlamaModel::LlamaModel(const keel_host* host, const keel_model_create_args& args)
    : host_(host), config_(parse_llama_config(args.config_json, args.json_path)) {
  if (args.backend == nullptr || args.backend_obj == nullptr)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: backend table and object are required");
  backend_ = {args.backend, args.backend_obj};
  ops_ = ComputeOps(backend_);
  // Every op this model calls, so a backend missing one fails here rather than mid-step.
#define KEEL_REQUIRE_OP(op) KEEL_REQUIRE_BACKEND_OP(args.backend, op, "the llama model");
  KEEL_REQUIRE_OP(alloc) KEEL_REQUIRE_OP(free_memory) KEEL_REQUIRE_OP(copy) KEEL_REQUIRE_OP(fill_zero)
  KEEL_REQUIRE_OP(accumulate) KEEL_REQUIRE_OP(matmul_forward) KEEL_REQUIRE_OP(matmul_backward)
  KEEL_REQUIRE_OP(add) KEEL_REQUIRE_OP(embedding_rows_forward) KEEL_REQUIRE_OP(embedding_rows_backward)
  KEEL_REQUIRE_OP(crossentropy_combine) KEEL_REQUIRE_OP(rmsnorm_forward_dt) KEEL_REQUIRE_OP(rmsnorm_backward_dt)
  KEEL_REQUIRE_OP(rope_forward_dt) KEEL_REQUIRE_OP(rope_backward_dt) KEEL_REQUIRE_OP(swiglu_forward_dt)
  KEEL_REQUIRE_OP(swiglu_backward_dt) KEEL_REQUIRE_OP(attention_gqa_saved_bytes)
  KEEL_REQUIRE_OP(attention_gqa_forward_dt) KEEL_REQUIRE_OP(attention_gqa_backward_dt)
#undef KEEL_REQUIRE_OP
  check_tensor_parallel(args);
  plan_ = ChunkPlan(args, config_.n_layer);
  connect_context_parallel(args);
  if (config_.moe.enabled()) create_sparse_mlp(args);
  build_param_specs();
  external_ = llama_external_names(config_, specs_.names());
  // Rope's frequencies, once: host math (keel_support/model/rope_frequencies.hpp) copied to the backend.
  std::vector<float> inv_freq(static_cast<size_t>(config_.head_dim() / 2));
  keel_support::rope_inverse_frequencies(inv_freq.data(), config_.head_dim(), config_.rope_theta, config_.rope_scaling);
  inv_freq_ = backend_.alloc_bytes(inv_freq.size() * sizeof(float));
  backend_.copy(inv_freq_.floats(), inv_freq.data(), int64_t(inv_freq.size()), KEEL_COPY_HOST_TO_DEVICE);
  // The stacked projections' scratch (weights, biases and their gradients), one block's worth.
  qkv_ = StackedLinear(ops_, config_.d_model, {share_.q_width, share_.kv_width, share_.kv_width},
                       config_.attention_bias);
  gate_up_ = StackedLinear(ops_, config_.d_model, {share_.hidden, share_.hidden}, config_.mlp_bias);
  if (config_.lora.enabled())
    for (int kind = 0; kind < 2; ++kind)
      if (!lora_targets_[kind].empty())
        lora_layers_[kind] =
            keel_support::LoraLayer(ops_, &tp_, config_.lora.r, config_.lora.scaling(), lora_targets_[kind],
                                    float(config_.lora.dropout));
  if (config_.qat.enabled()) create_qat();
}

// QAT's targets, per kind of block (dense, sparse): the weights whose module the config names
// (PEFT's naming, as LoRA's: q_proj, an expert's w1, a router's gate) in this rank's first block of
// that kind, with this rank's shapes, checked by keel_support::qat_target. Every block of a kind
// has the same tensors in the same order.
void LlamaModel::create_qat() {
  for (int kind = 0; kind < 2; ++kind) {
    int32_t layer = -1;
    for (int32_t c = plan_.pp_rank(); c < plan_.chunks() && layer < 0; c += plan_.pp_size())
      for (int32_t b = plan_.first_block(c); b < plan_.first_block(c + 1) && layer < 0; ++b)
        if (sparse_block(b) == (kind == 1)) layer = 1 + b;
    if (layer < 0) continue;  // this rank holds no block of the kind
    const keel_param_spec* specs = layer_specs(layer);
    std::vector<keel_support::QatTarget> targets;
    for (size_t i = 0; i < layer_size(layer); ++i) {
      const std::string name = specs[i].name, tail = ".weight";
      if (specs[i].ndim != 2 || name.size() <= tail.size() || name.compare(name.size() - tail.size(), tail.size(), tail))
        continue;
      const std::string path = name.substr(0, name.size() - tail.size()), module = path.substr(path.rfind('.') + 1);
      if (config_.qat.targets(module)) targets.push_back(keel_support::qat_target(config_.qat, module, i, specs[i]));
    }
    qat_layers_[kind] = keel_support::QatLayer(ops_, config_.qat, std::move(targets));
  }
}

void LlamaModel::describe(keel_model_info* out) const {
  keel_support::write_model_info(out, specs_.specs(), config_.n_layer + 2, config_.vocab_size, config_.padded_vocab_size,
                                 config_.max_seq_len, /*n_blocks=*/config_.n_layer,
                                 /*splits_sequences=*/!config_.moe.enabled());
}

// PaLM's 6·N per token for the matmuls of forward and backward plus 12·L·(NH·head_dim)·T for
// attention's score and value products (gpt_model.cpp has the derivation); N is the whole
// model's on every pipeline rank.
double LlamaModel::flops_per_token(int32_t seq_len) const {
  const double Cq = double(config_.n_head) * config_.head_dim();
  return 6.0 * matmul_params_ + 12.0 * config_.n_layer * Cq * static_cast<double>(seq_len);
}

// Room for either attention's state: the 0.9 op's, or the log-sum-exp per query row and head that
// attention over documents keeps.
int64_t LlamaModel::att_saved_bytes(int64_t B, int64_t T) const {
  const int64_t lse_bytes = B * share_.heads * T * int64_t(sizeof(float));
  if (cp_size_ > 1) return lse_bytes;  // the ring keeps the statistics alone
  return std::max(ops_.attention_gqa_saved_bytes(B, T, share_.q_width, share_.heads, share_.kv_heads), lse_bytes);
}

void LlamaModel::turn_qk(const BlockActivations& v, int64_t B, int64_t T) const {
  // q's and k's heads sit side by side at the start of each row: one turn covers both.
  const int64_t heads = share_.heads + share_.kv_heads, D = config_.head_dim(), QKV = share_.qkv_width;
  if (v.positions) return ops_.rope_at_forward(v.qkv, inv_freq_.floats(), v.positions, B, T, heads, D, QKV, 0);
  ops_.rope_forward(v.qkv, inv_freq_.floats(), B, T, heads, D, QKV, 0, 0);
}

void LlamaModel::turn_qk_backward(const BlockActivations& v, Elems dqkv, int64_t B, int64_t T) const {
  const int64_t heads = share_.heads + share_.kv_heads, D = config_.head_dim(), QKV = share_.qkv_width;
  if (v.positions) return ops_.rope_at_backward(dqkv, inv_freq_.floats(), v.positions, B, T, heads, D, QKV, 0);
  ops_.rope_backward(dqkv, inv_freq_.floats(), B, T, heads, D, QKV, 0, 0);
}

// Context parallelism (model.h cp_size): this rank's rows are 2·B' rows of T tokens, chunk-major;
// q (turned by rope at the tokens' true positions) and the keys and values sit in the stacked qkv
// rows, and the ring moves those rows.
keel_support::RingAttention::Shape LlamaModel::ring_shape(int64_t B, int64_t T) const {
  keel_support::RingAttention::Shape s;
  s.B = B / 2, s.Tc = T, s.NH = share_.heads, s.NKV = share_.kv_heads, s.hs = config_.head_dim();
  s.q_stride = share_.qkv_width, s.kv_stride = share_.qkv_width, s.out_stride = share_.q_width;
  return s;
}

// Context parallelism's first cut for llama: one stage, no tensor or expert parallelism (the core
// refuses those), no experts, no adapter dropout (its masks are drawn by row).
void LlamaModel::connect_context_parallel(const keel_model_create_args& args) {
  const keel_support::ContextGroup cp = keel_support::context_group(args);
  if (cp.size <= 1) return;
  if (config_.moe.enabled())  // capacity and the balancing loss are taken over a micro-batch's tokens
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "parallel.cp " + std::to_string(cp.size) + ": the llama model with "
                                              "experts does not split its sequences yet (capacity and the balancing "
                                              "loss count a micro-batch's tokens); run it at parallel.cp 1");
  if (config_.lora.dropout > 0)
    throw StatusError(KEEL_ERR_INVALID_CONFIG, "parallel.cp " + std::to_string(cp.size) + ": model.lora.dropout draws "
                                               "its masks by row, which a rank's chunks of the sequences do not keep; "
                                               "set it to 0 or run at parallel.cp 1");
#define KEEL_REQUIRE_OP(op) KEEL_REQUIRE_BACKEND_OP(args.backend, op, "the llama model under context parallelism");
  KEEL_REQUIRE_OP(attention_block_forward) KEEL_REQUIRE_OP(attention_block_backward)
  KEEL_REQUIRE_OP(attention_merge_dt) KEEL_REQUIRE_OP(rope_at_forward_dt) KEEL_REQUIRE_OP(rope_at_backward_dt)
#undef KEEL_REQUIRE_OP
  ring_ = keel_support::RingAttention(ops_, cp.comm, cp.obj, cp.rank, cp.size,
                                     cp.all_gather ? keel_support::KvExchange::all_gather : keel_support::KvExchange::ring);
  cp_size_ = cp.size;
}

void LlamaModel::attend(const BlockActivations& v, Elems out, int64_t B, int64_t T) const {
  if (cp_size_ > 1)
    return ring_.forward(ring_shape(B, T), v.qkv, v.qkv + share_.q_width, out, reinterpret_cast<float*>(v.att_saved));
  if (v.positions)
    return ops_.attention_documents_forward(out, reinterpret_cast<float*>(v.att_saved), v.qkv, v.positions, B, T,
                                            share_.q_width, share_.heads, share_.kv_heads);
  ops_.attention_gqa_forward(out, v.att_saved, v.qkv, B, T, share_.q_width, share_.heads, share_.kv_heads);
}

void LlamaModel::attend_backward(const BlockActivations& v, Elems dqkv, Elems datty, int64_t B, int64_t T) const {
  if (cp_size_ > 1)
    return ring_.backward(ring_shape(B, T), v.qkv, v.qkv + share_.q_width, v.atty,
                          reinterpret_cast<const float*>(v.att_saved), datty, dqkv, dqkv + share_.q_width);
  if (v.positions)
    return ops_.attention_documents_backward(dqkv, datty, v.qkv, v.atty, reinterpret_cast<const float*>(v.att_saved),
                                             v.positions, B, T, share_.q_width, share_.heads, share_.kv_heads);
  ops_.attention_gqa_backward(dqkv, datty, v.qkv, v.atty, v.att_saved, B, T, share_.q_width, share_.heads,
                              share_.kv_heads);
}

void LlamaModel::carve_activations(Activations& a, char* base, size_t* out_bytes) const {
  const int64_t L = a.blocks, C = config_.d_model, Cq = share_.q_width, QKV = share_.qkv_width;
  const int64_t F = share_.hidden, Vl = share_.vocab.rows;
  const int64_t N = int64_t(a.B) * a.T, Nr = tp_.norm_rows(N), head = a.head ? 1 : 0;
  const int64_t Lk = config_.recompute == Recompute::FULL ? 0 : L;   // layers of each kept tensor
  const int64_t La = config_.recompute == Recompute::NONE ? L : 0;   // layers of attention's state
  Carver carve(base);
  auto elems = [&](int64_t n) { return ops_.at(carve.take<char>(int64_t(ops_.bytes(n)))); };
  a.encoded = elems(Nr * C);
  a.ln1 = elems(Lk * N * C);
  a.ln1_rstd = carve.take<float>(Lk * Nr);
  a.qkv = elems(Lk * N * QKV);
  a.atty = elems(Lk * N * Cq);
  a.att_saved = carve.take<char>(La * a.att_saved_per_layer);
  a.residual2 = elems(Lk * Nr * C);
  a.ln2 = elems(Lk * N * C);
  a.ln2_rstd = carve.take<float>(Lk * Nr);
  a.gate_up = elems(Lk * N * 2 * F);
  a.act = elems(Lk * N * F);
  a.residual3 = elems(L * Nr * C);
  a.lnf = elems(head * N * C);
  a.lnf_rstd = carve.take<float>(head * Nr);
  a.logits = elems(head * N * Vl);
  a.lse = carve.take<float>(head * N);
  a.ce_stats = carve.take<float>(head * tp_.ce_stats_floats(N));
  a.loss_sum = carve.take<float>(head);
  a.tokens = carve.take<int32_t>(N);
  a.positions = carve.take<int32_t>(N);
  a.targets = carve.take<int32_t>(head * N);
  *out_bytes = carve.used();
}

BlockActivations LlamaModel::block_activations(const Activations& a, int64_t l) const {
  MoeBlockState* moe = config_.moe.sparse(plan_.first_block(a.chunk) + l) ? &a.moe.blocks[size_t(l)] : nullptr;
  if (config_.recompute == Recompute::FULL) {
    BlockActivations v = recompute_block_;
    v.moe = moe;  // a sparse block's routing state is kept: recomputation stops before it
    v.positions = a.packed ? a.positions : nullptr;
    v.block = plan_.first_block(a.chunk) + l;
    v.dropout_seed = a.dropout_seed;
    return v;
  }
  const int64_t C = config_.d_model, N = int64_t(a.B) * a.T, Nr = tp_.norm_rows(N);
  BlockActivations v;
  v.ln1 = a.ln1 + l * N * C;
  v.ln1_rstd = a.ln1_rstd + l * Nr;
  v.qkv = a.qkv + l * N * share_.qkv_width;
  v.atty = a.atty + l * N * share_.q_width;
  v.att_saved = config_.recompute == Recompute::SELECTIVE ? recompute_block_.att_saved
                                                            : a.att_saved + l * a.att_saved_per_layer;
  v.residual2 = a.residual2 + l * Nr * C;
  v.ln2 = a.ln2 + l * N * C;
  v.ln2_rstd = a.ln2_rstd + l * Nr;
  v.gate_up = a.gate_up + l * N * 2 * share_.hidden;
  v.act = a.act + l * N * share_.hidden;
  v.moe = moe;
  v.positions = a.packed ? a.positions : nullptr;
  v.block = plan_.first_block(a.chunk) + l;
  v.dropout_seed = a.dropout_seed;
  return v;
}

// One block's worth of what recomputation writes: every block tensor under FULL, attention's
// saved state and a second attention output under SELECTIVE.
void LlamaModel::ensure_recompute_scratch(int64_t B, int64_t T) {
  const int64_t N = B * T, att_bytes = att_saved_bytes(B, T);
  if (config_.recompute == Recompute::NONE || (recompute_rows_ >= N && recompute_att_bytes_ >= att_bytes)) return;
  const int64_t rows = std::max(N, recompute_rows_), att = std::max(att_bytes, recompute_att_bytes_);
  const int64_t C = config_.d_model, F = share_.hidden, Nr = tp_.norm_rows(rows);
  const int64_t full = config_.recompute == Recompute::FULL ? 1 : 0;
  auto carve_all = [&](char* base) {
    Carver carve(base);
    auto elems = [&](int64_t n) { return ops_.at(carve.take<char>(int64_t(ops_.bytes(n)))); };
    BlockActivations& v = recompute_block_;
    v.ln1 = elems(full * rows * C);
    v.ln1_rstd = carve.take<float>(full * Nr);
    v.qkv = elems(full * rows * share_.qkv_width);
    v.atty = elems(rows * share_.q_width);  // SELECTIVE: the recomputed output, equal to the kept one
    v.att_saved = carve.take<char>(att);
    v.residual2 = elems(full * Nr * C);
    v.ln2 = elems(full * rows * C);
    v.ln2_rstd = carve.take<float>(full * Nr);
    v.gate_up = elems(full * rows * 2 * F);
    v.act = elems(full * rows * F);
    return carve.used();
  };
  recompute_memory_ = BackendBuffer();  // free the smaller one first: peak memory is one copy
  recompute_rows_ = 0;
  const size_t bytes = carve_all(nullptr);
  recompute_memory_ = backend_.alloc_bytes(bytes);
  carve_all(static_cast<char*>(recompute_memory_.get()));
  recompute_rows_ = rows;
  recompute_att_bytes_ = att;
  keel_logf(host_, KEEL_LOG_DEBUG, kSource, "recompute buffer (%s, one block, %lld tokens): %zu bytes",
            keel_support::recompute_name(config_.recompute), static_cast<long long>(rows), bytes);
}

Activations& LlamaModel::activations_for(int32_t microbatch, int32_t chunk, int32_t B, int32_t T) {
  bool fresh = false;
  Activations& a = activations_.get(microbatch, chunk, B, T, &fresh);
  a.backward_pending = false;
  if (!fresh) return a;
  a.B = B, a.T = T;
  a.chunk = chunk;
  a.blocks = plan_.block_count(chunk);
  a.head = chunk == plan_.last_chunk();
  a.att_saved_per_layer = att_saved_bytes(B, T);
  size_t bytes = 0;
  carve_activations(a, nullptr, &bytes);
  a.memory = backend_.alloc_bytes(bytes);
  carve_activations(a, static_cast<char*>(a.memory.get()), &bytes);
  keel_logf(host_, KEEL_LOG_DEBUG, kSource, "activations for micro-batch %d, chunk %d (%d x %d tokens, tp %d%s, "
            "recompute %s): %zu bytes", microbatch, chunk, B, T, tp_.size(),
            tp_.sequence_parallel() ? ", sequence parallel" : "", keel_support::recompute_name(config_.recompute),
            bytes);
  return a;
}

void LlamaModel::ensure_scratch(int64_t rows) {
  if (scratch_.rows >= rows) return;
  const int64_t C = config_.d_model, F = share_.hidden;
  const int64_t tp = tp_.active() ? 1 : 0, sp = tp_.sequence_parallel() ? 1 : 0, Nr = tp_.norm_rows(rows);
  auto carve_all = [&](Scratch& s, char* base) {
    Carver carve(base);
    auto elems = [&](int64_t n) { return ops_.at(carve.take<char>(int64_t(ops_.bytes(n)))); };
    s.dresidual = elems(Nr * C);
    s.dln = elems(rows * C);
    s.datty = elems(rows * share_.q_width);
    s.dqkv = elems(rows * share_.qkv_width);
    s.dact = elems(rows * F);
    s.dgate_up = elems(rows * 2 * F);
    s.ln_rows = elems(sp * Nr * C);
    s.partial = elems(tp * rows * C);
    s.dln_rows = elems(sp * Nr * C);
    s.dgathered = elems(sp * rows * C);
    s.dnorm = carve.take<float>(C);
    return carve.used();
  };
  scratch_.memory = BackendBuffer();
  scratch_.rows = 0;
  const size_t bytes = carve_all(scratch_, nullptr);
  scratch_.memory = backend_.alloc_bytes(bytes);
  carve_all(scratch_, static_cast<char*>(scratch_.memory.get()));
  scratch_.rows = rows;
}

void LlamaModel::forward(keel_forward_args* args) {
  const keel_support::ForwardCall call =
      keel_support::read_forward_call(*args, plan_, config_.max_seq_len, tp_.sequence_parallel() ? tp_.size() : 1);
  const int32_t chunk = call.chunk, B = call.B, T = call.T;
  const bool first = call.first, last = call.last;
  const keel_support::BackendOps& be = backend_;
  const int64_t N = int64_t(B) * T, io_numel = stage_io_numel(B, T);
  if (first) keel_support::check_token_ids(be, args->tokens, N, config_.vocab_size, false, "tokens");
  int64_t valid_targets = 0;
  if (args->targets && last)
    valid_targets = keel_support::check_token_ids(be, args->targets, N, config_.vocab_size, true, "targets");

  Activations& a = activations_for(args->microbatch, chunk, B, T);
  a.backward_pending = a.weight_pending = false;
  ensure_scratch(N);
  ensure_recompute_scratch(B, T);
  if (sparse_) sparse_->ensure_state(a.moe, N, plan_.first_block(chunk), a.blocks);
  if (first) KEEL_OP(be, copy, a.tokens, args->tokens, N * sizeof(int32_t), KEEL_COPY_DEVICE_TO_DEVICE);
  a.packed = call.positions != nullptr;
  if (a.packed) KEEL_OP(be, copy, a.positions, call.positions, N * sizeof(int32_t), KEEL_COPY_DEVICE_TO_DEVICE);
  a.dropout_seed = call.dropout_seed;
  if (args->targets && last)
    KEEL_OP(be, copy, a.targets, args->targets, N * sizeof(int32_t), KEEL_COPY_DEVICE_TO_DEVICE);

  if (first) embedding_forward(a, args->access);
  else ops_.copy(a.encoded, ops_.at(call.input), io_numel);
  for (int64_t l = 0; l < a.blocks; ++l) block_forward(a, l, args->access);
  if (!last) {
    ops_.copy(ops_.at(call.output), a.residual3 + (a.blocks - 1) * io_numel, io_numel);
    a.backward_pending = args->targets != nullptr;
    return;
  }
  const bool device_loss = call.device_loss;
  const float loss = head_forward(a, args->access, args->targets != nullptr, valid_targets, &args->logits,
                                  device_loss ? args->loss_sum : nullptr, device_loss ? args->loss_weight : 1.0f);
  if (args->targets && !device_loss) args->loss = loss;
}

void LlamaModel::embedding_forward(Activations& a, const keel_param_access* access) {
  const int64_t C = config_.d_model, N = int64_t(a.B) * a.T;
  LayerLease lease(access, 0, KEEL_PHASE_FORWARD, layer_specs(0), layer_size(0));
  // Each rank embeds the tokens of its vocabulary rows (all of them at tp 1); the sum is the embedding.
  const Elems partial = tp_.active() ? scratch_.partial : a.encoded;
  ops_.embedding_rows_forward(partial, a.tokens, lease.param_elems(EMBED), Elems(), a.B, a.T, C, share_.vocab.begin,
                              share_.vocab.rows);
  if (tp_.active()) tp_.leave(partial, a.encoded, N);
  lease.release(false);
}

void LlamaModel::stack_weights(const LayerLease& lease, bool mlp) {
  auto w = [&](BlockTensor t) { return weight(lease, t); };
  auto biases = [&](bool held, std::initializer_list<BlockTensor> tensors) {
    std::vector<Elems> out;  // none without the config's biases
    if (held)
      for (BlockTensor t : tensors) out.push_back(bias_of(lease, t));
    return out;
  };
  qkv_.stack({w(Q_W), w(K_W), w(V_W)}, biases(config_.attention_bias, {Q_B, K_B, V_B}));
  if (mlp) gate_up_.stack({w(GATE_W), w(UP_W)}, biases(config_.mlp_bias, {GATE_B, UP_B}));
}

void LlamaModel::block_forward(Activations& a, int64_t l, const keel_param_access* access) {
  const int64_t C = config_.d_model, Nr = tp_.norm_rows(int64_t(a.B) * a.T);
  const int32_t layer = static_cast<int32_t>(1 + plan_.first_block(a.chunk) + l);
  LayerLease lease(access, layer, KEEL_PHASE_FORWARD, layer_specs(layer), layer_size(layer));
  prepare_weights(lease, layer - 1, a.dropout_seed);
  const Elems residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * Nr * C;
  block_forward_ops(block_activations(a, l), residual, a.residual3 + l * Nr * C, lease, a.B, a.T);
  lease.release(false);
}

void LlamaModel::block_forward_ops(const BlockActivations& v, Elems residual, Elems residual3,
                                   const LayerLease& lease, int64_t B, int64_t T) {
  Scratch& s = scratch_;
  const int64_t C = config_.d_model, N = B * T, Nr = tp_.norm_rows(N);
  const int64_t Cq = share_.q_width, F = share_.hidden;
  auto w = [&](int i) { return weight(lease, BlockTensor(i)); };
  const bool sp = tp_.sequence_parallel();
  const Elems ln_out1 = sp ? s.ln_rows : v.ln1, ln_out2 = sp ? s.ln_rows : v.ln2;
  const Elems o_out = tp_.active() ? s.partial : v.residual2;
  stack_weights(lease, !v.moe);

  // Attention: residual2 = residual + o_proj(attention(rope(qkv(norm(residual))))).
  // QAT's activations: the inputs the model keeps are quantized in place (the norms' backward reads
  // their inputs, SwiGLU's its gate and up); attention's output, which attention's backward reads,
  // as a copy (o_input). q, k and v share one input, as gate and up do (llama_config.cpp).
  auto quantize = [&](const char* module, Elems x, int64_t cols) {
    if (config_.qat.quantizes_input(module)) qat_->quantize_input(x, N, cols);
  };
  ops_.rmsnorm_forward(ln_out1, v.ln1_rstd, residual, w(IN_NORM), Nr, C, config_.rms_eps);
  tp_.enter(ln_out1, v.ln1, N);
  quantize("q_proj", v.ln1, C);
  // LoRA's dropout: the adapters' share added at each input, from its dropped copy.
  using keel_support::kAttentionInput, keel_support::kAttentionOutput, keel_support::kMlpInput, keel_support::kMlpHidden;
  const int64_t piece = tp_.active() ? tp_.rank() : 0;  // a row-parallel input's columns start at piece × its width
  qkv_.forward(v.qkv, v.ln1, N);
  lora_->add_dropped(v.qkv, v.ln1, N, C, qkv_parts(), input_seed(v, kAttentionInput), 0);
  turn_qk(v, B, T);
  attend(v, v.atty, B, T);
  ops_.matmul_forward(o_out, o_input(v.atty, N), w(O_W), Elems(), N, Cq, C);
  lora_->add_dropped(o_out, v.atty, N, Cq, {{O_W, C}}, input_seed(v, kAttentionOutput), piece * Cq);
  if (tp_.active()) tp_.leave(o_out, v.residual2, N);
  ops_.add(v.residual2, v.residual2, residual, Nr * C);
  // MLP: residual3 = residual2 + down(silu(gate(x)) · up(x)), x = norm(residual2).
  ops_.rmsnorm_forward(ln_out2, v.ln2_rstd, v.residual2, w(POST_NORM), Nr, C, config_.rms_eps);
  tp_.enter(ln_out2, v.ln2, N);
  if (v.moe) {  // a sparse MLP (llama_moe.cpp); its state is kept, so a recomputation stops here
    if (!residual3) return;
    sparse_->forward(*v.moe, residual3, v.ln2, LayerWeights{lease, nullptr, lora_, qat_, v.dropout_seed, v.block}, N);
    ops_.add(residual3, residual3, v.residual2, Nr * C);
    return;
  }
  quantize("gate_proj", v.ln2, C);
  gate_up_.forward(v.gate_up, v.ln2, N);
  lora_->add_dropped(v.gate_up, v.ln2, N, C, {{GATE_W, F}, {UP_W, F}}, input_seed(v, kMlpInput), 0);
  ops_.swiglu_forward(v.act, v.gate_up, N, F);
  quantize("down_proj", v.act, F);
  if (!residual3) return;  // a recomputation: the backward reads nothing past SwiGLU
  const Elems down_out = tp_.active() ? s.partial : residual3;
  ops_.matmul_forward(down_out, v.act, w(DOWN_W), bias_once(bias_of(lease, DOWN_B)), N, F, C);
  lora_->add_dropped(down_out, v.act, N, F, {{DOWN_W, C}}, input_seed(v, kMlpHidden), piece * F);
  if (tp_.active()) tp_.leave(down_out, residual3, N);
  ops_.add(residual3, residual3, v.residual2, Nr * C);
}

// The same ops on the same inputs write the same bits the forward wrote, so the gradients equal
// recompute "none"'s; under tensor parallelism the recomputation redoes the forward's collectives.
void LlamaModel::recompute_block(const BlockActivations& v, Elems residual, const LayerLease& lease, int64_t B,
                                 int64_t T, bool for_input) {
  if (config_.recompute == Recompute::FULL) return block_forward_ops(v, residual, Elems(), lease, B, T);
  if (config_.recompute == Recompute::SELECTIVE && for_input)
    attend(v, recompute_block_.atty, B, T);
}

float LlamaModel::head_forward(Activations& a, const keel_param_access* access, bool training, int64_t valid_targets,
                               const float** out_logits, float* loss_sum, float loss_weight) {
  const keel_support::BackendOps& be = backend_;
  const int64_t C = config_.d_model, N = int64_t(a.B) * a.T, Nr = tp_.norm_rows(N), Vl = share_.vocab.rows;
  const Elems last_residual = a.residual3 + (a.blocks - 1) * Nr * C;
  {  // layer L+1: the final norm, and the head when untied
    const int32_t layer = config_.n_layer + 1;
    LayerLease lease(access, layer, KEEL_PHASE_FORWARD, layer_specs(layer), layer_size(layer));
    const Elems lnf_out = tp_.sequence_parallel() ? scratch_.ln_rows : a.lnf;
    ops_.rmsnorm_forward(lnf_out, a.lnf_rstd, last_residual, lease.param_elems(FINAL_NORM), Nr, C, config_.rms_eps);
    tp_.enter(lnf_out, a.lnf, N);
    if (!tied()) ops_.matmul_forward(a.logits, a.lnf, lease.param_elems(LM_HEAD), Elems(), N, C, Vl);
    lease.release(false);
  }
  if (tied()) {  // layer 0 again: the embedding is the head (on a later pipeline stage, its copy)
    LayerLease lease(access, 0, KEEL_PHASE_FORWARD, layer_specs(0), layer_size(0));
    ops_.matmul_forward(a.logits, a.lnf, lease.param_elems(EMBED), Elems(), N, C, Vl);
    lease.release(false);
  }
  if (!training) {
    *out_logits = inference_logits_.get(backend_, tp_, a.logits, N, config_.padded_vocab_size);
    return 0.0f;
  }
  a.valid_targets = valid_targets;
  a.backward_pending = true;
  const float mean = valid_targets ? 1.0f / static_cast<float>(valid_targets) : 0.0f;
  if (loss_sum) {
    tp_.vocab_parallel_loss(ops_, a.ce_stats, a.logits, a.lse, a.targets, N, share_.vocab, loss_sum,
                            loss_weight * mean);
    return 0.0f;
  }
  KEEL_OP(be, fill_zero, a.loss_sum, sizeof(float));
  tp_.vocab_parallel_loss(ops_, a.ce_stats, a.logits, a.lse, a.targets, N, share_.vocab, a.loss_sum, mean);
  float loss = 0.0f;
  KEEL_OP(be, copy, &loss, a.loss_sum, sizeof(float), KEEL_COPY_DEVICE_TO_HOST);
  return loss;
}

}  // namespace keel_llama
