// Sampling with the model's key/value cache (model.h 0.18): the prompt runs once, then each new
// token runs alone over the cache, instead of the whole window at every token. It serves while
// the context fits the window (seq_len positions): past it, the window slides, every position's
// embedding changes, and the sampler goes back to whole windows. A model, layout or backend
// that cannot cache (decode_reset refuses with KEEL_ERR_UNIMPLEMENTED) samples by whole windows
// throughout, as before 0.18.
#include "generate/cached_decoder.h"

#include <keel/plugin.h>

#include <string>

#include "host/errors.h"

namespace keel {

CachedDecoder::CachedDecoder(PluginInstances& plugins, int32_t capacity) : plugins_(plugins), capacity_(capacity) {
  const keel_model_api* model = plugins_.model;
  if (capacity < 1 || !KEEL_HAS_SLOT(model, decode) || !model->decode_reset || !model->decode) return;
  const keel_status status = model->decode_reset(plugins_.model_obj, 1, capacity);
  if (status == KEEL_ERR_UNIMPLEMENTED) return;  // whole windows, as a model without the slots
  check_plugin(status, "model decode_reset");
  check_plugin(plugins_.backend->alloc(plugins_.backend_obj, size_t(capacity) * sizeof(int32_t), &device_tokens_),
               "backend alloc");
  usable_ = true;
}

CachedDecoder::~CachedDecoder() {
  if (device_tokens_) plugins_.backend->free_memory(plugins_.backend_obj, device_tokens_);
}

bool CachedDecoder::serves(size_t context_length) const { return usable_ && context_length <= size_t(capacity_); }

std::vector<float> CachedDecoder::last_logits(const std::vector<int32_t>& context) {
  // What the cache lacks of the context: the whole prompt at first, then the newest token.
  const int32_t count = int32_t(context.size()) - cached_;
  if (count < 1) throw KeelError(KEEL_ERR_INTERNAL, "cached decoding: no new token to run");
  check_plugin(plugins_.backend->copy(plugins_.backend_obj, device_tokens_, context.data() + cached_,
                                      size_t(count) * sizeof(int32_t), KEEL_COPY_HOST_TO_DEVICE),
               "copying tokens to the backend");
  const float* logits = nullptr;
  check_plugin(plugins_.model->decode(plugins_.model_obj, &plugins_.access, static_cast<const int32_t*>(device_tokens_),
                                      1, count, &logits),
               "model decode");
  cached_ += count;
  const size_t padded = size_t(plugins_.model_info.padded_vocab_size);
  std::vector<float> row(padded);
  check_plugin(plugins_.backend->copy(plugins_.backend_obj, row.data(), logits + size_t(count - 1) * padded,
                                      padded * sizeof(float), KEEL_COPY_DEVICE_TO_HOST),
               "copying logits");
  return row;
}

}  // namespace keel
