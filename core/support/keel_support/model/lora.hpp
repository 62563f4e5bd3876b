// LoRA adapters on a model's linear layers (installed for third-party models; docs/finetuning.md).
// A target's frozen weight W (out, in) gains two trained factors, PEFT's lora_A (r, in) and
// lora_B (out, r), and the layer computes with W + s·B·A, s = alpha / r (alpha / √r with rsLoRA).
// The model uses the sum as its weight: LoraLayer forms it once per layer use, so every path that
// reads a weight (stacked projections, tensor-parallel pieces, recomputation, a split backward)
// works unchanged; the backward forms the sum's gradient dW as it would a trained weight's, and
// LoraLayer turns it into the factors' gradients, dB = s·dW·Aᵀ and dA = s·Bᵀ·dW. The adapters'
// memory is the point: no gradient or optimizer state for W (the core holds it frozen, params.h
// KEEL_PARAM_FROZEN); dW lives in scratch for one layer at a time.
// Under tensor parallelism a column-parallel target (rows of W split) splits B's rows and keeps A
// whole on every rank; a row-parallel one splits A's columns and keeps B whole. The whole factor's
// gradient is a sum over the ranks' pieces, taken with TpRegions::sum_partial_grad.
// PEFT's lora_dropout drops the adapters' input only, so a training forward with dropout cannot
// use one weight: the layer computes x·Wᵀ with the base and adds drop(x)·Dᵀ, D = s·B·A, at each
// input that targets read (add_dropped), and its backward adds drop(dy·D) to dx and forms D's
// gradient from drop(x) (dropped_backward), which fold turns into the factors' as before. The
// mask is backend.h dropout_dt's hash of the micro-batch's seed (model.h dropout_seed), the block
// and the input: recomputation and a split backward draw it again. One mask per input: the
// targets that read one input (q, k and v; gate and up) share it (PEFT draws one per module).
// Evaluation and generation (seed 0) use the merged weight.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "keel_support/common/dropout_mask.hpp"
#include "keel_support/common/json_parse.hpp"
#include "keel_support/common/json_section.hpp"
#include "keel_support/model/carver.hpp"
#include "keel_support/model/compute_ops.hpp"
#include "keel_support/model/layer_lease.hpp"
#include "keel_support/model/tp_regions.hpp"

namespace keel_support {

// The model section's "lora" object, under PEFT's LoraConfig names.
struct LoraConfig {
  int32_t r = 0;  // 0: no adapters
  double alpha = 8.0;
  std::vector<std::string> target_modules;
  double dropout = 0.0;
  bool use_rslora = false;
  bool nf4_base = false;  // "quantize_base": "nf4": QLoRA, the frozen linears kept in NF4 (params.h KEEL_PARAM_NF4)

