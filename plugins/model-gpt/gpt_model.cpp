// GPT-2's config, activations and forward pass, layer by layer, in llm.c's order and naming
// (train_gpt2.c: gpt2_forward; the backward is gpt_backward.cpp), with every op delegated to the
// backend and every parameter borrowed from the strategy for exactly as long as its layer runs.
#include "gpt_model.hpp"

#include <keel_support/model/external_config.hpp>
#include <keel_support/common/sized_output.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace keel_gpt {

using keel_support::Carver;
using keel_support::LayerLease;
using keel_support::ConfigError;
using keel_support::StatusError;

const std::vector<std::string> kGptLinearModules = {"c_attn", "c_proj", "c_fc"};

GptConfig parse_gpt_config(const char* config_json, const char* json_path) {
  auto section = keel_support::JsonSection::parse(config_json, json_path ? json_path : "model");
  section.allow("plugin");
  GptConfig c;  // defaults: GPT-2 small (124M)
  c.n_layer = section.get_in_range<int32_t>("n_layer", c.n_layer, 1, 4096);
  c.n_head = section.get_in_range<int32_t>("n_head", c.n_head, 1, 4096);
  c.d_model = section.get_in_range<int32_t>("d_model", c.d_model, 1, 1 << 20);
  c.vocab_size = section.get_in_range<int32_t>("vocab_size", c.vocab_size, 1, (1 << 30));
  c.max_seq_len = section.get_in_range<int32_t>("seq_len", c.max_seq_len, 1, 1 << 24);
  c.recompute = keel_support::parse_recompute(section);
  // PEFT's default target for GPT-2 is c_attn.
  c.lora = keel_support::parse_lora_config(section, kGptLinearModules, {"c_attn"});
  c.qat = keel_support::parse_qat_config(section, kGptLinearModules);
  section.finish();
  keel_support::refuse_activations_with_lora(c.qat, c.lora.enabled(), section.path_of("qat"));
  if (c.d_model % c.n_head != 0)
    throw ConfigError(section.path_of("n_head") + ": must divide " + section.path_of("d_model") + " (" +
                      std::to_string(c.d_model) + "), found " + std::to_string(c.n_head));
  c.padded_vocab_size = (c.vocab_size + 127) / 128 * 128;
  return c;
}

std::string complete_gpt_config(const std::string& format, const char* external_json, const char* config_json,
                                const char* json_path) {
  if (format == "peft") {  // a LoRA adapter folder's adapter_config.json: model.lora from it
    const std::string completed =
        keel_support::complete_lora_from_peft(external_json, config_json, json_path, /*fan_in_fan_out=*/true);
    parse_gpt_config(completed.c_str(), json_path);
    return completed;
  }
  if (format != "huggingface")
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "no external format named '" + format + "'; the gpt model knows: "
                                              "huggingface, peft");
  keel_support::ExternalConfigMerge merge(config_json, json_path, external_json, "config.json");
  merge.require_one_of("model_type", {"gpt2"});
  // Keel's GPT-2 has a 4·d_model MLP with the tanh GELU, tied to the embedding.
  merge.require_value("n_inner", nullptr, "Keel's gpt has a 4·d_model MLP");
  merge.require_one_of("activation_function", {"gelu_new", "gelu_pytorch_tanh"}, /*absent_ok=*/true);
  merge.require_value("tie_word_embeddings", true, "Keel's gpt ties the LM head to the token embedding");
  // Keys that change GPT-2's function: each is Keel's value or refused by name. Dropout (the
  // *_pdrop keys) is left out on purpose: it acts in training only, and Keel trains without it.
  merge.require_value("scale_attn_weights", true, "Keel's gpt scales attention scores by 1/sqrt(head size)");
  merge.require_value("scale_attn_by_inverse_layer_idx", false,
                      "Keel's gpt does not scale attention scores by the inverse layer index");
  merge.require_value("add_cross_attention", false, "Keel's gpt is decoder-only, without cross-attention");
  merge.require_value("layer_norm_epsilon", 1e-5, "Keel's layer norm kernels use GPT-2's epsilon, 1e-5");
  merge.take("n_layer", "n_layer");
  merge.take("n_head", "n_head");
  merge.take("d_model", "n_embd");
  merge.take("vocab_size", "vocab_size");
  merge.take("seq_len", "n_positions");  // wpe's rows: equal, not at most
  const std::string completed = merge.result();
  parse_gpt_config(completed.c_str(), json_path);
  return completed;
}

