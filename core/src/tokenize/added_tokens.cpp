// The added-token matcher. A tokenizer may add many tokens (Llama 3 reserves 256 that all begin
// with "<|"), and a hostile one long ones (4 KiB): walking a trie from each position costs up to
// a token's length there, 4096 times the text. Instead one Aho-Corasick pass over the text from
// its end gives, for every position, the longest token starting there, in time linear in the
// text; a forward pass then takes the leftmost of those and skips past it, as the library does.
#include "tokenize/added_tokens.h"

#include <algorithm>
#include <deque>

namespace keel {

uint32_t AddedTokenMatcher::child(uint32_t node, unsigned char byte) const {
  const auto& children = nodes_[node].children;
  auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(byte, uint32_t(0)));
  return it != children.end() && it->first == byte ? it->second : 0;
}

uint32_t AddedTokenMatcher::step(uint32_t node, unsigned char byte) const {
  for (;;) {
    if (const uint32_t next = child(node, byte)) return next;
    if (node == 0) return 0;
    node = nodes_[node].fail;
  }
}

void AddedTokenMatcher::add(const std::string& content, uint32_t id) {
  uint32_t node = 0;
  for (auto it = content.rbegin(); it != content.rend(); ++it) {
    const unsigned char byte = static_cast<unsigned char>(*it);
    uint32_t next = child(node, byte);
    if (next == 0) {
      next = uint32_t(nodes_.size());
      nodes_.emplace_back();
      nodes_.back().depth = nodes_[node].depth + 1;
      auto& children = nodes_[node].children;
      children.insert(std::lower_bound(children.begin(), children.end(), std::make_pair(byte, uint32_t(0))),
                      {byte, next});
    }
    node = next;
  }
  nodes_[node].id = id;
  linked_ = false;
}

// Breadth first, so a node's failure link and its tokens are ready before its children's.
void AddedTokenMatcher::link() const {
  std::deque<uint32_t> queue;
  for (const auto& [byte, next] : nodes_[0].children) nodes_[next].fail = 0, queue.push_back(next);
  while (!queue.empty()) {
    const uint32_t node = queue.front();
    queue.pop_front();
    Node& n = nodes_[node];
    if (n.id >= 0) n.longest_len = n.depth, n.longest_id = uint32_t(n.id);
    else n.longest_len = nodes_[n.fail].longest_len, n.longest_id = nodes_[n.fail].longest_id;
    for (const auto& [byte, next] : n.children) {
      nodes_[next].fail = node == 0 ? 0 : step(n.fail, byte);
      queue.push_back(next);
    }
  }
  linked_ = true;
}

std::vector<AddedTokenMatcher::Piece> AddedTokenMatcher::split(std::string_view text) const {
  std::vector<Piece> pieces;
  if (empty() || text.empty()) {
    if (!text.empty()) pieces.push_back({text, false, 0, 0});
    return pieces;
  }
  if (!linked_) link();
  struct Start {
    size_t at;
    uint32_t length, id;
  };
  std::vector<Start> starts;  // from the end of the text backwards
  uint32_t state = 0;
  for (size_t at = text.size(); at-- > 0;) {
    state = step(state, static_cast<unsigned char>(text[at]));
    if (nodes_[state].longest_len) starts.push_back({at, nodes_[state].longest_len, nodes_[state].longest_id});
  }
  size_t text_start = 0;
  for (auto it = starts.rbegin(); it != starts.rend(); ++it) {
    if (it->at < text_start) continue;  // inside the token taken before
    if (it->at > text_start) pieces.push_back({text.substr(text_start, it->at - text_start), false, 0, text_start});
    pieces.push_back({text.substr(it->at, it->length), true, it->id, it->at});
    text_start = it->at + it->length;
  }
  if (text_start < text.size()) pieces.push_back({text.substr(text_start), false, 0, text_start});
  return pieces;
}

}  // namespace keel
