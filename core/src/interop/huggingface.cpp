// Export to and import from Hugging Face's layout. The model plugin says, per parameter, the
// external name, whether the tensor is stored as a 2-D transpose and how many leading rows exist
// outside Keel (a padded vocabulary is cut); this file only moves bytes accordingly (layout_of
// says how Keel's extra leading dimensions, declared for tensor parallelism, are merged).
#include "interop/huggingface.h"

#include <unistd.h>

#include <keel_support/json_parse.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <vector>

#include "host/errors.h"
#include "io/durable_files.h"
#include "io/safetensors.h"
#include "train/model_parameters.h"

namespace keel {

namespace {

constexpr const char* kFormat = "huggingface";

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

ExternalLayout layout_of(ModelParameters& params, size_t index) {
  const keel_param_spec& spec = params.info().params[index];
  const keel_external_tensor ext = params.external_tensor(kFormat, index);
  ExternalLayout out;
  out.keel_name = spec.name;
  out.keel_shape.assign(spec.global_shape, spec.global_shape + spec.ndim);
  if (!ext.name) return out;
  out.name = ext.name;
  out.transpose = ext.transpose != 0;
  // Keel may give a tensor leading dimensions the external format does not have, so that a
  // tensor-parallel piece is a box: gpt's qkv is (3, C, C), its bias (3, C). A transposed tensor
  // is the 2-D transpose of Keel's viewed as (all leading dims merged, last dim); a flattened one
  // (keel_external_tensor.flatten, 0.6) is Keel's as one dimension.
  const int64_t numel = params.global_numel(index);
  const int64_t last = spec.ndim > 0 ? spec.global_shape[spec.ndim - 1] : 1;
  const int64_t leading = spec.ndim == 0 ? 1 : out.transpose ? (last > 0 ? numel / last : 0) : spec.global_shape[0];
  const bool flat = ext.struct_size >= offsetof(keel_external_tensor, flatten) + sizeof ext.flatten && ext.flatten != 0;
  out.external_rows = ext.rows >= 0 ? ext.rows : leading;
  out.cols = leading > 0 ? numel / leading : 0;
  if (out.external_rows > leading || (out.transpose && spec.ndim < 2) || (out.transpose && flat) ||
      (ext.rows >= 0 && spec.ndim == 0) ||
      (ext.rows >= 0 && (spec.ndim > 2 || flat)))
    throw KeelError(KEEL_ERR_INTERNAL, "model '" + params.model_plugin() + "': external layout of " + spec.name +
                                           " (rows " + std::to_string(ext.rows) + ", transpose " +
                                           std::to_string(ext.transpose) + ") does not fit its shape " +
                                           shape_text(out.keel_shape));
  if (out.transpose) {
    out.external_shape = {out.cols, out.external_rows};
  } else if (flat) {
    out.external_shape = {numel};
  } else {
    out.external_shape = out.keel_shape;
    if (spec.ndim > 0) out.external_shape[0] = out.external_rows;
  }
  return out;
}

// (rows, cols) row-major into (cols, rows) row-major.
std::vector<float> transposed(const float* in, int64_t rows, int64_t cols) {
  std::vector<float> out(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[size_t(c * rows + r)] = in[r * cols + c];
  return out;
}

// The file's name for `name`: as written, or without "transformer." (GPT2Model's names, which
// the gpt2 download on the Hub uses). Empty when neither is there.
std::string stored_name(const SafetensorsFile& file, const std::string& name) {
  if (file.has(name)) return name;
  const std::string prefix = "transformer.";
  if (name.rfind(prefix, 0) == 0 && file.has(name.substr(prefix.size()))) return name.substr(prefix.size());
  return "";
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Tensors transformers writes besides the parameters: the causal-mask buffers of older
// versions, and the LM head, which GPT-2 ties to the token embedding.
bool is_ignored_extra(const std::string& name) {
  return name == "lm_head.weight" || ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias");
}

// A tied model's lm_head.weight must equal its embedding (the parameter flagged KEEL_PARAM_TIED);
// one that differs is a model whose untied head Keel's tied one cannot represent.
void check_tied_lm_head(ModelParameters& params, const SafetensorsFile& file) {
  if (!file.has("lm_head.weight")) return;
  const keel_model_info& info = params.info();
  for (size_t i = 0; i < info.n_params; ++i) {
    if (!(info.params[i].flags & KEEL_PARAM_TIED)) continue;
    const keel_external_tensor ext = params.external_tensor(kFormat, i);
    const std::string embedding = ext.name ? stored_name(file, ext.name) : "";
    if (embedding.empty() || embedding == "lm_head.weight") return;
    const auto& head = file.tensor("lm_head.weight");
    const auto& tied = file.tensor(embedding);
    if (head.dtype != tied.dtype || head.shape != tied.shape || std::memcmp(head.data, tied.data, head.bytes) != 0)
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, file.path() + ": lm_head.weight differs from " + embedding +
                                                     ": the file's model has an untied LM head, and model '" +
                                                     params.model_plugin() + "' ties it to the token embedding");
    return;
  }
}

}  // namespace

void export_huggingface(ModelParameters& params, const std::string& out_safetensors_path) {
  const size_t n = params.info().n_params;
  std::vector<std::vector<float>> buffers;  // kept alive until the file is written
  std::vector<SafetensorsEntry> entries;
  std::set<std::string> names;
  buffers.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const ExternalLayout layout = layout_of(params, i);
    if (layout.name.empty()) continue;
    if (!names.insert(layout.name).second)
      throw KeelError(KEEL_ERR_INTERNAL, "model '" + params.model_plugin() + "' gives two parameters the " +
                                             kFormat + " name " + layout.name);
    std::vector<float> values = params.read_param(i);
    values.resize(size_t(layout.external_rows * layout.cols));  // cuts the padded rows
    if (layout.transpose) values = transposed(values.data(), layout.external_rows, layout.cols);
    buffers.push_back(std::move(values));
    entries.push_back({layout.name, "F32", layout.external_shape, buffers.back().data(), buffers.back().size() * sizeof(float)});
  }

