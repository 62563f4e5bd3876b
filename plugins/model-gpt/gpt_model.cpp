// GPT-2's forward and backward passes, layer by layer, in llm.c's order and naming
// (train_gpt2.c: gpt2_forward / gpt2_backward), with every op delegated to the backend and
// every parameter borrowed from the strategy for exactly as long as its layer runs.
#include "gpt_model.hpp"

#include <keel_support/sized_output.hpp>

#include <cmath>

namespace keel_gpt {

using keel_model::Carver;
using keel_model::LayerLease;
using keel_support::ConfigError;
using keel_support::StatusError;

namespace {

// Index of each tensor inside a block's layer, in spec order.
enum BlockTensor {
  LN1_W, LN1_B, QKV_W, QKV_B, ATTPROJ_W, ATTPROJ_B, LN2_W, LN2_B, FC_W, FC_B, FCPROJ_W, FCPROJ_B,
  BLOCK_TENSORS
};
enum EmbeddingTensor { WTE, WPE };
enum FinalNormTensor { LNF_W, LNF_B };

}  // namespace

GptConfig parse_gpt_config(const char* config_json, const char* json_path) {
  auto section = keel_support::JsonSection::parse(config_json, json_path ? json_path : "model");
  section.allow("plugin");
  GptConfig c;  // defaults: GPT-2 small (124M)
  c.n_layer = section.get_in_range<int32_t>("n_layer", c.n_layer, 1, 4096);
  c.n_head = section.get_in_range<int32_t>("n_head", c.n_head, 1, 4096);
  c.d_model = section.get_in_range<int32_t>("d_model", c.d_model, 1, 1 << 20);
  c.vocab_size = section.get_in_range<int32_t>("vocab_size", c.vocab_size, 1, (1 << 30));
  c.max_seq_len = section.get_in_range<int32_t>("seq_len", c.max_seq_len, 1, 1 << 24);
  section.finish();
  if (c.d_model % c.n_head != 0)
    throw ConfigError(section.path_of("n_head") + ": must divide " + section.path_of("d_model") + " (" +
                      std::to_string(c.d_model) + "), found " + std::to_string(c.n_head));
  c.padded_vocab_size = (c.vocab_size + 127) / 128 * 128;
  return c;
}

GptModel::GptModel(const keel_host* host, const keel_model_create_args& args)
    : host_(host), config_(parse_gpt_config(args.config_json, args.json_path)) {
  if (args.tp_size != 1 || args.tp_rank != 0)
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "tensor parallelism is not implemented yet: tp_size must be 1 "
                                              "(found tp_rank " + std::to_string(args.tp_rank) + ", tp_size " +
                                                  std::to_string(args.tp_size) + ")");
  if (args.backend == nullptr || args.backend_obj == nullptr)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: backend table and object are required");
  backend_ = {args.backend, args.backend_obj};
  // Every op this model calls, so a backend missing one fails here rather than mid-step.
#define KEEL_REQUIRE_OP(op)                                                                  \
  if (!KEEL_HAS_SLOT(args.backend, op))                                                      \
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "the backend does not implement " #op ", which " \
                                              "the gpt model needs");
  KEEL_REQUIRE_OP(alloc) KEEL_REQUIRE_OP(free_memory) KEEL_REQUIRE_OP(copy) KEEL_REQUIRE_OP(fill_zero)
  KEEL_REQUIRE_OP(matmul_forward) KEEL_REQUIRE_OP(matmul_backward) KEEL_REQUIRE_OP(layernorm_forward)
  KEEL_REQUIRE_OP(layernorm_backward) KEEL_REQUIRE_OP(attention_saved_floats)
  KEEL_REQUIRE_OP(attention_forward) KEEL_REQUIRE_OP(attention_backward) KEEL_REQUIRE_OP(gelu_forward)
  KEEL_REQUIRE_OP(gelu_backward) KEEL_REQUIRE_OP(add) KEEL_REQUIRE_OP(embedding_forward)
  KEEL_REQUIRE_OP(embedding_backward) KEEL_REQUIRE_OP(crossentropy_forward)
  KEEL_REQUIRE_OP(crossentropy_backward)
#undef KEEL_REQUIRE_OP
  build_param_specs();
  external_ = std::make_unique<const GptExternalNames>(config_, names_);
}

