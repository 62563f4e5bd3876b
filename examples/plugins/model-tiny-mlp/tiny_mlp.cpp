// A worked model plugin, `tiny-mlp`: a two-layer MLP language model that predicts each next
// token from the current one alone (a learned bigram through a SwiGLU hidden layer). Per token:
//   x = wte[token]  (C);  h = silu(Wg·x + bg) · (Wu·x + bu)  (H = 4C);  logits = W2·h  (Vp)
// Layers, the units the strategy lends: 0 = wte, 1 = fc (Wg, Wu, bg, bu), 2 = head (W2). The
// gate and up projections are two tensors, as Hugging Face stores them, run as one matmul by
// keel_support::StackedLinear. It runs at tp 1 and pp 1 and has no Hugging Face names, so it
// defines none of ModelSlots's optional members: those slots refuse in its name, and the core
// refuses parallel.pp > 1 for it.
#include <keel/model.h>
#include <keel/plugin.h>

#include <map>
#include <string>
#include <vector>

#include <keel_support/common/backend_ops.hpp>    // defines: BackendOps, KEEL_OP, KEEL_REQUIRE_BACKEND_OP
#include <keel_support/model/carver.hpp>         // defines: Carver
#include <keel_support/model/compute_ops.hpp>    // defines: ComputeOps, Elems
#include <keel_support/common/json_section.hpp>   // defines: JsonSection
#include <keel_support/model/layer_lease.hpp>    // defines: LayerLease
#include <keel_support/model/model_slots.hpp>     // defines: ModelSlots
#include <keel_support/model/model_support.hpp>  // defines: make_spec, write_model_info, check_token_ids
#include <keel_support/model/stacked_linear.hpp>  // defines: StackedLinear
#include <keel_support/common/plugin_entry.hpp>   // defines: plugin_info, plugin_list

namespace {

using keel_support::BackendBuffer;
using keel_support::Elems;
using keel_support::LayerLease;
using keel_support::StatusError;

struct TinyConfig {
  int32_t vocab_size = 256;
  int32_t padded_vocab_size = 256;  // a multiple of 128: the logits' row stride
  int32_t d_model = 32;
  int32_t max_seq_len = 128;
};

TinyConfig parse_config(const char* config_json, const char* json_path) {
  auto section = keel_support::JsonSection::parse(config_json, json_path ? json_path : "model");
  section.allow("plugin");
  TinyConfig c;
  c.vocab_size = section.get_in_range<int32_t>("vocab_size", c.vocab_size, 1, 1 << 24);
  c.d_model = section.get_in_range<int32_t>("d_model", c.d_model, 1, 1 << 16);
  c.max_seq_len = section.get_in_range<int32_t>("seq_len", c.max_seq_len, 1, 1 << 20);
  section.finish();
  c.padded_vocab_size = (c.vocab_size + 127) / 128 * 128;
  return c;
}

// One micro-batch's forward state, carved from one backend allocation.
struct Activations {
  int32_t B = 0, T = 0;
  BackendBuffer memory;
  float* x = nullptr;        // (B,T,C) embedded tokens
  float* gate_up = nullptr;  // (B,T,2H) the gate and up projections side by side
  float* h = nullptr;        // (B,T,H) silu(gate)·up
  float* logits = nullptr;   // (B,T,Vp)
  float* stats = nullptr;    // (B,T,3) per-row cross-entropy statistics
  float* lse = nullptr;      // (B,T) log Σ exp of each row, kept for the backward
  float* loss_sum = nullptr; // 1
  int32_t* tokens = nullptr;   // (B,T)
  int32_t* targets = nullptr;  // (B,T)
  int64_t valid_targets = 0;
  bool backward_pending = false;
};

class TinyMlp {
 public:
  static constexpr const char* kSource = "model tiny-mlp";
  static void validate_config(const char* config_json, const char* json_path) { parse_config(config_json, json_path); }