  bool enabled() const { return r > 0; }
  float scaling() const { return float(use_rslora ? alpha / std::sqrt(double(r)) : alpha / double(r)); }
  bool targets(const std::string& module) const {
    for (const std::string& m : target_modules)
      if (m == module) return true;
    return false;
  }
};

// Reads model.lora when present. `modules`: the Hugging Face names of the model's linears that
// may carry adapters ("all-linear" takes them all); `defaults`: PEFT's targets for the
// architecture when the section names none. Throws ConfigError naming the key.
inline LoraConfig parse_lora_config(JsonSection& model, const std::vector<std::string>& modules,
                                    const std::vector<std::string>& defaults) {
  LoraConfig c;
  if (!model.has("lora") || model.raw("lora").is_null()) return c;
  JsonSection s(model.raw("lora"), model.path_of("lora"));
  if (!s.has("r")) throw ConfigError(s.path_of("r") + ": required, the adapters' rank (PEFT's r, e.g. 8)");
  const nlohmann::json& r = s.raw("r");
  if (!r.is_number_integer() || r.get<int64_t>() < 1 || r.get<int64_t>() > 4096)
    throw ConfigError(s.path_of("r") + ": the adapters' rank must be an integer from 1 to 4096, found " + r.dump());
  c.r = r.get<int32_t>();
  c.alpha = s.get_in_range<double>("alpha", c.alpha, 1e-6, 1e6);
  c.dropout = s.get_in_range<double>("dropout", 0.0, 0.0, 0.95);
  c.use_rslora = s.get<bool>("use_rslora", false);
  if (s.has("quantize_base")) {
    const nlohmann::json& q = s.raw("quantize_base");
    if (!q.is_string() || (q.get<std::string>() != "nf4" && q.get<std::string>() != "none"))
      throw ConfigError(s.path_of("quantize_base") + ": expected \"nf4\" (QLoRA: the frozen linear weights kept in "
                                                     "4-bit NormalFloat) or \"none\", found " + q.dump());
    c.nf4_base = q.get<std::string>() == "nf4";
  }
  if (!s.has("target_modules")) {
    c.target_modules = defaults;
  } else {
    const nlohmann::json& t = s.raw("target_modules");
    const std::string at = s.path_of("target_modules");
    if (t.is_string() && t.get<std::string>() == "all-linear") {
      c.target_modules = modules;
    } else {
      if (!t.is_array() || t.empty())
        throw ConfigError(at + ": expected a non-empty list of module names (or \"all-linear\"), found " + t.dump());
      for (const auto& m : t) {
        if (!m.is_string()) throw ConfigError(at + ": expected module names (strings), found " + m.dump());
        const std::string name = m.get<std::string>();
        bool known = false;
        for (const std::string& k : modules) known = known || k == name;
        if (!known) {
          std::string list;
          for (const std::string& k : modules) list += (list.empty() ? "" : ", ") + k;
          throw ConfigError(at + ": the model has no linear module \"" + name + "\" (it has: " + list + ")");
        }
        if (!c.targets(name)) c.target_modules.push_back(name);
      }
    }
  }
  s.finish();
  return c;
}

// The model section completed from a PEFT adapter_config.json (model.init_from naming an adapter
// folder; a model's complete_config for the format "peft"): model.lora takes r, lora_alpha,
// target_modules and use_rslora where it leaves them out, and must agree where it gives them.
// The adapter's lora_dropout is not taken (a training choice, not the weights'). Throws
// ConfigError naming the key and both values.
// `fan_in_fan_out`: the model's linears are Conv1D (GPT-2), whose adapters PEFT marks so.
inline std::string complete_lora_from_peft(const char* adapter_json, const char* config_json, const char* json_path,
                                           bool fan_in_fan_out = false) {
  const std::string path = json_path ? json_path : "model";
  nlohmann::json adapter = parse_json("adapter_config.json", adapter_json);
  nlohmann::json section = parse_json(path, config_json && *config_json ? config_json : "{}");
  if (!adapter.is_object() || !section.is_object())
    throw ConfigError("adapter_config.json and " + path + " must both be JSON objects");
  if (adapter.value("peft_type", std::string()) != "LORA")
    throw ConfigError("adapter_config.json: peft_type is " + adapter.value("peft_type", nlohmann::json()).dump() +
                      "; Keel reads LoRA adapters (\"LORA\")");
  // What Keel's LoRA does not compute is refused, not read as plain LoRA (another model).
  auto refuse_if = [&](const char* key, bool set, const char* what) {
    if (set)
      throw ConfigError("adapter_config.json: " + std::string(key) + " is " + adapter.at(key).dump() + ": " + what +
                        ", which Keel's LoRA does not do");
  };
  auto given = [&](const char* key) { return adapter.contains(key) && !adapter.at(key).is_null(); };
  auto non_empty = [&](const char* key) { return given(key) && !adapter.at(key).empty(); };
  refuse_if("use_dora", given("use_dora") && adapter.at("use_dora") != false, "DoRA's magnitude vectors");
  refuse_if("rank_pattern", non_empty("rank_pattern"), "a rank per module");
  refuse_if("alpha_pattern", non_empty("alpha_pattern"), "an alpha per module");
  refuse_if("bias", given("bias") && adapter.at("bias") != "none", "trained biases");
  refuse_if("modules_to_save", non_empty("modules_to_save"), "whole modules trained beside the adapters");
  if (given("fan_in_fan_out") && adapter.at("fan_in_fan_out") != fan_in_fan_out)
    throw ConfigError("adapter_config.json: fan_in_fan_out is " + adapter.at("fan_in_fan_out").dump() + ", but the " +
                      (fan_in_fan_out ? "model's linears are Conv1D (GPT-2's), stored transposed (true)"
                                      : "model's linears are nn.Linear, not stored transposed (false)"));
  refuse_if("layers_to_transform", non_empty("layers_to_transform"), "adapters on some layers only");
  nlohmann::json lora = section.contains("lora") && section.at("lora").is_object() ? section.at("lora") : nlohmann::json::object();
  auto take = [&](const char* key, const char* theirs) {
    if (!adapter.contains(theirs) || adapter.at(theirs).is_null()) return;
    nlohmann::json value = adapter.at(theirs);
    if (std::string(key) == "target_modules" && value.is_array()) {  // PEFT may save a set in any order
      std::vector<std::string> names = value.get<std::vector<std::string>>();
      std::sort(names.begin(), names.end());
      value = names;
      if (lora.contains(key) && lora.at(key).is_array()) {
        std::vector<std::string> ours = lora.at(key).get<std::vector<std::string>>();
        std::sort(ours.begin(), ours.end());
        lora[key] = ours;
      }
    }
    if (!lora.contains(key)) {
      lora[key] = value;
    } else if (lora.at(key) != value && !(lora.at(key).is_number() && value.is_number() &&
                                          lora.at(key).get<double>() == value.get<double>())) {
      throw ConfigError(path + ".lora." + key + " is " + lora.at(key).dump() + ", but the adapter's " + theirs + " is " +
                        value.dump() + " (adapter_config.json); leave it out to take the adapter's");
    }
  };
  take("r", "r");
  take("alpha", "lora_alpha");
  take("target_modules", "target_modules");
  take("use_rslora", "use_rslora");
  section["lora"] = lora;
  return section.dump();
}

// Whether `name` ends with one of `suffixes` (a model's block linears, for freeze_base).
inline bool ends_with_any(const std::string& name, std::initializer_list<const char*> suffixes) {
  for (const std::string suffix : suffixes)
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return true;
  return false;
}

// Under LoRA everything but the adapters is frozen (params.h KEEL_PARAM_FROZEN: held by the core,
// no gradient, no state); QLoRA keeps the frozen weights `nf4_candidate(name)` picks (the blocks'
// linears) in NF4 (KEEL_PARAM_NF4), which the core dequantizes as each layer is used.
template <typename Specs, typename Predicate>
void freeze_base(const LoraConfig& c, Specs& pending, const Predicate& nf4_candidate) {
  if (!c.enabled()) return;
  for (auto& p : pending)
    if (p.name.find(".lora_") == std::string::npos) {
      p.spec.flags |= KEEL_PARAM_FROZEN;
      if (c.nf4_base && nf4_candidate(p.name)) p.spec.flags |= KEEL_PARAM_NF4;
    }
}

// PEFT's adapter_config.json for a run's adapters (the keys PEFT 0.10's LoraConfig reads); the
// base is the one PeftModel.from_pretrained is handed. `fan_in_fan_out`: the base's linears are
// Conv1D (GPT-2's), stored (in, out).
inline std::string peft_adapter_config(const LoraConfig& c, bool fan_in_fan_out) {
  nlohmann::json j = {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"base_model_name_or_path", nullptr},
      {"r", c.r},
      {"lora_alpha", c.alpha},
      {"lora_dropout", c.dropout},
      {"target_modules", c.target_modules},
      {"use_rslora", c.use_rslora},
      {"bias", "none"},
      {"fan_in_fan_out", fan_in_fan_out},
      {"inference_mode", true},
      {"init_lora_weights", "gaussian"},
      {"modules_to_save", nullptr},
  };
  return j.dump(2) + "\n";
}