void GptModel::build_param_specs() {
  const int64_t L = config_.n_layer, C = config_.d_model, V = config_.vocab_size;
  const int64_t Vp = config_.padded_vocab_size, maxT = config_.max_seq_len;
  const uint32_t no_decay = KEEL_PARAM_NO_WEIGHT_DECAY;
  // GPT-2's init: N(0, 0.02), and residual-stream output projections scaled by 1/sqrt(2L).
  const float std = 0.02f, residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(L));

  struct Pending {
    std::string name;
    keel_param_spec spec;
  };
  std::vector<Pending> pending;
  auto add = [&](std::string name, int32_t layer, std::initializer_list<int64_t> shape, uint32_t flags,
                 int32_t init, float init_std, int64_t init_rows = -1) {
    pending.push_back({std::move(name), keel_model::make_spec(nullptr, layer, shape, flags, init, init_std, init_rows)});
  };

  // Layer 0: embeddings. wte's padded rows stay zero; wte is also the lm_head (tied).
  add("wte", 0, {Vp, C}, KEEL_PARAM_TIED, KEEL_INIT_NORMAL, std, V);
  add("wpe", 0, {maxT, C}, no_decay, KEEL_INIT_NORMAL, std);
  for (int64_t i = 0; i < L; ++i) {
    const int32_t layer = static_cast<int32_t>(1 + i);
    const std::string h = "h." + std::to_string(i) + ".";
    add(h + "ln_1.weight", layer, {C}, no_decay, KEEL_INIT_ONES, 0);
    add(h + "ln_1.bias", layer, {C}, no_decay, KEEL_INIT_ZEROS, 0);
    add(h + "attn.qkv.weight", layer, {3 * C, C}, 0, KEEL_INIT_NORMAL, std);
    add(h + "attn.qkv.bias", layer, {3 * C}, no_decay, KEEL_INIT_ZEROS, 0);
    add(h + "attn.proj.weight", layer, {C, C}, 0, KEEL_INIT_NORMAL, residual_std);
    add(h + "attn.proj.bias", layer, {C}, no_decay, KEEL_INIT_ZEROS, 0);
    add(h + "ln_2.weight", layer, {C}, no_decay, KEEL_INIT_ONES, 0);
    add(h + "ln_2.bias", layer, {C}, no_decay, KEEL_INIT_ZEROS, 0);
    add(h + "mlp.fc.weight", layer, {4 * C, C}, 0, KEEL_INIT_NORMAL, std);
    add(h + "mlp.fc.bias", layer, {4 * C}, no_decay, KEEL_INIT_ZEROS, 0);
    add(h + "mlp.proj.weight", layer, {C, 4 * C}, 0, KEEL_INIT_NORMAL, residual_std);
    add(h + "mlp.proj.bias", layer, {C}, no_decay, KEEL_INIT_ZEROS, 0);
  }
  add("ln_f.weight", static_cast<int32_t>(L + 1), {C}, no_decay, KEEL_INIT_ONES, 0);
  add("ln_f.bias", static_cast<int32_t>(L + 1), {C}, no_decay, KEEL_INIT_ZEROS, 0);

  names_.clear();
  specs_.clear();
  for (auto& p : pending) names_.push_back(std::move(p.name));
  for (size_t i = 0; i < pending.size(); ++i) {
    specs_.push_back(pending[i].spec);
    specs_.back().name = names_[i].c_str();  // names_ no longer grows, so the pointers stay valid
  }
  layer_first_spec_.assign(static_cast<size_t>(L + 3), specs_.size());
  for (size_t i = specs_.size(); i-- > 0;) layer_first_spec_[static_cast<size_t>(specs_[i].layer)] = i;
}

void GptModel::describe(keel_model_info* out) const {
  keel_model_info info{};
  info.struct_size = sizeof info;
  info.params = specs_.data();
  info.n_params = specs_.size();
  info.n_layers = config_.n_layer + 2;
  info.vocab_size = config_.vocab_size;
  info.padded_vocab_size = config_.padded_vocab_size;
  info.max_seq_len = config_.max_seq_len;
  keel_support::write_sized_output(out, info, sizeof info, "describe: out_info");
}

