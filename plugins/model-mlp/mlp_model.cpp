// The mlp model plugin: the smallest network that exercises everything a model does (layers
// borrowed through the access table, activations per micro-batch, padded vocabulary,
// cross-entropy), so strategy, optimizer and core tests run in milliseconds. Per token:
//   x0 = wte[token];  x_{l+1} = x_l + W2·gelu(W1·x_l + b1) + b2;  logits = head·x_L
// Layers: 0 = wte, 1..n_layer = residual blocks, n_layer+1 = head (untied, (Vp,C)).
#include <keel/model.h>
#include <keel/plugin.h>

#include <cmath>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include <keel_support/model/model_slots.hpp>     // defines: ModelSlots
#include <keel_support/common/plugin_entry.hpp>
#include <keel_support/common/sized_output.hpp>

#include <keel_support/common/backend_ops.hpp>     // defines: BackendOps, KEEL_OP
#include <keel_support/model/carver.hpp>          // defines: Carver
#include <keel_support/model/layer_lease.hpp>     // defines: LayerLease
#include <keel_support/model/model_support.hpp>   // defines: make_spec, check_token_ids, require_fp32_compute

namespace {

using keel_support::Carver;
using keel_support::BackendBuffer;
using keel_support::LayerLease;
using keel_support::ConfigError;
using keel_support::StatusError;

struct MlpConfig {
  int32_t vocab_size = 256;
  int32_t padded_vocab_size = 256;
  int32_t d_model = 64;
  int32_t n_layer = 2;
  int32_t max_seq_len = 64;
};

MlpConfig parse_mlp_config(const char* config_json, const char* json_path) {
  auto section = keel_support::JsonSection::parse(config_json, json_path ? json_path : "model");
  section.allow("plugin");
  MlpConfig c;
  c.vocab_size = section.get_in_range<int32_t>("vocab_size", c.vocab_size, 1, 1 << 30);
  c.d_model = section.get_in_range<int32_t>("d_model", c.d_model, 1, 1 << 20);
  c.n_layer = section.get_in_range<int32_t>("n_layer", c.n_layer, 0, 4096);
  c.max_seq_len = section.get_in_range<int32_t>("seq_len", c.max_seq_len, 1, 1 << 24);
  section.finish();
  c.padded_vocab_size = (c.vocab_size + 127) / 128 * 128;
  return c;
}

enum BlockTensor { FC_W, FC_B, PROJ_W, PROJ_B };

// One micro-batch's saved forward state, one backend allocation.
struct Activations {
  int32_t B = 0, T = 0;
  BackendBuffer memory;
  float* x;          // (L+1,B,T,C) the residual stream before each block and after the last
  float* fc;         // (L,B,T,4C)
  float* fc_gelu;    // (L,B,T,4C)
  float* logits;     // (B,T,Vp)
  float* stats;      // (B,T,3) each row's maximum logit, Σ exp, the target's logit
  float* lse;        // (B,T) each row's log Σ exp, for the backward
  float* loss_sum;   // 1: the mean loss, when the caller keeps none in backend memory
  int32_t* tokens;   // (B,T)
  int32_t* targets;  // (B,T)
  int64_t valid_targets = 0;
  bool backward_pending = false;
};

// Its C table is keel_support::ModelSlots: no external(), stage_io_numel, splits_backward or
// complete_config, so those slots refuse in its name and create refuses parallel.pp > 1.
class MlpModel {
 public:
  static constexpr const char* kSource = "model mlp";
  static void validate_config(const char* config_json, const char* json_path) {
    parse_mlp_config(config_json, json_path);
  }

