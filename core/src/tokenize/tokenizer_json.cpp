// Reads a Hugging Face tokenizer.json into a TokenizerPipeline. The file is untrusted input:
// every number is bounded, every id checked for duplicates, and every part this reader does
// not implement is refused with its JSON path rather than skipped, so a file never tokenizes
// differently here than in the tokenizers library without saying so. Supported:
//   normalizer     null, Prepend, Replace (a String pattern), or a Sequence of them
//   pre_tokenizer  null, ByteLevel, Split (Isolated or Removed, not inverted), Metaspace, or a
//                  Sequence of them (ByteLevel last)
//   model          BPE: vocab, merges (either form), unk_token, fuse_unk, byte_fallback,
//                  ignore_merges; no dropout, continuing_subword_prefix or end_of_word_suffix
//   added_tokens   matched before the normalizer, without lstrip, rstrip or single_word
//   decoder        null, ByteLevel, Replace (a String pattern), ByteFallback, Fuse, Strip,
//                  Metaspace, or a Sequence of them (token_decoder.h); any other is kept as a
//                  refusal that only decode raises, since prepare-data never decodes
// post_processor is read past: prepare-data adds no BOS/EOS; truncation and padding do not
// apply to whole documents.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <new>
#include <set>

#include "host/errors.h"
#include "io/regular_file.h"
#include "tokenize/json_tokenizer.h"

namespace keel {
namespace {

using nlohmann::json;

constexpr int64_t kMaxVocabulary = int64_t(1) << 24;   // ids below 16.7M; the largest real vocabularies are ~1M
constexpr size_t kMaxTokenBytes = 4096;
// Entries of model.merges and added_tokens: bounded by TokenizerFileLimits before the tree is built.
constexpr size_t kCountedBefore = SIZE_MAX;
constexpr size_t kMaxPatternBytes = 4096;
constexpr size_t kMaxSequenceSteps = 64;

// A JSON value and where it sits in the file, for messages.
struct At {
  const json& value;
  std::string path;
  const std::string& file;

  [[noreturn]] void refuse(const std::string& why) const {
    throw KeelError(KEEL_ERR_INVALID_CONFIG, file + ": " + path + " " + why);
  }
  At operator[](const std::string& key) const {
    static const json null_value;
    auto it = value.find(key);
    return {it == value.end() ? null_value : *it, path.empty() ? key : path + "." + key, file};
  }
  At operator[](size_t index) const { return {value[index], path + "[" + std::to_string(index) + "]", file}; }
  bool is_null() const { return value.is_null(); }

