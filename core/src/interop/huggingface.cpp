// Export to and import from Hugging Face's layout. The model plugin says, per parameter, the
// external name, whether the tensor is stored as a 2-D transpose and how many leading rows exist
// outside Keel (a padded vocabulary is cut); this file only moves bytes accordingly (layout_of
// says how Keel's extra leading dimensions, declared for tensor parallelism, are merged).
#include "interop/huggingface.h"

#include <unistd.h>

#include <keel_support/common/json_parse.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "config/init_from_config.h"
#include "host/errors.h"
#include "io/durable_files.h"
#include "io/safetensors.h"
#include "host/host_table.h"
#include "io/regular_file.h"
#include "loader/plugin_registry.h"
#include "mesh/collectives.h"
#include "train/model_parameters.h"

namespace keel {

namespace {

constexpr const char* kFormat = "huggingface";
constexpr const char* kAdapterFormat = "peft";  // PEFT's adapter folder, as keel_support's ExternalNames names it

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t d = 0; d < shape.size(); ++d) out += (d ? ", " : "") + std::to_string(shape[d]);
  return out + "]";
}

// One parameter as Keel holds it and as the external format stores it.
struct ExternalLayout {
  std::string keel_name, name;  // name empty: the model does not export this parameter
  bool transpose = false;
  std::vector<int64_t> keel_shape, external_shape;
  int64_t external_rows = 0, cols = 0;  // the external tensor before transposing: (external_rows, cols)
};

ExternalLayout layout_of(ModelParameters& params, size_t index, const char* format = kFormat) {
  const keel_param_spec& spec = params.info().params[index];
  const keel_external_tensor ext = params.external_tensor(format, index);
  ExternalLayout out;
  out.keel_name = spec.name;
  out.keel_shape.assign(spec.global_shape, spec.global_shape + spec.ndim);
  if (!ext.name || !*ext.name) return out;
  out.name = ext.name;
  out.transpose = ext.transpose != 0;
  // Keel may give a tensor leading dimensions the external format does not have, so that a
  // tensor-parallel piece is a box: gpt's qkv is (3, C, C), its bias (3, C). A transposed tensor
  // is the 2-D transpose of Keel's viewed as (all leading dims merged, last dim); a flattened one
  // (keel_external_tensor.flatten, 0.6) is Keel's as one dimension; a merged one
  // (merge_leading, 0.19) is Keel's as (all leading dims merged, last dim).
  const int64_t numel = params.global_numel(index);
  const int64_t last = spec.ndim > 0 ? spec.global_shape[spec.ndim - 1] : 1;
  const int64_t leading = spec.ndim == 0 ? 1 : out.transpose ? (last > 0 ? numel / last : 0) : spec.global_shape[0];
  const bool flat = ext.struct_size >= offsetof(keel_external_tensor, flatten) + sizeof ext.flatten && ext.flatten != 0;
  const bool merge = ext.struct_size >= offsetof(keel_external_tensor, merge_leading) + sizeof ext.merge_leading &&
                     ext.merge_leading != 0;
  out.external_rows = ext.rows >= 0 ? ext.rows : leading;
  out.cols = leading > 0 ? numel / leading : 0;
  if (out.external_rows > leading || (out.transpose && spec.ndim < 2) || (out.transpose && flat) ||
      (ext.rows >= 0 && spec.ndim == 0) ||
      (ext.rows >= 0 && (spec.ndim > 2 || flat)) || (merge && (out.transpose || flat || ext.rows >= 0 || spec.ndim < 2)))
    throw KeelError(KEEL_ERR_INTERNAL, "model '" + params.model_plugin() + "': external layout of " + spec.name +
                                           " (rows " + std::to_string(ext.rows) + ", transpose " +
                                           std::to_string(ext.transpose) + ") does not fit its shape " +
                                           shape_text(out.keel_shape));
  if (out.transpose) {
    out.external_shape = {out.cols, out.external_rows};
  } else if (flat) {
    out.external_shape = {numel};
  } else if (merge) {
    out.external_shape = {numel / last, last};
  } else {
    out.external_shape = out.keel_shape;
    if (spec.ndim > 0) out.external_shape[0] = out.external_rows;
  }
  return out;
}

