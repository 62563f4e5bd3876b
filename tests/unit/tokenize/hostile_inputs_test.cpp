// Tokenizer files and documents built to cost time or memory (issue 38): a regex whose every
// match reads to the end of a long line, a 4 KiB added token, files past the reader's counts;
// and the pre-tokenizer's window edges, where a piece must come out as if the whole text were
// seen. Expected pieces are worked out by hand in each test (the oracle run against the
// tokenizers library is tests/e2e/tokenizer_checks.py's `edges`).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "host/errors.h"
#include "tokenize/added_tokens.h"
#include "tokenize/json_tokenizer.h"
#include "tokenize/regex_split.h"
#include "tokenize/tokenizer.h"

namespace {
namespace fs = std::filesystem;
using keel::RegexSplitter;
using keel::RegexWorkBudget;
using keel::SplitBehavior;
using Pieces = std::vector<std::string>;

Pieces split(const RegexSplitter& regex, const std::string& text, RegexWorkBudget budget = RegexWorkBudget::for_document(0)) {
  Pieces pieces;
  regex.split(text, SplitBehavior::isolated, "doc.txt", budget, [&](std::string_view p) { pieces.emplace_back(p); });
  return pieces;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const keel::KeelError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(RegexSplit, MongolianVowelSeparatorIsNotWhitespace) {
  // Oniguruma's \s (the tokenizers library's) is Unicode White_Space, without U+180E; PCRE2's
  // has it. tokenizers splits "a\u180Eb \u2000c\u00A0d" by \s+ into: a\u180Eb, " \u2000", c, \u00A0, d.
  const std::string text = "a\xE1\xA0\x8E" "b \xE2\x80\x80" "c\xC2\xA0" "d";
  const Pieces want = {"a\xE1\xA0\x8E" "b", " \xE2\x80\x80", "c", "\xC2\xA0", "d"};
  for (const char* pattern : {R"(\s+)", R"(\S+)", R"([\s]+)", R"([^\s]+)", R"([[:space:]]+)", R"([^\S]+)"})
    EXPECT_EQ(split(RegexSplitter(pattern, "test"), text), want) << pattern;
  // \p{Cf} takes U+180E in both; an escaped backslash before "s" is no class.
  EXPECT_EQ(split(RegexSplitter(R"(\p{Cf}+)", "test"), text), (Pieces{"a", "\xE1\xA0\x8E", "b \xE2\x80\x80" "c\xC2\xA0" "d"}));
  EXPECT_EQ(split(RegexSplitter(R"(\\s)", "test"), "a\\sb"), (Pieces{"a", "\\s", "b"}));
}

TEST(RegexSplit, PiecesAcrossTheWindowAreWhole) {
  // 10,000 spaces between a and b: \s+(?!\S) takes all but the last space, \s+ the last (as
  // GPT-2's pattern does), though the first window holds 256 bytes.
  const RegexSplitter spaces(R"(\s+(?!\S)|\s+)", "test");
  EXPECT_EQ(split(spaces, "a" + std::string(10000, ' ') + "b"),
            (Pieces{"a", std::string(9999, ' '), " ", "b"}));
  // x(?!y) with the x at a window's last byte and y just past it: no match.
  for (size_t before : {255, 4095}) {
    const std::string text = std::string(before, 'b') + "xy";
    EXPECT_EQ(split(RegexSplitter("x(?!y)", "test"), text), (Pieces{text}));
  }
  // A word of 20,000 letters is one piece; a match far from the start is found.
  EXPECT_EQ(split(RegexSplitter(R"(\p{L}+)", "test"), std::string(20000, 'q') + " "),
            (Pieces{std::string(20000, 'q'), " "}));
  EXPECT_EQ(split(RegexSplitter("z$", "test"), std::string(30000, '.') + "z"), (Pieces{std::string(30000, '.'), "z"}));
}

TEST(RegexSplit, LookaheadToTheEndOfALongLineRunsOutOfBudget) {
  // .(?=.*$): every match reads to the end of the line, n²/2 bytes in all (28 s at 160k before).
  const RegexSplitter regex(".(?=.*$)", "tokenizer.json: pre_tokenizer.pattern.Regex");
  const std::string line(160'000, 'w');
  const std::string message = error_of([&] { split(regex, line, RegexWorkBudget::for_document(line.size())); });
  EXPECT_NE(message.find("doc.txt: the pre-tokenizer regex tokenizer.json: pre_tokenizer.pattern.Regex (.(?=.*$)) read "
                         "more than the 19337216 bytes of matching allowed for a document of 160000 bytes"),
            std::string::npos) << message;
  // A short line is cheap and splits into characters.
  EXPECT_EQ(split(regex, "abc"), (Pieces{"a", "b", "c"}));
}

TEST(RegexSplit, BudgetCountsBytesPastTheFreeWindow) {
  // One 20,000-letter word: windows of 512 bytes to 16 KiB are charged, then the rest, 20,001.
  const RegexSplitter letters(R"(\p{L}+)", "test");
  const std::string word = std::string(20000, 'q') + " ";
  const uint64_t charged = 512 + 1024 + 2048 + 4096 + 8192 + 16384 + 20001;
  EXPECT_EQ(split(letters, word, RegexWorkBudget(charged)).size(), 2u);
  EXPECT_NE(error_of([&] { split(letters, word, RegexWorkBudget(charged - 1)); }).find("read more than the 52256"),
            std::string::npos);
}

// The obvious matcher: at each position the longest token starting there.
std::vector<std::pair<size_t, uint32_t>> naive_added(const std::vector<std::string>& tokens, const std::string& text) {
  std::vector<std::pair<size_t, uint32_t>> found;
  for (size_t at = 0; at < text.size();) {
    size_t best = 0;
    uint32_t id = 0;
    for (uint32_t t = 0; t < tokens.size(); ++t)
      if (tokens[t].size() > best && text.compare(at, tokens[t].size(), tokens[t]) == 0) best = tokens[t].size(), id = t;
    if (!best) {
      ++at;
      continue;
    }
    found.push_back({at, id});
    at += best;
  }
  return found;
}

TEST(AddedTokens, AhoCorasickEqualsTheObviousMatcher) {
  std::mt19937 rng(20261128);
  for (int round = 0; round < 300; ++round) {
    std::vector<std::string> tokens(1 + rng() % 6);
    keel::AddedTokenMatcher matcher;
    for (uint32_t t = 0; t < tokens.size(); ++t) {
      const size_t length = 1 + rng() % 5;
      for (size_t i = 0; i < length; ++i) tokens[t] += "ab"[rng() % 2];
      matcher.add(tokens[t], t);  // a repeated content keeps the later id, as the naive search does not
    }
    std::vector<std::string> last(tokens);
    for (uint32_t t = 0; t < tokens.size(); ++t)
      for (uint32_t u = t + 1; u < tokens.size(); ++u)
        if (tokens[u] == tokens[t]) last[t].clear();
    std::string text;
    for (size_t i = 0, n = rng() % 40; i < n; ++i) text += "abc"[rng() % 3];
    std::vector<std::pair<size_t, uint32_t>> got;
    std::string rebuilt;
    for (const auto& piece : matcher.split(text)) {
      if (piece.is_token) got.push_back({piece.offset, piece.id});
      rebuilt += piece.text;
    }
    EXPECT_EQ(rebuilt, text);
    EXPECT_EQ(got, naive_added(last, text)) << "text " << text;
  }
}

TEST(AddedTokens, A4KiBTokenCostsNothingPerPosition) {
  // Tokens "a" and 4095 a's then b; text: 2M a's, then the long token. Walking a trie from each
  // position read 4095 bytes at each (8e9 steps); the answer is 2M "a"s, then the long token.
  keel::AddedTokenMatcher matcher;
  const std::string long_token = std::string(4095, 'a') + "b";
  matcher.add("a", 1);
  matcher.add(long_token, 2);
  const size_t n = 2'000'000;
  const std::string text = std::string(n, 'a') + long_token;
  const auto pieces = matcher.split(text);
  ASSERT_EQ(pieces.size(), n + 1);
  EXPECT_TRUE(pieces[n - 1].is_token && pieces[n - 1].id == 1 && pieces[n - 1].offset == n - 1);
  EXPECT_TRUE(pieces[n].is_token && pieces[n].id == 2 && pieces[n].offset == n && pieces[n].text == long_token);
}

struct TempFile {
  fs::path path = fs::temp_directory_path() / ("keel-hostile-test-" + std::to_string(::getpid()) + ".json");
  explicit TempFile(const std::string& text) { std::ofstream(path) << text; }
  ~TempFile() { fs::remove(path); }
};

// A byte-level file with `merges` merges "a a", "aa a", ... and `added` added tokens.
std::string tokenizer_text(size_t merges, size_t added) {
  std::string vocab = R"("a": 0)", merge_list;
  std::string token = "a";
  for (size_t i = 0; i < merges; ++i) {
    merge_list += std::string(i ? "," : "") + "[\"" + token + "\", \"a\"]";
    token += "a";
    vocab += ", \"" + token + "\": " + std::to_string(i + 1);
  }
  std::string added_list;
  for (size_t i = 0; i < added; ++i)
    added_list += std::string(i ? "," : "") + R"({"id": )" + std::to_string(1000 + i) + R"(, "content": "<)" +
                  std::to_string(i) + R"(>", "special": true, "normalized": false})";
  return R"({"added_tokens": [)" + added_list + R"(], "pre_tokenizer": null, "model": {"type": "BPE", "vocab": {)" + vocab +
         R"(}, "merges": [)" + merge_list + "]}}";
}