GptModel::GptModel(const keel_host* host, const keel_model_create_args& args)
    : host_(host), config_(parse_gpt_config(args.config_json, args.json_path)) {
  if (args.backend == nullptr || args.backend_obj == nullptr)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: backend table and object are required");
  backend_ = {args.backend, args.backend_obj};
  ops_ = ComputeOps(backend_);
  // Every op this model calls, so a backend missing one fails here rather than mid-step.
#define KEEL_REQUIRE_OP(op) KEEL_REQUIRE_BACKEND_OP(args.backend, op, "the gpt model");
  KEEL_REQUIRE_OP(alloc) KEEL_REQUIRE_OP(free_memory) KEEL_REQUIRE_OP(copy) KEEL_REQUIRE_OP(fill_zero)
  KEEL_REQUIRE_OP(matmul_forward) KEEL_REQUIRE_OP(matmul_backward) KEEL_REQUIRE_OP(layernorm_forward)
  KEEL_REQUIRE_OP(layernorm_backward) KEEL_REQUIRE_OP(attention_saved_floats)
  KEEL_REQUIRE_OP(attention_forward) KEEL_REQUIRE_OP(attention_backward) KEEL_REQUIRE_OP(gelu_forward)
  KEEL_REQUIRE_OP(gelu_backward) KEEL_REQUIRE_OP(add) KEEL_REQUIRE_OP(embedding_forward)
  KEEL_REQUIRE_OP(embedding_backward) KEEL_REQUIRE_OP(crossentropy_shard_stats)
  KEEL_REQUIRE_OP(crossentropy_shard_backward) KEEL_REQUIRE_OP(crossentropy_combine)
#undef KEEL_REQUIRE_OP
  check_tensor_parallel(args);
  plan_ = ChunkPlan(args, config_.n_layer);
  connect_context_parallel(args);
  build_param_specs();
  external_ = gpt_external_names(config_, specs_.names());
  if (config_.lora.enabled())
    lora_ = keel_support::LoraLayer(ops_, &tp_, config_.lora.r, config_.lora.scaling(), lora_targets_,
                                    float(config_.lora.dropout));
  if (config_.qat.enabled()) create_qat();
}

// QAT's targets: the configured linears with this rank's shapes (qkv's (3, C/tp, C) piece is a
// (3C/tp, C) matrix), checked by keel_support::qat_target.
void GptModel::create_qat() {
  const std::pair<const char*, BlockTensor> linears[] = {
      {"c_attn", QKV_W}, {"c_proj", ATTPROJ_W}, {"c_fc", FC_W}, {"c_proj", FCPROJ_W}};
  // This rank's first block (every block's shapes are the same).
  const keel_param_spec* specs = layer_specs(1 + plan_.first_block(plan_.pp_rank()));
  std::vector<keel_support::QatTarget> targets;
  for (const auto& [module, tensor] : linears)
    if (config_.qat.targets(module))
      targets.push_back(keel_support::qat_target(config_.qat, module, size_t(tensor), specs[tensor]));
  qat_ = keel_support::QatLayer(ops_, config_.qat, std::move(targets));
}

void GptModel::describe(keel_model_info* out) const {
  keel_support::write_model_info(out, specs_.specs(), config_.n_layer + 2, config_.vocab_size, config_.padded_vocab_size,
                                 config_.max_seq_len, /*n_blocks=*/config_.n_layer, /*splits_sequences=*/true);
}

