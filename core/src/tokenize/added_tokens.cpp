// The added-token trie. A tokenizer may add many tokens (Llama 3 reserves 256 that all begin
// with "<|"), so each position walks the trie once instead of comparing every token.
#include "tokenize/added_tokens.h"

#include <algorithm>

namespace keel {

uint32_t AddedTokenMatcher::child(uint32_t node, unsigned char byte) const {
  const auto& children = nodes_[node].children;
  auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(byte, uint32_t(0)));
  return it != children.end() && it->first == byte ? it->second : 0;
}

void AddedTokenMatcher::add(const std::string& content, uint32_t id) {
  uint32_t node = 0;
  for (unsigned char byte : content) {
    uint32_t next = child(node, byte);
    if (next == 0) {
      next = uint32_t(nodes_.size());
      nodes_.emplace_back();
      auto& children = nodes_[node].children;
      children.insert(std::lower_bound(children.begin(), children.end(), std::make_pair(byte, uint32_t(0))),
                      {byte, next});
    }
    node = next;
  }
  nodes_[node].id = id;
}

std::vector<AddedTokenMatcher::Piece> AddedTokenMatcher::split(std::string_view text) const {
  std::vector<Piece> pieces;
  size_t text_start = 0;
  for (size_t at = 0; at < text.size();) {
    uint32_t node = 0;
    size_t longest = 0;
    int64_t longest_id = -1;
    for (size_t i = at; i < text.size() && (node = child(node, static_cast<unsigned char>(text[i]))) != 0; ++i)
      if (nodes_[node].id >= 0) longest = i + 1 - at, longest_id = nodes_[node].id;
    if (longest_id < 0) {
      ++at;
      continue;
    }
    if (at > text_start) pieces.push_back({text.substr(text_start, at - text_start), false, 0, text_start});
    pieces.push_back({text.substr(at, longest), true, uint32_t(longest_id), at});
    at += longest;
    text_start = at;
  }
  if (text_start < text.size()) pieces.push_back({text.substr(text_start), false, 0, text_start});
  return pieces;
}

}  // namespace keel