  TinyMlp(const keel_host* host, const keel_model_create_args& args)
      : host_(host), config_(parse_config(args.config_json, args.json_path)) {
    if (args.tp_size > 1)
      throw StatusError(KEEL_ERR_UNIMPLEMENTED, "tiny-mlp does not split over tensor-parallel ranks: set parallel.tp to 1");
    if (!args.backend || !args.backend_obj)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: backend table and object are required");
#define REQUIRE(op) KEEL_REQUIRE_BACKEND_OP(args.backend, op, "tiny-mlp");
    REQUIRE(alloc) REQUIRE(free_memory) REQUIRE(copy) REQUIRE(fill_zero) REQUIRE(accumulate)
    REQUIRE(matmul_forward) REQUIRE(matmul_backward) REQUIRE(swiglu_forward_dt) REQUIRE(swiglu_backward_dt)
    REQUIRE(embedding_forward) REQUIRE(embedding_backward) REQUIRE(crossentropy_shard_stats)
    REQUIRE(crossentropy_shard_backward) REQUIRE(crossentropy_combine)
#undef REQUIRE
    backend_ = {args.backend, args.backend_obj};
    keel_support::require_fp32_compute(backend_, "tiny-mlp");
    ops_ = keel_support::ComputeOps(backend_);
    // The backend's embedding op adds a position table; this model has none: zeros, and a sink
    // for their gradient.
    const size_t position_bytes = sizeof(float) * config_.max_seq_len * config_.d_model;
    zero_positions_ = backend_.alloc_bytes(position_bytes);
    position_grad_sink_ = backend_.alloc_bytes(position_bytes);
    const int64_t V = config_.vocab_size, Vp = config_.padded_vocab_size, C = config_.d_model, H = 4 * C;
    specs_ = {keel_support::make_spec("wte", 0, {V, C}, 0, KEEL_INIT_NORMAL, 0.02f),
              keel_support::make_spec("fc.gate.weight", 1, {H, C}, 0, KEEL_INIT_NORMAL, 0.02f),
              keel_support::make_spec("fc.up.weight", 1, {H, C}, 0, KEEL_INIT_NORMAL, 0.02f),
              keel_support::make_spec("fc.gate.bias", 1, {H}, KEEL_PARAM_NO_WEIGHT_DECAY, KEEL_INIT_ZEROS, 0),
              keel_support::make_spec("fc.up.bias", 1, {H}, KEEL_PARAM_NO_WEIGHT_DECAY, KEEL_INIT_ZEROS, 0),
              keel_support::make_spec("head.weight", 2, {Vp, H}, 0, KEEL_INIT_NORMAL, 0.02f, V)};
    // gate|up: one (2H, C) weight and (2H) bias at the compute type, rebuilt from the two tensors at each use.
    gate_up_ = keel_support::StackedLinear(ops_, C, {H, H}, /*with_bias=*/true);
  }

  const keel_host* host() const { return host_; }
  void describe(keel_model_info* out) const {
    keel_support::write_model_info(out, specs_, 3, config_.vocab_size, config_.padded_vocab_size, config_.max_seq_len);
  }
  // 6 FLOPs per parameter a token passes through (forward 2, backward 4); the embedding is a lookup.
  double flops_per_token(int32_t) const {
    const double C = config_.d_model, H = 4 * C;
    return 6.0 * (2 * H * C + H * config_.vocab_size);
  }