  static std::string kind(const json& v) {
    return v.is_null() ? "null" : v.is_boolean() ? "a boolean" : v.is_number() ? "a number"
           : v.is_string() ? "a string" : v.is_array() ? "an array" : "an object";
  }
  void expect_object() const {
    if (!value.is_object()) refuse("must be an object, found " + kind(value));
  }
  const json::array_t& array(size_t max_items) const {
    if (!value.is_array()) refuse("must be an array, found " + kind(value));
    if (value.size() > max_items)
      refuse("has " + std::to_string(value.size()) + " entries, more than the " + std::to_string(max_items) + " allowed");
    return value.get_ref<const json::array_t&>();
  }
  std::string string(size_t max_bytes = kMaxTokenBytes) const {
    if (!value.is_string()) refuse("must be a string, found " + kind(value));
    const auto& s = value.get_ref<const std::string&>();
    if (s.size() > max_bytes)
      refuse("is " + std::to_string(s.size()) + " bytes long, more than the " + std::to_string(max_bytes) + " allowed");
    return s;
  }
  bool boolean(bool if_null) const {
    if (value.is_null()) return if_null;
    if (!value.is_boolean()) refuse("must be true or false, found " + kind(value));
    return value.get<bool>();
  }
  uint32_t id() const {
    if (!value.is_number_integer()) refuse("must be a token id (an integer), found " + kind(value));
    if (value.is_number_unsigned() ? value.get<uint64_t>() >= uint64_t(kMaxVocabulary)
                                   : (value.get<int64_t>() < 0 || value.get<int64_t>() >= kMaxVocabulary))
      refuse("is " + value.dump() + ", outside the ids this reader accepts [0, " + std::to_string(kMaxVocabulary) + ")");
    return uint32_t(value.get<int64_t>());
  }
  // The object's "type", which must be one of `known`.
  std::string type(const std::vector<std::string>& known) const {
    expect_object();
    const At t = (*this)["type"];
    const std::string name = t.value.is_string() ? t.value.get<std::string>() : "";
    for (const auto& k : known)
      if (name == k) return name;
    std::string list;
    for (size_t i = 0; i < known.size(); ++i) list += (i ? (i + 1 == known.size() ? " or \"" : ", \"") : "\"") + known[i] + "\"";
    t.refuse((t.value.is_string() ? "\"" + name + "\" is not supported" : "is missing or not a string") + "; expected " + list);
  }
  // Refuses keys other than `known`, so an option this reader does not implement is never ignored.
  void only_keys(const std::vector<std::string>& known) const {
    for (const auto& item : value.items())
      if (std::find(known.begin(), known.end(), item.key()) == known.end())
        (*this)[item.key()].refuse("is not supported by Keel's tokenizer.json reader");
  }
};

void read_normalizer(const At& node, std::vector<NormalizeStep>& steps) {
  if (node.is_null()) return;
  const std::string type = node.type({"Sequence", "Prepend", "Replace"});
  if (type == "Sequence") {
    node.only_keys({"type", "normalizers"});
    const auto& items = node["normalizers"].array(kMaxSequenceSteps);
    for (size_t i = 0; i < items.size(); ++i) read_normalizer(node["normalizers"][i], steps);
  } else if (type == "Prepend") {
    node.only_keys({"type", "prepend"});
    steps.push_back({NormalizeStep::Kind::prepend, node["prepend"].string(), ""});
  } else {
    node.only_keys({"type", "pattern", "content"});
    const At pattern = node["pattern"];
    pattern.expect_object();
    if (pattern.value.size() != 1 || !pattern.value.contains("String"))
      pattern.refuse("must be {\"String\": ...}: a Regex pattern in a Replace normalizer is not supported");
    const std::string from = pattern["String"].string();
    if (from.empty()) pattern["String"].refuse("must not be empty");
    steps.push_back({NormalizeStep::Kind::replace, from, node["content"].string()});
  }
}

SplitBehavior read_behavior(const At& node) {
  const std::string name = node.string();
  if (name == "Isolated") return SplitBehavior::isolated;
  if (name == "Removed") return SplitBehavior::removed;
  node.refuse("\"" + name + "\" is not supported; expected \"Isolated\" or \"Removed\"");
}

void read_pre_tokenizer(const At& node, std::vector<PreTokenizeStep>& steps) {
  if (node.is_null()) return;
  const std::string type = node.type({"Sequence", "ByteLevel", "Split", "Metaspace"});
  PreTokenizeStep step;
  if (type == "Sequence") {
    node.only_keys({"type", "pretokenizers"});
    const auto& items = node["pretokenizers"].array(kMaxSequenceSteps);
    for (size_t i = 0; i < items.size(); ++i) read_pre_tokenizer(node["pretokenizers"][i], steps);
    return;
  }
  if (type == "ByteLevel") {
    node.only_keys({"type", "add_prefix_space", "trim_offsets", "use_regex"});  // trim_offsets: offsets only
    node["trim_offsets"].boolean(true);
    step.kind = PreTokenizeStep::Kind::byte_level;
    step.add_prefix_space = node["add_prefix_space"].boolean(true);
    if (node["use_regex"].boolean(true))
      step.regex = std::make_shared<RegexSplitter>(kGpt2SplitPattern, node.file + ": " + node.path + " (GPT-2's pattern)");
  } else if (type == "Split") {
    node.only_keys({"type", "pattern", "behavior", "invert"});
    if (node["invert"].boolean(false)) node["invert"].refuse("true is not supported");
    const At pattern = node["pattern"];
    pattern.expect_object();
    if (pattern.value.size() != 1 || !(pattern.value.contains("Regex") || pattern.value.contains("String")))
      pattern.refuse("must be {\"Regex\": ...} or {\"String\": ...}");
    const bool is_regex = pattern.value.contains("Regex");
    const At text = pattern[is_regex ? "Regex" : "String"];
    const std::string source = text.string(kMaxPatternBytes);
    if (source.empty()) text.refuse("must not be empty");
    step.kind = PreTokenizeStep::Kind::split;
    step.regex = std::make_shared<RegexSplitter>(is_regex ? source : RegexSplitter::escape(source), node.file + ": " + text.path);
    step.behavior = read_behavior(node["behavior"]);
  } else {
    node.only_keys({"type", "replacement", "prepend_scheme", "split", "add_prefix_space", "str_rep"});
    step.kind = PreTokenizeStep::Kind::metaspace;
    step.replacement = node["replacement"].string(16);
    if (step.replacement.empty()) node["replacement"].refuse("must not be empty");
    step.metaspace_split = node["split"].boolean(true);
    const At scheme = node["prepend_scheme"];
    if (scheme.is_null()) {  // files from before prepend_scheme
      step.prepend = node["add_prefix_space"].boolean(true) ? PreTokenizeStep::Prepend::always : PreTokenizeStep::Prepend::never;
    } else {
      const std::string name = scheme.string();
      if (name == "always") step.prepend = PreTokenizeStep::Prepend::always;
      else if (name == "first") step.prepend = PreTokenizeStep::Prepend::first;
      else if (name == "never") step.prepend = PreTokenizeStep::Prepend::never;
      else scheme.refuse("\"" + name + "\" is not supported; expected \"always\", \"first\" or \"never\"");
    }
  }
  steps.push_back(std::move(step));
}

std::pair<std::string, std::string> read_merge(const At& node) {
  if (node.value.is_array()) {  // [left, right], the form since tokenizers 0.20
    if (node.value.size() != 2) node.refuse("must be a pair of tokens");
    return {node[size_t(0)].string(), node[size_t(1)].string()};
  }
  const std::string text = node.string(2 * kMaxTokenBytes + 1);
  const size_t space = text.find(' ');
  if (space == std::string::npos || space == 0 || space + 1 == text.size() || text.find(' ', space + 1) != std::string::npos)
    node.refuse("must be two tokens separated by one space, found \"" + text.substr(0, 64) + "\"");
  return {text.substr(0, space), text.substr(space + 1)};
}

BpeSpec read_bpe(const At& model, int64_t& max_id) {
  model.type({"BPE"});
  model.only_keys({"type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk",
                   "byte_fallback", "ignore_merges", "vocab", "merges"});
  const At dropout = model["dropout"];
  if (!dropout.is_null() && !(dropout.value.is_number() && dropout.value.get<double>() == 0))
    dropout.refuse("must be null: BPE dropout makes tokenizing random");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!model[key].is_null() && !model[key].string().empty()) model[key].refuse("is not supported (only null)");
  BpeSpec spec;
  spec.fuse_unk = model["fuse_unk"].boolean(false);
  spec.byte_fallback = model["byte_fallback"].boolean(false);
  spec.ignore_merges = model["ignore_merges"].boolean(false);

