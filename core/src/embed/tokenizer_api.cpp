// The tokenizer half of the embedding API (abi/keel/embed.h, keel_tokenizer_*): the tokenizer
// prepare-data uses (core/src/tokenize), opened by spec, with the results of its last call
// kept in the handle so a caller reads them without sizing a buffer first.
#include <keel/embed.h>

#include <memory>
#include <string>
#include <vector>

#include "embed/embed_call.h"
#include "tokenize/tokenizer.h"

struct keel_tokenizer {
  std::unique_ptr<keel::Tokenizer> tokenizer;
  std::vector<int32_t> ids;  // the last encode's
  std::string text;          // the last decode's, or the last token looked up
};

using keel::embed::embed_call;
using keel::embed::require;

extern "C" {

KEEL_API keel_status keel_tokenizer_open(const char* spec, keel_tokenizer** out_tokenizer) {
  return embed_call([&] {
    require(spec && out_tokenizer, "keel_tokenizer_open: spec and out_tokenizer must not be NULL");
    auto handle = std::make_unique<keel_tokenizer>();
    handle->tokenizer = keel::open_tokenizer(spec);
    *out_tokenizer = handle.release();
  });
}

KEEL_API void keel_tokenizer_destroy(keel_tokenizer* tokenizer) { delete tokenizer; }

KEEL_API keel_status keel_tokenizer_vocab_size(keel_tokenizer* tokenizer, int64_t* out_vocab_size) {
  return embed_call([&] {
    require(tokenizer && out_vocab_size, "keel_tokenizer_vocab_size: tokenizer and out_vocab_size must not be NULL");
    *out_vocab_size = tokenizer->tokenizer->vocab_size();
  });
}

KEEL_API keel_status keel_tokenizer_encode(keel_tokenizer* tokenizer, const char* text, size_t length,
                                           const int32_t** out_ids, size_t* out_count) {
  return embed_call([&] {
    require(tokenizer && (text || length == 0) && out_ids && out_count,
            "keel_tokenizer_encode: tokenizer, out_ids and out_count must not be NULL, nor text with a length");
    std::vector<uint32_t> ids;
    tokenizer->tokenizer->encode(std::string_view(text ? text : "", length), "keel_tokenizer_encode's text", ids);
    tokenizer->ids.assign(ids.begin(), ids.end());  // ids are below 2^24 (tokenizer_json.cpp's bound)
    *out_ids = tokenizer->ids.data();
    *out_count = tokenizer->ids.size();
  });
}

KEEL_API keel_status keel_tokenizer_decode(keel_tokenizer* tokenizer, const int32_t* ids, size_t count,
                                           int32_t skip_special, const char** out_text, size_t* out_length) {
  return embed_call([&] {
    require(tokenizer && (ids || count == 0) && out_text && out_length,
            "keel_tokenizer_decode: tokenizer, out_text and out_length must not be NULL, nor ids with a count");
    std::vector<uint32_t> unsigned_ids(count);
    for (size_t i = 0; i < count; ++i) {
      if (ids[i] < 0)
        throw keel::KeelError(KEEL_ERR_INVALID_ARGUMENT, "keel_tokenizer_decode: id " + std::to_string(ids[i]) +
                                                             " at index " + std::to_string(i) + " is negative");
      unsigned_ids[i] = uint32_t(ids[i]);
    }
    tokenizer->text = tokenizer->tokenizer->decode(unsigned_ids, skip_special != 0);
    *out_text = tokenizer->text.c_str();
    *out_length = tokenizer->text.size();
  });
}

KEEL_API keel_status keel_tokenizer_token_id(keel_tokenizer* tokenizer, const char* token, int32_t* out_id) {
  return embed_call([&] {
    require(tokenizer && token && out_id, "keel_tokenizer_token_id: tokenizer, token and out_id must not be NULL");
    const std::optional<uint32_t> id = tokenizer->tokenizer->token_id(token);
    if (!id) throw keel::KeelError(KEEL_ERR_NOT_FOUND, std::string("keel_tokenizer_token_id: \"") + token +
                                                           "\" is no token of " + tokenizer->tokenizer->describe());
    *out_id = int32_t(*id);
  });
}

KEEL_API keel_status keel_tokenizer_token(keel_tokenizer* tokenizer, int32_t id, const char** out_token,
                                          int32_t* out_special) {
  return embed_call([&] {
    require(tokenizer && out_token, "keel_tokenizer_token: tokenizer and out_token must not be NULL");
    const auto token = id < 0 ? std::nullopt : tokenizer->tokenizer->token_of(uint32_t(id));
    if (!token) throw keel::KeelError(KEEL_ERR_NOT_FOUND, "keel_tokenizer_token: no token of " +
                                                               tokenizer->tokenizer->describe() + " has the id " +
                                                               std::to_string(id));
    tokenizer->text = token->text;
    *out_token = tokenizer->text.c_str();
    if (out_special) *out_special = token->special ? 1 : 0;
  });
}

}  // extern "C"