// The inputs of a transformer block that adapters read, each with its own dropout mask: the
// attention's input (q, k, v), its output (the output projection's input), the MLP's input and
// its hidden activation (the down projection's input); in a sparse MLP, the routers and a shared
// expert read the MLP's input and hidden too, and the routed experts read theirs as (token, slot)
// pairs: row t·K + k of the expert input's and the expert hidden's masks is token t's k-th choice.
// A reference draws a block's mask with dropout_site_seed(seed, block, input).
enum LoraInput : int32_t {
  kAttentionInput = 0,
  kAttentionOutput = 1,
  kMlpInput = 2,
  kMlpHidden = 3,
  kExpertInput = 4,
  kExpertHidden = 5,
};

// One target in a layer's specs: the frozen weight's index and its factors', with the weight's
// local shape and which factor is whole on every tensor-parallel rank.
struct LoraTarget {
  size_t weight = 0, a = 0, b = 0;
  int64_t out = 0, in = 0;  // W's local shape
  bool column_parallel = true;  // W's rows split: A whole on every tp rank; else B whole
};

// The effective weights and their gradients' scratch for one layer use, the same targets in
// every layer that has adapters.
class LoraLayer {
 public:
  LoraLayer() = default;
  LoraLayer(const ComputeOps& ops, const TpRegions* tp, int32_t r, float scaling, std::vector<LoraTarget> targets,
            float dropout = 0.0f)
      : ops_(ops), tp_(tp), r_(r), scaling_(scaling), dropout_(dropout), targets_(std::move(targets)) {
    memory_ = ops_.backend().alloc_bytes(carve(nullptr));
    carve(static_cast<char*>(memory_.get()));
    // I (r, r): one matmul with it turns B (out, r) into Bᵀ (r, out), exactly.
    std::vector<float> identity(size_t(r_) * size_t(r_), 0.0f);
    for (int32_t i = 0; i < r_; ++i) identity[size_t(i) * size_t(r_) + size_t(i)] = 1.0f;
    BackendBuffer staging = ops_.backend().alloc_floats(int64_t(identity.size()));
    ops_.backend().copy(staging.floats(), identity.data(), int64_t(identity.size()), KEEL_COPY_HOST_TO_DEVICE);
    from_fp32(identity_, staging.floats(), int64_t(identity.size()));
  }

