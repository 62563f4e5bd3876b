// The BPE merge loop and byte fallback on tiny vocabularies whose ids are worked out by hand in
// each test's comments; added tokens cut out before the model; a tokenizer.json of each kind
// read from a file. The oracle for real tokenizers is tests/e2e/tokenizer_checks.py.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "host/errors.h"
#include "tokenize/added_tokens.h"
#include "tokenize/bpe_model.h"
#include "tokenize/json_tokenizer.h"
#include "tokenize/tokenizer.h"

namespace {
namespace fs = std::filesystem;
using keel::BpeModel;
using keel::BpeSpec;
using Ids = std::vector<uint32_t>;

Ids encode_word(const BpeModel& model, const std::string& word) {
  Ids ids;
  model.encode_word(word, "test", ids);
  return ids;
}

// a=0 b=1 c=2 ab=3 bc=4 abc=5 aa=6; merges by rank: "b c" (0), "a b" (1), "a bc" (2), "a a" (3).
BpeSpec abc_spec() {
  BpeSpec spec;
  spec.vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}, {"aa", 6}};
  spec.merges = {{"b", "c"}, {"a", "b"}, {"a", "bc"}, {"a", "a"}};
  return spec;
}

TEST(BpeMerge, LowestRankFirstNotLeftmost) {
  BpeModel model(abc_spec());
  // "abc": "b c" (rank 0) beats "a b" (rank 1) → a bc → "a bc" (rank 2) → abc.
  EXPECT_EQ(encode_word(model, "abc"), (Ids{5}));
  // "ab": only "a b" → ab.  "ba": nothing merges.  "abab": a b a b → ab ab (no "ab ab" merge).
  EXPECT_EQ(encode_word(model, "ab"), (Ids{3}));
  EXPECT_EQ(encode_word(model, "ba"), (Ids{1, 0}));
  EXPECT_EQ(encode_word(model, "abab"), (Ids{3, 3}));
  // "abcab": b c first → a bc a b; then a b (rank 1, pos 3) → a bc ab; then a bc → abc ab.
  EXPECT_EQ(encode_word(model, "abcab"), (Ids{5, 3}));
}

TEST(BpeMerge, EqualRanksMergeLeftmostFirst) {
  BpeModel model(abc_spec());
  // "aaa": "a a" at 0 and at 1 tie; the leftmost merges → aa a.  "aaaa" → aa aa.
  EXPECT_EQ(encode_word(model, "aaa"), (Ids{6, 0}));
  EXPECT_EQ(encode_word(model, "aaaa"), (Ids{6, 6}));
  // "aab": "a b" (rank 1) beats "a a" (rank 3): a ab.
  EXPECT_EQ(encode_word(model, "aab"), (Ids{0, 3}));
}

TEST(BpeMerge, LongWordMatchesTheSimpleLoop) {
  // The priority queue against the obvious quadratic loop, on a word long enough to matter.
  BpeSpec spec = abc_spec();
  BpeModel model(spec);
  std::string word;
  for (int i = 0; i < 3000; ++i) word += "abcaab"[(i * 7 + i / 5) % 6];
  Ids simple;
  for (char c : word) simple.push_back(spec.vocab.at(std::string(1, c)));
  for (;;) {
    size_t best = simple.size();
    size_t best_rank = spec.merges.size();
    for (size_t i = 0; i + 1 < simple.size(); ++i)
      for (size_t r = 0; r < best_rank; ++r)
        if (spec.vocab.at(spec.merges[r].first) == simple[i] && spec.vocab.at(spec.merges[r].second) == simple[i + 1])
          best = i, best_rank = r;
    if (best == simple.size()) break;
    const auto& m = spec.merges[best_rank];
    simple[best] = spec.vocab.at(m.first + m.second);
    simple.erase(simple.begin() + long(best) + 1);
  }
  EXPECT_EQ(encode_word(model, word), simple);
}

