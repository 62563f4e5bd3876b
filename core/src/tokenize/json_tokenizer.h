// A tokenizer.json as a pipeline Keel runs: split out added tokens, normalize each stretch
// between them, pre-tokenize it into words, and turn each word into ids with the BPE model.
// tokenizer_json.cpp builds it from a file (and checks it); json_tokenizer.cpp runs it.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tokenize/added_tokens.h"
#include "tokenize/bpe_model.h"
#include "tokenize/regex_split.h"
#include "tokenize/token_decoder.h"
#include "tokenize/tokenizer.h"
#include "tokenize/tokenizer_file_limits.h"

namespace keel {

struct NormalizeStep {
  enum class Kind { prepend, replace } kind;
  std::string text;         // prepend: what goes in front of a non-empty stretch; replace: what is replaced
  std::string replacement;  // replace: what replaces each occurrence
};

struct PreTokenizeStep {
  enum class Kind { split, byte_level, metaspace } kind;
  std::shared_ptr<RegexSplitter> regex;  // split, and byte_level with use_regex (GPT-2's pattern)
  SplitBehavior behavior = SplitBehavior::isolated;
  bool add_prefix_space = false;         // byte_level: a space before a word that has none
  std::string replacement;               // metaspace: what spaces become ("▁")
  enum class Prepend { always, first, never } prepend = Prepend::always;  // metaspace
  bool metaspace_split = true;           // metaspace: a word starts at each replacement
};

struct TokenizerPipeline {
  std::string file;
  std::string kind;                      // "byte-level BPE", "SentencePiece-style BPE", "BPE"
  AddedTokenMatcher added;
  std::vector<NormalizeStep> normalizers;
  std::vector<PreTokenizeStep> pre_tokenizers;
  bool byte_level = false;               // words reach the model through GPT-2's byte-to-unicode table
  std::unique_ptr<BpeModel> model;
  int64_t vocab_size = 0;                // one past the largest id, added tokens included
  // For decoding: every id's token (an added token's content over the model's), its reverse,
  // and which ids are special added tokens.
  std::unordered_map<uint32_t, std::string> token_by_id;
  std::unordered_map<std::string, uint32_t> id_by_token;
  std::unordered_set<uint32_t> special_ids;
  TokenDecoder decoder;
};

// Reads and checks a tokenizer.json (tokenizer_json.cpp); a file past `limits` is refused
// before it is parsed, and running out of memory is an error naming the file, not an abort.
TokenizerPipeline read_tokenizer_json(const std::string& path, const TokenizerFileLimits& limits = {});

std::unique_ptr<Tokenizer> make_pipeline_tokenizer(TokenizerPipeline pipeline);

// GPT-2's table: byte b stands for the character byte_level_char(b), given as UTF-8.
const std::string& byte_level_char(unsigned char b);

// The pattern ByteLevel's use_regex splits with (GPT-2's).
extern const char* const kGpt2SplitPattern;

}  // namespace keel