  const At vocab = model["vocab"];
  vocab.expect_object();
  if (vocab.value.empty()) vocab.refuse("is empty");
  if (int64_t(vocab.value.size()) > kMaxVocabulary)
    vocab.refuse("has " + std::to_string(vocab.value.size()) + " tokens, more than the " + std::to_string(kMaxVocabulary) + " allowed");
  std::unordered_map<uint32_t, std::string> by_id;
  spec.vocab.reserve(vocab.value.size());
  for (const auto& item : vocab.value.items()) {
    const At entry = vocab[item.key()];
    if (item.key().empty()) vocab.refuse("has an empty token");
    if (item.key().size() > kMaxTokenBytes)
      vocab.refuse("has a token of " + std::to_string(item.key().size()) + " bytes, more than the " +
                   std::to_string(kMaxTokenBytes) + " allowed");
    const uint32_t id = entry.id();
    auto [other, fresh] = by_id.emplace(id, item.key());
    if (!fresh) entry.refuse("repeats id " + std::to_string(id) + " of \"" + other->second + "\"");
    spec.vocab.emplace(item.key(), id);
    max_id = std::max<int64_t>(max_id, id);
  }

  const At merges = model["merges"];
  const auto& merge_items = merges.array(kCountedBefore);
  std::set<std::pair<uint32_t, uint32_t>> seen;
  spec.merges.reserve(merge_items.size());
  for (size_t i = 0; i < merge_items.size(); ++i) {
    const At merge = merges[i];
    auto pair = read_merge(merge);
    auto left = spec.vocab.find(pair.first), right = spec.vocab.find(pair.second);
    if (left == spec.vocab.end() || right == spec.vocab.end())
      merge.refuse("names \"" + (left == spec.vocab.end() ? pair.first : pair.second).substr(0, 64) +
                   "\", which is not in model.vocab");
    if (!spec.vocab.count(pair.first + pair.second))
      merge.refuse("makes \"" + (pair.first + pair.second).substr(0, 64) + "\", which is not in model.vocab");
    if (!seen.emplace(left->second, right->second).second) merge.refuse("repeats an earlier merge");
    spec.merges.push_back(std::move(pair));
  }

