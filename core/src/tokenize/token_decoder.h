// A tokenizer.json's decoder: how the tokens of some ids become text again, as the tokenizers
// library's decode does it (each step rewrites the list of token strings, then they are joined).
// prepare-data never decodes; keel.Tokenizer.decode and generate's text output do. The steps are
// those the two BPE kinds Keel reads use: ByteLevel (GPT-2, Llama 3), and Replace, ByteFallback,
// Fuse, Strip or Metaspace (Llama 2 and SentencePiece-style files). Reading them is
// tokenizer_json.cpp's; a file whose decoder is anything else still tokenizes, and its decode
// fails naming that decoder.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace keel {

struct DecodeStep {
  enum class Kind { byte_level, replace, byte_fallback, fuse, strip, metaspace } kind;
  std::string pattern;      // replace: what is replaced in each token; metaspace: the replacement ("▁")
  std::string content;      // replace: what replaces it; strip: the one character stripped
  size_t strip_start = 0;   // strip: at most this many `content` characters cut from each token's start
  size_t strip_stop = 0;    // strip: ... and from its end
  bool drop_first_replacements = true;  // metaspace: the first token loses its replacements (prepend_scheme not "never")
};

struct TokenDecoder {
  bool present = false;          // false (decoder null): the tokens joined by single spaces
  std::vector<DecodeStep> steps; // a Sequence, flattened
  std::string refusal;           // non-empty: why Keel cannot run this file's decoder (decode throws it)
};

// The text of `tokens` (the vocabulary's strings of some ids, in order) through `decoder`.
// Throws KeelError with decoder.refusal when it has one.
std::string decode_tokens(const TokenDecoder& decoder, std::vector<std::string> tokens);

// `bytes` as UTF-8 with each maximal invalid sequence replaced by U+FFFD, as Rust's
// String::from_utf8_lossy (and Python's errors="replace") do.
std::string utf8_lossy(std::string_view bytes);

}  // namespace keel