// (rows, cols) row-major into (cols, rows) row-major.
template <typename T>
std::vector<T> transposed(const T* in, int64_t rows, int64_t cols) {
  std::vector<T> out(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[size_t(c * rows + r)] = in[r * cols + c];
  return out;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Tensors transformers writes besides the parameters: the causal-mask buffers of older
// versions, and the LM head, which GPT-2 ties to the token embedding.
bool is_ignored_extra(const std::string& name) {
  return name == "lm_head.weight" || ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias");
}

// transformers takes a missing bos/eos id from the model class's defaults (GPT-2's 50256,
// Llama's 1 and 2), which may lie outside this vocabulary: a model that names none says null.
void write_special_token_ids(nlohmann::json& config) {
  for (const char* key : {"bos_token_id", "eos_token_id"})
    if (!config.contains(key)) config[key] = nullptr;
}

// What transformers' generate reads first; pad is eos, as generate would pick after a warning.
nlohmann::json generation_config(const nlohmann::json& config) {
  nlohmann::json generation = {{"bos_token_id", config.at("bos_token_id")},
                               {"eos_token_id", config.at("eos_token_id")}};
  generation["pad_token_id"] = config.contains("pad_token_id") ? config.at("pad_token_id") : config.at("eos_token_id");
  return generation;
}

// Each file an export writes must be absent or a regular file (a symlink to one counts), checked
// before the first is written: a folder or FIFO named generation_config.json used to be found
// only after the weights and config.json were in place, leaving half an export behind.
void refuse_unwritable_targets(const std::vector<std::filesystem::path>& targets) {
  for (const std::filesystem::path& target : targets) {
    std::error_code error;
    const std::filesystem::file_status status = std::filesystem::status(target, error);
    if (status.type() == std::filesystem::file_type::not_found || status.type() == std::filesystem::file_type::regular)
      continue;
    const std::string kind = status.type() == std::filesystem::file_type::directory ? "a folder" : "not a regular file";
    throw KeelError(KEEL_ERR_IO, target.string() + " is " + kind +
                                     "; an export writes a file there (move it away or export to another folder); "
                                     "nothing was written");
  }
}

}  // namespace

namespace {

// One format's tensors into `out_safetensors_path` and its config into `config_name` beside it
// (with generation_config.json for a model's own format).
// Adds each adapter's s·B·A (PEFT's LoRA; s = lora_alpha / r, or / √r with use_rslora) to the
// base tensor it belongs on, in the Hugging Face layout: PEFT's key
// base_model.model.<module>.lora_A.weight belongs on <module>.weight.
void merge_adapters(ModelParameters& params, std::map<std::string, std::vector<float>*>& tensors) {
  nlohmann::json adapter;
  try {
    adapter = keel_support::parse_json("adapter config", params.external_config(kAdapterFormat));
  } catch (const keel_support::ConfigError& e) {
    throw KeelError(KEEL_ERR_INTERNAL, "model '" + params.model_plugin() + "': its peft config is not JSON: " + e.what());
  }
  const double r = adapter.at("r").get<double>(), alpha = adapter.at("lora_alpha").get<double>();
  const double scaling = adapter.value("use_rslora", false) ? alpha / std::sqrt(r) : alpha / r;
  const bool fan_in_fan_out = adapter.value("fan_in_fan_out", false);  // the base stored (in, out): GPT-2's Conv1D
  std::map<std::string, std::pair<ExternalLayout, size_t>> factors;  // PEFT key -> layout, index
  for (size_t i = 0; i < params.info().n_params; ++i) {
    ExternalLayout layout = layout_of(params, i, kAdapterFormat);
    if (!layout.name.empty()) factors.emplace(layout.name, std::make_pair(layout, i));
  }
  const std::string prefix = "base_model.model.", a_tail = ".lora_A.weight";
  for (const auto& [name, factor] : factors) {
    if (name.size() < a_tail.size() || name.compare(name.size() - a_tail.size(), a_tail.size(), a_tail) != 0) continue;
    const std::string module = name.substr(prefix.size(), name.size() - prefix.size() - a_tail.size());
    const auto b = factors.find(prefix + module + ".lora_B.weight");
    const auto base = tensors.find(module + ".weight");
    if (name.rfind(prefix, 0) != 0 || b == factors.end() || base == tensors.end())
      throw KeelError(KEEL_ERR_INTERNAL, "model '" + params.model_plugin() + "': adapter " + name +
                                             " has no lora_B or no base tensor " + module + ".weight to merge into");
    const std::vector<float> a_values = params.read_param(factor.second), b_values = params.read_param(b->second.second);
    const int64_t rank = factor.first.external_shape.at(0), in = factor.first.external_shape.at(1);
    const int64_t out = b->second.first.external_shape.at(0);
    std::vector<float>& w = *base->second;
    if (int64_t(w.size()) != out * in)
      throw KeelError(KEEL_ERR_INTERNAL, module + ".weight holds " + std::to_string(w.size()) + " values, not the " +
                                             std::to_string(out) + " x " + std::to_string(in) + " its adapter makes");
    for (int64_t o = 0; o < out; ++o)
      for (int64_t k = 0; k < rank; ++k) {
        const double coefficient = scaling * double(b_values[size_t(o * rank + k)]);
        const float* a_row = a_values.data() + k * in;
        for (int64_t c = 0; c < in; ++c)
          w[size_t(fan_in_fan_out ? c * out + o : o * in + c)] += float(coefficient * double(a_row[c]));
      }
  }
}

// The QAT scheme a model's config names (null when none).
struct QatScheme {
  int32_t bits = 0;
  int64_t group = 0;  // 0: a row
  int32_t activation_bits = 0;  // 0: the inputs were not quantized
  std::vector<std::string> modules;
};

QatScheme qat_scheme(const nlohmann::json& config, const std::string& model) {
  QatScheme s;
  const nlohmann::json q = config.value("keel_qat", nlohmann::json());
  if (!q.is_object()) return s;
  try {
    s.bits = q.at("bits").get<int32_t>();
    s.group = q.at("group_size").get<int64_t>();
    s.modules = q.at("modules").get<std::vector<std::string>>();
    s.activation_bits = q.value("activation_bits", 0);
  } catch (const nlohmann::json::exception& e) {
    throw KeelError(KEEL_ERR_INTERNAL, "model '" + model + "': its keel_qat config is malformed: " + e.what());
  }
  if (s.bits < 2 || s.bits > 8 || s.group < 0)
    throw KeelError(KEEL_ERR_INTERNAL, "model '" + model + "': keel_qat names bits " + std::to_string(s.bits) +
                                           ", group_size " + std::to_string(s.group));
  return s;
}

bool quantized_by(const QatScheme& scheme, const std::string& name) {
  for (const std::string& m : scheme.modules) {
    const std::string tail = "." + m + ".weight";
    if (name.size() > tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0) return true;
  }
  return false;
}

// torchao's symmetric rule, as the backends' fake_quantize_dt: q and one scale per group.
void quantize_rows(const std::vector<float>& w, int64_t rows, int64_t cols, int64_t group, int32_t bits,
                   std::vector<int8_t>* q, std::vector<float>* scales) {
  const float qmin = -std::ldexp(1.0f, bits - 1), qmax = std::ldexp(1.0f, bits - 1) - 1.0f;
  q->resize(w.size());
  scales->resize(size_t(rows * (cols / group)));
  for (int64_t g = 0; g < rows * cols / group; ++g) {
    float amax = 0.0f;
    for (int64_t i = 0; i < group; ++i) amax = std::max(amax, std::fabs(w[size_t(g * group + i)]));
    const float scale = std::max(amax / ((qmax - qmin) / 2.0f), std::numeric_limits<float>::epsilon());
    (*scales)[size_t(g)] = scale;
    const float inverse = 1.0f / scale;
    for (int64_t i = 0; i < group; ++i)
      (*q)[size_t(g * group + i)] = int8_t(std::clamp(std::nearbyint(w[size_t(g * group + i)] * inverse), qmin, qmax));
  }
}

void export_format(ModelParameters& params, const char* format, const std::string& out_safetensors_path,
                   const std::string& config_name, const nlohmann::json& config_overrides = nlohmann::json::object(),
                   bool merged = false, bool quantize = false) {
  const bool model_format = std::string(format) == kFormat;
  const std::filesystem::path out_path(out_safetensors_path);
  std::vector<std::filesystem::path> targets = {out_path, out_path.parent_path() / config_name};
  if (model_format) targets.push_back(out_path.parent_path() / "generation_config.json");
  refuse_unwritable_targets(targets);
  const size_t n = params.info().n_params;
  std::vector<std::vector<float>> buffers;  // kept alive until the file is written
  std::vector<SafetensorsEntry> entries;
  std::vector<bool> entry_transposed;  // per entry: stored as the transpose of Keel's (out, in)
  std::set<std::string> names;
  buffers.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const ExternalLayout layout = layout_of(params, i, format);
    if (layout.name.empty()) continue;
    if (!names.insert(layout.name).second)
      throw KeelError(KEEL_ERR_INTERNAL, "model '" + params.model_plugin() + "' gives two parameters the " +
                                             format + " name " + layout.name);
    std::vector<float> values = params.read_param(i);
    values.resize(size_t(layout.external_rows * layout.cols));  // cuts the padded rows
    if (layout.transpose) values = transposed(values.data(), layout.external_rows, layout.cols);
    buffers.push_back(std::move(values));
    entries.push_back({layout.name, "F32", layout.external_shape, buffers.back().data(), buffers.back().size() * sizeof(float)});
    entry_transposed.push_back(layout.transpose);
  }
  if (merged) {
    std::map<std::string, std::vector<float>*> by_name;
    for (size_t k = 0; k < entries.size(); ++k) by_name[entries[k].name] = &buffers[k];
    merge_adapters(params, by_name);
  }
  if (entries.empty())
    throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "model '" + params.model_plugin() + "' names no tensor in the " + format +
                                                   " format");

  nlohmann::json config;
  try {
    config = keel_support::parse_json("config", params.external_config(format));
  } catch (const keel_support::ConfigError& e) {
    throw KeelError(KEEL_ERR_INTERNAL, "model '" + params.model_plugin() + "': its " + format +
                                           " config is not JSON: " + e.what());
  }
  const QatScheme scheme = model_format ? qat_scheme(config, params.model_plugin()) : QatScheme();
  config.erase("keel_qat");
  std::vector<std::vector<int8_t>> codes;  // kept alive until the file is written
  std::vector<std::vector<float>> scales;
  if (quantize) {
    if (scheme.bits == 0)
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "--quantize: this checkpoint is no quantization-aware training run "
                                                 "(model.qat): it has no scheme to quantize by");
    codes.reserve(entries.size());
    scales.reserve(entries.size());
    const size_t n_entries = entries.size();
    for (size_t k = 0; k < n_entries; ++k) {
      if (!quantized_by(scheme, entries[k].name) || entries[k].shape.size() != 2) continue;
      // Groups run along a row of Keel's (out, in); a Conv1D weight (GPT-2's, stored (in, out))
      // is quantized so and its codes and scales stored transposed like it.
      const bool flipped = entry_transposed[k];
      const int64_t rows = entries[k].shape[flipped ? 1 : 0], cols = entries[k].shape[flipped ? 0 : 1];
      const int64_t group = scheme.group ? scheme.group : cols;
      if (cols % group != 0)
        throw KeelError(KEEL_ERR_INTERNAL, entries[k].name + ": " + std::to_string(cols) + " columns do not divide "
                                           "into groups of " + std::to_string(group));
      codes.emplace_back();
      scales.emplace_back();
      const std::vector<float> rows_first = flipped ? transposed(buffers[k].data(), cols, rows) : std::vector<float>();
      quantize_rows(flipped ? rows_first : buffers[k], rows, cols, group, scheme.bits, &codes.back(), &scales.back());
      std::vector<int64_t> scale_shape = {rows, cols / group};
      if (flipped) {
        codes.back() = transposed(codes.back().data(), rows, cols);
        scales.back() = transposed(scales.back().data(), rows, cols / group);
        scale_shape = {cols / group, rows};
      }
      entries[k].dtype = "I8";
      entries[k].data = codes.back().data();
      entries[k].bytes = codes.back().size();
      entries.push_back({entries[k].name + "_scale", "F32", scale_shape, scales.back().data(),
                         scales.back().size() * sizeof(float)});
    }
    config["quantization_config"] = {
        {"quant_method", "keel_qat"}, {"bits", scheme.bits}, {"group_size", scheme.group},
        {"symmetric", true}, {"modules", scheme.modules}, {"activation_bits", scheme.activation_bits},
        {"activations", scheme.activation_bits ? "each module's input quantized per token, asymmetric (torchao's "
                                                 "per-token rule), when it is served as it was trained"
                                               : "not quantized"},
        {"layout", "<module>.weight: I8 values q; <module>.weight_scale: F32 (out, in / group_size, or 1 per row when "
                   "group_size is 0); the weight is q * scale. A Conv1D weight, stored (in, out), has both "
                   "transposed: scale (in / group_size, out)"}};
  }

  const std::filesystem::path out(out_safetensors_path);
  std::error_code error;
  if (out.has_parent_path() && !std::filesystem::create_directories(out.parent_path(), error) && error)
    throw KeelError(KEEL_ERR_IO, out.parent_path().string() + ": cannot create the folder: " + error.message());
  const std::string temporary = out_safetensors_path + ".tmp-" + std::to_string(::getpid());
  try {
    write_safetensors(temporary, entries, {{"format", "pt"}});
    rename_durably(temporary, out_safetensors_path);
  } catch (...) {
    std::remove(temporary.c_str());
    throw;
  }
  for (const auto& [key, value] : config_overrides.items()) config[key] = value;
  if (model_format) write_special_token_ids(config);
  write_file_atomically((out.parent_path() / config_name).string(), config.dump(2) + "\n");
  if (model_format)
    write_file_atomically((out.parent_path() / "generation_config.json").string(),
                          generation_config(config).dump(2) + "\n");
}

}  // namespace