TEST(TokenizerFileLimits, CountsAreRefusedBeforeParsingNamingFileAndLimit) {
  TempFile file(tokenizer_text(11, 3));
  const std::string path = file.path.string();
  keel::TokenizerFileLimits limits;
  EXPECT_EQ(keel::read_tokenizer_json(path, limits).vocab_size, 1003);  // within the defaults
  limits.max_merges = 10;
  EXPECT_EQ(error_of([&] { keel::read_tokenizer_json(path, limits); }),
            path + ": model.merges has more than 10 entries, the most Keel reads (refused before parsing the file, to "
                   "bound its memory; docs/data.md lists the limits)");
  limits = {};
  limits.max_vocabulary = 11;
  EXPECT_NE(error_of([&] { keel::read_tokenizer_json(path, limits); }).find(path + ": model.vocab has more than 11 entries"),
            std::string::npos);
  limits = {};
  limits.max_added_tokens = 2;
  EXPECT_NE(error_of([&] { keel::read_tokenizer_json(path, limits); }).find(path + ": added_tokens has more than 2 entries"),
            std::string::npos);
  limits = {};
  limits.max_json_values = 40;
  EXPECT_NE(error_of([&] { keel::read_tokenizer_json(path, limits); }).find(path + ": the file has more than 40 JSON values"),
            std::string::npos);
}