// PaLM (Chowdhery et al. 2022), appendix B: 6·N per token for the matmuls of forward and
// backward, plus 12·L·C·T for attention's score and value products (forward 2·2·L·C·T, backward
// twice that). N counts every parameter element except the position embedding wpe (a lookup,
// not a matmul), with wte's true V rows (its padded rows never reach the loss).
double GptModel::flops_per_token(int32_t seq_len) const {
  double n = 0;
  for (const auto& spec : specs_) {
    const std::string name = spec.name;
    if (name == "wpe") continue;
    n += name == "wte" ? static_cast<double>(config_.vocab_size) * config_.d_model
                       : static_cast<double>(keel_model::element_count(spec));
  }
  return 6.0 * n + 12.0 * config_.n_layer * config_.d_model * static_cast<double>(seq_len);
}

void GptModel::carve_activations(Activations& a, char* base, size_t* out_bytes) const {
  const int64_t L = config_.n_layer, C = config_.d_model, Vp = config_.padded_vocab_size;
  const int64_t N = static_cast<int64_t>(a.B) * a.T;
  Carver carve(base);
  a.encoded = carve.take<float>(N * C);
  a.ln1 = carve.take<float>(L * N * C);
  a.ln1_mean = carve.take<float>(L * N);
  a.ln1_rstd = carve.take<float>(L * N);
  a.qkv = carve.take<float>(L * N * 3 * C);
  a.atty = carve.take<float>(L * N * C);
  a.att_saved = carve.take<float>(L * a.att_saved_per_layer);
  a.residual2 = carve.take<float>(L * N * C);
  a.ln2 = carve.take<float>(L * N * C);
  a.ln2_mean = carve.take<float>(L * N);
  a.ln2_rstd = carve.take<float>(L * N);
  a.fch = carve.take<float>(L * N * 4 * C);
  a.fch_gelu = carve.take<float>(L * N * 4 * C);
  a.residual3 = carve.take<float>(L * N * C);
  a.lnf = carve.take<float>(N * C);
  a.lnf_mean = carve.take<float>(N);
  a.lnf_rstd = carve.take<float>(N);
  a.logits = carve.take<float>(N * Vp);
  a.losses = carve.take<float>(N);
  a.tokens = carve.take<int32_t>(N);
  a.targets = carve.take<int32_t>(N);
  *out_bytes = carve.used();
}

Activations& GptModel::activations_for(int32_t microbatch, int32_t B, int32_t T) {
  Activations& a = activations_[microbatch];
  if (a.B == B && a.T == T && a.memory.get()) return a;
  a.memory = BackendBuffer();  // free the old size first: peak memory is one copy
  a.B = B, a.T = T;
  a.att_saved_per_layer = backend_.api->attention_saved_floats(backend_.obj, B, T, config_.d_model, config_.n_head);
  if (a.att_saved_per_layer < 0)
    throw StatusError(KEEL_ERR_INTERNAL, "the backend's attention_saved_floats returned a negative size");
  size_t bytes = 0;
  carve_activations(a, nullptr, &bytes);
  a.memory = BackendBuffer(backend_.api, backend_.obj, bytes);
  carve_activations(a, static_cast<char*>(a.memory.get()), &bytes);
  a.backward_pending = false;
  return a;
}

void GptModel::ensure_grad_scratch(int64_t rows) {
  if (scratch_.rows >= rows) return;
  const int64_t C = config_.d_model, Vp = config_.padded_vocab_size;
  auto carve_all = [&](GradScratch& s, char* base) {
    Carver carve(base);
    s.dlogits = carve.take<float>(rows * Vp);
    s.dresidual = carve.take<float>(rows * C);
    s.dln = carve.take<float>(rows * C);
    s.datty = carve.take<float>(rows * C);
    s.dqkv = carve.take<float>(rows * 3 * C);
    s.dfch_gelu = carve.take<float>(rows * 4 * C);
    s.dfch = carve.take<float>(rows * 4 * C);
    return carve.used();
  };
  scratch_.memory = BackendBuffer();
  scratch_.rows = 0;
  size_t bytes = carve_all(scratch_, nullptr);
  scratch_.memory = BackendBuffer(backend_.api, backend_.obj, bytes);
  carve_all(scratch_, static_cast<char*>(scratch_.memory.get()));
  scratch_.rows = rows;
}

