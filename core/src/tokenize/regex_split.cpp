// RegexSplitter: PCRE2 compiled once per pattern (JIT when the platform has it), matched with
// PCRE2_NO_UTF_CHECK because the caller has checked the whole document once; without that flag
// PCRE2 would re-check the rest of the subject on every call, quadratic in the document.
// Each search sees a window of the text and runs with PCRE2_PARTIAL_HARD, so PCRE2 says
// "partial" the moment it would need a byte past the window (a greedy run, a lookahead, $ or
// \b at the window's end). A complete match found in a window is the match on the whole text:
// nothing it tried reached the window's end. A partial match, or no match in a window that is
// not the whole rest of the text, tries again on a window twice as large.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenize/regex_split.h"

#include <pcre2.h>

#include "host/errors.h"
#include "tokenize/oniguruma_whitespace.h"

namespace keel {
namespace {

constexpr uint32_t kMatchLimit = 10'000'000;  // backtracking steps per match: far above any sane pattern
constexpr uint32_t kDepthLimit = 100'000;
constexpr uint64_t kBudgetBytesPerDocumentByte = 64;
constexpr uint64_t kBudgetBaseBytes = uint64_t(64) << 20;
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

std::pair<size_t, size_t> RegexSplitter::find(std::string_view text, size_t at, const std::string& where,
                                              RegexWorkBudget& budget) const {
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  constexpr size_t none = std::string_view::npos;
  for (size_t window = RegexWorkBudget::kFreeWindowBytes;; window *= 2) {
    const size_t end = text.size() - at <= window ? text.size() : character_boundary(text, at + window);
    const bool whole_rest = end == text.size();
    if (end - at > RegexWorkBudget::kFreeWindowBytes && !budget.charge(end - at))
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT,
                      failure(where, "read more than the " + std::to_string(budget.total_bytes()) +
                                         " bytes of matching allowed for a document of " + std::to_string(text.size()) +
                                         " bytes (64 per byte plus 64 MiB; it stopped at byte " + std::to_string(at) +
                                         "): a pattern whose matches each read far ahead is quadratic in a long line"));
    const int rc = pcre2_match(compiled_->code, subject, end, at, PCRE2_NO_UTF_CHECK | (whole_rest ? 0 : PCRE2_PARTIAL_HARD),
                               compiled_->match, compiled_->context);
    if (rc == PCRE2_ERROR_NOMATCH && whole_rest) return {none, none};
    if (rc == PCRE2_ERROR_NOMATCH || rc == PCRE2_ERROR_PARTIAL) continue;
    if (rc < 0) throw KeelError(KEEL_ERR_INVALID_ARGUMENT, failure(where, "failed at byte " + std::to_string(at) + ": " + pcre2_message(rc)));
    const PCRE2_SIZE* range = pcre2_get_ovector_pointer(compiled_->match);
    return {range[0], range[1]};
  }
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