// PaLM (Chowdhery et al. 2022), appendix B: 6·N per token for the matmuls of forward and
// backward, plus 12·L·C·T for attention's score and value products (forward 2·2·L·C·T, backward
// twice that). N counts every parameter element except the position embedding wpe (a lookup,
// not a matmul), with wte's true V rows (its padded rows never reach the loss). N is the whole
// model's on every pipeline rank: the core's MFU divides the model's work by all the ranks.
double GptModel::flops_per_token(int32_t seq_len) const {
  return 6.0 * matmul_params_ + 12.0 * config_.n_layer * config_.d_model * static_cast<double>(seq_len);
}

void GptModel::carve_activations(Activations& a, char* base, size_t* out_bytes) const {
  const int64_t L = a.blocks, C = config_.d_model;
  const int64_t Cl = share_.channels, F = share_.hidden, Vl = share_.vocab.rows;
  const int64_t N = static_cast<int64_t>(a.B) * a.T, Nr = norm_rows(N);
  const int64_t head = a.head ? 1 : 0;  // the head's buffers exist on the last chunk only
  // Layers of each kept tensor: FULL keeps only the blocks' outputs, SELECTIVE all but attention's state.
  const int64_t Lk = config_.recompute == Recompute::FULL ? 0 : L;
  const int64_t La = config_.recompute == Recompute::NONE ? L : 0;
  Carver carve(base);
  auto elems = [&](int64_t n) { return ops_.at(carve.take<char>(int64_t(ops_.bytes(n)))); };
  a.encoded = elems(Nr * C);
  a.ln1 = elems(Lk * N * C);
  a.ln1_mean = carve.take<float>(Lk * Nr);
  a.ln1_rstd = carve.take<float>(Lk * Nr);
  a.qkv = elems(Lk * N * 3 * Cl);
  a.atty = elems(Lk * N * Cl);
  a.att_saved = carve.take<char>(La * a.att_saved_per_layer);
  a.residual2 = elems(Lk * Nr * C);
  a.ln2 = elems(Lk * N * C);
  a.ln2_mean = carve.take<float>(Lk * Nr);
  a.ln2_rstd = carve.take<float>(Lk * Nr);
  a.fch = elems(Lk * N * F);
  a.fch_gelu = elems(Lk * N * F);
  a.residual3 = elems(L * Nr * C);
  a.lnf = elems(head * N * C);
  a.lnf_mean = carve.take<float>(head * Nr);
  a.lnf_rstd = carve.take<float>(head * Nr);
  a.logits = elems(head * N * Vl);
  a.lse = carve.take<float>(head * N);
  a.ce_stats = carve.take<float>(head * tp_.ce_stats_floats(N));
  a.loss_sum = carve.take<float>(head);
  a.tokens = carve.take<int32_t>(N);
  a.targets = carve.take<int32_t>(head * N);
  a.positions = carve.take<int32_t>(N);
  *out_bytes = carve.used();
}

int64_t GptModel::att_saved_bytes(int64_t B, int64_t T) const {
  const int64_t lse_bytes = B * share_.heads * T * int64_t(sizeof(float));
  if (cp_size_ > 1) return lse_bytes;  // the ring keeps the statistics alone
  return std::max(ops_.attention_saved_bytes(B, T, share_.channels, share_.heads), lse_bytes);
}

// Context parallelism: this rank's rows are 2·B' rows of T tokens, chunk-major (model.h cp_size);
// q and the keys and values sit in the fused qkv rows, and the ring moves those rows.
keel_support::RingAttention::Shape GptModel::ring_shape(int64_t B, int64_t T) const {
  keel_support::RingAttention::Shape s;
  const int64_t Cl = share_.channels;
  s.B = B / 2, s.Tc = T, s.NH = share_.heads, s.NKV = share_.heads, s.hs = Cl / share_.heads;
  s.q_stride = 3 * Cl, s.kv_stride = 3 * Cl, s.out_stride = Cl;
  return s;
}

void GptModel::attend(const BlockActivations& v, Elems out, int64_t B, int64_t T) const {
  if (cp_size_ > 1)
    return ring_.forward(ring_shape(B, T), v.qkv, v.qkv + share_.channels, out, reinterpret_cast<float*>(v.att_saved));
  if (v.positions)
    return ops_.attention_documents_forward(out, reinterpret_cast<float*>(v.att_saved), v.qkv, v.positions, B, T,
                                            share_.channels, share_.heads, share_.heads);
  ops_.attention_forward(out, v.att_saved, v.qkv, B, T, share_.channels, share_.heads);
}

