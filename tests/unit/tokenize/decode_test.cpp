// The decoders of token_decoder.h on tokens worked out by hand, and the lossy UTF-8 rule they
// end in. The oracle on whole files is bindings/python/tests/test_tokenizer.py (the tokenizers
// library itself); these pin each step's edge cases where a failure names the step.
#include <gtest/gtest.h>

#include "host/errors.h"
#include "tokenize/token_decoder.h"

namespace {
using keel::DecodeStep;
using keel::TokenDecoder;
using Kind = DecodeStep::Kind;
const std::string kFffd = "\xEF\xBF\xBD";

TokenDecoder steps(std::vector<DecodeStep> list) {
  TokenDecoder decoder;
  decoder.present = true;
  decoder.steps = std::move(list);
  return decoder;
}

TEST(Utf8Lossy, EachMaximalInvalidPrefixIsOneReplacement) {
  EXPECT_EQ(keel::utf8_lossy("ok \xC3\xA9"), "ok \xC3\xA9");
  EXPECT_EQ(keel::utf8_lossy("a\xE6\x97"), "a" + kFffd);                 // a cut 3-byte character: one
  EXPECT_EQ(keel::utf8_lossy("\xE6\x97x"), kFffd + "x");
  EXPECT_EQ(keel::utf8_lossy("\xC0\xAF"), kFffd + kFffd);                // C0 never starts a sequence
  EXPECT_EQ(keel::utf8_lossy("\xED\xA0\x80"), kFffd + kFffd + kFffd);    // a surrogate: ED takes 80..9F only
  EXPECT_EQ(keel::utf8_lossy("\xF0\x9F\x9A"), kFffd);                    // a cut emoji
  EXPECT_EQ(keel::utf8_lossy("\xFF\x80"), kFffd + kFffd);
}

TEST(TokenDecoders, ByteLevelReadsGpt2sTableAndKeepsOtherTokensAsTheyAre) {
  // Ġ is the space; Ã © are C3 A9 (é); a token with a character outside the table is its own bytes.
  const TokenDecoder decoder = steps({{Kind::byte_level}});
  EXPECT_EQ(keel::decode_tokens(decoder, {"h", "Ã", "©", "Ġx", "<|endoftext|>", "日本"}), "h\xC3\xA9 x<|endoftext|>日本");
  EXPECT_EQ(keel::decode_tokens(decoder, {"Ã"}), kFffd);
}

TEST(TokenDecoders, Llama2sSequence) {
  // Replace ▁ → space, bytes back to text (an invalid run: one U+FFFD per byte), fuse, strip one space.
  const TokenDecoder decoder = steps({{Kind::replace, "▁", " "}, {Kind::byte_fallback}, {Kind::fuse},
                                      {Kind::strip, "", " ", 1, 0}});
  EXPECT_EQ(keel::decode_tokens(decoder, {"▁hi", "<0xC3>", "<0xA9>", "▁▁x"}), "hi\xC3\xA9  x");
  EXPECT_EQ(keel::decode_tokens(decoder, {"<0xE6>", "<0x97>", "a"}), kFffd + kFffd + "a");
  EXPECT_EQ(keel::decode_tokens(decoder, {"<0xZZ>", "<0x41>"}), "<0xZZ>A");
}

TEST(TokenDecoders, MetaspaceDropsTheFirstTokensReplacementsUnlessNever) {
  DecodeStep metaspace{Kind::metaspace, "▁"};
  EXPECT_EQ(keel::decode_tokens(steps({metaspace}), {"▁▁Hey", "▁my", "▁"}), "Hey my ");
  metaspace.drop_first_replacements = false;
  EXPECT_EQ(keel::decode_tokens(steps({metaspace}), {"▁Hey", "▁my"}), " Hey my");
}

TEST(TokenDecoders, NoDecoderJoinsWithSpacesAndARefusalIsRaised) {
  EXPECT_EQ(keel::decode_tokens(TokenDecoder{}, {"▁a", "b"}), "▁a b");
  TokenDecoder refused;
  refused.present = true;
  refused.refusal = "f.json: decoder.type \"WordPiece\": not supported";
  EXPECT_THROW(keel::decode_tokens(refused, {"a"}), keel::KeelError);
}

}  // namespace