void export_huggingface(ModelParameters& params, const std::string& out_safetensors_path) {
  export_format(params, kFormat, out_safetensors_path, "config.json");
}

bool has_adapter_format(ModelParameters& params) {
  try {
    params.external_config(kAdapterFormat);
    return true;
  } catch (const KeelError&) {
    return false;
  }
}

void export_quantized(ModelParameters& params, const std::string& out_safetensors_path) {
  // A LoRA run's model is its base with the adapters added: merged, then quantized.
  export_format(params, kFormat, out_safetensors_path, "config.json", nlohmann::json::object(),
                /*merged=*/has_adapter_format(params), /*quantize=*/true);
}

void export_merged(ModelParameters& params, const std::string& out_safetensors_path) {
  export_format(params, kFormat, out_safetensors_path, "config.json", nlohmann::json::object(), /*merged=*/true);
}

void export_adapter(ModelParameters& params, const std::string& out_safetensors_path, const std::string& base) {
  const nlohmann::json base_path = base.empty() ? nlohmann::json() : nlohmann::json(base);
  export_format(params, kAdapterFormat, out_safetensors_path, "adapter_config.json",
                {{"base_model_name_or_path", base_path}});
}

namespace {

constexpr size_t kMaxIndexBytes = size_t(64) << 20;   // a shard index names tensors and files

bool is_folder(const std::string& path) {
  std::error_code error;
  return std::filesystem::is_directory(path, error);
}

// A shard's name from model.safetensors.index.json: a plain file name, so every file read lies
// directly inside the folder the user named.
std::string shard_path(const std::string& folder, const std::string& name, const std::string& index) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\\') != std::string::npos || name.find('\0') != std::string::npos)
    throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "model.init_from: " + index + ": weight_map names \"" + name +
                                                   "\"; a shard must be a file name inside the folder");
  return (std::filesystem::path(folder) / name).string();
}

