// Generation with a key/value cache (model.h 0.18): each block keeps the keys and values of the
// positions generated so far in backend memory, so a new token runs the network on itself alone
// and attends over the cache (backend.h attention_decode_dt) instead of rerunning the window.
// The same ops as the forward otherwise, in the same order, so its logits match a forward's of
// the whole prefix to rounding. Whole networks only: under tensor or pipeline parallelism, or
// on a backend without the op, decode_reset refuses and the core runs whole windows.
#include <keel_support/model/carver.hpp>

#include <string>

#include "gpt_model.hpp"

namespace keel_gpt {

using keel_support::Carver;
using keel_support::LayerLease;
using keel_support::StatusError;

void GptModel::decode_reset(int32_t batch, int32_t capacity) {
  if (tp_.active() || plan_.pp_size() != 1 || plan_.chunks() != 1)
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "decode: the model is split over tensor-parallel ranks or pipeline "
                                              "stages; a key/value cache needs the whole network on one rank");
  if (!ops_.has_attention_decode())
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "decode: the backend has no attention_decode_dt (ABI 0.18)");
  if (!keel_support::is_fp32(ops_.dtype()))  // the cpu backend caches fp32 only
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "decode: the key/value cache is kept at fp32 only");
  if (capacity > config_.max_seq_len)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "decode_reset: capacity " + std::to_string(capacity) +
                                                     " is past the model's seq_len " + std::to_string(config_.max_seq_len));
  const int64_t C = config_.d_model, hs = C / config_.n_head;
  // Keys, then values, for every block: (L, 2, B, NH, capacity, hs), zeroed (the cache's unused
  // positions are never read, but a fresh allocation should not hold stale bits either).
  const int64_t per_block = int64_t(batch) * config_.n_head * capacity * hs;
  decode_ = DecodeCache();  // the old cache goes before the new one comes
  decode_.cache = backend_.alloc_bytes(ops_.bytes(2 * config_.n_layer * per_block));
  KEEL_OP(backend_, fill_zero, decode_.cache.get(), ops_.bytes(2 * config_.n_layer * per_block));
  decode_.per_block = per_block;
  decode_.batch = batch;
  decode_.capacity = capacity;
  decode_.length = 0;
}

const float* GptModel::decode(const keel_param_access* access, const int32_t* tokens, int32_t batch, int32_t count) {
  if (!decode_.cache.get()) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "decode: call decode_reset first");
  if (batch != decode_.batch || count < 1 || decode_.length + count > decode_.capacity)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT,
                      "decode: " + std::to_string(batch) + " rows of " + std::to_string(count) + " tokens after " +
                          std::to_string(decode_.length) + " cached do not fit the cache's " +
                          std::to_string(decode_.batch) + " rows of " + std::to_string(decode_.capacity));
  const keel_support::BackendOps& be = backend_;
  const int64_t B = batch, T = count, N = B * T, C = config_.d_model, F = share_.hidden, NH = config_.n_head;
  const int64_t past = decode_.length, Vp = config_.padded_vocab_size;
  keel_support::check_token_ids(be, tokens, N, config_.vocab_size, false, "tokens");

  // This call's activations: one block's at a time, reused down the blocks.
  Carver sizes(nullptr);
  auto layout = [&](Carver& carve, DecodeBuffers& d) {
    auto elems = [&](int64_t n) { return ops_.at(carve.take<char>(int64_t(ops_.bytes(n)))); };
    d.residual = elems(N * C);
    d.ln = elems(N * C);
    d.mean = carve.take<float>(N);
    d.rstd = carve.take<float>(N);
    d.qkv = elems(N * 3 * C);
    d.atty = elems(N * C);
    d.residual2 = elems(N * C);
    d.fch = elems(N * F);
    d.fch_gelu = elems(N * F);
    d.logits = elems(N * Vp);
    d.tokens = carve.take<int32_t>(N);
  };
  DecodeBuffers d;
  layout(sizes, d);
  d.memory = backend_.alloc_bytes(sizes.used());
  Carver carve(static_cast<char*>(d.memory.get()));
  layout(carve, d);
  KEEL_OP(be, copy, d.tokens, tokens, N * sizeof(int32_t), KEEL_COPY_DEVICE_TO_DEVICE);

  {  // layer 0: token embeddings, and the position embeddings of positions past .. past+T-1
    LayerLease lease(access, 0, KEEL_PHASE_FORWARD, layer_specs(0), layer_size(0));
    ops_.embedding_forward(d.residual, d.tokens, lease.param_elems(WTE), lease.param_elems(WPE) + past * C, B, T, C);
    lease.release(false);
  }
  char* cache = static_cast<char*>(decode_.cache.get());
  for (int32_t l = 0; l < config_.n_layer; ++l) {
    const int32_t layer = 1 + l;
    LayerLease lease(access, layer, KEEL_PHASE_FORWARD, layer_specs(layer), layer_size(layer));
    prepare_weights(lease);
    auto w = [&](int i) { return weight(lease, BlockTensor(i)); };
    void* keys = cache + ops_.bytes(2 * l * decode_.per_block);
    void* values = cache + ops_.bytes((2 * l + 1) * decode_.per_block);
    auto quantize = [&](const char* module, Elems x, int64_t cols) {  // QAT's activations, as the forward
      if (config_.qat.quantizes_input(module)) qat_.quantize_input(x, N, cols);
    };
    ops_.layernorm_forward(d.ln, d.mean, d.rstd, d.residual, w(LN1_W), w(LN1_B), N, C);
    quantize("c_attn", d.ln, C);
    ops_.matmul_forward(d.qkv, d.ln, w(QKV_W), w(QKV_B), N, C, 3 * C);
    ops_.attention_decode(d.atty, keys, values, d.qkv, B, T, C, NH, NH, past, decode_.capacity);
    quantize("c_proj", d.atty, C);
    ops_.matmul_forward(d.residual2, d.atty, w(ATTPROJ_W), w(ATTPROJ_B), N, C, C);
    ops_.add(d.residual2, d.residual2, d.residual, N * C);
    ops_.layernorm_forward(d.ln, d.mean, d.rstd, d.residual2, w(LN2_W), w(LN2_B), N, C);
    quantize("c_fc", d.ln, C);
    ops_.matmul_forward(d.fch, d.ln, w(FC_W), w(FC_B), N, C, F);
    ops_.gelu_forward(d.fch_gelu, d.fch, N * F);
    quantize("c_proj", d.fch_gelu, F);
    ops_.matmul_forward(d.residual, d.fch_gelu, w(FCPROJ_W), w(FCPROJ_B), N, F, C);
    ops_.add(d.residual, d.residual, d.residual2, N * C);
    lease.release(false);
  }
  {  // layer L+1: the final layernorm
    const int32_t layer = config_.n_layer + 1;
    LayerLease lease(access, layer, KEEL_PHASE_FORWARD, layer_specs(layer), layer_size(layer));
    ops_.layernorm_forward(d.ln, d.mean, d.rstd, d.residual, lease.param_elems(LNF_W), lease.param_elems(LNF_B), N, C);
    lease.release(false);
  }
  {  // layer 0 again: the lm_head is wte
    LayerLease lease(access, 0, KEEL_PHASE_FORWARD, layer_specs(0), layer_size(0));
    ops_.matmul_forward(d.logits, d.ln, lease.param_elems(WTE), Elems(), N, C, Vp);
    lease.release(false);
  }
  decode_.length += count;
  decode_.last = std::move(d.memory);  // the logits stay valid until the next call
  return inference_logits_.get(backend_, tp_, d.logits, N, config_.padded_vocab_size);
}

}  // namespace keel_gpt
