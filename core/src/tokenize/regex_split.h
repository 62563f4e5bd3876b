// Pre-tokenizer regexes (the GPT-2 and Llama 3 splits, or a file's own Split pattern) through
// PCRE2. Why PCRE2: the patterns need Unicode property classes (\p{L}, \p{N}) and lookahead,
// which std::regex lacks; PCRE2 has both (PCRE2_UTF | PCRE2_UCP), is a Debian package with no
// Rust behind it, JIT-compiles, and bounds a match's work so a hostile pattern cannot hang us.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace keel {

enum class SplitBehavior {
  isolated,  // matches and the text between them are all pieces
  removed,   // only the text between matches is kept
};

class RegexSplitter {
 public:
  // `origin` ("FILE: pre_tokenizer.pattern.Regex") prefixes every error. Throws KeelError when
  // the pattern does not compile.
  RegexSplitter(const std::string& pattern, std::string origin);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Appends the non-empty pieces of `text` (valid UTF-8, checked by the caller) in order.
  // Empty matches are skipped, as the tokenizers library skips them. Throws KeelError naming
  // `where` when PCRE2 gives up (its match limits).
  void split(std::string_view text, SplitBehavior behavior, const std::string& where,
             std::vector<std::string_view>& pieces) const;

  // `literal` as a pattern that matches exactly it.
  static std::string escape(std::string_view literal);

 private:
  struct Compiled;
  Compiled* compiled_;
  std::string origin_;
};

}  // namespace keel
