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
  // The input cut into added tokens and the (non-empty) text between them, in order. Time is
  // linear in the input whatever the tokens' lengths.
  std::vector<Piece> split(std::string_view text) const;

 private:
  // An Aho-Corasick automaton over the tokens written backwards: node 0 is the root; children
  // are sorted by byte. Read from the end of the text, the state after byte s names the longest
  // token that starts at s.
  struct Node {
    std::vector<std::pair<unsigned char, uint32_t>> children;
    int64_t id = -1;           // the token ending here (starting here, in the text), or -1
    uint32_t depth = 0;
    uint32_t fail = 0;         // the node of the longest proper suffix that is also in the trie
    uint32_t longest_len = 0;  // the longest token that is a suffix of this node's bytes, 0 if none
    uint32_t longest_id = 0;
  };
  uint32_t child(uint32_t node, unsigned char byte) const;  // 0: none
  uint32_t step(uint32_t node, unsigned char byte) const;   // the automaton's move
  void link() const;  // fills fail and longest_* after adds
  // Built by add(); the links are filled on the first split after an add (tokenizing is
  // single-threaded, hence mutable without a lock).
  mutable std::vector<Node> nodes_{1};
  mutable bool linked_ = true;
};

}  // namespace keel
