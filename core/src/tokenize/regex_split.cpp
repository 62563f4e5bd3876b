// RegexSplitter: PCRE2 compiled once per pattern (JIT when the platform has it), matched with
// PCRE2_NO_UTF_CHECK because the caller has checked the whole document once; without that flag
// PCRE2 would re-check the rest of the subject on every call, quadratic in the document.
// Each search sees a window of the text and runs with PCRE2_PARTIAL_HARD, so PCRE2 says
// "partial" the moment it would need a byte past the window (a greedy run, a lookahead, $ or
// \b at the window's end). A complete match found in a window is the match on the whole text:
// nothing it tried reached the window's end; and no match at all means no start in the window
// can match. A partial match is tried again on larger windows (find()).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenize/regex_split.h"

#include <pcre2.h>

#include <algorithm>

#include "host/errors.h"
#include "tokenize/oniguruma_whitespace.h"

namespace keel {
namespace {

constexpr uint32_t kMatchLimit = 10'000'000;  // backtracking steps per match: far above any sane pattern
constexpr uint32_t kDepthLimit = 100'000;
constexpr uint64_t kBudgetBytesPerDocumentByte = 16;
constexpr uint64_t kBudgetBaseBytes = uint64_t(16) << 20;
constexpr size_t kPatternShownBytes = 80;

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(code, buffer, sizeof(buffer)) < 0) return "PCRE2 error " + std::to_string(code);
  return reinterpret_cast<const char*>(buffer);
}

pcre2_code* compile(const std::string& pattern, int& error, PCRE2_SIZE& offset) {
  return pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &error,
                       &offset, nullptr);
}

// The first character boundary at or after `at`.
size_t character_boundary(std::string_view text, size_t at) {
  while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
  return at;
}

}  // namespace

RegexWorkBudget RegexWorkBudget::for_document(size_t document_bytes) {
  return RegexWorkBudget(kBudgetBaseBytes + kBudgetBytesPerDocumentByte * uint64_t(document_bytes));
}

bool RegexWorkBudget::charge(uint64_t bytes) {
  if (bytes > left_bytes_) return false;
  left_bytes_ -= bytes;
  return true;
}

struct RegexSplitter::Compiled {
  pcre2_code* code = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_match_data* match = nullptr;
  ~Compiled() {
    pcre2_match_data_free(match);
    pcre2_match_context_free(context);
    pcre2_code_free(code);
  }
};

RegexSplitter::RegexSplitter(const std::string& pattern, std::string origin)
    : compiled_(new Compiled), origin_(std::move(origin)), pattern_(pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // The pattern as written compiles first, so an error's offset is one the file's author can find.
  pcre2_code* as_written = compile(pattern, error, offset);
  if (as_written) compiled_->code = compile(with_oniguruma_whitespace(pattern), error, offset);
  pcre2_code_free(as_written);
  if (!compiled_->code) {
    delete compiled_;
    throw KeelError(KEEL_ERR_INVALID_CONFIG, origin_ + ": the regex does not compile (PCRE2, at pattern offset " +
                                                 std::to_string(offset) + "): " + pcre2_message(error));
  }
  // No JIT on this platform: the interpreter matches.
  pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE | PCRE2_JIT_PARTIAL_HARD);
  compiled_->context = pcre2_match_context_create(nullptr);
  compiled_->match = pcre2_match_data_create_from_pattern(compiled_->code, nullptr);
  if (!compiled_->context || !compiled_->match) {
    delete compiled_;
    throw KeelError(KEEL_ERR_OUT_OF_MEMORY, origin_ + ": PCRE2 could not allocate its match data");
  }
  pcre2_set_match_limit(compiled_->context, kMatchLimit);
  pcre2_set_depth_limit(compiled_->context, kDepthLimit);
}

RegexSplitter::~RegexSplitter() { delete compiled_; }

std::string RegexSplitter::failure(const std::string& where, const std::string& why) const {
  const std::string shown = pattern_.size() > kPatternShownBytes ? pattern_.substr(0, kPatternShownBytes) + "..." : pattern_;
  return where + ": the pre-tokenizer regex " + origin_ + " (" + shown + ") " + why;
}

