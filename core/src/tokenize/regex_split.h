// Pre-tokenizer regexes (the GPT-2 and Llama 3 splits, or a file's own Split pattern) through
// PCRE2. Why PCRE2: the patterns need Unicode property classes (\p{L}, \p{N}) and lookahead,
// which std::regex lacks; PCRE2 has both (PCRE2_UTF | PCRE2_UCP), is a Debian package with no
// Rust behind it, JIT-compiles, and bounds a match's work so a hostile pattern cannot hang us.
// A match's work is bounded twice: PCRE2's own limits catch backtracking that explodes inside one
// match, and a RegexWorkBudget per document catches patterns whose every match reads far ahead
// (a lookahead such as .(?=.*$) on one long line is quadratic in the line, each match cheap).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace keel {

enum class SplitBehavior {
  isolated,  // matches and the text between them are all pieces
  removed,   // only the text between matches is kept
};

// How many bytes of text one document's matches may read past the first kFreeWindowBytes of
// each match attempt. Searching looks at a window of text from where it starts; a match that
// needs more than the window sees is tried again from its start on a window twice as large, and
// every window past the free one is charged here. Ordinary pieces (words, runs of spaces) fit the free window;
// a long run of one class is charged about twice its length once. The free window is small
// because its work goes uncounted: a pattern reading to the end of every 200-byte line costs
// at most 256 steps a byte.
class RegexWorkBudget {
 public:
  static constexpr size_t kFreeWindowBytes = 256;
  explicit RegexWorkBudget(uint64_t bytes) : total_bytes_(bytes), left_bytes_(bytes) {}
  // 16 times the document's size plus 16 MiB: linear in the document, whatever the pattern.
  static RegexWorkBudget for_document(size_t document_bytes);

  bool charge(uint64_t bytes);  // false, charging nothing, when fewer than `bytes` are left
  uint64_t total_bytes() const { return total_bytes_; }

 private:
  uint64_t total_bytes_, left_bytes_;
};

class RegexSplitter {
 public:
  // `origin` ("FILE: pre_tokenizer.pattern.Regex") prefixes every error. Throws KeelError when
  // the pattern does not compile. \s and \S mean Oniguruma's (oniguruma_whitespace.h).
  RegexSplitter(const std::string& pattern, std::string origin);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Calls `piece` with each non-empty piece of `text` (valid UTF-8, checked by the caller) in
  // order; the views point into `text`. Empty matches are skipped, as the tokenizers library
  // skips them. Throws KeelError naming `where` and the pattern when PCRE2 gives up (its match
  // limits) or the matches spend more than `budget` allows.
  void split(std::string_view text, SplitBehavior behavior, const std::string& where, RegexWorkBudget& budget,
             const std::function<void(std::string_view)>& piece) const;

  // `literal` as a pattern that matches exactly it.
  static std::string escape(std::string_view literal);

 private:
  struct Compiled;
  // The start and end of the first match at or after `at`, or {npos, npos}.
  std::pair<size_t, size_t> find(std::string_view text, size_t at, const std::string& where,
                                 RegexWorkBudget& budget) const;
  // pcre2_match on text[..end) from `at`, with PCRE2_PARTIAL_HARD when `end` is not the text's end.
  int match(std::string_view text, size_t at, size_t end, uint32_t options) const;
  std::string failure(const std::string& where, const std::string& why) const;

  Compiled* compiled_;
  std::string origin_;
  std::string pattern_;
};

}  // namespace keel