TEST(BpeMerge, IgnoreMergesTakesAWholeWordFromTheVocabulary) {
  // With merges only "a b" → ab, "abc" would be ab c; ignore_merges finds "abc" itself.
  BpeSpec spec;
  spec.vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"abc", 4}};
  spec.merges = {{"a", "b"}};
  EXPECT_EQ(encode_word(BpeModel(spec), "abc"), (Ids{3, 2}));
  spec.ignore_merges = true;
  EXPECT_EQ(encode_word(BpeModel(spec), "abc"), (Ids{4}));
}

// <0x00>..<0xFF> at ids 0..255, then ▁=256 h=257 i=258 ▁h=259 ▁hi=260 <unk>=261.
BpeSpec fallback_spec() {
  BpeSpec spec;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    spec.vocab[name] = uint32_t(b);
  }
  spec.vocab.insert({{"\xE2\x96\x81", 256}, {"h", 257}, {"i", 258}, {"\xE2\x96\x81h", 259}, {"\xE2\x96\x81hi", 260}, {"<unk>", 261}});
  spec.merges = {{"\xE2\x96\x81", "h"}, {"\xE2\x96\x81h", "i"}};
  spec.byte_fallback = true;
  spec.unk_id = 261;
  return spec;
}

TEST(BpeByteFallback, UnknownCharactersBecomeTheirUtf8Bytes) {
  BpeModel model(fallback_spec());
  // "▁hi" merges whole; "é" (C3 A9) is not in the vocabulary → <0xC3> <0xA9>.
  EXPECT_EQ(encode_word(model, "\xE2\x96\x81hi\xC3\xA9"), (Ids{260, 0xC3, 0xA9}));
  // "€" (E2 82 AC) between two known characters: the merge loop still sees ▁ h around it.
  EXPECT_EQ(encode_word(model, "\xE2\x96\x81\xE2\x82\xACh"), (Ids{256, 0xE2, 0x82, 0xAC, 257}));
  // A 4-byte character: 🚀 = F0 9F 9A 80.
  EXPECT_EQ(encode_word(model, "\xF0\x9F\x9A\x80"), (Ids{0xF0, 0x9F, 0x9A, 0x80}));
}

TEST(BpeByteFallback, WithoutFallbackUnknownsAreUnkFusedOrNot) {
  BpeSpec spec = fallback_spec();
  spec.byte_fallback = false;
  EXPECT_EQ(encode_word(BpeModel(spec), "h\xC3\xA9\xC3\xA9i"), (Ids{257, 261, 261, 258}));
  spec.fuse_unk = true;
  EXPECT_EQ(encode_word(BpeModel(spec), "h\xC3\xA9\xC3\xA9i"), (Ids{257, 261, 258}));
  spec.unk_id.reset();
  try {
    encode_word(BpeModel(spec), "h\xC3\xA9");
    FAIL() << "no error for a character outside the vocabulary with no unk";
  } catch (const keel::KeelError& e) {
    EXPECT_NE(std::string(e.what()).find("test: the character U+00E9 is not in the tokenizer's vocabulary"),
              std::string::npos) << e.what();
  }
}

TEST(AddedTokens, LeftmostThenLongest) {
  keel::AddedTokenMatcher added;
  added.add("<s>", 1);
  added.add("<s>x", 2);
  added.add("s>", 3);
  auto pieces = added.split("a<s>x<s>b<");
  ASSERT_EQ(pieces.size(), 4u);  // "a", "<s>x", "<s>", "b<"
  EXPECT_EQ(pieces[0].text, "a");
  EXPECT_TRUE(pieces[1].is_token && pieces[1].id == 2);  // "<s>x" beats "<s>"; "s>" starts later
  EXPECT_TRUE(pieces[2].is_token && pieces[2].id == 1);
  EXPECT_EQ(pieces[3].text, "b<");
  EXPECT_EQ(pieces[3].offset, 8u);
  EXPECT_FALSE(pieces[3].is_token);
}

