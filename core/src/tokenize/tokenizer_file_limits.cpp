// The streaming count behind TokenizerFileLimits: nlohmann's SAX parser walks the text with no
// tree built (and no recursion, so depth costs nothing here), and a handler keeps the path of
// keys from the top to know when it is inside model.vocab, model.merges or added_tokens.
#include "tokenize/tokenizer_file_limits.h"

#include <nlohmann/json.hpp>

#include "host/errors.h"

namespace keel {
namespace {

using nlohmann::json;

class LimitCounter : public json::json_sax_t {
 public:
  LimitCounter(const std::string& path, const TokenizerFileLimits& limits) : path_(path), limits_(limits) {}

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool key(string_t& name) override {
    next_key_ = name;
    return true;
  }
  bool start_object(std::size_t) override { return open(); }
  bool start_array(std::size_t) override { return open(); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t, const std::string&, const json::exception& e) override {
    throw KeelError(KEEL_ERR_INVALID_CONFIG, path_ + ": not valid JSON: " + e.what());
  }

 private:
  struct Open {
    std::string key;     // the key it sits under, "" in an array or at the top
    size_t entries = 0;  // values directly inside it
    size_t limit = 0;    // 0: not a counted part
    const char* name = "";
  };

  // A value directly inside the innermost open container.
  bool value() {
    if (++values_ > limits_.max_json_values)
      refuse("the file", limits_.max_json_values, "JSON values");
    if (!open_.empty()) {
      Open& parent = open_.back();
      if (parent.limit && ++parent.entries > parent.limit) refuse(parent.name, parent.limit, "entries");
    }
    next_key_.clear();
    return true;
  }
  bool open() {
    std::string key = std::move(next_key_);
    value();
    if (int(open_.size()) >= limits_.max_depth)
      throw KeelError(KEEL_ERR_INVALID_CONFIG, path_ + ": JSON nested deeper than " + std::to_string(limits_.max_depth) + " levels");
    Open o{std::move(key)};
    if (open_.size() == 1 && o.key == "added_tokens") o.limit = limits_.max_added_tokens, o.name = "added_tokens";
    if (open_.size() == 2 && open_[1].key == "model" && o.key == "vocab") o.limit = limits_.max_vocabulary, o.name = "model.vocab";
    if (open_.size() == 2 && open_[1].key == "model" && o.key == "merges") o.limit = limits_.max_merges, o.name = "model.merges";
    open_.push_back(std::move(o));
    return true;
  }
  bool close() {
    open_.pop_back();
    return true;
  }
  [[noreturn]] void refuse(const char* what, size_t limit, const char* unit) const {
    throw KeelError(KEEL_ERR_INVALID_CONFIG, path_ + ": " + what + " has more than " + std::to_string(limit) + " " + unit +
                                                 ", the most Keel reads (refused before parsing the file, to bound its "
                                                 "memory; docs/data.md lists the limits)");
  }

  const std::string& path_;
  const TokenizerFileLimits& limits_;
  std::vector<Open> open_;
  std::string next_key_;
  size_t values_ = 0;
};

}  // namespace

void check_tokenizer_file_limits(const std::vector<unsigned char>& text, const std::string& path,
                                 const TokenizerFileLimits& limits) {
  LimitCounter counter(path, limits);
  json::sax_parse(text.begin(), text.end(), &counter);
}

}  // namespace keel
