// Runs a TokenizerPipeline over a document, in the tokenizers library's order: added tokens
// are cut out of the raw text first; each stretch between them is normalized on its own (so
// Llama 2's Prepend "▁" applies after every special token too), pre-tokenized into words, and
// each word goes through the BPE model. Byte-level words are mapped through GPT-2's
// byte-to-unicode table just before the model, which is where the library's ByteLevel puts it
// when ByteLevel is the last pre-tokenizer (the reader refuses it anywhere else).
#include "tokenize/json_tokenizer.h"

#include "host/errors.h"

namespace keel {
namespace {

struct Word {
  std::string text;
  bool at_start;  // begins at offset 0 of the document (Metaspace's prepend_scheme "first")
};

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  std::string out;
  size_t at = 0;
  for (size_t hit; (hit = text.find(from, at)) != std::string::npos; at = hit + from.size()) out.append(text, at, hit - at) += to;
  if (at == 0) return;
  out.append(text, at, std::string::npos);
  text.swap(out);
}

void normalize(const std::vector<NormalizeStep>& steps, std::string& text) {
  for (const auto& step : steps) {
    if (step.kind == NormalizeStep::Kind::prepend) {
      if (!text.empty()) text.insert(0, step.text);
    } else {
      replace_all(text, step.text, step.replacement);
    }
  }
}

void split_words(const RegexSplitter& regex, SplitBehavior behavior, const std::string& where, std::vector<Word>& words) {
  std::vector<Word> out;
  std::vector<std::string_view> pieces;
  for (const auto& word : words) {
    pieces.clear();
    regex.split(word.text, behavior, where, pieces);
    for (auto piece : pieces) out.push_back({std::string(piece), word.at_start && piece.data() == word.text.data()});
  }
  words.swap(out);
}

void metaspace(const PreTokenizeStep& step, std::vector<Word>& words) {
  std::vector<Word> out;
  for (auto& word : words) {
    replace_all(word.text, " ", step.replacement);
    const bool starts = word.text.compare(0, step.replacement.size(), step.replacement) == 0;
    if (!starts && (step.prepend == PreTokenizeStep::Prepend::always ||
                    (step.prepend == PreTokenizeStep::Prepend::first && word.at_start)))
      word.text.insert(0, step.replacement);
    if (!step.metaspace_split) {
      out.push_back(std::move(word));
      continue;
    }
    // Each replacement begins a word (the library's MergedWithNext).
    size_t begin = 0;
    for (size_t hit = word.text.find(step.replacement, 1); hit != std::string::npos;
         hit = word.text.find(step.replacement, hit + step.replacement.size())) {
      if (hit > begin) out.push_back({word.text.substr(begin, hit - begin), word.at_start && begin == 0});
      begin = hit;
    }
    if (begin < word.text.size()) out.push_back({word.text.substr(begin), word.at_start && begin == 0});
  }
  words.swap(out);
}

class PipelineTokenizer : public Tokenizer {
 public:
  explicit PipelineTokenizer(TokenizerPipeline pipeline) : p_(std::move(pipeline)) {}

  void encode(std::string_view text, const std::string& where, std::vector<uint32_t>& ids) const override {
    const size_t bad = find_invalid_utf8(text);
    if (bad != std::string_view::npos)
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, where + ": byte offset " + std::to_string(bad) +
                                                     ": not valid UTF-8 (a tokenizer.json tokenizer reads Unicode text)");
    std::vector<Word> words;
    std::string mapped;
    for (const auto& piece : p_.added.split(text)) {
      if (piece.is_token) {
        ids.push_back(piece.id);
        continue;
      }
      std::string stretch(piece.text);
      normalize(p_.normalizers, stretch);
      if (stretch.empty()) continue;
      words.clear();
      words.push_back({std::move(stretch), piece.offset == 0});
      pre_tokenize(where, words);
      for (const auto& word : words) {
        if (!p_.byte_level) {
          p_.model->encode_word(word.text, where, ids);
          continue;
        }
        mapped.clear();
        for (unsigned char b : word.text) mapped += byte_level_char(b);
        p_.model->encode_word(mapped, where, ids);
      }
    }
  }

  int64_t vocab_size() const override { return p_.vocab_size; }
  std::string describe() const override {
    return p_.kind + " from " + p_.file + " (vocabulary " + std::to_string(p_.vocab_size) + ")";
  }

 private:
  void pre_tokenize(const std::string& where, std::vector<Word>& words) const {
    for (const auto& step : p_.pre_tokenizers) {
      switch (step.kind) {
        case PreTokenizeStep::Kind::split:
          split_words(*step.regex, step.behavior, where, words);
          break;
        case PreTokenizeStep::Kind::byte_level:
          for (auto& word : words)
            if (step.add_prefix_space && word.text[0] != ' ') word.text.insert(0, 1, ' ');
          if (step.regex) split_words(*step.regex, SplitBehavior::isolated, where, words);
          break;
        case PreTokenizeStep::Kind::metaspace:
          metaspace(step, words);
          break;
      }
    }
  }

  TokenizerPipeline p_;
};

}  // namespace

const char* const kGpt2SplitPattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

const std::string& byte_level_char(unsigned char b) {
  // Printable Latin-1 bytes stand for themselves; the other 68 take U+0100 onwards in order.
  static const auto table = [] {
    std::vector<std::string> chars(256);
    uint32_t next_spare = 256;
    for (int byte = 0; byte < 256; ++byte) {
      const bool printable = (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE);
      const uint32_t cp = printable ? uint32_t(byte) : next_spare++;
      std::string& utf8 = chars[size_t(byte)];
      if (cp < 0x80) utf8 += char(cp);
      else utf8 += char(0xC0 | cp >> 6), utf8 += char(0x80 | (cp & 0x3F));
    }
    return chars;
  }();
  return table[b];
}

std::unique_ptr<Tokenizer> make_pipeline_tokenizer(TokenizerPipeline pipeline) {
  return std::make_unique<PipelineTokenizer>(std::move(pipeline));
}

}  // namespace keel