struct TempFile {
  fs::path path = fs::temp_directory_path() / ("keel-tokenize-test-" + std::to_string(::getpid()) + ".json");
  explicit TempFile(const std::string& text) { std::ofstream(path) << text; }
  ~TempFile() { fs::remove(path); }
};

Ids encode(const keel::Tokenizer& tokenizer, const std::string& text) {
  Ids ids;
  tokenizer.encode(text, "doc", ids);
  return ids;
}

TEST(TokenizerJson, ByteLevelMapsBytesAndSplitsWithGpt2sPattern) {
  // Ġ is the space byte, Ċ the newline; "Ġ a" merges to Ġa. GPT-2's pattern makes " a", " a",
  // "\n" of " a a\n", so the ids are Ġa Ġa Ċ; "é" is C3 A9 → Ã (C3) and © (A9).
  TempFile file(R"({"added_tokens": [{"id": 9, "content": "<|eot|>", "special": true, "normalized": false}],
    "normalizer": null, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false},
    "model": {"type": "BPE", "vocab": {"a": 0, "Ġ": 1, "Ċ": 2, "Ġa": 3, "Ã": 4, "©": 5},
              "merges": [["Ġ", "a"]]}})");
  auto tokenizer = keel::open_tokenizer(file.path.string());
  EXPECT_EQ(tokenizer->vocab_size(), 10);
  EXPECT_EQ(encode(*tokenizer, " a a\n"), (Ids{3, 3, 2}));
  EXPECT_EQ(encode(*tokenizer, "a<|eot|> a\xC3\xA9"), (Ids{0, 9, 3, 4, 5}));
}

TEST(TokenizerJson, SentencePieceStylePrependsAfterEverySpecialToken) {
  // Llama 2's normalizer: each stretch between added tokens gets "▁" in front and "▁" for " ".
  TempFile file(R"({"added_tokens": [{"id": 1, "content": "<s>", "special": true, "normalized": false}],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                   {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
    "pre_tokenizer": null,
    "model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>",
              "vocab": {"<unk>": 0, "<s>": 1, "<0xC3>": 2, "<0xA9>": 3, "▁": 4, "h": 5, "i": 6, "▁h": 7, "▁hi": 8},
              "merges": ["▁ h", "▁h i"]}})");
  auto tokenizer = keel::open_tokenizer(file.path.string());
  // "hi hi" → "▁hi▁hi" → ▁hi ▁hi; "<s>hi" → <s>, then "hi" → "▁hi"; "é" → <0xC3> <0xA9>.
  EXPECT_EQ(encode(*tokenizer, "hi hi"), (Ids{8, 8}));
  EXPECT_EQ(encode(*tokenizer, "<s>hi\xC3\xA9"), (Ids{1, 8, 2, 3}));
  try {
    encode(*tokenizer, "h\xFFi");
    FAIL() << "invalid UTF-8 accepted";
  } catch (const keel::KeelError& e) {
    EXPECT_NE(std::string(e.what()).find("doc: byte offset 1: not valid UTF-8"), std::string::npos) << e.what();
  }
}

TEST(TokenizerJson, Utf8Check) {
  EXPECT_EQ(keel::find_invalid_utf8("plain \xC3\xA9 \xF0\x9F\x9A\x80"), std::string_view::npos);
  EXPECT_EQ(keel::find_invalid_utf8("ab\xC0\xAF"), 2u);           // overlong "/"
  EXPECT_EQ(keel::find_invalid_utf8("\xED\xA0\x80"), 0u);         // a surrogate
  EXPECT_EQ(keel::find_invalid_utf8("abc\xE2\x82"), 3u);          // cut short
  EXPECT_EQ(keel::find_invalid_utf8("\xF4\x90\x80\x80"), 0u);     // past U+10FFFF
}

}  // namespace
