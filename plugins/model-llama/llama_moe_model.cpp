// The llama model's side of its experts at create: what they cannot run on yet is refused by
// name (tensor parallelism, transformers' balancing loss across pipeline stages, a backend without
// the routing ops, an ep that does not divide the experts, adapter dropout on experts at ep > 1), and the sparse MLP is made with its tensors' slots and, at ep > 1, the
// exchange over the expert-parallel group (model.h 0.19).
#include "llama_model.hpp"

#include <cstddef>

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
  if (plan_.pp_size() > 1 && config_.moe.router_aux_loss_coef > 0)
    throw StatusError(KEEL_ERR_INVALID_CONFIG,
                      "model.router_aux_loss_coef (" + std::to_string(config_.moe.router_aux_loss_coef) +
                          ") with parallel.pp = " + std::to_string(plan_.pp_size()) + " is refused: transformers' "
                          "balancing loss pairs every layer's routing of a micro-batch, which pipeline stages do not "
                          "share; use pp 1, or balance with router_bias_update_speed (loss-free) instead");
#define KEEL_REQUIRE_OP(op) KEEL_REQUIRE_BACKEND_OP(args.backend, op, "the llama model with experts");
  KEEL_REQUIRE_OP(moe_route) KEEL_REQUIRE_OP(moe_route_backward) KEEL_REQUIRE_OP(moe_permute_plan)
  KEEL_REQUIRE_OP(moe_permute_dt) KEEL_REQUIRE_OP(moe_unpermute_dt) KEEL_REQUIRE_OP(moe_unpermute_scale_backward_dt)
  KEEL_REQUIRE_OP(grouped_matmul_forward_dt) KEEL_REQUIRE_OP(grouped_matmul_backward_dt)
#undef KEEL_REQUIRE_OP
  // A sparse layer's slots: the six of norms and attention, the shared expert in the dense MLP's
  // three (Qwen2-MoE), the attention biases (Qwen2-MoE), then the router and the experts.
  // The expert-parallel group, when the core's create args reach it (a core before 0.19: ep 1).
  const bool has_ep = args.struct_size >= offsetof(keel_model_create_args, ep_comm_obj) + sizeof(args.ep_comm_obj);
  const int32_t ep = has_ep ? args.ep_size : 1;
  std::unique_ptr<ExpertDispatch> dispatch;
  if (ep > 1) {
    if (config_.moe.n_experts % ep != 0)
      throw StatusError(KEEL_ERR_INVALID_CONFIG, "parallel.ep " + std::to_string(ep) + " does not divide " + experts +
                                                     ": each rank of an expert-parallel group holds the same number "
                                                     "of each layer's experts");
    if (!args.ep_comm || !args.ep_comm_obj || args.ep_rank < 0 || args.ep_rank >= ep)
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "parallel.ep " + std::to_string(ep) + ": the create args hold no "
                                                       "expert-parallel group, or rank " + std::to_string(args.ep_rank) +
                                                       " outside it");
    // The routed experts' dropout masks are keyed by the (token, slot) pairs of the replica that
    // sent the rows, which the rows received from other replicas do not carry.
    const std::vector<std::string> expert_modules = config_.attention_bias  // Qwen2-MoE's names, else Mixtral's
                                                        ? std::vector<std::string>{"gate_proj", "up_proj", "down_proj"}
                                                        : std::vector<std::string>{"w1", "w3", "w2"};
    for (const std::string& module : expert_modules)
      if (config_.lora.dropout > 0 && config_.lora.targets(module))
        throw StatusError(KEEL_ERR_INVALID_CONFIG,
                          "model.lora.dropout (" + std::to_string(config_.lora.dropout) + ") on the routed experts (" +
                              "target_modules names \"" + module + "\") with parallel.ep " + std::to_string(ep) +
                              " is refused: the experts' masks are keyed by the tokens of the replica that sent "
                              "their rows; use ep 1, dropout 0, or leave the experts' modules out of target_modules");
    dispatch = std::make_unique<ExpertDispatch>(backend_, ops_, args.ep_comm, args.ep_comm_obj, args.ep_rank, ep,
                                                config_.moe.n_experts, config_.d_model);
  }
  const bool shared = config_.moe.shared_expert_ffn_hidden > 0;
  const int32_t first = POST_NORM + 1 + (shared ? 3 : 0) + (config_.attention_bias ? 3 : 0);
  std::vector<int64_t> held_sparse_blocks;
  for (int32_t i = 0; i < config_.n_layer; ++i)
    if (config_.moe.sparse(i) && plan_.holds_block(i)) held_sparse_blocks.push_back(i);
  sparse_ = std::make_unique<SparseMlp>(host_, config_, backend_, ops_, first, GATE_W, UP_W, DOWN_W, std::move(dispatch),
                                        std::move(held_sparse_blocks));
}

}  // namespace keel_llama