TEST(TokenizerFileLimits, DefaultsRefuseTooManyMerges) {
  // 4,194,305 merges of [] (8 MB): the default limit refuses them before a tree exists.
  std::string text = R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [)";
  const size_t count = (size_t(1) << 22) + 1;
  text.reserve(text.size() + 3 * count);
  for (size_t i = 0; i < count; ++i) text += i ? ",[]" : "[]";
  TempFile file(text + "]}}");
  EXPECT_NE(error_of([&] { keel::read_tokenizer_json(file.path.string()); }).find("model.merges has more than 4194304 entries"),
            std::string::npos);
}

TEST(TokenizerJson, LongDocumentThroughEveryStepNamesTheRegexThatRanOutOfBudget) {
  TempFile file(R"json({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": ".(?=.*$)"}, "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},
    "model": {"type": "BPE", "vocab": {"w": 0}, "merges": []}})json");
  auto tokenizer = keel::open_tokenizer(file.path.string());
  std::vector<uint32_t> ids;
  tokenizer->encode("www", "short.txt", ids);
  EXPECT_EQ(ids, (std::vector<uint32_t>{0, 0, 0}));
  const std::string message = error_of([&] { tokenizer->encode(std::string(160'000, 'w'), "long.txt", ids); });
  EXPECT_NE(message.find("long.txt: the pre-tokenizer regex " + file.path.string() +
                         ": pre_tokenizer.pretokenizers[0].pattern.Regex (.(?=.*$)) read more than"),
            std::string::npos) << message;
}

}  // namespace