void GptModel::attend_backward(const BlockActivations& v, Elems dqkv, Elems datty, int64_t B, int64_t T) const {
  if (cp_size_ > 1)
    return ring_.backward(ring_shape(B, T), v.qkv, v.qkv + share_.channels, v.atty,
                          reinterpret_cast<const float*>(v.att_saved), datty, dqkv, dqkv + share_.channels);
  if (v.positions)
    return ops_.attention_documents_backward(dqkv, datty, v.qkv, v.atty, reinterpret_cast<const float*>(v.att_saved),
                                             v.positions, B, T, share_.channels, share_.heads, share_.heads);
  ops_.attention_backward(dqkv, datty, v.qkv, v.atty, v.att_saved, B, T, share_.channels, share_.heads);
}

BlockActivations GptModel::block_activations(const Activations& a, int64_t l) const {
  if (config_.recompute == Recompute::FULL) {
    BlockActivations v = recompute_.block;
    v.positions = a.packed ? a.positions : nullptr;
    v.block = plan_.first_block(a.chunk) + l;
    v.dropout_seed = a.dropout_seed;
    return v;
  }
  const int64_t C = config_.d_model, N = static_cast<int64_t>(a.B) * a.T, Nr = norm_rows(N);
  const int64_t Cl = share_.channels, F = share_.hidden;
  BlockActivations v;
  v.ln1 = a.ln1 + l * N * C;
  v.ln1_mean = a.ln1_mean + l * Nr;
  v.ln1_rstd = a.ln1_rstd + l * Nr;
  v.qkv = a.qkv + l * N * 3 * Cl;
  v.atty = a.atty + l * N * Cl;
  v.att_saved = config_.recompute == Recompute::SELECTIVE ? recompute_.block.att_saved
                                                            : a.att_saved + l * a.att_saved_per_layer;
  v.residual2 = a.residual2 + l * Nr * C;
  v.ln2 = a.ln2 + l * N * C;
  v.ln2_mean = a.ln2_mean + l * Nr;
  v.ln2_rstd = a.ln2_rstd + l * Nr;
  v.fch = a.fch + l * N * F;
  v.fch_gelu = a.fch_gelu + l * N * F;
  v.positions = a.packed ? a.positions : nullptr;
  v.block = plan_.first_block(a.chunk) + l;
  v.dropout_seed = a.dropout_seed;
  return v;
}

// One block's worth of what recomputation writes: every block tensor but the output under FULL,
// attention's saved state and output under SELECTIVE. Sized by the same formulas as
// carve_activations' per-layer pieces, so the log's numbers add up with the activations' own.
void GptModel::ensure_recompute_scratch(int64_t B, int64_t T) {
  const int64_t N = B * T, att_bytes = att_saved_bytes(B, T);
  if (config_.recompute == Recompute::NONE || (recompute_.rows >= N && recompute_.att_saved_bytes >= att_bytes)) return;
  const int64_t rows = std::max(N, recompute_.rows), att = std::max(att_bytes, recompute_.att_saved_bytes);
  const int64_t C = config_.d_model, Cl = share_.channels, F = share_.hidden, Nr = norm_rows(rows);
  const int64_t full = config_.recompute == Recompute::FULL ? 1 : 0;
  auto carve_all = [&](RecomputeScratch& r, char* base) {
    Carver carve(base);
    auto elems = [&](int64_t n) { return ops_.at(carve.take<char>(int64_t(ops_.bytes(n)))); };
    BlockActivations& v = r.block;
    v.ln1 = elems(full * rows * C);
    v.ln1_mean = carve.take<float>(full * Nr);
    v.ln1_rstd = carve.take<float>(full * Nr);
    v.qkv = elems(full * rows * 3 * Cl);
    v.atty = elems(full * rows * Cl);
    v.att_saved = carve.take<char>(att);
    v.residual2 = elems(full * Nr * C);
    v.ln2 = elems(full * rows * C);
    v.ln2_mean = carve.take<float>(full * Nr);
    v.ln2_rstd = carve.take<float>(full * Nr);
    v.fch = elems(full * rows * F);
    v.fch_gelu = elems(full * rows * F);
    r.atty = elems((1 - full) * rows * Cl);
    return carve.used();
  };
  recompute_.memory = BackendBuffer();  // free the smaller one first: peak memory is one copy
  recompute_.rows = 0;
  const size_t bytes = carve_all(recompute_, nullptr);
  recompute_.memory = backend_.alloc_bytes(bytes);
  carve_all(recompute_, static_cast<char*>(recompute_.memory.get()));
  recompute_.rows = rows;
  recompute_.att_saved_bytes = att;
  keel_logf(host_, KEEL_LOG_DEBUG, "model gpt", "recompute buffer (%s, one block, %lld tokens): %zu bytes",
            keel_support::recompute_name(config_.recompute), static_cast<long long>(rows), bytes);
}

