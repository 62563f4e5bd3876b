// The tokenizers library matches its regexes with Oniguruma, whose \s is Unicode's White_Space
// property. PCRE2's \s (with PCRE2_UCP) also takes U+180E MONGOLIAN VOWEL SEPARATOR, through its
// fixed list of horizontal spaces; a scan of every code point found no other difference, and the
// \p{..} classes agree. So a pattern is rewritten before PCRE2 compiles it: \s, \S, [:space:] and
// [:^space:] spelled out to mean what Oniguruma means by them.
#pragma once

#include <string>
#include <string_view>

namespace keel {

// `pattern` with its whitespace classes made Oniguruma's; everything else copied unchanged.
std::string with_oniguruma_whitespace(std::string_view pattern);

}  // namespace keel
