// Parsing and checking the sections the core owns. Every message starts with the file and the
// JSON path, says what was expected and what was found, and suggests a key for a misspelling.
#include "config/run_config.h"

#include "config/init_from_config.h"
#include "loader/plugin_registry.h"

#include <keel/offload.h>
#include <keel_support/common/json_section.hpp>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <sstream>

#include "host/errors.h"
#include "launch/host_file.h"
#include "io/regular_file.h"

namespace keel {
namespace {

using keel_support::ConfigError;
using keel_support::JsonSection;

// Far above any real config (Keel's own are a few KiB), far below what parsing one could cost.
constexpr size_t kMaxRunConfigBytes = size_t(64) << 20;

PluginSection read_plugin_section(const nlohmann::json& config, const std::string& key, const std::string& path,
                                  const std::string& default_plugin) {
  PluginSection section;
  section.json_path = path;
  section.json = config.contains(key) ? config.at(key) : nlohmann::json::object();
  if (!section.json.is_object())
    throw ConfigError(path + ": expected an object, found " + keel_support::json_type_name(section.json));
  if (!section.json.contains("plugin")) {
    if (default_plugin.empty()) throw ConfigError(path + ".plugin: required key is missing (which " + key + " plugin to load)");
    section.json["plugin"] = default_plugin;
  }
  if (!section.json.at("plugin").is_string())
    throw ConfigError(path + ".plugin: expected a string, found " + keel_support::json_type_name(section.json.at("plugin")));
  section.plugin = section.json.at("plugin").get<std::string>();
  return section;
}

void read_lr_schedule(JsonSection s, LrScheduleConfig& out) {
  out.warmup_steps = s.get_in_range<int64_t>("warmup_steps", out.warmup_steps, 0, INT64_MAX);
  out.decay = s.get_choice("decay", out.decay, {"cosine", "linear", "constant"});
  out.min_lr_ratio = s.get_in_range<double>("min_lr_ratio", out.min_lr_ratio, 0.0, 1.0);
  out.decay_steps = s.get_in_range<int64_t>("decay_steps", out.decay_steps, 0, INT64_MAX);
  s.finish();
}

void read_batch_schedule(JsonSection& data, DataConfig& out) {
  const nlohmann::json& raw = data.raw("batch_schedule");
  const std::string path = data.path_of("batch_schedule");
  if (!raw.is_object())
    throw ConfigError(path + ": expected an object {\"max_global_batch\": N, \"check_every\": 50, \"lr_rule\": \"sqrt\"}, "
                      "found " + keel_support::json_type_name(raw) + " " + raw.dump());
  JsonSection s(raw, path);
  BatchScheduleConfig& schedule = out.batch_schedule;
  schedule.enabled = true;
  if (!s.has("max_global_batch")) throw ConfigError(s.path_of("max_global_batch") + ": required key is missing");
  schedule.max_global_batch = s.get_in_range<int32_t>("max_global_batch", 0, 1, 1 << 30);
  schedule.check_every = s.get_in_range<int64_t>("check_every", schedule.check_every, 1, 1 << 30);
  schedule.lr_rule = s.get_choice("lr_rule", schedule.lr_rule, {"sqrt", "linear"});
  if (schedule.max_global_batch < out.global_batch)
    throw ConfigError(s.path_of("max_global_batch") + ": " + std::to_string(schedule.max_global_batch) +
                      " is smaller than data.global_batch " + std::to_string(out.global_batch) + ", where the schedule starts");
  s.finish();
}

void read_data(JsonSection s, DataConfig& out) {
  out.source = s.get_choice("source", out.source, {"text", "shards"});
  out.text_root = s.get<std::string>("text_root", out.text_root);
  out.text_max_bytes = s.get_in_range<int64_t>("text_max_bytes", out.text_max_bytes, 1 << 12, INT64_MAX);
  out.val_fraction = s.get_in_range<double>("val_fraction", out.val_fraction, 0.001, 0.5);
  out.train_pattern = s.get<std::string>("train", out.train_pattern);
  out.val_pattern = s.get<std::string>("val", out.val_pattern);
  out.seq_len = s.get_in_range<int32_t>("seq_len", out.seq_len, 0, 1 << 20);
  out.micro_batch = s.get_in_range<int32_t>("micro_batch", out.micro_batch, 1, 1 << 20);
  out.global_batch = s.get_in_range<int32_t>("global_batch", out.global_batch, 0, 1 << 30);
  out.val_batches = s.get_in_range<int32_t>("val_batches", out.val_batches, 1, 1 << 20);
  if (out.source == "shards" && out.train_pattern.empty())
    throw ConfigError(s.path_of("train") + ": required when source is \"shards\" (a glob of llm.c .bin token shards)");
  // 0: one micro-batch per step. Whether it divides among the ranks is batch_geometry.h's to
  // say, once the data-parallel size is known (validate and a run's start-up alike).
  if (out.global_batch == 0) out.global_batch = out.micro_batch;
  if (s.has("batch_schedule")) read_batch_schedule(s, out);
  s.finish();
}

void read_train(JsonSection s, TrainConfig& out) {
  out.steps = s.get_in_range<int64_t>("steps", out.steps, 0, INT64_MAX);
  out.seed = s.get<uint64_t>("seed", out.seed);
  out.grad_clip = s.get_in_range<double>("grad_clip", out.grad_clip, 0.0, 1e30);
  out.log_every = s.get_in_range<int64_t>("log_every", out.log_every, 1, INT64_MAX);
  out.eval_every = s.get_in_range<int64_t>("eval_every", out.eval_every, 0, INT64_MAX);
  out.metrics_path = s.get<std::string>("metrics_path", out.metrics_path);
  out.sample_tokens = s.get_in_range<int32_t>("sample_tokens", out.sample_tokens, 0, 1 << 20);
  out.sample_prompt = s.get<std::string>("sample_prompt", out.sample_prompt);
  out.sample_temperature = s.get_in_range<double>("sample_temperature", out.sample_temperature, 0.0, 100.0);
  out.tensorboard_dir = s.get<std::string>("tensorboard_dir", out.tensorboard_dir);
  out.on_nonfinite = s.get_choice("on_nonfinite", out.on_nonfinite, {"stop", "skip"});
  if (s.has("checkpoint")) {
    JsonSection c(s.raw("checkpoint"), s.path_of("checkpoint"));
    out.checkpoint.dir = c.get<std::string>("dir", out.checkpoint.dir);
    out.checkpoint.every = c.get_in_range<int64_t>("every", out.checkpoint.every, 0, INT64_MAX);
    out.checkpoint.keep = c.get_in_range<int32_t>("keep", out.checkpoint.keep, 1, 1 << 20);
    out.checkpoint.async = c.get<bool>("async", out.checkpoint.async);
    out.checkpoint.on_interrupt = c.get<bool>("on_interrupt", out.checkpoint.on_interrupt);
    c.finish();
  }
  s.finish();
}

void read_dp_groups(JsonSection& s, RunConfig& out) {
  if (s.has("dp_groups")) {
    const nlohmann::json& v = s.raw("dp_groups");
    if (v.is_number_integer()) {
      out.dp_groups = RunConfig::DpGroups::kRanks;
      out.dp_group_ranks = s.get_in_range<int32_t>("dp_groups", 0, 1, 1 << 20);
    } else {
      const std::string level = s.get_choice("dp_groups", std::string("flat"), {"flat", "host", "site"});
      out.dp_groups = level == "host"   ? RunConfig::DpGroups::kHost
                      : level == "site" ? RunConfig::DpGroups::kSite
                                        : RunConfig::DpGroups::kFlat;
    }
  }
  if (!s.has("sites")) {
    if (out.dp_groups == RunConfig::DpGroups::kSite)
      throw ConfigError("parallel.dp_groups: \"site\" needs parallel.sites (which hosts make each site)");
    return;
  }
  const nlohmann::json& sites = s.raw("sites");
  if (!sites.is_object())
    throw ConfigError("parallel.sites: expected an object of site names, each with a list of its hosts, found " +
                      keel_support::json_type_name(sites));
  constexpr size_t kMaxHosts = 65536;
  for (const auto& [site, hosts] : sites.items()) {
    const std::string where = "parallel.sites." + site.substr(0, 64);
    if (!plain_host_name(site))
      throw ConfigError(where + ": a site name is letters, digits, . - _ (not starting with -), at most 253 characters");
    if (!hosts.is_array() || hosts.empty())
      throw ConfigError(where + ": expected a non-empty list of host names, found " + hosts.dump().substr(0, 64));
    for (size_t i = 0; i < hosts.size(); ++i) {
      const std::string at = where + "[" + std::to_string(i) + "]";
      if (!hosts[i].is_string() || !plain_host_name(hosts[i].get<std::string>()))
        throw ConfigError(at + ": expected a host name (letters, digits, . - _), found " + hosts[i].dump().substr(0, 64));
      const std::string host = hosts[i].get<std::string>();
      for (const auto& [seen, in] : out.site_of_host)
        if (seen == host)
          throw ConfigError(at + ": host " + host + " is already in site " + in + "; a host is in one site");
      if (out.site_of_host.size() == kMaxHosts)
        throw ConfigError(at + ": more than " + std::to_string(kMaxHosts) + " hosts");
      out.site_of_host.emplace_back(host, site);
    }
  }
  if (out.site_of_host.empty())
    throw ConfigError("parallel.sites: names no host; list each site's hosts, or leave parallel.sites out");
}

void read_parallel(const nlohmann::json& config, RunConfig& out) {
  JsonSection s(config.contains("parallel") ? config.at("parallel") : nlohmann::json::object(), "parallel");
  s.allow("strategy");
  s.allow("schedule");
  out.tp = s.get_in_range<int32_t>("tp", 1, 1, 4096);
  out.pp = s.get_in_range<int32_t>("pp", 1, 1, 4096);
  out.ep = s.get_in_range<int32_t>("ep", 1, 1, 4096);
  out.cp = s.get_in_range<int32_t>("cp", 1, 1, 4096);
  out.cp_all_gather = s.get_choice("cp_exchange", "ring", {"ring", "all_gather"}) == "all_gather";
  if (out.cp > 1 && out.ep > 1)  // both take blocks of the data-parallel ranks: not combined yet
    throw ConfigError("parallel.cp: " + std::to_string(out.cp) + " splits each sequence, which does not combine with "
                      "parallel.ep > 1 yet (found ep " + std::to_string(out.ep) + "); run at parallel.cp 1 or without it");
  out.sequence_parallel = s.get<bool>("sequence_parallel", false);
  out.virtual_stages = s.get_in_range<int32_t>("virtual_stages", 1, 1, 1024);
  if (out.sequence_parallel && out.tp == 1)
    throw ConfigError("parallel.sequence_parallel: splits the sequence over tensor-parallel ranks, so it needs "
                      "parallel.tp > 1 (found tp 1)");
  if (out.virtual_stages > 1 && out.pp == 1)
    throw ConfigError("parallel.virtual_stages: " + std::to_string(out.virtual_stages) +
                      " chunks per rank interleave a pipeline, so it needs parallel.pp > 1 (found pp 1)");
  if (s.has("layers_per_stage")) {
    const nlohmann::json& list = s.raw("layers_per_stage");
    const size_t chunks = size_t(out.pp) * size_t(out.virtual_stages);
    if (!list.is_array() || list.size() != chunks)
      throw ConfigError("parallel.layers_per_stage: expected a list of " + std::to_string(chunks) +
                        " block counts (pp " + std::to_string(out.pp) + " × virtual_stages " +
                        std::to_string(out.virtual_stages) + "), found " + list.dump());
    for (size_t i = 0; i < list.size(); ++i) {
      if (!list[i].is_number_integer() || list[i].get<int64_t>() < 1 || list[i].get<int64_t>() > (1 << 20))
        throw ConfigError("parallel.layers_per_stage[" + std::to_string(i) + "]: expected a block count of at least 1, found " +
                          list[i].dump());
      out.layers_per_stage.push_back(list[i].get<int32_t>());
    }
  }
  read_dp_groups(s, out);
  s.finish();
  nlohmann::json parallel = config.contains("parallel") ? config.at("parallel") : nlohmann::json::object();
  out.strategy = read_plugin_section(parallel, "strategy", "parallel.strategy", "ddp");
  out.schedule = read_plugin_section(parallel, "schedule", "parallel.schedule", "1f1b");
}

// The core's keys of "offload" are read here and taken out; the rest is the tier plugin's.
void read_offload(const nlohmann::json& config, OffloadConfig& out) {
  if (!config.contains("offload")) return;
  out.tier = read_plugin_section(config, "offload", "offload", "");
  nlohmann::json& section = out.tier.json;
  for (const char* key : {"optimizer_state", "params", "gradients"})
    if (section.contains(key)) {
      const nlohmann::json& value = section.at(key);
      if (!value.is_boolean())
        throw ConfigError(std::string("offload.") + key + ": expected a boolean, found " +
                          keel_support::json_type_name(value) + " " + value.dump());
    }
  out.optimizer_state = section.value("optimizer_state", out.optimizer_state);
  out.params = section.value("params", out.params);
  out.gradients = section.value("gradients", out.gradients);
  for (const char* key : {"plugin", "optimizer_state", "params", "gradients"}) section.erase(key);
  if (!out.optimizer_state && !out.params && !out.gradients)
    throw ConfigError("offload: optimizer_state, params and gradients are all false, so nothing would live in the "
                      "tier; set one of them true, or remove the \"offload\" section");
}

}  // namespace

uint32_t OffloadConfig::arrays() const {
  return (optimizer_state ? uint32_t(KEEL_OFFLOAD_OPTIMIZER_STATE) : 0u) | (params ? uint32_t(KEEL_OFFLOAD_PARAMS) : 0u) |
         (gradients ? uint32_t(KEEL_OFFLOAD_GRADIENTS) : 0u);
}

namespace {

RunConfig parse(nlohmann::json json, const std::string& origin, const std::string& name,
                const std::vector<std::string>& overrides) {
  RunConfig config;
  config.file = origin;
  config.name = name;
  try {
    if (!json.is_object()) throw ConfigError("(top level): expected an object, found " + keel_support::json_type_name(json));
    for (const auto& assignment : overrides) apply_override(json, assignment);
    JsonSection top(json, "");
    for (const char* key : {"model", "optimizer", "backend", "parallel", "lr_schedule", "data", "train", "comm", "offload"})
      top.allow(key);
    auto plugin_path = top.get<nlohmann::json>("plugin_path", nlohmann::json::array());
    top.finish();
    if (plugin_path.is_string()) config.plugin_path.push_back(plugin_path.get<std::string>());
    else if (plugin_path.is_array() && std::all_of(plugin_path.begin(), plugin_path.end(), [](auto& v) { return v.is_string(); }))
      config.plugin_path = plugin_path.get<std::vector<std::string>>();
    else throw ConfigError("plugin_path: expected a folder or a list of folders, found " + plugin_path.dump());
    // Relative plugin folders written in a file are taken from the file's folder; one given
    // with --set on the command line is taken from the current directory, as a shell user expects.
    const bool plugin_path_from_command_line = std::any_of(overrides.begin(), overrides.end(), [](const std::string& o) {
      return o.rfind("plugin_path=", 0) == 0;
    });
    if (origin != "<json>" && !plugin_path_from_command_line)
      for (auto& folder : config.plugin_path)
        if (std::filesystem::path(folder).is_relative())
          folder = (std::filesystem::path(origin).parent_path() / folder).lexically_normal().string();

    config.model = read_plugin_section(json, "model", "model", "");
    if (config.model.json.contains("init_from")) {
      const auto& init_from = config.model.json.at("init_from");
      if (!init_from.is_string())
        throw ConfigError("model.init_from: expected a string (a safetensors file or a Hugging Face checkpoint folder), found " + keel_support::json_type_name(init_from));
      config.model_init_from = init_from.get<std::string>();
      config.model.json.erase("init_from");
      // A checkpoint folder's config.json gives the dimensions the section leaves out (the model
      // plugin maps them); the completed section is what every later step, checkpoints
      // included, sees.
      PluginRegistry::instance().add_search_folders(config.plugin_path);
      nlohmann::json completed = keel_support::parse_json(
          "model", complete_model_config(config.model.plugin, config.model_init_from, config.model.json.dump(), "model"));
      config.model.json = completed;
      completed["init_from"] = config.model_init_from;
      json["model"] = completed;
    }
    config.optimizer = read_plugin_section(json, "optimizer", "optimizer", "adamw");
    config.backend = read_plugin_section(json, "backend", "backend", "cpu");
    config.comm_explicit = json.contains("comm");
    config.comm = read_plugin_section(json, "comm", "comm", "mpi");
    read_parallel(json, config);
    read_offload(json, config.offload);
    auto section = [&](const char* key) {
      return JsonSection(json.contains(key) ? json.at(key) : nlohmann::json::object(), key);
    };
    read_lr_schedule(section("lr_schedule"), config.lr_schedule);
    nlohmann::json data = json.contains("data") ? json.at("data") : nlohmann::json::object();
    if (data.is_object() && data.contains("plugin")) {
      // The core keeps the batch geometry; the plugin validates everything else.
      config.data_plugin = read_plugin_section(json, "data", "data", "");
      nlohmann::json core_keys = nlohmann::json::object();
      for (const char* key : {"seq_len", "micro_batch", "global_batch", "val_batches", "batch_schedule"})
        if (data.contains(key)) {
          core_keys[key] = data.at(key);
          config.data_plugin.json.erase(key);
        }
      read_data(JsonSection(core_keys, "data"), config.data);
    } else {
      read_data(section("data"), config.data);
    }
    read_train(section("train"), config.train);
    if (config.train.metrics_path.empty()) config.train.metrics_path = "runs/" + name + "/metrics.jsonl";
    if (config.train.tensorboard_dir.empty()) config.train.tensorboard_dir = "runs/" + name + "/tb";
    if (config.train.tensorboard_dir == "none") config.train.tensorboard_dir.clear();
    if (config.train.checkpoint.dir.empty()) config.train.checkpoint.dir = "runs/" + name + "/checkpoints";
  } catch (const ConfigError& e) {
    throw KeelError(KEEL_ERR_INVALID_CONFIG, origin + ": " + e.what());
  }
  config.json = std::move(json);
  return config;
}

}  // namespace

void apply_override(nlohmann::json& config, const std::string& assignment) {
  auto equals = assignment.find('=');
  if (equals == std::string::npos || equals == 0)
    throw ConfigError("--set " + assignment + ": expected path=value, e.g. train.steps=20");
  const std::string path = assignment.substr(0, equals), text = assignment.substr(equals + 1);
  nlohmann::json value;
  try {
    value = keel_support::parse_json("--set " + path, text);
  } catch (const ConfigError& e) {
    if (nlohmann::json::accept(text)) throw;  // valid JSON refused for its depth
    value = text;                            // a bare word is a string: --set backend.plugin=cpu
  }
  nlohmann::json* node = &config;
  std::stringstream parts(path);
  std::string part, walked;
  std::vector<std::string> keys;
  while (std::getline(parts, part, '.')) keys.push_back(part);
  if (keys.size() > size_t(keel_support::kMaxJsonDepth))
    throw ConfigError("--set " + path.substr(0, 40) + "...: a path of " + std::to_string(keys.size()) +
                      " keys is nested deeper than " + std::to_string(keel_support::kMaxJsonDepth) + " levels");
  for (size_t i = 0; i < keys.size(); ++i) {
    if (node->is_null()) *node = nlohmann::json::object();  // --set creates missing sections
    if (!node->is_object())
      throw ConfigError("--set " + path + ": " + (walked.empty() ? "the top level" : walked) + " is " +
                        keel_support::json_type_name(*node) + ", not an object, so it cannot hold \"" + keys[i] + "\"");
    walked += (walked.empty() ? "" : ".") + keys[i];
    if (i + 1 == keys.size()) (*node)[keys[i]] = value;
    else node = &(*node)[keys[i]];
  }
}

RunConfig RunConfig::from_file(const std::string& path, const std::vector<std::string>& overrides) {
  // Only a regular file, read whole and bounded: a FIFO named as the config would block the open
  // forever, a folder gave a stream's internal error, and a huge file is no config.
  const std::vector<unsigned char> text = read_regular_file(path, "the config file", Symlinks::follow, kMaxRunConfigBytes);
  nlohmann::json json;
  try {
    json = keel_support::parse_json(path, text);
  } catch (const ConfigError& e) {
    throw KeelError(KEEL_ERR_INVALID_CONFIG, e.what());
  }
  return parse(std::move(json), path, std::filesystem::path(path).stem().string(), overrides);
}

RunConfig RunConfig::from_json_text(const std::string& text, const std::string& origin,
                                    const std::vector<std::string>& overrides) {
  nlohmann::json json;
  try {
    json = keel_support::parse_json(origin, text);
  } catch (const ConfigError& e) {
    throw KeelError(KEEL_ERR_INVALID_CONFIG, e.what());
  }
  return parse(std::move(json), origin, "run", overrides);
}

}  // namespace keel