// The safetensors files model.init_from names: the file itself; in a folder, its
// model.safetensors, else every shard model.safetensors.index.json's weight_map names.
std::vector<std::string> init_files(const std::string& init_from) {
  if (!is_folder(init_from)) return {init_from};
  const std::filesystem::path folder(init_from);
  std::error_code error;
  const std::filesystem::path single = folder / "model.safetensors";
  if (std::filesystem::exists(single, error)) return {single.string()};
  if (std::filesystem::is_symlink(std::filesystem::symlink_status(single, error)))  // a Hub cache's link, its blob gone
    throw KeelError(KEEL_ERR_MISSING_FILE, "model.init_from: " + single.string() + " is a symbolic link to " +
                                            std::filesystem::read_symlink(single, error).string() +
                                            ", which does not exist (an incomplete download?)");
  const std::string index = (folder / "model.safetensors.index.json").string();
  if (!std::filesystem::exists(index, error))
    throw KeelError(KEEL_ERR_NOT_FOUND, "model.init_from: " + init_from + " holds neither model.safetensors nor "
                                        "model.safetensors.index.json");
  const std::vector<unsigned char> bytes = read_regular_file(index, "shard index", Symlinks::follow, kMaxIndexBytes);
  nlohmann::json json;
  try {
    json = keel_support::parse_json(index, std::string(bytes.begin(), bytes.end()));
  } catch (const keel_support::ConfigError& e) {
    throw KeelError(KEEL_ERR_INVALID_ARGUMENT, std::string("model.init_from: ") + e.what());
  }
  if (!json.is_object() || !json.contains("weight_map") || !json.at("weight_map").is_object() ||
      json.at("weight_map").empty())
    throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "model.init_from: " + index + ": expected an object with a non-empty "
                                               "\"weight_map\" of tensor name to shard file");
  std::set<std::string> files;
  for (const auto& entry : json.at("weight_map").items()) {
    if (!entry.value().is_string())
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "model.init_from: " + index + ": weight_map[\"" + entry.key() +
                                                     "\"] is " + entry.value().dump() + "; expected a file name");
    files.insert(shard_path(init_from, entry.value().get<std::string>(), index));
  }
  return std::vector<std::string>(files.begin(), files.end());
}

