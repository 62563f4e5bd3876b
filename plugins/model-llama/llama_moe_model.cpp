// The llama model's side of its experts at create: what they cannot run on yet is refused by
// name (tensor and pipeline parallelism until expert parallelism lands, a backend without the
// routing ops), and the sparse MLP is made with its tensors' slots.
#include "llama_model.hpp"

namespace keel_llama {

using keel_support::StatusError;

void LlamaModel::create_sparse_mlp(const keel_model_create_args& args) {
  const std::string experts = "model.n_experts (" + std::to_string(config_.moe.n_experts) + ")";
  auto refuse = [&](const std::string& what) {
    throw StatusError(KEEL_ERR_INVALID_CONFIG, experts + " with " + what);
  };
  if (tp_.size() > 1)
    refuse("parallel.tp = " + std::to_string(tp_.size()) + " is refused: the experts' matrices are not split over "
           "tensor-parallel ranks yet; use tp 1");
  if (plan_.pp_size() > 1)
    refuse("parallel.pp = " + std::to_string(plan_.pp_size()) + " is refused: the balancing loss reads every "
           "layer's routing of a micro-batch, which pipeline stages do not share yet; use pp 1");
#define KEEL_REQUIRE_OP(op) KEEL_REQUIRE_BACKEND_OP(args.backend, op, "the llama model with experts");
  KEEL_REQUIRE_OP(moe_route) KEEL_REQUIRE_OP(moe_route_backward) KEEL_REQUIRE_OP(moe_permute_plan)
  KEEL_REQUIRE_OP(moe_permute_dt) KEEL_REQUIRE_OP(moe_unpermute_dt) KEEL_REQUIRE_OP(moe_unpermute_scale_backward_dt)
  KEEL_REQUIRE_OP(grouped_matmul_forward_dt) KEEL_REQUIRE_OP(grouped_matmul_backward_dt)
#undef KEEL_REQUIRE_OP
  // A sparse layer's slots: the six of norms and attention, the shared expert in the dense MLP's
  // three (Qwen2-MoE), the attention biases (Qwen2-MoE), then the router and the experts.
  const bool shared = config_.moe.shared_expert_ffn_hidden > 0;
  const int32_t first = POST_NORM + 1 + (shared ? 3 : 0) + (config_.attention_bias ? 3 : 0);
  sparse_ = std::make_unique<SparseMlp>(host_, config_, backend_, ops_, first, GATE_W, UP_W, DOWN_W);
}

}  // namespace keel_llama