Activations& GptModel::activations_for(int32_t microbatch, int32_t chunk, int32_t B, int32_t T) {
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
  a.backward_pending = false;
  // For benchmarks/tensor_parallel.py: the token-row regions are the tensors sequence parallelism
  // holds as this rank's rows (the embedding output, the residual stream, the norms' statistics);
  // the norms' outputs are kept gathered, as the column-parallel matmuls' weight gradients read them.
  const int64_t L = a.blocks, C = config_.d_model, Nr = norm_rows(static_cast<int64_t>(B) * T);
  const int64_t Lk = config_.recompute == Recompute::FULL ? 0 : L;  // layers of residual2 and the norms' statistics
  const int64_t row_bytes = int64_t(ops_.bytes(Nr * C + (L + Lk) * Nr * C)) +
                            int64_t(sizeof(float)) * (4 * Lk * Nr + (a.head ? 2 * Nr : 0));
  keel_logf(host_, KEEL_LOG_DEBUG, "model gpt",
            "activations for micro-batch %d%s (%d x %d tokens, tp %d%s, recompute %s): %zu bytes, of which token-row "
            "regions %lld bytes",
            microbatch, plan_.chunks() > 1 ? (", chunk " + std::to_string(chunk)).c_str() : "", B, T, tp_.size(),
            tp_.sequence_parallel() ? ", sequence parallel" : "", keel_support::recompute_name(config_.recompute), bytes,
            static_cast<long long>(row_bytes));
  return a;
}

void GptModel::ensure_grad_scratch(int64_t rows) {
  if (scratch_.rows >= rows) return;
  const int64_t C = config_.d_model, Cl = share_.channels, F = share_.hidden;
  const int64_t sp = tp_.sequence_parallel() ? 1 : 0;
  auto carve_all = [&](GradScratch& s, char* base) {
    Carver carve(base);
    auto elems = [&](int64_t n) { return ops_.at(carve.take<char>(int64_t(ops_.bytes(n)))); };
    s.dresidual = elems(norm_rows(rows) * C);
    s.dln = elems(rows * C);
    s.datty = elems(rows * Cl);
    s.dqkv = elems(rows * 3 * Cl);
    s.dfch_gelu = elems(rows * F);
    s.dfch = elems(rows * F);
    s.ln_rows = elems(sp * norm_rows(rows) * C);
    s.partial = elems(sp * rows * C);
    s.dln_rows = elems(sp * norm_rows(rows) * C);
    s.dgathered = elems(sp * rows * C);
    s.dnorm = carve.take<float>(2 * C);
    return carve.used();
  };
  scratch_.memory = BackendBuffer();
  scratch_.rows = 0;
  size_t bytes = carve_all(scratch_, nullptr);
  scratch_.memory = backend_.alloc_bytes(bytes);
  carve_all(scratch_, static_cast<char*>(scratch_.memory.get()));
  scratch_.rows = rows;
}