  bool active() const { return !targets_.empty(); }

  bool targets(size_t index) const {
    for (const LoraTarget& g : targets_)
      if (g.weight == index) return true;
    return false;
  }

  // Each target's W + s·B·A from the lease into scratch, and its dW scratch zeroed; call once per
  // layer use, before any weight is read. `base(index)`: the W to add to, the lease's own unless
  // the model computes with another (QAT's fake-quantized copy: torchtune's QAT with LoRA).
  // `dropout_seed`: the micro-batch's (model.h); with dropout configured and a seed, the scratch
  // holds s·B·A alone and the model adds it at each input (dropping()).
  void merge(const LayerLease& lease, uint64_t dropout_seed = 0) {
    merge(lease, [&](size_t index) { return lease.param_elems(index); }, dropout_seed);
  }
  template <typename Base>
  void merge(const LayerLease& lease, const Base& base, uint64_t dropout_seed = 0) {
    dropping_ = dropout_ > 0.0f && dropout_seed != 0;
    for (size_t t = 0; t < targets_.size(); ++t) {
      const LoraTarget& g = targets_[t];
      ops_.matmul_forward(bt_, identity_, lease.param_elems(g.b), Elems(), r_, r_, g.out);  // Bᵀ (r, out)
      ops_.backend().fill_zero(dweight_[t], g.out * g.in);
      // dW += (Bᵀ)ᵀ·A = B·A, fp32, through the weight-gradient matmul (no transpose op needed),
      // then × s in fp32.
      ops_.matmul_backward(Elems(), dweight_[t], nullptr, bt_, lease.param_elems(g.a), lease.param_elems(g.weight), r_,
                           g.in, g.out);
      ops_.backend().scale(dweight_[t], scaling_, g.out * g.in);
      from_fp32(effective_[t], dweight_[t], g.out * g.in);
      if (!dropping_) ops_.add(effective_[t], effective_[t], base(g.weight), g.out * g.in);
      ops_.backend().fill_zero(dweight_[t], g.out * g.in);
    }
  }