// Opening a file is where a mistyped model.init_from shows; the message says which key named it.
SafetensorsFile open_init_file(const std::string& safetensors_path) {
  try {
    return SafetensorsFile(safetensors_path);
  } catch (const KeelError& e) {
    throw KeelError(e.code, std::string("model.init_from: ") + e.what());
  }
}

// Where each tensor of the init files is, with its header: the first pass reads every file's
// header (and, for the tied-head check, two tensors), the second reads each file again to copy
// its tensors, so memory holds one shard at a time.
struct StoredTensor {
  size_t file = 0;
  std::string dtype;
  std::vector<int64_t> shape;
};

std::vector<float> tensor_as_f32(const SafetensorsFile& file, const std::string& name) {
  const auto& t = file.tensor(name);
  int64_t count = 1;
  for (int64_t d : t.shape) count *= d;
  std::vector<float> out(static_cast<size_t>(count));
  file.read_as_f32(name, out.data());
  return out;
}

}  // namespace

namespace {

// What one rank takes from the init files: for each of its parameters the stored tensor's name
// ("" when the model does not name it externally) and layout, and which file holds which tensor.
struct ImportPlan {
  std::vector<std::string> paths;
  std::map<std::string, StoredTensor> stored;
  std::vector<ExternalLayout> layouts;
  std::vector<std::string> names;
  std::set<std::string> used;
  std::string tied_name;
};

// A NaN or Inf weight would train to NaN at step 1 and be blamed on the learning rate.
void require_finite(const std::vector<float>& values, const std::string& path, const std::string& name) {
  for (size_t k = 0; k < values.size(); ++k)
    if (!std::isfinite(values[k]))
      throw KeelError(KEEL_ERR_NONFINITE, path + ": tensor \"" + name + "\" holds " +
                                              (std::isnan(values[k]) ? "NaN" : "an infinity") + " at element " +
                                              std::to_string(k) + "; a model cannot start from non-finite weights");
}

// Pass 1, every header: checks everything this rank will write before anything is written, so a
// refused checkpoint leaves the parameters as they were.
ImportPlan plan_import(ModelParameters& params, const std::string& init_from, const char* format) {
  ImportPlan plan;
  plan.paths = init_files(init_from);
  const size_t n = params.info().n_params;
  for (size_t f = 0; f < plan.paths.size(); ++f) {
    const SafetensorsFile file = open_init_file(plan.paths[f]);
    for (const auto& name : file.names()) {
      const auto& t = file.tensor(name);
      if (!plan.stored.emplace(name, StoredTensor{f, t.dtype, t.shape}).second)
        throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "model.init_from: tensor \"" + name + "\" is in both " +
                                                       plan.paths[plan.stored.at(name).file] + " and " + plan.paths[f]);
    }
  }
  auto find_stored = [&](const std::string& name) -> std::string {
    if (plan.stored.count(name)) return name;
    const std::string prefix = "transformer.";  // GPT2Model's names, which the gpt2 download uses
    if (name.rfind(prefix, 0) == 0 && plan.stored.count(name.substr(prefix.size()))) return name.substr(prefix.size());
    return "";
  };
  plan.names.resize(n);
  for (size_t i = 0; i < n; ++i) {
    plan.layouts.push_back(layout_of(params, i, format));
    const ExternalLayout& layout = plan.layouts.back();
    if (layout.name.empty()) continue;
    plan.names[i] = find_stored(layout.name);
    const std::string what = "tensor \"" + layout.name + "\" (Keel's " + layout.keel_name + ")";
    if (plan.names[i].empty())
      throw KeelError(KEEL_ERR_NOT_FOUND, init_from + ": " + what + " is missing; expected shape " +
                                              shape_text(layout.external_shape));
    const StoredTensor& t = plan.stored.at(plan.names[i]);
    if (t.dtype != "F32" && t.dtype != "BF16" && t.dtype != "F16")
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, plan.paths[t.file] + ": " + what + " is " + t.dtype +
                                                     "; F32, BF16 and F16 are read");
    if (t.shape != layout.external_shape)
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT,
                      plan.paths[t.file] + ": " + what + ": expected shape " + shape_text(layout.external_shape) +
                          (layout.transpose ? " (Keel's " + shape_text(layout.keel_shape) + " as " +
                                                     shape_text({layout.external_rows, layout.cols}) + ", transposed)"
                                               : "") +
                          ", found " + shape_text(t.shape) + "; does the model config match the file's?");
    plan.used.insert(plan.names[i]);
    if (params.info().params[i].flags & KEEL_PARAM_TIED) plan.tied_name = plan.names[i];
  }
  // Every value this rank will write is finite, checked before anything is written (a live
  // trainer's load_hf must change nothing when it refuses).
  for (size_t f = 0; f < plan.paths.size(); ++f) {
    std::unique_ptr<SafetensorsFile> file;
    for (size_t i = 0; i < n; ++i) {
      if (plan.names[i].empty() || plan.stored.at(plan.names[i]).file != f) continue;
      if (!file) file = std::make_unique<SafetensorsFile>(open_init_file(plan.paths[f]));
      require_finite(tensor_as_f32(*file, plan.names[i]), plan.paths[f], plan.names[i]);
    }
  }
  return plan;
}