void GptModel::forward(keel_forward_args* args) {
  if (decode_.cache.get()) decode_ = DecodeCache();  // generation is over: its cache goes
  const keel_support::ForwardCall call =
      keel_support::read_forward_call(*args, plan_, config_.max_seq_len, tp_.sequence_parallel() ? tp_.size() : 1);
  const int32_t chunk = call.chunk, B = call.B, T = call.T;
  const bool first = call.first, last = call.last;
  const float* input = call.input;
  float* output = call.output;
  const keel_support::BackendOps& be = backend_;
  const int64_t N = static_cast<int64_t>(B) * T, io_numel = stage_io_numel(B, T);

  if (first) keel_support::check_token_ids(be, args->tokens, N, config_.vocab_size, false, "tokens");
  int64_t valid_targets = 0;
  if (args->targets && last)
    valid_targets = keel_support::check_token_ids(be, args->targets, N, config_.vocab_size, true, "targets");

  Activations& a = activations_for(args->microbatch, chunk, B, T);
  a.backward_pending = a.weight_pending = false;
  ensure_grad_scratch(N);
  ensure_recompute_scratch(B, T);
  if (first) {
    KEEL_OP(be, copy, a.tokens, args->tokens, N * sizeof(int32_t), KEEL_COPY_DEVICE_TO_DEVICE);
  }
  a.packed = call.positions != nullptr;
  if (a.packed) KEEL_OP(be, copy, a.positions, call.positions, N * sizeof(int32_t), KEEL_COPY_DEVICE_TO_DEVICE);
  a.dropout_seed = call.dropout_seed;
  if (args->targets && last)
    KEEL_OP(be, copy, a.targets, args->targets, N * sizeof(int32_t), KEEL_COPY_DEVICE_TO_DEVICE);

  if (first) embedding_forward(a, args->access);
  else ops_.copy(a.encoded, ops_.at(input), io_numel);
  for (int64_t l = 0; l < a.blocks; ++l) block_forward(a, l, args->access);
  if (!last) {
    ops_.copy(ops_.at(output), a.residual3 + (a.blocks - 1) * io_numel, io_numel);
    a.backward_pending = args->targets != nullptr;  // a training forward: the backward comes
    return;
  }
  const bool device_loss = call.device_loss;
  const float loss = head_forward(a, args->access, args->targets != nullptr, valid_targets, &args->logits,
                                  device_loss ? args->loss_sum : nullptr, device_loss ? args->loss_weight : 1.0f);
  if (args->targets && !device_loss) args->loss = loss;
}

void GptModel::embedding_forward(Activations& a, const keel_param_access* access) {
  const int64_t C = config_.d_model, B = a.B, T = a.T, N = B * T, Vl = share_.vocab.rows;
  // layer 0: token and position embeddings
  LayerLease lease(access, 0, KEEL_PHASE_FORWARD, layer_specs(0), layer_size(0));
  if (!tp_.active() && !a.packed) {
    ops_.embedding_forward(a.encoded, a.tokens, lease.param_elems(WTE), lease.param_elems(WPE), B, T, C);  // (B,T,C)
  } else {  // each rank embeds the tokens of its vocabulary rows (wpe once, on rank 0); the sum is the embedding
    Elems partial = tp_.sequence_parallel() ? scratch_.partial : a.encoded;
    const bool position_rank = tp_.rank() == 0;
    ops_.embedding_rows_forward(partial, a.tokens, lease.param_elems(WTE),
                                position_rank && !a.packed ? lease.param_elems(WPE) : Elems(), B, T, C,
                                share_.vocab.begin, Vl);
    if (position_rank && a.packed) {  // a packed row's positions restart per document: wpe's rows by position
      ops_.embedding_rows_forward(scratch_.dln, a.positions, lease.param_elems(WPE), Elems(), B, T, C, 0,
                                  config_.max_seq_len);
      ops_.add(partial, partial, scratch_.dln, N * C);
    }
    tp_.leave(partial, a.encoded, N);
  }
  lease.release(false);
}