  void forward(keel_forward_args* args) {
    if (!args->access || !args->tokens || args->batch < 1 || args->seq_len < 1 || args->seq_len > config_.max_seq_len)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "forward: need access, tokens, batch >= 1 and 1 <= seq_len <= " +
                                                       std::to_string(config_.max_seq_len));
    const keel_support::BackendOps& be = backend_;
    const int32_t B = args->batch, T = args->seq_len;
    const int64_t N = int64_t{B} * T, C = config_.d_model, H = 4 * C;
    const int64_t V = config_.vocab_size, Vp = config_.padded_vocab_size;
    keel_support::check_token_ids(be, args->tokens, N, config_.vocab_size, false, "tokens");
    Activations& a = activations_for(args->microbatch, B, T);
    a.backward_pending = false;
    KEEL_OP(be, copy, a.tokens, args->tokens, N * sizeof(int32_t), KEEL_COPY_DEVICE_TO_DEVICE);
    {
      LayerLease wte(args->access, 0, KEEL_PHASE_FORWARD, &specs_[0], 1);
      KEEL_OP(be, embedding_forward, a.x, a.tokens, wte.param(0), static_cast<const float*>(zero_positions_.get()), B,
              T, C);
      wte.release(false);
    }
    {
      LayerLease fc(args->access, 1, KEEL_PHASE_FORWARD, &specs_[1], 4);
      stack_gate_up(fc);
      gate_up_.forward(f(a.gate_up), f(a.x), N);
      ops_.swiglu_forward(f(a.h), f(a.gate_up), N, H);
      fc.release(false);
    }
    {
      LayerLease head(args->access, 2, KEEL_PHASE_FORWARD, &specs_[5], 1);
      KEEL_OP(be, matmul_forward, a.logits, a.h, head.param(0), nullptr, N, H, Vp);
      head.release(false);
    }
    if (!args->targets) {
      args->logits = a.logits;
      return;
    }
    a.valid_targets = keel_support::check_token_ids(be, args->targets, N, config_.vocab_size, true, "targets");
    KEEL_OP(be, copy, a.targets, args->targets, N * sizeof(int32_t), KEEL_COPY_DEVICE_TO_DEVICE);
    a.backward_pending = true;
    // The mean loss into the caller's scalar in backend memory (model.h loss_sum), or into ours.
    const float mean = a.valid_targets ? 1.0f / static_cast<float>(a.valid_targets) : 0.0f;
    const bool device_loss = args->struct_size >= offsetof(keel_forward_args, loss_weight) + sizeof(float) &&
                             args->loss_sum != nullptr;
    float* sum = device_loss ? args->loss_sum : a.loss_sum;
    if (!device_loss) KEEL_OP(be, fill_zero, a.loss_sum, sizeof(float));
    KEEL_OP(be, crossentropy_shard_stats, a.stats, a.logits, a.targets, N, 0, V, Vp);
    KEEL_OP(be, crossentropy_combine, a.lse, sum, a.stats, 1, a.targets, N, device_loss ? args->loss_weight * mean : mean);
    if (!device_loss) KEEL_OP(be, copy, &args->loss, a.loss_sum, sizeof(float), KEEL_COPY_DEVICE_TO_HOST);
  }

