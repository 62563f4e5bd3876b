// Added (special) tokens, split out of the text before the model sees it, as the tokenizers
// library does in the common case (no lstrip, rstrip or single_word): at each point the
// leftmost match, and of matches starting there the longest.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace keel {

class AddedTokenMatcher {
 public:
  void add(const std::string& content, uint32_t id);  // content is non-empty
  bool empty() const { return nodes_.size() == 1; }

  struct Piece {
    std::string_view text;  // a stretch of the input
    bool is_token;          // true: exactly one added token, whose id is `id`
    uint32_t id;
    size_t offset;          // where `text` starts in the input
  };
  // The input cut into added tokens and the (non-empty) text between them, in order.
  std::vector<Piece> split(std::string_view text) const;

 private:
  // A byte trie: node 0 is the root; children are sorted by byte.
  struct Node {
    std::vector<std::pair<unsigned char, uint32_t>> children;
    int64_t id = -1;  // the token ending here, or -1
  };
  uint32_t child(uint32_t node, unsigned char byte) const;  // 0: none
  std::vector<Node> nodes_{1};
};

}  // namespace keel
