// Runs a TokenDecoder over token strings, step by step as the tokenizers library's decoders
// rewrite the list (decode_chain), then joins the result. Each step's behaviour, edge cases
// included (a lone byte token, a token of characters outside GPT-2's table), is the library's
// own; bindings/python/tests/test_tokenizer.py compares whole texts against it.
#include "tokenize/token_decoder.h"
#include "tokenize/replace_all.h"

#include <algorithm>
#include <unordered_map>

#include "host/errors.h"
#include "tokenize/json_tokenizer.h"
#include "tokenize/tokenizer.h"

namespace keel {
namespace {

const char* const kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD

// The UTF-8 characters of a valid string, as views.
std::vector<std::string_view> characters(std::string_view text) {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
    len = std::min(len, text.size() - i);
    out.push_back(text.substr(i, len));
    i += len;
  }
  return out;
}


// GPT-2's table read backwards: each token's characters are bytes again, unless one of them is
// not in the table; then the token stands for its own UTF-8 bytes. The bytes of all tokens
// become one text.
std::vector<std::string> byte_level(const std::vector<std::string>& tokens) {
  static const auto byte_of = [] {
    std::unordered_map<std::string, unsigned char> table;
    for (int b = 0; b < 256; ++b) table.emplace(byte_level_char(static_cast<unsigned char>(b)), static_cast<unsigned char>(b));
    return table;
  }();
  std::string bytes;
  for (const std::string& token : tokens) {
    std::string mapped;
    bool all_in_table = true;
    for (std::string_view c : characters(token)) {
      auto it = byte_of.find(std::string(c));
      if (it == byte_of.end()) {
        all_in_table = false;
        break;
      }
      mapped += static_cast<char>(it->second);
    }
    bytes += all_in_table ? mapped : token;
  }
  return {utf8_lossy(bytes)};
}

// A token "<0xNN>" is the byte NN. A run of them becomes its text when the bytes are valid
// UTF-8, else one U+FFFD per byte.
bool byte_token(const std::string& token, unsigned char& byte) {
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return false;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  };
  const int high = hex(token[3]), low = hex(token[4]);
  if (high < 0 || low < 0) return false;
  byte = static_cast<unsigned char>(high * 16 + low);
  return true;
}

std::vector<std::string> byte_fallback(const std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  std::string run;
  auto flush = [&] {
    if (run.empty()) return;
    if (find_invalid_utf8(run) == std::string_view::npos) out.push_back(run);
    else out.insert(out.end(), run.size(), kReplacementCharacter);
    run.clear();
  };
  for (const std::string& token : tokens) {
    unsigned char byte;
    if (byte_token(token, byte)) {
      run += static_cast<char>(byte);
      continue;
    }
    flush();
    out.push_back(token);
  }
  flush();
  return out;
}

std::string strip(const std::string& token, const DecodeStep& step) {
  const std::vector<std::string_view> chars = characters(token);
  size_t begin = 0, end = chars.size();
  while (begin < step.strip_start && begin < end && chars[begin] == step.content) ++begin;
  for (size_t cut = 0; cut < step.strip_stop && end > begin && chars[end - 1] == step.content; ++cut) --end;
  std::string out;
  for (size_t i = begin; i < end; ++i) out += chars[i];
  return out;
}

void run_step(const DecodeStep& step, std::vector<std::string>& tokens) {
  switch (step.kind) {
    case DecodeStep::Kind::byte_level:
      tokens = byte_level(tokens);
      return;
    case DecodeStep::Kind::byte_fallback:
      tokens = byte_fallback(tokens);
      return;
    case DecodeStep::Kind::fuse: {
      std::string whole;
      for (const std::string& token : tokens) whole += token;
      tokens.assign(1, whole);
      return;
    }
    case DecodeStep::Kind::replace:
      for (std::string& token : tokens) replace_all(token, step.pattern, step.content);
      return;
    case DecodeStep::Kind::strip:
      for (std::string& token : tokens) token = strip(token, step);
      return;
    case DecodeStep::Kind::metaspace:
      for (size_t i = 0; i < tokens.size(); ++i)
        replace_all(tokens[i], step.pattern, i == 0 && step.drop_first_replacements ? "" : " ");
      return;
  }
}

}  // namespace

std::string decode_tokens(const TokenDecoder& decoder, std::vector<std::string> tokens) {
  if (!decoder.refusal.empty()) throw KeelError(KEEL_ERR_UNIMPLEMENTED, decoder.refusal);
  std::string text;
  if (!decoder.present) {
    for (size_t i = 0; i < tokens.size(); ++i) (text += i ? " " : "") += tokens[i];
    return text;
  }
  for (const DecodeStep& step : decoder.steps) run_step(step, tokens);
  for (const std::string& token : tokens) text += token;
  return text;
}

std::string utf8_lossy(std::string_view bytes) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  std::string out;
  out.reserve(n);
  for (size_t i = 0; i < n;) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    // The sequence's length and the range its second byte must fall in (no overlong forms,
    // no surrogates, nothing past U+10FFFF); later bytes are 0x80..0xBF.
    size_t len = 0;
    unsigned char low = 0x80, high = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, low = 0xA0;
    else if (c == 0xED) len = 3, high = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF) len = 3;
    else if (c == 0xF0) len = 4, low = 0x90;
    else if (c == 0xF4) len = 4, high = 0x8F;
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    size_t valid = len ? 1 : 0;  // bytes of the sequence read so far that fit
    while (valid && valid < len && i + valid < n) {
      const unsigned char next = s[i + valid];
      const bool fits = valid == 1 ? next >= low && next <= high : next >= 0x80 && next <= 0xBF;
      if (!fits) break;
      ++valid;
    }
    if (valid == len && len) {
      out.append(bytes.substr(i, len));
      i += len;
    } else {
      out += kReplacementCharacter;  // the maximal invalid prefix, as one character
      i += std::max<size_t>(valid, 1);
    }
  }
  return out;
}

}  // namespace keel