// The files' tensors no rank takes: under pipeline parallelism each stage takes its own layers,
// so only the union over every rank tells a tensor of another stage from one of another model.
// Collective over the world.
void refuse_unknown_tensors(ModelParameters& params, const ImportPlan& plan, const std::string& init_from) {
  std::string mine;
  for (const auto& name : plan.used) mine += name + "\n";
  std::set<std::string> used_anywhere;
  for (const auto& part : gather_strings(params.world(), mine)) {
    size_t at = 0;
    for (size_t next; (next = part.find('\n', at)) != std::string::npos; at = next + 1)
      used_anywhere.insert(part.substr(at, next - at));
  }
  std::vector<std::string> unknown;
  for (const auto& entry : plan.stored)
    if (!used_anywhere.count(entry.first) && !is_ignored_extra(entry.first)) unknown.push_back(entry.first);
  if (unknown.empty()) return;
  std::string list;
  for (size_t k = 0; k < std::min<size_t>(unknown.size(), 5); ++k) list += (k ? ", " : "") + unknown[k];
  if (unknown.size() > 5) list += ", ... (" + std::to_string(unknown.size()) + " in all)";
  throw KeelError(KEEL_ERR_INVALID_ARGUMENT, init_from + ": holds tensors model '" + params.model_plugin() +
                                                 "' does not have: " + list + "; does the model config match the file's?");
}

