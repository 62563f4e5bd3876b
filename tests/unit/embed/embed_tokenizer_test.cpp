// keel_tokenizer_* through the C functions only, as a binding calls them: ids of
// examples/data/stdlib-bpe-4k.json worked out from the file, text back, the lookups, and every
// refusal with a status and a message that names what was wrong. Whole-text equality with the
// tokenizers library is bindings/python/tests/test_tokenizer.py's.
#include <keel/keel.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

struct TokenizerHandle {
  keel_tokenizer* t = nullptr;
  explicit TokenizerHandle(const char* spec) { EXPECT_EQ(keel_tokenizer_open(spec, &t), KEEL_OK) << keel_last_error(); }
  ~TokenizerHandle() { keel_tokenizer_destroy(t); }
};

std::vector<int32_t> encode(keel_tokenizer* t, const std::string& text) {
  const int32_t* ids = nullptr;
  size_t count = 0;
  EXPECT_EQ(keel_tokenizer_encode(t, text.data(), text.size(), &ids, &count), KEEL_OK) << keel_last_error();
  return std::vector<int32_t>(ids, ids + count);
}

std::string decode(keel_tokenizer* t, const std::vector<int32_t>& ids, bool skip_special = false) {
  const char* text = nullptr;
  size_t length = 0;
  EXPECT_EQ(keel_tokenizer_decode(t, ids.data(), ids.size(), skip_special, &text, &length), KEEL_OK) << keel_last_error();
  return std::string(text, length);
}

TEST(EmbedTokenizer, ByteLevelBpeEncodesDecodesAndLooksUp) {
  TokenizerHandle tok(KEEL_STDLIB_BPE_TOKENIZER);
  int64_t vocab = 0;
  ASSERT_EQ(keel_tokenizer_vocab_size(tok.t, &vocab), KEEL_OK);
  EXPECT_EQ(vocab, 4096);
  // <|endoftext|> is added token 0; "Ġx" (" x") is one token of the vocabulary.
  int32_t end = -1, space_x = -1;
  ASSERT_EQ(keel_tokenizer_token_id(tok.t, "<|endoftext|>", &end), KEEL_OK);
  ASSERT_EQ(keel_tokenizer_token_id(tok.t, "\xC4\xA0x", &space_x), KEEL_OK);
  EXPECT_EQ(end, 0);
  EXPECT_EQ(encode(tok.t, "<|endoftext|> x"), (std::vector<int32_t>{0, space_x}));
  const std::string text = "def f(x):\n    return 'h\xC3\xA9llo \xE6\x97\xA5'<|endoftext|>";
  EXPECT_EQ(decode(tok.t, encode(tok.t, text)), text);
  EXPECT_EQ(decode(tok.t, {space_x, end, space_x}, true), " x x");
  const char* token = nullptr;
  int32_t special = -1;
  ASSERT_EQ(keel_tokenizer_token(tok.t, end, &token, &special), KEEL_OK);
  EXPECT_EQ(std::string(token), "<|endoftext|>");
  EXPECT_EQ(special, 1);
}

TEST(EmbedTokenizer, BytesAreTheirOwnIds) {
  TokenizerHandle tok("bytes");
  EXPECT_EQ(encode(tok.t, "a\xFF"), (std::vector<int32_t>{97, 255}));
  EXPECT_EQ(decode(tok.t, {97, 255}), "a\xFF");  // bytes as they are; the binding decides how to show them
}

TEST(EmbedTokenizer, RefusalsNameWhatIsWrong) {
  TokenizerHandle tok(KEEL_STDLIB_BPE_TOKENIZER);
  auto fails = [](keel_status status, keel_status expected, const std::string& words) {
    EXPECT_EQ(status, expected);
    EXPECT_NE(std::string(keel_last_error()).find(words), std::string::npos) << keel_last_error();
  };
  const int32_t* ids = nullptr;
  const char* text = nullptr;
  size_t count = 0;
  int32_t id = 0;
  fails(keel_tokenizer_encode(tok.t, "a\xFF", 2, &ids, &count), KEEL_ERR_INVALID_ARGUMENT, "byte offset 1: not valid UTF-8");
  const int32_t beyond[] = {5, 4096};
  fails(keel_tokenizer_decode(tok.t, beyond, 2, 0, &text, &count), KEEL_ERR_INVALID_ARGUMENT, "id 4096 at index 1 is no token");
  const int32_t negative[] = {-3};
  fails(keel_tokenizer_decode(tok.t, negative, 1, 0, &text, &count), KEEL_ERR_INVALID_ARGUMENT, "id -3 at index 0 is negative");
  fails(keel_tokenizer_token_id(tok.t, "no such token", &id), KEEL_ERR_NOT_FOUND, "\"no such token\" is no token of");
  fails(keel_tokenizer_token(tok.t, 99999, &text, nullptr), KEEL_ERR_NOT_FOUND, "has the id 99999");
  fails(keel_tokenizer_encode(nullptr, "a", 1, &ids, &count), KEEL_ERR_INVALID_ARGUMENT, "keel_tokenizer_encode");
  keel_tokenizer* none = nullptr;
  EXPECT_NE(keel_tokenizer_open("/no/such/tokenizer.json", &none), KEEL_OK);
  EXPECT_NE(std::string(keel_last_error()).find("/no/such/tokenizer.json"), std::string::npos) << keel_last_error();
  EXPECT_EQ(none, nullptr);
}

}  // namespace
