// RegexSplitter: PCRE2 compiled once per pattern (JIT when the platform has it), matched with
// PCRE2_NO_UTF_CHECK because the caller has checked the whole document once; without that flag
// PCRE2 would re-check the rest of the subject on every call, quadratic in the document.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenize/regex_split.h"

#include <pcre2.h>

#include "host/errors.h"

namespace keel {
namespace {

constexpr uint32_t kMatchLimit = 10'000'000;  // backtracking steps per match: far above any sane pattern
constexpr uint32_t kDepthLimit = 100'000;

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(code, buffer, sizeof(buffer)) < 0) return "PCRE2 error " + std::to_string(code);
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

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
    : compiled_(new Compiled), origin_(std::move(origin)) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                  PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (!compiled_->code) {
    delete compiled_;
    throw KeelError(KEEL_ERR_INVALID_CONFIG, origin_ + ": the regex does not compile (PCRE2, at pattern offset " +
                                                 std::to_string(offset) + "): " + pcre2_message(error));
  }
  pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);  // no JIT on this platform: the interpreter matches
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

void RegexSplitter::split(std::string_view text, SplitBehavior behavior, const std::string& where,
                          std::vector<std::string_view>& pieces) const {
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t gap_start = 0, at = 0;
  while (at <= text.size()) {
    const int rc = pcre2_match(compiled_->code, subject, text.size(), at, PCRE2_NO_UTF_CHECK, compiled_->match,
                               compiled_->context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0)
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, where + ": the pre-tokenizer regex " + origin_ + " failed at byte " +
                                                     std::to_string(at) + ": " + pcre2_message(rc));
    const PCRE2_SIZE* range = pcre2_get_ovector_pointer(compiled_->match);
    const size_t start = range[0], end = range[1];
    if (end == start) {  // an empty match: step over one character
      at = start + 1;
      while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
      continue;
    }
    if (start > gap_start) pieces.push_back(text.substr(gap_start, start - gap_start));
    if (behavior == SplitBehavior::isolated) pieces.push_back(text.substr(start, end - start));
    gap_start = at = end;
  }
  if (gap_start < text.size()) pieces.push_back(text.substr(gap_start));
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
