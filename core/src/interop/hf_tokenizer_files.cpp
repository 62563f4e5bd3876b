// The tokenizer beside a Hugging Face export: read its files as untrusted input, find its start-
// and end-of-text ids, check them against the model's vocabulary, then copy the files and write
// the ids. Nothing is written until every check has passed.
#include "interop/hf_tokenizer_files.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <optional>

#include "host/errors.h"
#include "io/durable_files.h"
#include "io/regular_file.h"
#include "tokenize/tokenizer_file_limits.h"

namespace keel {
namespace {

constexpr size_t kSideFileLimit = size_t(1) << 20;
const char* const kSideFiles[] = {"tokenizer_config.json", "special_tokens_map.json"};
// A tokenizer.json alone names no roles: the end- and start-of-text tokens of the families in use.
const char* const kEndOfText[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"};
const char* const kStartOfText[] = {"<|begin_of_text|>", "<s>", "<bos>"};

nlohmann::json read_object(const std::string& path, size_t limit) {
  const std::vector<unsigned char> bytes = read_regular_file(path, "a tokenizer file", Symlinks::follow, limit);
  nlohmann::json value = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) throw KeelError(KEEL_ERR_INVALID_ARGUMENT, path + ": not JSON");
  if (!value.is_object()) throw KeelError(KEEL_ERR_INVALID_ARGUMENT, path + ": expected a JSON object at the top level");
  return value;
}

// content -> id of the model's vocabulary and the added tokens.
std::map<std::string, int64_t> token_ids(const nlohmann::json& tokenizer, const std::string& path) {
  std::map<std::string, int64_t> ids;
  const nlohmann::json model = tokenizer.value("model", nlohmann::json());
  if (model.is_object() && model.contains("vocab") && model.at("vocab").is_object())
    for (const auto& [token, id] : model.at("vocab").items())
      if (id.is_number_integer()) ids[token] = id.get<int64_t>();
  const nlohmann::json added = tokenizer.value("added_tokens", nlohmann::json::array());
  if (!added.is_array()) throw KeelError(KEEL_ERR_INVALID_ARGUMENT, path + ": added_tokens must be a list");
  for (const nlohmann::json& token : added)
    if (token.is_object() && token.contains("content") && token.at("content").is_string() && token.contains("id") &&
        token.at("id").is_number_integer())
      ids[token.at("content").get<std::string>()] = token.at("id").get<int64_t>();
  return ids;
}

// tokenizer_config.json's bos_token / eos_token: a string, or {"content": string}.
std::optional<std::string> configured(const nlohmann::json& side, const char* role) {
  nlohmann::json value = side.value(role, nlohmann::json());
  if (value.is_object()) value = value.value("content", nlohmann::json());
  if (value.is_string()) return value.get<std::string>();
  return std::nullopt;
}

template <size_t N>
std::optional<std::string> first_known(const char* const (&tokens)[N], const std::map<std::string, int64_t>& ids) {
  for (const char* token : tokens)
    if (ids.count(token)) return std::string(token);
  return std::nullopt;
}

nlohmann::json id_or_null(const std::optional<int64_t>& id) { return id ? nlohmann::json(*id) : nlohmann::json(); }

}  // namespace

void attach_hf_tokenizer(const std::string& folder, const std::string& tokenizer) {
  namespace fs = std::filesystem;
  std::error_code error;
  const bool source_is_folder = fs::is_directory(tokenizer, error);
  const std::string tokenizer_path = source_is_folder ? (fs::path(tokenizer) / "tokenizer.json").string() : tokenizer;
  if (!fs::is_regular_file(tokenizer_path, error))
    throw KeelError(KEEL_ERR_INVALID_ARGUMENT,
                    "export: tokenizer '" + tokenizer + "': expected a tokenizer.json or a folder holding one");
  const nlohmann::json tokenizer_json = read_object(tokenizer_path, TokenizerFileLimits().max_file_bytes);
  nlohmann::json side = nlohmann::json::object();
  const std::string side_config = source_is_folder ? (fs::path(tokenizer) / "tokenizer_config.json").string() : "";
  const bool has_side = source_is_folder && fs::is_regular_file(side_config, error);
  if (has_side) side = read_object(side_config, kSideFileLimit);

  const std::string named_in = has_side ? side_config : tokenizer_path;
  const std::map<std::string, int64_t> ids = token_ids(tokenizer_json, named_in);
  std::optional<std::string> eos = configured(side, "eos_token"), bos = configured(side, "bos_token");
  if (!eos) eos = first_known(kEndOfText, ids);
  if (!bos) bos = first_known(kStartOfText, ids);
  if (!bos && eos == std::optional<std::string>("<|endoftext|>")) bos = eos;  // GPT-2's one token opens and ends a text
  for (const auto& [role, token] : {std::make_pair("eos_token", eos), std::make_pair("bos_token", bos)})
    if (token && !ids.count(*token))
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, named_in + ": " + role + " '" + *token +
                                                     "' is not a token of the tokenizer");
  const std::optional<int64_t> bos_id = bos ? std::optional<int64_t>(ids.at(*bos)) : std::nullopt;
  const std::optional<int64_t> eos_id = eos ? std::optional<int64_t>(ids.at(*eos)) : std::nullopt;

  const std::string config_path = (fs::path(folder) / "config.json").string();
  nlohmann::json config = read_object(config_path, kSideFileLimit);
  const int64_t vocab = config.value("vocab_size", int64_t(0));
  for (const auto& [role, id] : {std::make_pair("bos_token_id", bos_id), std::make_pair("eos_token_id", eos_id)})
    if (id && (*id < 0 || *id >= vocab))
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, tokenizer_path + ": " + role + " " + std::to_string(*id) +
                                                     " lies outside the model's vocabulary (" + std::to_string(vocab) +
                                                     "): not the tokenizer the model was trained with");
  config["bos_token_id"] = id_or_null(bos_id);
  config["eos_token_id"] = id_or_null(eos_id);
  const nlohmann::json generation = {{"bos_token_id", id_or_null(bos_id)},
                                     {"eos_token_id", id_or_null(eos_id)},
                                     {"pad_token_id", config.contains("pad_token_id") ? config.at("pad_token_id")
                                                                                      : id_or_null(eos_id)}};

  auto copy = [&](const std::string& from, const std::string& name) {
    const std::vector<unsigned char> bytes = read_regular_file(from, "a tokenizer file", Symlinks::follow,
                                                               TokenizerFileLimits().max_file_bytes);
    write_file_atomically((fs::path(folder) / name).string(), std::string(bytes.begin(), bytes.end()));
  };
  copy(tokenizer_path, "tokenizer.json");
  for (const char* name : kSideFiles)
    if (source_is_folder && fs::is_regular_file(fs::path(tokenizer) / name, error))
      copy((fs::path(tokenizer) / name).string(), name);
  if (!has_side) {  // transformers' AutoTokenizer needs a class and the roles
    nlohmann::json made = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                           {"model_max_length", config.contains("n_positions") ? config.at("n_positions")
                                                                               : config.value("max_position_embeddings",
                                                                                              nlohmann::json())}};
    if (bos) made["bos_token"] = *bos;
    if (eos) made["eos_token"] = *eos;
    write_file_atomically((fs::path(folder) / "tokenizer_config.json").string(), made.dump(2) + "\n");
  }
  write_file_atomically(config_path, config.dump(2) + "\n");
  write_file_atomically((fs::path(folder) / "generation_config.json").string(), generation.dump(2) + "\n");
}

}  // namespace keel