  const At unk = model["unk_token"];
  if (!unk.is_null()) {
    auto it = spec.vocab.find(unk.string());
    if (it == spec.vocab.end()) unk.refuse("\"" + unk.string().substr(0, 64) + "\" is not in model.vocab");
    spec.unk_id = it->second;
  }
  return spec;
}

void read_added_tokens(const At& node, const BpeSpec& spec, bool has_normalizer, TokenizerPipeline& pipeline,
                       int64_t& max_id) {
  if (node.is_null()) return;
  const auto& items = node.array(kCountedBefore);
  std::unordered_map<uint32_t, std::string> model_by_id;
  for (const auto& [content, id] : spec.vocab) model_by_id.emplace(id, content);
  std::unordered_map<uint32_t, std::string> added_by_id;
  std::unordered_map<std::string, uint32_t> added_by_content;
  for (size_t i = 0; i < items.size(); ++i) {
    const At token = node[i];
    token.expect_object();
    token.only_keys({"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"});
    const uint32_t id = token["id"].id();
    const std::string content = token["content"].string();
    if (content.empty()) token["content"].refuse("must not be empty");
    for (const char* key : {"single_word", "lstrip", "rstrip"})
      if (token[key].boolean(false)) token[key].refuse("true is not supported");
    token["special"].boolean(false);
    if (token["normalized"].boolean(!token["special"].boolean(false)) && has_normalizer)
      token["normalized"].refuse("true is not supported in a file with a normalizer (Keel matches added tokens in the raw text)");
    auto in_model = spec.vocab.find(content);
    if (in_model != spec.vocab.end() && in_model->second != id)
      token["id"].refuse("is " + std::to_string(id) + " but model.vocab gives \"" + content.substr(0, 64) + "\" the id " +
                         std::to_string(in_model->second));
    auto same_id = model_by_id.find(id);
    if (same_id != model_by_id.end() && same_id->second != content)
      token["id"].refuse("repeats id " + std::to_string(id) + " of model.vocab's \"" + same_id->second.substr(0, 64) + "\"");
    if (!added_by_id.emplace(id, content).second) token["id"].refuse("repeats id " + std::to_string(id) + " of an earlier added token");
    if (!added_by_content.emplace(content, id).second)
      token["content"].refuse("repeats \"" + content.substr(0, 64) + "\", an earlier added token");
    pipeline.added.add(content, id);
    if (token["special"].boolean(false)) pipeline.special_ids.insert(id);
    pipeline.token_by_id[id] = content;
    pipeline.id_by_token[content] = id;
    max_id = std::max<int64_t>(max_id, id);
  }
}

// Why a decoder cannot be run, or "" when every step can be (appended to `steps`).
std::string read_decoder(const At& node, std::vector<DecodeStep>& steps) {
  static const std::vector<std::string> known = {"Sequence", "ByteLevel", "Replace", "ByteFallback",
                                                 "Fuse", "Strip", "Metaspace"};
  const json& type = node.value.is_object() ? node.value.value("type", json()) : json();
  if (!type.is_string() || std::find(known.begin(), known.end(), type.get<std::string>()) == known.end())
    return node.file + ": " + node.path + ".type " + (type.is_string() ? "\"" + type.get<std::string>() + "\"" : "(missing)") +
           ": Keel decodes ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace and Sequence decoders only";
  const std::string name = type.get<std::string>();
  if (name == "Sequence") {
    const auto& items = node["decoders"].array(kMaxSequenceSteps);
    for (size_t i = 0; i < items.size(); ++i) {
      std::string refusal = read_decoder(node["decoders"][i], steps);
      if (!refusal.empty()) return refusal;
    }
    return "";
  }
  DecodeStep step;
  if (name == "ByteLevel") step.kind = DecodeStep::Kind::byte_level;
  else if (name == "ByteFallback") step.kind = DecodeStep::Kind::byte_fallback;
  else if (name == "Fuse") step.kind = DecodeStep::Kind::fuse;
  else if (name == "Replace") {
    const At pattern = node["pattern"];
    pattern.expect_object();
    if (pattern.value.size() != 1 || !pattern.value.contains("String"))
      return node.file + ": " + pattern.path + ": a Regex pattern in a Replace decoder is not supported";
    step.kind = DecodeStep::Kind::replace;
    step.pattern = pattern["String"].string();
    if (step.pattern.empty()) pattern["String"].refuse("must not be empty");
    step.content = node["content"].string();
  } else if (name == "Strip") {
    step.kind = DecodeStep::Kind::strip;
    step.content = node["content"].string(4);
    auto count = [&](const char* key) {
      const At n = node[key];
      if (!n.value.is_number_unsigned()) n.refuse("must be a count (an integer >= 0), found " + At::kind(n.value));
      return size_t(std::min<uint64_t>(n.value.get<uint64_t>(), 1u << 20));
    };
    step.strip_start = count("start");
    step.strip_stop = count("stop");
  } else {
    step.kind = DecodeStep::Kind::metaspace;
    step.pattern = node["replacement"].string(16);
    if (step.pattern.empty()) node["replacement"].refuse("must not be empty");
    const At scheme = node["prepend_scheme"];
    step.drop_first_replacements = scheme.is_null() ? node["add_prefix_space"].boolean(true) : scheme.string() != "never";
  }
  steps.push_back(std::move(step));
  return "";
}

// The counts come first (tokenizer_file_limits.cpp), so nlohmann's tree is only built for a file
// whose size it can hold; the tree is parsed from the file's bytes with no copy of them.
TokenizerPipeline read_checked_file(const std::string& path, const TokenizerFileLimits& limits) {
  const std::vector<unsigned char> bytes = read_regular_file(path, "tokenizer file", Symlinks::follow, limits.max_file_bytes);
  check_tokenizer_file_limits(bytes, path, limits);
  json root;
  try {
    root = json::parse(bytes.begin(), bytes.end());
  } catch (const json::exception& e) {
    throw KeelError(KEEL_ERR_INVALID_CONFIG, path + ": not valid JSON: " + e.what());
  }
  const At top{root, "", path};
  if (!root.is_object()) throw KeelError(KEEL_ERR_INVALID_CONFIG, path + ": not a tokenizer.json (the top level is not an object)");
  top.only_keys({"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer", "post_processor",
                 "decoder", "model"});
  if (top["model"].is_null()) top["model"].refuse("is missing");

  TokenizerPipeline pipeline;
  pipeline.file = path;
  int64_t max_id = -1;
  BpeSpec spec = read_bpe(top["model"], max_id);
  read_normalizer(top["normalizer"], pipeline.normalizers);
  read_pre_tokenizer(top["pre_tokenizer"], pipeline.pre_tokenizers);
  for (const auto& [token, id] : spec.vocab) pipeline.token_by_id.emplace(id, token), pipeline.id_by_token.emplace(token, id);
  read_added_tokens(top["added_tokens"], spec, !pipeline.normalizers.empty(), pipeline, max_id);
  pipeline.decoder.present = !top["decoder"].is_null();
  if (pipeline.decoder.present) {
    try {  // a malformed decoder, too, is only decode's concern
      pipeline.decoder.refusal = read_decoder(top["decoder"], pipeline.decoder.steps);
    } catch (const KeelError& e) {
      pipeline.decoder.refusal = e.what();
    }
  }

  for (size_t i = 0; i < pipeline.pre_tokenizers.size(); ++i) {
    if (pipeline.pre_tokenizers[i].kind != PreTokenizeStep::Kind::byte_level) continue;
    if (i + 1 != pipeline.pre_tokenizers.size())
      top["pre_tokenizer"].refuse("has a ByteLevel step before another step; Keel supports ByteLevel only as the last");
    pipeline.byte_level = true;
  }
  const bool metaspace = std::any_of(pipeline.pre_tokenizers.begin(), pipeline.pre_tokenizers.end(),
                                     [](const auto& s) { return s.kind == PreTokenizeStep::Kind::metaspace; });
  pipeline.kind = pipeline.byte_level ? "byte-level BPE"
                  : (spec.byte_fallback || metaspace || !pipeline.normalizers.empty()) ? "SentencePiece-style BPE"
                                                                                        : "BPE";
  pipeline.vocab_size = max_id + 1;
  pipeline.model = std::make_unique<BpeModel>(std::move(spec));
  return pipeline;
}

}  // namespace

TokenizerPipeline read_tokenizer_json(const std::string& path, const TokenizerFileLimits& limits) {
  try {
    return read_checked_file(path, limits);
  } catch (const std::bad_alloc&) {
    throw KeelError(KEEL_ERR_OUT_OF_MEMORY, path + ": out of memory while reading this tokenizer file");
  }
}

}  // namespace keel