  // This layer use drops the adapters' input: the model computes with the base and calls
  // add_dropped and dropped_backward at each input its targets read.
  bool dropping() const { return dropping_; }
  float dropout() const { return dropout_; }
  // While dropping, for a model that applies the adapters itself (a sparse MLP's grouped
  // matmuls): a target's D = s·B·A (out, in) at the compute type, and its gradient dD (fp32,
  // ADDED to; fold turns it into the factors'). Empty and nullptr for a tensor without adapters.
  Elems delta(size_t index) const {
    const LoraTarget* g = dropping_ ? find(index) : nullptr;
    return g ? effective_[size_t(g - targets_.data())] : Elems();
  }
  float* delta_grad(size_t index) const {
    const LoraTarget* g = dropping_ ? find(index) : nullptr;
    return g ? dweight_[size_t(g - targets_.data())] : nullptr;
  }
  // Whether `index` computes with the merged weight (a target, not dropping).
  bool merges(size_t index) const { return !dropping_ && targets(index); }

  // The weight the layer computes with: the merged one for a target (not dropping), else the lease's.
  Elems weight(const LayerLease& lease, size_t index) const {
    if (!dropping_)
      for (size_t t = 0; t < targets_.size(); ++t)
        if (targets_[t].weight == index) return effective_[t];
    return lease.param_elems(index);
  }
  // Where the weight's gradient goes: a target's dW scratch (not dropping: dropped_backward fills
  // it then); else the lease's buffer (NULL for a frozen tensor, and when `grads` is NULL: no
  // weight gradients in this pass).
  float* grad(const LayerLease* grads, size_t index) const {
    if (!grads) return nullptr;
    if (!dropping_)
      for (size_t t = 0; t < targets_.size(); ++t)
        if (targets_[t].weight == index) return dweight_[t];
    return grads->grad(index);
  }

  // One input of a block under dropout: `parts` are the projections that read it, in the order
  // their outputs sit side by side in y (a stacked projection's; one for an unstacked linear),
  // each its weight's index and output rows; `seed` the input's mask (dropout_site_seed) and
  // `col_offset` where this rank's columns of x start in the whole row (a row-parallel input).
  struct Part {
    size_t index;
    int64_t rows;
  };
  // y(N, Σrows) += drop(x)·Dᵀ, D the parts' s·B·A stacked (zero rows for a part without adapters).
  void add_dropped(Elems y, Elems x, int64_t N, int64_t in, const std::vector<Part>& parts, uint64_t seed,
                   int64_t col_offset) {
    if (!dropping_) return;
    const int64_t out = stack_delta(parts, in);
    if (out == 0) return;
    ensure_rows(N, in, out);
    ops_.dropout(dropped_, x, N, in, col_offset, seed, dropout_);
    ops_.matmul_forward(product_, dropped_, delta_, Elems(), N, in, out);
    ops_.add(y, y, product_, N * out);
  }
  // Its backward: dx(N, in) += drop(dy·D) when dx is given; each target's dD += dyᵀ·drop(x) when
  // `weight_grads` (fold then turns them into the factors' gradients).
  void dropped_backward(Elems dx, bool weight_grads, Elems dy, Elems x, int64_t N, int64_t in,
                        const std::vector<Part>& parts, uint64_t seed, int64_t col_offset) {
    if (!dropping_ || (!dx && !weight_grads)) return;
    const int64_t out = stack_delta(parts, in);
    if (out == 0) return;
    ensure_rows(N, in, out);
    if (weight_grads) {  // dD reads the dropped input; dx alone does not
      ops_.dropout(dropped_, x, N, in, col_offset, seed, dropout_);
      ops_.backend().fill_zero(ddelta_, out * in);
    }
    if (dx) ops_.fill_zero(product_, N * in);
    ops_.matmul_backward(dx ? product_ : Elems(), weight_grads ? ddelta_ : nullptr, nullptr, dy,
                         weight_grads ? dropped_ : x, delta_, N, in, out);
    if (dx) {
      ops_.dropout(product_, product_, N, in, col_offset, seed, dropout_);
      ops_.add(dx, dx, product_, N * in);
    }
    if (!weight_grads) return;
    int64_t row = 0;
    for (const Part& part : parts) {
      if (const LoraTarget* g = find(part.index))
        ops_.backend().accumulate(dweight_[size_t(g - targets_.data())], ddelta_ + row * in, part.rows * in);
      row += part.rows;
    }
  }

