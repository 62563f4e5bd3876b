// Every occurrence of a string replaced by another, left to right without overlaps: the
// tokenizer's normalizer and decoder both replace literal patterns ("▁" and spaces).
#pragma once

#include <string>

namespace keel {

inline void replace_all(std::string& text, const std::string& from, const std::string& to) {
  if (from.empty()) return;  // the reader refuses an empty pattern; nothing would end the loop
  std::string out;
  size_t at = 0;
  for (size_t hit; (hit = text.find(from, at)) != std::string::npos; at = hit + from.size()) out.append(text, at, hit - at) += to;
  if (at == 0) return;  // no occurrence: the text stays as it is
  out.append(text, at, std::string::npos);
  text.swap(out);
}

}  // namespace keel