  nlohmann::json config;
  try {
    config = keel_support::parse_json("config", params.external_config(kFormat));
  } catch (const keel_support::ConfigError& e) {
    throw KeelError(KEEL_ERR_INTERNAL, "model '" + params.model_plugin() + "': its " + kFormat +
                                           " config is not JSON: " + e.what());
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
  write_file_atomically((out.parent_path() / "config.json").string(), config.dump(2) + "\n");
}

namespace {

// Opening the file is where a mistyped model.init_from shows; the message says which key named it.
SafetensorsFile open_init_file(const std::string& safetensors_path) {
  try {
    return SafetensorsFile(safetensors_path);
  } catch (const KeelError& e) {
    throw KeelError(e.code, std::string("model.init_from: ") + e.what());
  }
}

}  // namespace

void import_huggingface(ModelParameters& params, const std::string& safetensors_path) {
  const SafetensorsFile file = open_init_file(safetensors_path);
  const size_t n = params.info().n_params;
  // Check everything before writing anything, so a refused file leaves the parameters as they were.
  std::vector<ExternalLayout> layouts;
  std::vector<std::string> stored;
  std::set<std::string> used;
  for (size_t i = 0; i < n; ++i) {
    layouts.push_back(layout_of(params, i));
    const ExternalLayout& layout = layouts.back();
    stored.push_back(layout.name.empty() ? "" : stored_name(file, layout.name));
    if (layout.name.empty()) continue;
    const std::string what = "tensor \"" + layout.name + "\" (Keel's " + layout.keel_name + ")";
    if (stored.back().empty())
      throw KeelError(KEEL_ERR_NOT_FOUND, safetensors_path + ": " + what + " is missing; expected shape " +
                                              shape_text(layout.external_shape));
    const auto& tensor = file.tensor(stored.back());
    if (tensor.dtype != "F32")
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, safetensors_path + ": " + what + " is " + tensor.dtype +
                                                     "; only F32 is read");
    if (tensor.shape != layout.external_shape)
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT,
                      safetensors_path + ": " + what + ": expected shape " + shape_text(layout.external_shape) +
                          (layout.transpose ? " (Keel's " + shape_text(layout.keel_shape) + " as " +
                                                     shape_text({layout.external_rows, layout.cols}) + ", transposed)"
                                               : "") +
                          ", found " + shape_text(tensor.shape) + "; does the model config match the file's?");
    used.insert(stored.back());
  }
  std::vector<std::string> unknown;
  for (const auto& name : file.names())
    if (!used.count(name) && !is_ignored_extra(name)) unknown.push_back(name);
  if (!unknown.empty()) {
    std::string list;
    for (size_t k = 0; k < std::min<size_t>(unknown.size(), 5); ++k) list += (k ? ", " : "") + unknown[k];
    if (unknown.size() > 5) list += ", ... (" + std::to_string(unknown.size()) + " in all)";
    throw KeelError(KEEL_ERR_INVALID_ARGUMENT, safetensors_path + ": holds tensors model '" +
                                                   params.model_plugin() + "' does not have: " + list +
                                                   "; does the model config match the file's?");
  }
  check_tied_lm_head(params, file);

  for (size_t i = 0; i < n; ++i) {
    const ExternalLayout& layout = layouts[i];
    if (layout.name.empty()) continue;
    const int64_t count = layout.external_rows * layout.cols;
    std::vector<float> external(static_cast<size_t>(count));
    file.read_f32(stored[i], 0, count, external.data());
    if (layout.transpose) external = transposed(external.data(), layout.cols, layout.external_rows);
    std::vector<float> values(size_t(params.global_numel(i)), 0.0f);  // rows the format lacks stay zero
    std::copy(external.begin(), external.end(), values.begin());
    params.write_param(i, values);
  }
}

}  // namespace keel