// A tied model's lm_head.weight, when the checkpoint has one, must equal its embedding.
void check_tied_head(ModelParameters& params, const ImportPlan& plan) {
  if (plan.tied_name.empty() || plan.tied_name == "lm_head.weight" || !plan.stored.count("lm_head.weight")) return;
  const StoredTensor& head = plan.stored.at("lm_head.weight");
  std::vector<float> head_values = tensor_as_f32(open_init_file(plan.paths[head.file]), "lm_head.weight");
  std::vector<float> embedding = tensor_as_f32(open_init_file(plan.paths[plan.stored.at(plan.tied_name).file]), plan.tied_name);
  if (head.shape != plan.stored.at(plan.tied_name).shape || head_values != embedding)
    throw KeelError(KEEL_ERR_INVALID_ARGUMENT, plan.paths[head.file] + ": lm_head.weight differs from " + plan.tied_name +
                                                   ": the file's model has an untied LM head, and model '" +
                                                   params.model_plugin() + "' ties it to the token embedding");
}

}  // namespace

namespace {

// One format's tensors from `init_from` (a file or a folder of the format's files).
void import_format(ModelParameters& params, const std::string& init_from, const char* format) {
  // Every rank checks its own parameters' tensors; all learn whether any rank refused before any
  // writes, so no rank is left in a collective the others skipped.
  ImportPlan plan;
  std::exception_ptr failure;
  try {
    plan = plan_import(params, init_from, format);
    if (std::string(format) == kFormat) check_tied_head(params, plan);
  } catch (...) {
    failure = std::current_exception();
  }
  rethrow_if_any_failed(params.world(), failure, KEEL_ERR_INVALID_ARGUMENT,
                        "model.init_from: " + init_from + ": another rank refused its part (its message says why)");
  try {
    refuse_unknown_tensors(params, plan, init_from);  // collective; each rank judges the union alike
  } catch (...) {
    failure = std::current_exception();
  }
  rethrow_if_any_failed(params.world(), failure, KEEL_ERR_INVALID_ARGUMENT,
                        "model.init_from: " + init_from + ": another rank found tensors no rank takes");

  // Pass 2, file by file: each of this rank's parameters from its tensor, widened to fp32; the
  // strategy keeps the range this rank owns (a ZeRO-3 shard, a pipeline stage's own layers).
  const size_t n = params.info().n_params;
  try {
    for (size_t f = 0; f < plan.paths.size(); ++f) {
      std::unique_ptr<SafetensorsFile> file;
      for (size_t i = 0; i < n; ++i) {
        const ExternalLayout& layout = plan.layouts[i];
        if (layout.name.empty() || plan.stored.at(plan.names[i]).file != f) continue;
        if (!file) file = std::make_unique<SafetensorsFile>(open_init_file(plan.paths[f]));
        std::vector<float> external = tensor_as_f32(*file, plan.names[i]);
        if (layout.transpose) external = transposed(external.data(), layout.cols, layout.external_rows);
        std::vector<float> values(size_t(params.global_numel(i)), 0.0f);  // rows the format lacks stay zero
        std::copy(external.begin(), external.end(), values.begin());
        params.write_param(i, values);
      }
    }
    failure = nullptr;
  } catch (...) {
    failure = std::current_exception();
  }
  rethrow_if_any_failed(params.world(), failure, KEEL_ERR_INVALID_ARGUMENT,
                        "model.init_from: " + init_from + ": another rank could not take its part (its message says why)");
}

}  // namespace

void import_huggingface(ModelParameters& params, const std::string& init_from) {
  // An adapter folder: its base first, then the adapters under PEFT's keys.
  if (const std::optional<AdapterFolder> adapter = adapter_folder(init_from)) {
    if (!has_adapter_format(params))
      throw KeelError(KEEL_ERR_INVALID_CONFIG, "model.init_from: " + init_from + " is a PEFT adapter folder, but model '" +
                                                   params.model_plugin() + "' has no adapters (set model.lora)");
    import_format(params, adapter->base, kFormat);
    import_format(params, adapter->adapter_file, kAdapterFormat);
    return;
  }
  import_format(params, init_from, kFormat);
}

}  // namespace keel