  // The forward in reverse: head, fc, embedding.
  void backward(const keel_backward_args& args) {
    auto found = activations_.find(args.microbatch);
    if (!args.access || found == activations_.end() || !found->second.backward_pending)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "backward: micro-batch " + std::to_string(args.microbatch) +
                                                       " has no forward with targets awaiting its backward");
    Activations& a = found->second;
    a.backward_pending = false;
    const keel_support::BackendOps& be = backend_;
    const int64_t N = int64_t{a.B} * a.T, C = config_.d_model, H = 4 * C;
    const int64_t V = config_.vocab_size, Vp = config_.padded_vocab_size;
    const float dloss = a.valid_targets ? args.loss_scale / static_cast<float>(a.valid_targets) : 0.0f;
    // Activation gradients for this call; alloc zero-fills, and every op below adds into its output.
    BackendBuffer scratch = backend_.alloc_bytes(sizeof(float) * N * (Vp + 3 * H + C));
    float* dlogits = static_cast<float*>(scratch.get());  // (B,T,Vp)
    float* dh = dlogits + N * Vp;                          // (B,T,H)
    float* dgate_up = dh + N * H;                          // (B,T,2H)
    float* dx = dgate_up + N * 2 * H;                      // (B,T,C)
    KEEL_OP(be, crossentropy_shard_backward, dlogits, a.logits, a.lse, a.targets, dloss, N, 0, V, Vp);
    {
      LayerLease head(args.access, 2, KEEL_PHASE_BACKWARD, &specs_[5], 1);
      KEEL_OP(be, matmul_backward, dh, head.grad(0), nullptr, dlogits, a.h, head.param(0), N, H, Vp);
      head.release(true);
    }
    {
      LayerLease fc(args.access, 1, KEEL_PHASE_BACKWARD, &specs_[1], 4);
      ops_.swiglu_backward(f(dgate_up), f(dh), f(a.gate_up), N, H);
      // Each tensor's rows of the stacked gradient are added to its own gradient buffer.
      stack_gate_up(fc);
      gate_up_.backward(f(dx), f(dgate_up), f(a.x), N, /*dweights=*/{fc.grad(0), fc.grad(1)},
                        /*dbiases=*/{fc.grad(2), fc.grad(3)});
      fc.release(true);
    }
    {
      LayerLease wte(args.access, 0, KEEL_PHASE_BACKWARD, &specs_[0], 1);
      KEEL_OP(be, embedding_backward, wte.grad(0), static_cast<float*>(position_grad_sink_.get()), dx, a.tokens, a.B,
              a.T, C);
      wte.release(true);
    }
  }

 private:
  Elems f(float* data) const { return ops_.at(data); }  // fp32 compute: an activation as the ops' view
  // Layer 1's specs in order: gate weight, up weight, gate bias, up bias.
  void stack_gate_up(const LayerLease& fc) {
    gate_up_.stack({fc.param_elems(0), fc.param_elems(1)}, {fc.param_elems(2), fc.param_elems(3)});
  }

  Activations& activations_for(int32_t microbatch, int32_t B, int32_t T) {
    Activations& a = activations_[microbatch];
    if (a.B == B && a.T == T && a.memory.get()) return a;
    a.memory = BackendBuffer();  // free the old shape first
    a.B = B, a.T = T;
    const int64_t N = int64_t{B} * T, C = config_.d_model, H = 4 * C, Vp = config_.padded_vocab_size;
    auto carve = [&](char* base) {  // one pass to size, one to hand out: they cannot disagree
      keel_support::Carver c(base);
      a.x = c.take<float>(N * C), a.gate_up = c.take<float>(N * 2 * H), a.h = c.take<float>(N * H);
      a.logits = c.take<float>(N * Vp), a.stats = c.take<float>(3 * N), a.lse = c.take<float>(N);
      a.loss_sum = c.take<float>(1), a.tokens = c.take<int32_t>(N), a.targets = c.take<int32_t>(N);
      return c.used();
    };
    a.memory = backend_.alloc_bytes(carve(nullptr));
    carve(static_cast<char*>(a.memory.get()));
    return a;
  }

  const keel_host* host_;
  keel_support::BackendOps backend_;
  keel_support::ComputeOps ops_;
  keel_support::StackedLinear gate_up_;
  TinyConfig config_;
  std::vector<keel_param_spec> specs_;
  BackendBuffer zero_positions_;      // (maxT,C) zeros
  BackendBuffer position_grad_sink_;  // (maxT,C) never read
  std::map<int32_t, Activations> activations_;
};

const keel_plugin_info kPlugins[] = {keel_support::plugin_info(
    KEEL_KIND_MODEL, "tiny-mlp", "0.1.0", &keel_support::ModelSlots<TinyMlp>::kApi,
    "two-layer SwiGLU MLP language model (the model SDK's worked example)")};
const keel_plugin_list kPluginList = keel_support::plugin_list(kPlugins);

}  // namespace

extern "C" KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) { return &kPluginList; }