  // After the layer's weight gradients were formed: each target's dW into its factors' gradients
  // (ADDED to the lease's buffers), the whole factor's summed over tensor-parallel ranks.
  void fold(const LayerLease& lease) {
    for (size_t t = 0; t < targets_.size(); ++t) {
      const LoraTarget& g = targets_[t];
      ops_.backend().scale(dweight_[t], scaling_, g.out * g.in);
      const Elems dw = effective_[t];  // the merged weight is read no more: its scratch holds s·dW
      from_fp32(dw, dweight_[t], g.out * g.in);
      // dA (r, in) = Bᵀ·(s·dW): the weight-gradient matmul with B as the output gradient.
      ops_.backend().fill_zero(factor_, r_ * g.in);
      ops_.matmul_backward(Elems(), factor_, nullptr, lease.param_elems(g.b), dw, lease.param_elems(g.a), g.out, g.in,
                           r_);
      add_factor_grad(lease.grad(g.a), r_ * g.in, g.column_parallel, "the lora_A gradients");
      // dB (out, r) = (s·dW)·Aᵀ: a forward matmul with A as the weight.
      ops_.matmul_forward(small_, dw, lease.param_elems(g.a), Elems(), g.out, g.in, r_);
      ops_.to_fp32(factor_, small_, g.out * r_);
      add_factor_grad(lease.grad(g.b), g.out * r_, !g.column_parallel, "the lora_B gradients");
    }
  }

 private:
  void add_factor_grad(float* grad, int64_t n, bool whole_on_every_rank, const char* what) const {
    if (whole_on_every_rank && tp_) tp_->sum_partial_grad(factor_, n, what);
    if (grad) ops_.backend().accumulate(grad, factor_, n);
  }
  void from_fp32(Elems dst, const float* src, int64_t n) const {
    if (is_fp32(ops_.dtype())) return ops_.copy(dst, Elems(src, 4), n);
    check_callee(ops_.backend().api->convert(ops_.backend().obj, dst.get(), ops_.dtype(), src,
                                             keel_dtype{KEEL_DTYPE_FLOAT, 32, 1}, n),
                 "backend convert");
  }
  size_t carve(char* base) {
    Carver take(base);
    auto elems = [&](int64_t n) { return ops_.at(take.take<char>(int64_t(ops_.bytes(n)))); };
    int64_t widest = 0, longest = 0;
    effective_.clear();
    dweight_.clear();
    for (const LoraTarget& g : targets_) {
      effective_.push_back(elems(g.out * g.in));
      dweight_.push_back(take.take<float>(g.out * g.in));
      widest = std::max(widest, std::max(g.out, g.in));
      longest = std::max(longest, g.out);
    }
    identity_ = elems(int64_t(r_) * r_);
    bt_ = elems(int64_t(r_) * longest);
    small_ = elems(int64_t(r_) * longest);
    factor_ = take.take<float>(int64_t(r_) * widest);
    return take.used();
  }