void GptModel::block_forward(Activations& a, int64_t l, const keel_param_access* access) {
  const int64_t C = config_.d_model, Nr = norm_rows(static_cast<int64_t>(a.B) * a.T);
  const int32_t layer = static_cast<int32_t>(1 + plan_.first_block(a.chunk) + l);
  LayerLease lease(access, layer, KEEL_PHASE_FORWARD, layer_specs(layer), layer_size(layer));
  prepare_weights(lease, a.dropout_seed);
  const Elems residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * Nr * C;  // (Nr,C)
  block_forward_ops(block_activations(a, l), residual, a.residual3 + l * Nr * C, lease, a.B, a.T);
  lease.release(false);
}

void GptModel::block_forward_ops(const BlockActivations& v, Elems residual, Elems residual3, const LayerLease& lease,
                                 int64_t B, int64_t T) {
  GradScratch& s = scratch_;
  const int64_t C = config_.d_model, N = B * T, Nr = norm_rows(N);
  const int64_t Cl = share_.channels, F = share_.hidden;
  auto w = [&](int i) { return weight(lease, BlockTensor(i)); };
  // Under sequence parallelism a norm writes this rank's rows, which are then gathered, and a
  // row-parallel matmul writes partial sums of every row, which are reduce-scattered.
  const Elems ln_out1 = tp_.sequence_parallel() ? s.ln_rows : v.ln1;
  const Elems ln_out2 = tp_.sequence_parallel() ? s.ln_rows : v.ln2;
  const Elems proj_out = tp_.sequence_parallel() ? s.partial : v.residual2;

  // QAT's activations: the inputs the model keeps are quantized in place (the norms' backward reads
  // their inputs, the GELU's its pre-activation); attention's output, which attention's backward
  // reads, as a copy (proj_input).
  auto quantize = [&](const char* module, Elems x, int64_t cols) {
    if (config_.qat.quantizes_input(module)) qat_.quantize_input(x, N, cols);
  };
  ops_.layernorm_forward(ln_out1, v.ln1_mean, v.ln1_rstd, residual, w(LN1_W), w(LN1_B), Nr, C);
  tp_.enter(ln_out1, v.ln1, N);
  quantize("c_attn", v.ln1, C);
  // LoRA's dropout: the adapters' share added at each input, from its dropped copy.
  const int64_t piece = tp_.active() ? tp_.rank() : 0;  // a row-parallel input's columns start at piece × its width
  ops_.matmul_forward(v.qkv, v.ln1, w(QKV_W), w(QKV_B), N, C, 3 * Cl);
  lora_.add_dropped(v.qkv, v.ln1, N, C, {{QKV_W, 3 * Cl}}, input_seed(v, keel_support::kAttentionInput), 0);
  attend(v, v.atty, B, T);
  ops_.matmul_forward(proj_out, proj_input(v.atty, N), w(ATTPROJ_W), bias_once(w(ATTPROJ_B)), N, Cl, C);
  lora_.add_dropped(proj_out, v.atty, N, Cl, {{ATTPROJ_W, C}}, input_seed(v, keel_support::kAttentionOutput),
                    piece * Cl);
  tp_.leave(proj_out, v.residual2, N);
  ops_.add(v.residual2, v.residual2, residual, Nr * C);
  ops_.layernorm_forward(ln_out2, v.ln2_mean, v.ln2_rstd, v.residual2, w(LN2_W), w(LN2_B), Nr, C);
  tp_.enter(ln_out2, v.ln2, N);
  quantize("c_fc", v.ln2, C);
  if (lora_.dropping()) {  // the adapters' share joins before the GELU
    ops_.matmul_forward(v.fch, v.ln2, w(FC_W), w(FC_B), N, C, F);
    lora_.add_dropped(v.fch, v.ln2, N, C, {{FC_W, F}}, input_seed(v, keel_support::kMlpInput), 0);
    ops_.gelu_forward(v.fch_gelu, v.fch, N * F);
  } else {
    ops_.matmul_gelu_forward(v.fch_gelu, v.fch, v.ln2, w(FC_W), w(FC_B), N, C, F);
  }
  quantize("c_proj", v.fch_gelu, F);
  if (!residual3) return;  // a recomputation: the backward reads nothing past the GELU
  const Elems fcproj_out = tp_.sequence_parallel() ? s.partial : residual3;
  ops_.matmul_forward(fcproj_out, v.fch_gelu, w(FCPROJ_W), bias_once(w(FCPROJ_B)), N, F, C);
  lora_.add_dropped(fcproj_out, v.fch_gelu, N, F, {{FCPROJ_W, C}}, input_seed(v, keel_support::kMlpHidden), piece * F);
  tp_.leave(fcproj_out, residual3, N);
  ops_.add(residual3, residual3, v.residual2, Nr * C);
}