  MlpModel(const keel_host* host, const keel_model_create_args& args)
      : host_(host), config_(parse_mlp_config(args.config_json, args.json_path)) {
    if (args.tp_size != 1 || args.tp_rank != 0)
      throw StatusError(KEEL_ERR_UNIMPLEMENTED, "the mlp model does not split over tensor-parallel ranks: set "
                                                "parallel.tp to 1 (found tp_rank " + std::to_string(args.tp_rank) +
                                                    ", tp_size " + std::to_string(args.tp_size) +
                                                    "), or use the gpt model");
    if (!args.backend || !args.backend_obj)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create: backend table and object are required");
#define KEEL_REQUIRE_OP(op) KEEL_REQUIRE_BACKEND_OP(args.backend, op, "the mlp model");
    KEEL_REQUIRE_OP(alloc) KEEL_REQUIRE_OP(free_memory) KEEL_REQUIRE_OP(copy) KEEL_REQUIRE_OP(fill_zero)
    KEEL_REQUIRE_OP(matmul_forward) KEEL_REQUIRE_OP(matmul_backward) KEEL_REQUIRE_OP(gelu_forward)
    KEEL_REQUIRE_OP(gelu_backward) KEEL_REQUIRE_OP(add) KEEL_REQUIRE_OP(embedding_forward)
    KEEL_REQUIRE_OP(embedding_backward) KEEL_REQUIRE_OP(crossentropy_shard_stats)
    KEEL_REQUIRE_OP(crossentropy_shard_backward) KEEL_REQUIRE_OP(crossentropy_combine)
#undef KEEL_REQUIRE_OP
    backend_ = {args.backend, args.backend_obj};
    keel_support::require_fp32_compute(backend_, "the mlp model");
    // The backend's embedding op adds a position table; this model has none, so it passes a
    // zero table, and a sink for that table's gradient.
    const size_t position_bytes = static_cast<size_t>(config_.max_seq_len) * config_.d_model * sizeof(float);
    zero_positions_ = backend_.alloc_bytes(position_bytes);
    position_grad_sink_ = backend_.alloc_bytes(position_bytes);
    build_param_specs();
  }

  const keel_host* host() const { return host_; }

  void describe(keel_model_info* out) const {
    keel_support::write_model_info(out, specs_, config_.n_layer + 2, config_.vocab_size, config_.padded_vocab_size,
                                   config_.max_seq_len);
  }

  // 6·N per token (forward 2N, backward 4N for the matmuls); no attention term. The head's
  // padded rows are not counted (they never reach the loss).
  double flops_per_token(int32_t /*seq_len*/) const {
    double n = 0;
    for (const auto& spec : specs_)
      n += std::string(spec.name) == "head.weight" ? static_cast<double>(config_.vocab_size) * config_.d_model
                                                   : static_cast<double>(keel_support::element_count(spec));
    return 6.0 * n;
  }

  void forward(keel_forward_args* args) {
    if (args->struct_size < offsetof(keel_forward_args, chunk) || !args->access ||
        args->access->struct_size < sizeof(keel_param_access) || !args->tokens)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "forward: args (with struct_size set), an access table "
                                                   "and tokens are required");
    const int32_t B = args->batch, T = args->seq_len;
    if (B < 1 || T < 1 || T > config_.max_seq_len)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "forward: need batch >= 1 and 1 <= seq_len <= " +
                                                       std::to_string(config_.max_seq_len) + ", found batch " +
                                                       std::to_string(B) + ", seq_len " + std::to_string(T));
    const keel_param_access* access = args->access;
    const keel_support::BackendOps& be = backend_;
    const int64_t L = config_.n_layer, C = config_.d_model, V = config_.vocab_size;
    const int64_t Vp = config_.padded_vocab_size, N = static_cast<int64_t>(B) * T;

    keel_support::check_token_ids(be, args->tokens, N, config_.vocab_size, false, "tokens");
    int64_t valid_targets = 0;
    if (args->targets)
      valid_targets = keel_support::check_token_ids(be, args->targets, N, config_.vocab_size, true, "targets");
    Activations& a = activations_for(args->microbatch, B, T);
    a.backward_pending = false;
    KEEL_OP(be, copy, a.tokens, args->tokens, N * sizeof(int32_t), KEEL_COPY_DEVICE_TO_DEVICE);
    if (args->targets) KEEL_OP(be, copy, a.targets, args->targets, N * sizeof(int32_t), KEEL_COPY_DEVICE_TO_DEVICE);