void GptModel::forward(keel_forward_args* args) {
  if (args->struct_size < sizeof(keel_forward_args))
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "forward: args->struct_size is smaller than keel_forward_args");
  if (!args->access || args->access->struct_size < sizeof(keel_param_access) || !args->tokens)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "forward: access table and tokens are required");
  const int32_t B = args->batch, T = args->seq_len;
  if (B < 1 || T < 1 || T > config_.max_seq_len)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "forward: need batch >= 1 and 1 <= seq_len <= " +
                                                     std::to_string(config_.max_seq_len) + ", found batch " +
                                                     std::to_string(B) + ", seq_len " + std::to_string(T));
  const keel_param_access* access = args->access;
  const keel_model::Backend& be = backend_;
  const int64_t L = config_.n_layer, NH = config_.n_head, C = config_.d_model;
  const int64_t V = config_.vocab_size, Vp = config_.padded_vocab_size, N = static_cast<int64_t>(B) * T;

  keel_model::check_token_ids(be, args->tokens, N, config_.vocab_size, false, "tokens");
  int64_t valid_targets = 0;
  if (args->targets) valid_targets = keel_model::check_token_ids(be, args->targets, N, config_.vocab_size, true, "targets");

  Activations& a = activations_for(args->microbatch, B, T);
  a.backward_pending = false;
  KEEL_OP(be, copy, a.tokens, args->tokens, N * sizeof(int32_t), KEEL_COPY_DEVICE_TO_DEVICE);
  if (args->targets) KEEL_OP(be, copy, a.targets, args->targets, N * sizeof(int32_t), KEEL_COPY_DEVICE_TO_DEVICE);

  {  // layer 0: token and position embeddings
    LayerLease lease(access, 0, KEEL_PHASE_FORWARD, layer_specs(0), layer_size(0));
    KEEL_OP(be, embedding_forward, a.encoded, a.tokens, lease.param(WTE), lease.param(WPE), B, T, C);  // (B,T,C)
    lease.release(false);
  }
  for (int64_t l = 0; l < L; ++l) {
    const int32_t layer = static_cast<int32_t>(1 + l);
    LayerLease lease(access, layer, KEEL_PHASE_FORWARD, layer_specs(layer), layer_size(layer));
    auto w = [&](int i) { return lease.param(static_cast<size_t>(i)); };
    const float* residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * N * C;  // (B,T,C)
    float* ln1 = a.ln1 + l * N * C;                                               // (B,T,C)
    float* ln1_mean = a.ln1_mean + l * N;                                         // (B,T)
    float* ln1_rstd = a.ln1_rstd + l * N;                                         // (B,T)
    float* qkv = a.qkv + l * N * 3 * C;                                           // (B,T,3C)
    float* atty = a.atty + l * N * C;                                             // (B,T,C)
    float* att_saved = a.att_saved + l * a.att_saved_per_layer;
    float* residual2 = a.residual2 + l * N * C;  // (B,T,C)
    float* ln2 = a.ln2 + l * N * C;              // (B,T,C)
    float* ln2_mean = a.ln2_mean + l * N;        // (B,T)
    float* ln2_rstd = a.ln2_rstd + l * N;        // (B,T)
    float* fch = a.fch + l * N * 4 * C;          // (B,T,4C)
    float* fch_gelu = a.fch_gelu + l * N * 4 * C;  // (B,T,4C)
    float* residual3 = a.residual3 + l * N * C;    // (B,T,C)

    KEEL_OP(be, layernorm_forward, ln1, ln1_mean, ln1_rstd, residual, w(LN1_W), w(LN1_B), N, C);
    KEEL_OP(be, matmul_forward, qkv, ln1, w(QKV_W), w(QKV_B), N, C, 3 * C);
    KEEL_OP(be, attention_forward, atty, att_saved, qkv, B, T, C, NH);
    KEEL_OP(be, matmul_forward, residual2, atty, w(ATTPROJ_W), w(ATTPROJ_B), N, C, C);
    KEEL_OP(be, add, residual2, residual2, residual, N * C);
    KEEL_OP(be, layernorm_forward, ln2, ln2_mean, ln2_rstd, residual2, w(LN2_W), w(LN2_B), N, C);
    KEEL_OP(be, matmul_forward, fch, ln2, w(FC_W), w(FC_B), N, C, 4 * C);
    KEEL_OP(be, gelu_forward, fch_gelu, fch, N * 4 * C);
    KEEL_OP(be, matmul_forward, residual3, fch_gelu, w(FCPROJ_W), w(FCPROJ_B), N, 4 * C, C);
    KEEL_OP(be, add, residual3, residual3, residual2, N * C);
    lease.release(false);
  }
  const float* last_residual = a.residual3 + (L - 1) * N * C;  // (B,T,C)
  {  // layer L+1: final layernorm
    const int32_t layer = static_cast<int32_t>(L + 1);
    LayerLease lease(access, layer, KEEL_PHASE_FORWARD, layer_specs(layer), layer_size(layer));
    KEEL_OP(be, layernorm_forward, a.lnf, a.lnf_mean, a.lnf_rstd, last_residual, lease.param(LNF_W),
            lease.param(LNF_B), N, C);
    lease.release(false);
  }
  {  // layer 0 again: the lm_head is wte
    LayerLease lease(access, 0, KEEL_PHASE_FORWARD, layer_specs(0), layer_size(0));
    KEEL_OP(be, matmul_forward, a.logits, a.lnf, lease.param(WTE), nullptr, N, C, Vp);  // (B,T,Vp)
    lease.release(false);
  }

  if (!args->targets) {
    args->logits = a.logits;
    return;
  }
  // The probabilities overwrite the logits: the backward needs only them.
  KEEL_OP(be, crossentropy_forward, a.losses, a.logits, a.logits, a.targets, N, V, Vp);
  a.valid_targets = valid_targets;
  a.backward_pending = true;
  // With no valid target the loss is 0 and, in backward, the gradients are zero.
  args->loss = keel_model::mean_loss(be, a.losses, N, valid_targets);
}