  const LoraTarget* find(size_t index) const {
    for (const LoraTarget& g : targets_)
      if (g.weight == index) return &g;
    return nullptr;
  }
  // The parts' D stacked into delta_ (Σrows, in); returns Σrows, 0 when no part has adapters.
  int64_t stack_delta(const std::vector<Part>& parts, int64_t in) {
    int64_t out = 0;
    bool any = false;
    for (const Part& part : parts) out += part.rows, any = any || find(part.index);
    if (!any) return 0;
    ensure_stack(out * in);
    int64_t row = 0;
    for (const Part& part : parts) {
      const LoraTarget* g = find(part.index);
      if (g && (g->out != part.rows || g->in != in))
        throw StatusError(KEEL_ERR_INTERNAL, "LoraLayer: a dropped input's part has the shape (" +
                                                 std::to_string(part.rows) + ", " + std::to_string(in) +
                                                 "), its adapters' weight (" + std::to_string(g->out) + ", " +
                                                 std::to_string(g->in) + ")");
      if (g) ops_.copy(delta_ + row * in, effective_[size_t(g - targets_.data())], part.rows * in);
      else ops_.fill_zero(delta_ + row * in, part.rows * in);
      row += part.rows;
    }
    return out;
  }
  // The stacked delta and its gradient, grown to `elems`.
  void ensure_stack(int64_t elems) {
    if (elems <= stack_elems_) return;
    auto carve_stack = [&](char* base) {
      Carver take(base);  // each piece aligned, whatever the compute type's width
      delta_ = ops_.at(take.take<char>(int64_t(ops_.bytes(elems))));
      ddelta_ = take.take<float>(elems);
      return take.used();
    };
    stack_ = ops_.backend().alloc_bytes(carve_stack(nullptr));
    carve_stack(static_cast<char*>(stack_.get()));
    stack_elems_ = elems;
  }
  // The dropped input and a product, grown to N rows of the widest side.
  void ensure_rows(int64_t N, int64_t in, int64_t out) {
    const int64_t elems = N * std::max(in, out);
    if (elems <= row_elems_) return;
    auto carve_rows = [&](char* base) {
      Carver take(base);
      dropped_ = ops_.at(take.take<char>(int64_t(ops_.bytes(elems))));
      product_ = ops_.at(take.take<char>(int64_t(ops_.bytes(elems))));
      return take.used();
    };
    rows_ = ops_.backend().alloc_bytes(carve_rows(nullptr));
    carve_rows(static_cast<char*>(rows_.get()));
    row_elems_ = elems;
  }

  ComputeOps ops_;
  const TpRegions* tp_ = nullptr;
  int32_t r_ = 0;
  float scaling_ = 1.0f;
  float dropout_ = 0.0f;   // PEFT's lora_dropout
  bool dropping_ = false;  // this layer use: merge's scratch holds s·B·A alone
  BackendBuffer stack_, rows_;
  int64_t stack_elems_ = 0, row_elems_ = 0;
  Elems delta_, dropped_, product_;  // stacked D (Σrows, in); drop(x) and a product (N, widest)
  float* ddelta_ = nullptr;          // stacked D's gradient (Σrows, in) fp32
  std::vector<LoraTarget> targets_;
  BackendBuffer memory_;
  std::vector<Elems> effective_;  // per target: W + s·B·A (out, in) at the compute type
  std::vector<float*> dweight_;   // per target: dW (out, in) fp32
  Elems identity_, bt_, small_;   // I (r, r); Bᵀ (r, out); (s·dW)·Aᵀ (out, r)
  float* factor_ = nullptr;       // one factor's gradient before it is added, fp32
};

}  // namespace keel_support