    {  // layer 0: token embedding
      LayerLease lease(access, 0, KEEL_PHASE_FORWARD, layer_specs(0), layer_size(0));
      KEEL_OP(be, embedding_forward, a.x, a.tokens, lease.param(0), static_cast<const float*>(zero_positions_.get()),
              B, T, C);  // (B,T,C)
      lease.release(false);
    }
    for (int64_t l = 0; l < L; ++l) {
      const int32_t layer = static_cast<int32_t>(1 + l);
      LayerLease lease(access, layer, KEEL_PHASE_FORWARD, layer_specs(layer), layer_size(layer));
      const float* x_in = a.x + l * N * C;      // (B,T,C)
      float* x_out = a.x + (l + 1) * N * C;     // (B,T,C)
      float* fc = a.fc + l * N * 4 * C;         // (B,T,4C)
      float* fc_gelu = a.fc_gelu + l * N * 4 * C;  // (B,T,4C)
      KEEL_OP(be, matmul_forward, fc, x_in, lease.param(FC_W), lease.param(FC_B), N, C, 4 * C);
      KEEL_OP(be, gelu_forward, fc_gelu, fc, N * 4 * C);
      KEEL_OP(be, matmul_forward, x_out, fc_gelu, lease.param(PROJ_W), lease.param(PROJ_B), N, 4 * C, C);
      KEEL_OP(be, add, x_out, x_out, x_in, N * C);
      lease.release(false);
    }
    {  // layer L+1: the head
      const int32_t layer = static_cast<int32_t>(L + 1);
      LayerLease lease(access, layer, KEEL_PHASE_FORWARD, layer_specs(layer), layer_size(layer));
      KEEL_OP(be, matmul_forward, a.logits, a.x + L * N * C, lease.param(0), nullptr, N, C, Vp);  // (B,T,Vp)
      lease.release(false);
    }
    if (!args->targets) {
      args->logits = a.logits;
      return;
    }
    // Cross-entropy without probabilities: per-row statistics combined into lse and the mean loss,
    // added into the caller's scalar in backend memory (model.h loss_sum), or into ours and read.
    a.valid_targets = valid_targets;
    a.backward_pending = true;
    const float mean = valid_targets ? 1.0f / static_cast<float>(valid_targets) : 0.0f;
    const bool device_loss = args->struct_size >= offsetof(keel_forward_args, loss_weight) + sizeof(float) &&
                             args->loss_sum != nullptr;
    float* sum = device_loss ? args->loss_sum : a.loss_sum;
    if (!device_loss) KEEL_OP(be, fill_zero, a.loss_sum, sizeof(float));
    KEEL_OP(be, crossentropy_shard_stats, a.stats, a.logits, a.targets, N, 0, V, Vp);
    KEEL_OP(be, crossentropy_combine, a.lse, sum, a.stats, 1, a.targets, N, device_loss ? args->loss_weight * mean : mean);
    if (!device_loss) KEEL_OP(be, copy, &args->loss, a.loss_sum, sizeof(float), KEEL_COPY_DEVICE_TO_HOST);
  }

  void backward(const keel_backward_args& args) {
    if (args.struct_size < offsetof(keel_backward_args, chunk) || !args.access ||
        args.access->struct_size < sizeof(keel_param_access))
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "backward: args (with struct_size set) and an access table "
                                                   "are required");
    auto found = activations_.find(args.microbatch);
    if (found == activations_.end() || !found->second.backward_pending)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "backward: micro-batch " + std::to_string(args.microbatch) +
                                                       " has no forward with targets awaiting its backward");
    Activations& a = found->second;
    a.backward_pending = false;
    const keel_param_access* access = args.access;
    const keel_support::BackendOps& be = backend_;
    const int64_t L = config_.n_layer, C = config_.d_model, V = config_.vocab_size;
    const int64_t Vp = config_.padded_vocab_size, B = a.B, T = a.T, N = B * T;
    ensure_grad_scratch(N);
    const float dloss = a.valid_targets ? args.loss_scale / static_cast<float>(a.valid_targets) : 0.0f;

    KEEL_OP(be, fill_zero, dlogits_, N * Vp * sizeof(float));
    KEEL_OP(be, fill_zero, dx_, N * C * sizeof(float));
    KEEL_OP(be, crossentropy_shard_backward, dlogits_, a.logits, a.lse, a.targets, dloss, N, 0, V, Vp);  // (B,T,Vp)
    {
      const int32_t layer = static_cast<int32_t>(L + 1);
      LayerLease lease(access, layer, KEEL_PHASE_BACKWARD, layer_specs(layer), layer_size(layer));
      KEEL_OP(be, matmul_backward, dx_, lease.grad(0), nullptr, dlogits_, a.x + L * N * C, lease.param(0), N, C, Vp);
      lease.release(true);
    }
    for (int64_t l = L - 1; l >= 0; --l) {
      const int32_t layer = static_cast<int32_t>(1 + l);
      LayerLease lease(access, layer, KEEL_PHASE_BACKWARD, layer_specs(layer), layer_size(layer));
      const float* x_in = a.x + l * N * C;
      const float* fc = a.fc + l * N * 4 * C;
      const float* fc_gelu = a.fc_gelu + l * N * 4 * C;
      KEEL_OP(be, fill_zero, dfc_gelu_, N * 4 * C * sizeof(float));
      KEEL_OP(be, fill_zero, dfc_, N * 4 * C * sizeof(float));
      // dx_ holds ∂/∂x_out: both the skip path's gradient and the projection's output gradient.
      KEEL_OP(be, matmul_backward, dfc_gelu_, lease.grad(PROJ_W), lease.grad(PROJ_B), dx_, fc_gelu,
              lease.param(PROJ_W), N, 4 * C, C);
      KEEL_OP(be, gelu_backward, dfc_, fc, dfc_gelu_, N * 4 * C);
      // adds the branch's gradient to the skip path's: dx_ becomes ∂/∂x_in
      KEEL_OP(be, matmul_backward, dx_, lease.grad(FC_W), lease.grad(FC_B), dfc_, x_in, lease.param(FC_W), N, C,
              4 * C);
      lease.release(true);
    }
    {
      LayerLease lease(access, 0, KEEL_PHASE_BACKWARD, layer_specs(0), layer_size(0));
      KEEL_OP(be, embedding_backward, lease.grad(0), static_cast<float*>(position_grad_sink_.get()), dx_, a.tokens,
              B, T, C);
      lease.release(true);
    }
  }

 private:
  void build_param_specs() {
    const int64_t L = config_.n_layer, C = config_.d_model, V = config_.vocab_size;
    const int64_t Vp = config_.padded_vocab_size;
    const float std = 0.02f, residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(L > 0 ? L : 1));
    names_.push_back("wte");
    specs_.push_back(keel_support::make_spec(nullptr, 0, {V, C}, 0, KEEL_INIT_NORMAL, std));
    for (int64_t i = 0; i < L; ++i) {
      const int32_t layer = static_cast<int32_t>(1 + i);
      const std::string h = "h." + std::to_string(i) + ".";
      names_.push_back(h + "fc.weight");
      specs_.push_back(keel_support::make_spec(nullptr, layer, {4 * C, C}, 0, KEEL_INIT_NORMAL, std));
      names_.push_back(h + "fc.bias");
      specs_.push_back(keel_support::make_spec(nullptr, layer, {4 * C}, KEEL_PARAM_NO_WEIGHT_DECAY, KEEL_INIT_ZEROS, 0));
      names_.push_back(h + "proj.weight");
      specs_.push_back(keel_support::make_spec(nullptr, layer, {C, 4 * C}, 0, KEEL_INIT_NORMAL, residual_std));
      names_.push_back(h + "proj.bias");
      specs_.push_back(keel_support::make_spec(nullptr, layer, {C}, KEEL_PARAM_NO_WEIGHT_DECAY, KEEL_INIT_ZEROS, 0));
    }
    names_.push_back("head.weight");  // padded rows stay zero
    specs_.push_back(keel_support::make_spec(nullptr, static_cast<int32_t>(L + 1), {Vp, C}, 0, KEEL_INIT_NORMAL, std, V));
    for (size_t i = 0; i < specs_.size(); ++i) specs_[i].name = names_[i].c_str();  // names_ is complete
  }

  // Layer 0 is spec 0, block l is specs 1+4(l-1) .. 4+4(l-1), the head is the last spec.
  const keel_param_spec* layer_specs(int32_t layer) const {
    return &specs_[layer == 0 ? 0 : 1 + 4 * static_cast<size_t>(layer - 1)];
  }
  size_t layer_size(int32_t layer) const { return layer == 0 || layer == config_.n_layer + 1 ? 1 : 4; }

  Activations& activations_for(int32_t microbatch, int32_t B, int32_t T) {
    Activations& a = activations_[microbatch];
    if (a.B == B && a.T == T && a.memory.get()) return a;
    a.memory = BackendBuffer();
    a.B = B, a.T = T;
    const int64_t L = config_.n_layer, C = config_.d_model, Vp = config_.padded_vocab_size;
    const int64_t N = static_cast<int64_t>(B) * T;
    auto carve_all = [&](char* base) {
      Carver carve(base);
      a.x = carve.take<float>((L + 1) * N * C);
      a.fc = carve.take<float>(L * N * 4 * C);
      a.fc_gelu = carve.take<float>(L * N * 4 * C);
      a.logits = carve.take<float>(N * Vp);
      a.stats = carve.take<float>(3 * N);
      a.lse = carve.take<float>(N);
      a.loss_sum = carve.take<float>(1);
      a.tokens = carve.take<int32_t>(N);
      a.targets = carve.take<int32_t>(N);
      return carve.used();
    };
    a.memory = backend_.alloc_bytes(carve_all(nullptr));
    carve_all(static_cast<char*>(a.memory.get()));
    a.backward_pending = false;
    return a;
  }

  // Activation gradients shared by all micro-batches, sized for the largest B*T seen.
  void ensure_grad_scratch(int64_t rows) {
    if (scratch_rows_ >= rows) return;
    const int64_t C = config_.d_model, Vp = config_.padded_vocab_size;
    auto carve_all = [&](char* base) {
      Carver carve(base);
      dlogits_ = carve.take<float>(rows * Vp);     // (B,T,Vp)
      dx_ = carve.take<float>(rows * C);           // (B,T,C) gradient of the residual stream
      dfc_gelu_ = carve.take<float>(rows * 4 * C);  // (B,T,4C)
      dfc_ = carve.take<float>(rows * 4 * C);       // (B,T,4C)
      return carve.used();
    };
    scratch_ = BackendBuffer();
    scratch_rows_ = 0;
    scratch_ = backend_.alloc_bytes(carve_all(nullptr));
    carve_all(static_cast<char*>(scratch_.get()));
    scratch_rows_ = rows;
  }

  const keel_host* host_;
  keel_support::BackendOps backend_;
  MlpConfig config_;
  std::vector<std::string> names_;
  std::vector<keel_param_spec> specs_;
  BackendBuffer zero_positions_;      // (maxT,C) zeros
  BackendBuffer position_grad_sink_;  // (maxT,C) never read
  std::map<int32_t, Activations> activations_;
  BackendBuffer scratch_;
  int64_t scratch_rows_ = 0;
  float* dlogits_ = nullptr;
  float* dx_ = nullptr;
  float* dfc_gelu_ = nullptr;
  float* dfc_ = nullptr;
};

const keel_plugin_info kPlugins[] = {keel_support::plugin_info(
    KEEL_KIND_MODEL, "mlp", "0.1.0", &keel_support::ModelSlots<MlpModel>::kApi, "tiny residual GELU MLP language model, for tests")};

const keel_plugin_list kPluginList = keel_support::plugin_list(kPlugins);

}  // namespace

extern "C" KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) { return &kPluginList; }