// The same ops on the same inputs (the block's kept input, the parameters the strategy hands out
// again) write the same bits the forward wrote, so the gradients equal recompute "none"'s. Under
// tensor parallelism the recomputed forward redoes its communication: the all-gathers of ln_1 and
// ln_2 (sequence parallel) and attn.proj's reduce-scatter (sequence parallel) or all-reduce, which
// residual2 needs; it stops before mlp.proj, whose output no backward reads.
void GptModel::recompute_block(const BlockActivations& v, Elems residual, const LayerLease& lease, int64_t B,
                               int64_t T, bool for_input) {
  if (config_.recompute == Recompute::FULL) return block_forward_ops(v, residual, Elems(), lease, B, T);
  if (config_.recompute == Recompute::SELECTIVE && for_input) attend(v, recompute_.atty, B, T);
}

float GptModel::head_forward(Activations& a, const keel_param_access* access, bool training,
                             int64_t valid_targets, const float** out_logits, float* loss_sum, float loss_weight) {
  const keel_support::BackendOps& be = backend_;
  const int64_t C = config_.d_model, N = static_cast<int64_t>(a.B) * a.T, Nr = norm_rows(N);
  const int64_t Vl = share_.vocab.rows;
  const Elems last_residual = a.residual3 + (a.blocks - 1) * Nr * C;  // (Nr,C)
  {  // layer L+1: final layernorm
    const int32_t layer = config_.n_layer + 1;
    LayerLease lease(access, layer, KEEL_PHASE_FORWARD, layer_specs(layer), layer_size(layer));
    const Elems lnf_out = tp_.sequence_parallel() ? scratch_.ln_rows : a.lnf;
    ops_.layernorm_forward(lnf_out, a.lnf_mean, a.lnf_rstd, last_residual, lease.param_elems(LNF_W),
                           lease.param_elems(LNF_B), Nr, C);
    tp_.enter(lnf_out, a.lnf, N);
    lease.release(false);
  }
  {  // layer 0 again: the lm_head is wte (this rank's vocabulary rows; on a later pipeline stage its copy)
    LayerLease lease(access, 0, KEEL_PHASE_FORWARD, layer_specs(0), layer_size(0));
    ops_.matmul_forward(a.logits, a.lnf, lease.param_elems(WTE), Elems(), N, C, Vl);  // (B,T,Vp/tp)
    lease.release(false);
  }

  if (!training) {
    *out_logits = inference_logits_.get(backend_, tp_, a.logits, N, config_.padded_vocab_size);
    return 0.0f;
  }
  a.valid_targets = valid_targets;
  a.backward_pending = true;
  // The mean over valid targets; with none the loss is 0 and, in backward, the gradients are zero.
  const float mean = valid_targets ? 1.0f / static_cast<float>(valid_targets) : 0.0f;
  if (loss_sum) {  // the caller's scalar in backend memory: nothing is read back here
    tp_.vocab_parallel_loss(ops_, a.ce_stats, a.logits, a.lse, a.targets, N, share_.vocab, loss_sum, loss_weight * mean);
    return 0.0f;
  }
  KEEL_OP(be, fill_zero, a.loss_sum, sizeof(float));
  tp_.vocab_parallel_loss(ops_, a.ce_stats, a.logits, a.lse, a.targets, N, share_.vocab, a.loss_sum, mean);
  float loss = 0.0f;
  KEEL_OP(be, copy, &loss, a.loss_sum, sizeof(float), KEEL_COPY_DEVICE_TO_HOST);
  return loss;
}

}  // namespace keel_gpt