void GptModel::backward(const keel_backward_args& args) {
  if (args.struct_size < sizeof(keel_backward_args))
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "backward: args->struct_size is smaller than keel_backward_args");
  if (!args.access || args.access->struct_size < sizeof(keel_param_access))
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "backward: an access table is required");
  auto found = activations_.find(args.microbatch);
  if (found == activations_.end() || !found->second.backward_pending)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "backward: micro-batch " + std::to_string(args.microbatch) +
                                                     " has no forward with targets awaiting its backward");
  Activations& a = found->second;
  a.backward_pending = false;
  const keel_param_access* access = args.access;
  const keel_model::Backend& be = backend_;
  const int64_t L = config_.n_layer, NH = config_.n_head, C = config_.d_model;
  const int64_t V = config_.vocab_size, Vp = config_.padded_vocab_size;
  const int64_t B = a.B, T = a.T, N = B * T;
  ensure_grad_scratch(N);
  GradScratch& g = scratch_;
  const float dloss = a.valid_targets ? args.loss_scale / static_cast<float>(a.valid_targets) : 0.0f;

  KEEL_OP(be, fill_zero, g.dlogits, N * Vp * sizeof(float));
  KEEL_OP(be, fill_zero, g.dln, N * C * sizeof(float));
  KEEL_OP(be, fill_zero, g.dresidual, N * C * sizeof(float));
  KEEL_OP(be, crossentropy_backward, g.dlogits, a.logits, a.targets, dloss, N, V, Vp);  // (B,T,Vp)
  {  // layer 0, first use: the lm_head. Not final: the embedding backward still adds to dwte.
    LayerLease lease(access, 0, KEEL_PHASE_BACKWARD, layer_specs(0), layer_size(0));
    KEEL_OP(be, matmul_backward, g.dln, lease.grad(WTE), nullptr, g.dlogits, a.lnf, lease.param(WTE), N, C, Vp);
    lease.release(false);
  }
  const float* last_residual = a.residual3 + (L - 1) * N * C;
  {  // layer L+1: final layernorm; dresidual becomes the gradient of the last block's output
    const int32_t layer = static_cast<int32_t>(L + 1);
    LayerLease lease(access, layer, KEEL_PHASE_BACKWARD, layer_specs(layer), layer_size(layer));
    KEEL_OP(be, layernorm_backward, g.dresidual, lease.grad(LNF_W), lease.grad(LNF_B), g.dln, last_residual,
            lease.param(LNF_W), a.lnf_mean, a.lnf_rstd, N, C);
    lease.release(true);
  }
  for (int64_t l = L - 1; l >= 0; --l) {
    const int32_t layer = static_cast<int32_t>(1 + l);
    LayerLease lease(access, layer, KEEL_PHASE_BACKWARD, layer_specs(layer), layer_size(layer));
    auto w = [&](int i) { return lease.param(static_cast<size_t>(i)); };
    auto dw = [&](int i) { return lease.grad(static_cast<size_t>(i)); };
    const float* residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * N * C;  // (B,T,C)
    const float* ln1 = a.ln1 + l * N * C;
    const float* ln1_mean = a.ln1_mean + l * N;
    const float* ln1_rstd = a.ln1_rstd + l * N;
    const float* qkv = a.qkv + l * N * 3 * C;
    const float* atty = a.atty + l * N * C;
    const float* att_saved = a.att_saved + l * a.att_saved_per_layer;
    const float* residual2 = a.residual2 + l * N * C;
    const float* ln2 = a.ln2 + l * N * C;
    const float* ln2_mean = a.ln2_mean + l * N;
    const float* ln2_rstd = a.ln2_rstd + l * N;
    const float* fch = a.fch + l * N * 4 * C;
    const float* fch_gelu = a.fch_gelu + l * N * 4 * C;

    // MLP branch: residual3 = residual2 + proj(gelu(fc(ln2(residual2)))). dresidual holds
    // ∂/∂residual3, which is also the gradient of the projection's output.
    KEEL_OP(be, fill_zero, g.dfch_gelu, N * 4 * C * sizeof(float));
    KEEL_OP(be, fill_zero, g.dfch, N * 4 * C * sizeof(float));
    KEEL_OP(be, fill_zero, g.dln, N * C * sizeof(float));
    KEEL_OP(be, matmul_backward, g.dfch_gelu, dw(FCPROJ_W), dw(FCPROJ_B), g.dresidual, fch_gelu, w(FCPROJ_W), N,
            4 * C, C);
    KEEL_OP(be, gelu_backward, g.dfch, fch, g.dfch_gelu, N * 4 * C);
    KEEL_OP(be, matmul_backward, g.dln, dw(FC_W), dw(FC_B), g.dfch, ln2, w(FC_W), N, C, 4 * C);
    // adds ln2's path to the skip path already in dresidual: now ∂/∂residual2
    KEEL_OP(be, layernorm_backward, g.dresidual, dw(LN2_W), dw(LN2_B), g.dln, residual2, w(LN2_W), ln2_mean,
            ln2_rstd, N, C);

    // Attention branch: residual2 = residual + proj(attention(qkv(ln1(residual)))).
    KEEL_OP(be, fill_zero, g.datty, N * C * sizeof(float));
    KEEL_OP(be, fill_zero, g.dqkv, N * 3 * C * sizeof(float));
    KEEL_OP(be, fill_zero, g.dln, N * C * sizeof(float));
    KEEL_OP(be, matmul_backward, g.datty, dw(ATTPROJ_W), dw(ATTPROJ_B), g.dresidual, atty, w(ATTPROJ_W), N, C, C);
    KEEL_OP(be, attention_backward, g.dqkv, g.datty, qkv, att_saved, B, T, C, NH);
    KEEL_OP(be, matmul_backward, g.dln, dw(QKV_W), dw(QKV_B), g.dqkv, ln1, w(QKV_W), N, C, 3 * C);
    KEEL_OP(be, layernorm_backward, g.dresidual, dw(LN1_W), dw(LN1_B), g.dln, residual, w(LN1_W), ln1_mean,
            ln1_rstd, N, C);
    lease.release(true);
  }
  {  // layer 0, last use: the embeddings. Now wte's gradient is complete.
    LayerLease lease(access, 0, KEEL_PHASE_BACKWARD, layer_specs(0), layer_size(0));
    KEEL_OP(be, embedding_backward, lease.grad(WTE), lease.grad(WPE), g.dresidual, a.tokens, B, T, C);
    lease.release(true);
  }
}

}  // namespace keel_gpt