int RegexSplitter::match(std::string_view text, size_t at, size_t end, uint32_t options) const {
  if (end < text.size()) options |= PCRE2_PARTIAL_HARD;
  return pcre2_match(compiled_->code, reinterpret_cast<PCRE2_SPTR>(text.data()), end, at, PCRE2_NO_UTF_CHECK | options,
                     compiled_->match, compiled_->context);
}

// The first match at or after `at`. Searching (PCRE2 trying each start position in turn) only
// ever sees the free window, so its uncounted work is bounded by the window at each start. A
// start whose attempt needs more text is then tried alone (anchored) on windows twice as large,
// each charged to the budget; when nothing matches there, the search goes on from the next
// character. Searching a large window instead would try every start in it, each reading up to
// the window's end: quadratic work for a linear charge.
std::pair<size_t, size_t> RegexSplitter::find(std::string_view text, size_t at, const std::string& where,
                                              RegexWorkBudget& budget) const {
  constexpr size_t none = std::string_view::npos;
  auto window_end = [&](size_t from, size_t window) {
    return text.size() - from <= window ? text.size() : character_boundary(text, from + window);
  };
  auto found = [&]() -> std::pair<size_t, size_t> {
    const PCRE2_SIZE* range = pcre2_get_ovector_pointer(compiled_->match);
    return {range[0], range[1]};
  };
  auto fail = [&](int rc, size_t where_at) {
    throw KeelError(KEEL_ERR_INVALID_ARGUMENT, failure(where, "failed at byte " + std::to_string(where_at) + ": " + pcre2_message(rc)));
  };
  while (at <= text.size()) {
    const size_t end = window_end(at, RegexWorkBudget::kFreeWindowBytes);
    int rc = match(text, at, end, 0);
    if (rc >= 0) return found();
    if (rc == PCRE2_ERROR_NOMATCH) {  // no start before `end` matches, nor needs more text
      if (end == text.size()) return {none, none};
      at = end;
      continue;
    }
    if (rc != PCRE2_ERROR_PARTIAL) fail(rc, at);
    const size_t start = std::max<size_t>(at, pcre2_get_startchar(compiled_->match));
    for (size_t window = 2 * RegexWorkBudget::kFreeWindowBytes;; window *= 2) {
      const size_t anchored_end = window_end(start, window);
      if (!budget.charge(anchored_end - start))
        throw KeelError(KEEL_ERR_INVALID_ARGUMENT,
                        failure(where, "read more than the " + std::to_string(budget.total_bytes()) +
                                           " bytes of matching allowed for a document of " + std::to_string(text.size()) +
                                           " bytes (16 per byte plus 16 MiB; it stopped at byte " + std::to_string(start) +
                                           "): a pattern whose matches each read far ahead is quadratic in a long line"));
      rc = match(text, start, anchored_end, PCRE2_ANCHORED);
      if (rc >= 0) return found();
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc != PCRE2_ERROR_PARTIAL) fail(rc, start);
    }
    at = character_boundary(text, start + 1);
  }
  return {none, none};
}

void RegexSplitter::split(std::string_view text, SplitBehavior behavior, const std::string& where, RegexWorkBudget& budget,
                          const std::function<void(std::string_view)>& piece) const {
  size_t gap_start = 0, at = 0;
  while (at <= text.size()) {
    const auto [start, end] = find(text, at, where, budget);
    if (start == std::string_view::npos) break;
    if (end == start) {  // an empty match: step over one character
      at = character_boundary(text, start + 1);
      continue;
    }
    if (start > gap_start) piece(text.substr(gap_start, start - gap_start));
    if (behavior == SplitBehavior::isolated) piece(text.substr(start, end - start));
    gap_start = at = end;
  }
  if (gap_start < text.size()) piece(text.substr(gap_start));
}

std::string RegexSplitter::escape(std::string_view literal) {
  std::string pattern;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}-/#").find(c) != std::string_view::npos) pattern += '\\';
    pattern += c;
  }
  return pattern;
}

}  // namespace keel
