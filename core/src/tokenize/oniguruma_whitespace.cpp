// Rewrites a pattern's whitespace classes (oniguruma_whitespace.h). A small scanner tells a
// class ([...]) from the rest, skips \Q...\E quoting and takes each escape as a unit, so a \s
// that is really "\\" followed by "s" is left alone.
#include "tokenize/oniguruma_whitespace.h"

namespace keel {
namespace {

// Unicode's White_Space property, as the items of a character class.
constexpr std::string_view kWhiteSpaceItems =
    R"(\x{9}-\x{D}\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
// PCRE2's \S lacks only U+180E of Oniguruma's.
constexpr std::string_view kNotWhiteSpaceItems = R"(\S\x{180E})";

// Copies \Q...\E (or \Q to the end) starting at `at`; returns where the copy stopped.
size_t copy_quoted(std::string_view pattern, size_t at, std::string& out) {
  const size_t end = pattern.find("\\E", at + 2);
  const size_t stop = end == std::string_view::npos ? pattern.size() : end + 2;
  out.append(pattern.substr(at, stop - at));
  return stop;
}

}  // namespace

std::string with_oniguruma_whitespace(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size();) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      if (e == 'Q') {
        i = copy_quoted(pattern, i, out);
      } else if (e == 's') {
        out += in_class ? std::string(kWhiteSpaceItems) : "[" + std::string(kWhiteSpaceItems) + "]";
        i += 2;
      } else if (e == 'S') {
        out += in_class ? std::string(kNotWhiteSpaceItems) : "[" + std::string(kNotWhiteSpaceItems) + "]";
        i += 2;
      } else {
        const size_t n = (e == 'c' && i + 2 < pattern.size()) ? 3 : 2;  // \cX takes X whatever it is
        out.append(pattern.substr(i, n));
        i += n;
      }
      continue;
    }
    if (!in_class) {
      out += c;
      ++i;
      if (c != '[') continue;
      in_class = true;
      if (i < pattern.size() && pattern[i] == '^') out += pattern[i++];
      if (i < pattern.size() && pattern[i] == ']') out += pattern[i++];  // a leading ] is literal
      continue;
    }
    if (pattern.substr(i, 9) == "[:space:]") {
      out += kWhiteSpaceItems;
      i += 9;
    } else if (pattern.substr(i, 10) == "[:^space:]") {
      out += kNotWhiteSpaceItems;
      i += 10;
    } else if (c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      const size_t end = pattern.find(":]", i + 2);
      const size_t stop = end == std::string_view::npos ? i + 1 : end + 2;
      out.append(pattern.substr(i, stop - i));
      i = stop;
    } else {
      if (c == ']') in_class = false;
      out += c;
      ++i;
    }
  }
  return out;
}

}  // namespace keel
