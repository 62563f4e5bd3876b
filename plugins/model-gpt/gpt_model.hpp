// GPT-2 (as in llm.c's train_gpt2.c) written against the backend op set: its config, its
// parameter specs, and the forward/backward pair. The model owns activations only; parameters
// and their gradients come one layer at a time from the strategy's keel_param_access.
// Layers (units of acquire/release): 0 = wte + wpe (wte is also the tied lm_head),
// 1..n_layer = transformer blocks, n_layer+1 = ln_f.
#pragma once

#include <keel/model.h>
#include <keel/plugin.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gpt_external_names.hpp"  // defines: GptExternalNames
#include "model_support.hpp"  // defines: Backend, LayerLease, KEEL_OP, Carver

namespace keel_gpt {

using keel_model::Backend;
using keel_model::BackendBuffer;

struct GptConfig {
  int32_t n_layer = 12;
  int32_t n_head = 12;
  int32_t d_model = 768;
  int32_t vocab_size = 50257;
  int32_t padded_vocab_size = 50304;  // vocab_size rounded up to a multiple of 128
  int32_t max_seq_len = 1024;
};

// Reads and checks the "model" section; throws keel_support::ConfigError naming the JSON path.
GptConfig parse_gpt_config(const char* config_json, const char* json_path);

// One micro-batch's saved forward state in one backend allocation (llm.c's ActivationTensors).
// The attention output projection and the MLP output projection are written straight into
// the residual buffers (then the residual is added in place), so they need no buffers of
// their own: their backward only needs the gradient of the residual.
struct Activations {
  int32_t B = 0, T = 0;
  BackendBuffer memory;
  float* encoded;    // (B,T,C) token + position embedding
  float* ln1;        // (L,B,T,C)
  float* ln1_mean;   // (L,B,T)
  float* ln1_rstd;   // (L,B,T)
  float* qkv;        // (L,B,T,3C)
  float* atty;       // (L,B,T,C) attention output before its projection
  float* att_saved;  // (L, attention_saved_floats) what attention_backward needs
  float* residual2;  // (L,B,T,C) residual after the attention branch
  float* ln2;        // (L,B,T,C)
  float* ln2_mean;   // (L,B,T)
  float* ln2_rstd;   // (L,B,T)
  float* fch;        // (L,B,T,4C)
  float* fch_gelu;   // (L,B,T,4C)
  float* residual3;  // (L,B,T,C) residual after the MLP branch: the block's output
  float* lnf;        // (B,T,C)
  float* lnf_mean;   // (B,T)
  float* lnf_rstd;   // (B,T)
  float* logits;     // (B,T,Vp) logits; probabilities after the cross-entropy forward
  float* losses;     // (B,T)
  int32_t* tokens;   // (B,T) copied at forward for the embedding backward
  int32_t* targets;  // (B,T) copied at forward for the cross-entropy backward
  int64_t att_saved_per_layer = 0;
  int64_t valid_targets = 0;      // targets >= 0: the mean's denominator
  bool backward_pending = false;  // forward had targets and no backward has consumed it yet
};

// Activation gradients, shared by all micro-batches (only one backward runs at a time), sized
// for the largest B*T seen. Every op accumulates into them, so each is zeroed before use.
struct GradScratch {
  int64_t rows = 0;  // B*T it was sized for
  BackendBuffer memory;
  float* dlogits;    // (B,T,Vp)
  float* dresidual;  // (B,T,C) gradient of the residual stream, carried down the blocks
  float* dln;        // (B,T,C) gradient of a layernorm's output (ln_f, ln_2, ln_1 in turn)
  float* datty;      // (B,T,C)
  float* dqkv;       // (B,T,3C)
  float* dfch_gelu;  // (B,T,4C)
  float* dfch;       // (B,T,4C)
};

class GptModel {
 public:
  GptModel(const keel_host* host, const keel_model_create_args& args);

  const keel_host* host() const { return host_; }
  void describe(keel_model_info* out) const;
  double flops_per_token(int32_t seq_len) const;
  void forward(keel_forward_args* args);
  void backward(const keel_backward_args& args);
  // Names and layouts in external formats ("huggingface"), for export and import.
  const GptExternalNames& external() const { return *external_; }

 private:
  void build_param_specs();
  Activations& activations_for(int32_t microbatch, int32_t B, int32_t T);
  void carve_activations(Activations& acts, char* base, size_t* out_bytes) const;
  void ensure_grad_scratch(int64_t rows);
  const keel_param_spec* layer_specs(int32_t layer) const { return &specs_[layer_first_spec_[layer]]; }
  size_t layer_size(int32_t layer) const { return layer_first_spec_[layer + 1] - layer_first_spec_[layer]; }

  const keel_host* host_;
  Backend backend_;
  GptConfig config_;
  std::vector<std::string> names_;              // storage for specs_[i].name
  std::vector<keel_param_spec> specs_;          // sorted by layer
  std::vector<size_t> layer_first_spec_;        // n_layer + 3 entries, the last is specs_.size()
  std::map<int32_t, Activations> activations_;  // by micro-batch id
  GradScratch scratch_;
  std::unique_ptr<const GptExternalNames> external_;  // built from names_ once the specs exist
};

}  // namespace keel_gpt
