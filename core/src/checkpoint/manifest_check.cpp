// One pass over the manifest, each rule with the JSON path it failed at. The coverage rule
// sorts each (tensor, kind)'s slices by begin and walks them: the next must start exactly where
// the previous ended, the first at 0 and the last end at the tensor's element count.
#include "checkpoint/manifest_check.h"

#include "checkpoint/checkpoint.h"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "host/errors.h"
#include "train/run_position.h"

namespace keel {
namespace {

class ManifestReader {
 public:
  explicit ManifestReader(std::string manifest_path) : manifest_path_(std::move(manifest_path)) {}

  [[noreturn]] void fail(const std::string& json_path, const std::string& why) const {
    throw KeelError(KEEL_ERR_IO, manifest_path_ + ": " + json_path + ": " + why);
  }

  // parent[key], or "<json_path>: missing; expected <expected>".
  const nlohmann::json& member(const nlohmann::json& parent, const std::string& key, const std::string& json_path,
                               const std::string& expected) const {
    auto found = parent.find(key);
    if (found == parent.end()) fail(json_path, "missing; expected " + expected);
    return *found;
  }

  const nlohmann::json& object(const nlohmann::json& parent, const std::string& key, const std::string& json_path) const {
    const nlohmann::json& value = member(parent, key, json_path, "an object");
    if (!value.is_object()) fail(json_path, "expected an object, found " + shown(value));
    return value;
  }

  const nlohmann::json& array(const nlohmann::json& parent, const std::string& key, const std::string& json_path) const {
    const nlohmann::json& value = member(parent, key, json_path, "a list");
    if (!value.is_array()) fail(json_path, "expected a list, found " + shown(value));
    return value;
  }

  std::string string(const nlohmann::json& parent, const std::string& key, const std::string& json_path) const {
    const nlohmann::json& value = member(parent, key, json_path, "a string");
    if (!value.is_string()) fail(json_path, "expected a string, found " + shown(value));
    return value.get<std::string>();
  }

  // An integer in [min, max]: never a fraction, and never converted before it is known to fit.
  int64_t integer(const nlohmann::json& value, int64_t min, int64_t max, const std::string& json_path) const {
    const std::string range = "expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
    if (value.is_number_unsigned()) {
      if (value.get<uint64_t>() > uint64_t(max)) fail(json_path, value.dump() + " is out of range; " + range);
      return int64_t(value.get<uint64_t>());
    }
    if (!value.is_number_integer()) fail(json_path, range + ", found " + shown(value));
    const int64_t v = value.get<int64_t>();
    if (v < min || v > max) fail(json_path, std::to_string(v) + " is out of range; " + range);
    return v;
  }

  int64_t integer(const nlohmann::json& parent, const std::string& key, int64_t min, int64_t max,
                  const std::string& json_path) const {
    return integer(member(parent, key, json_path, "an integer"), min, max, json_path);
  }

  static std::string shown(const nlohmann::json& value) {
    std::string text = value.dump();
    if (text.size() > 60) text = text.substr(0, 57) + "...";
    return text;
  }

 private:
  std::string manifest_path_;
};

bool is_crc_text(const std::string& text) {
  return text.size() == 8 && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// "param" → -1, "state3" → 3 (no sign, no leading zeros); -2 when neither.
int64_t kind_index(const std::string& kind) {
  if (kind == "param") return -1;
  const std::string digits = kind.rfind("state", 0) == 0 ? kind.substr(5) : "";
  if (digits.empty() || digits.size() > 6 || (digits.size() > 1 && digits[0] == '0') ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -2;
  return std::stoll(digits);
}

// A slice: flat range [begin, end) of the box offset + shape of its tensor (format 1: the whole
// tensor).
struct Piece {
  std::vector<int64_t> offset, shape;
  int64_t begin, end;
  size_t slice;  // index in slices, for messages
};

int64_t volume(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t extent : shape) n *= extent;
  return n;
}

bool boxes_meet(const Piece& a, const Piece& b) {
  for (size_t d = 0; d < a.shape.size(); ++d)
    if (std::max(a.offset[d], b.offset[d]) >= std::min(a.offset[d] + a.shape[d], b.offset[d] + b.shape[d])) return false;
  return true;
}

std::string box_text(const Piece& p) {
  std::string text = "box offset [";
  for (size_t d = 0; d < p.offset.size(); ++d) text += (d ? ", " : "") + std::to_string(p.offset[d]);
  text += "] shape [";
  for (size_t d = 0; d < p.shape.size(); ++d) text += (d ? ", " : "") + std::to_string(p.shape[d]);
  return text + "]";
}

}  // namespace

bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

int64_t manifest_param_elements(const nlohmann::json& param) {
  int64_t elements = 1;
  for (const auto& size : param.at("shape")) elements *= size.get<int64_t>();
  return elements;
}

namespace {

// The manifest's parameters: each name's element count and shape.
struct ManifestParams {
  std::map<std::string, int64_t> elements_of;
  std::map<std::string, std::vector<int64_t>> shape_of;
  std::set<std::string> frozen;  // saved with no optimizer state (params.h KEEL_PARAM_FROZEN)
};

// The run's fields: position, config, strategy, mesh, data position, optimizer. Returns the
// optimizer's state slot count.
int64_t check_run_fields(const ManifestReader& r, const nlohmann::json& manifest) {
  const int64_t step = r.integer(manifest, "step", 0, kMaxManifestCount, "step");
  r.integer(manifest, "tokens_seen", 0, kMaxManifestCount, "tokens_seen");
  // The run's config: its model section names the network (inspect shows it, export rebuilds it).
  r.string(r.object(r.object(manifest, "config", "config"), "model", "config.model"), "plugin", "config.model.plugin");
  r.string(r.object(manifest, "strategy", "strategy"), "plugin", "strategy.plugin");
  const nlohmann::json& mesh = r.object(manifest, "mesh", "mesh");
  const int64_t dp = r.integer(mesh, "dp", 1, INT32_MAX, "mesh.dp");
  for (const char* axis : {"tp", "pp", "ep"})  // ep from 0.19: a resume compares them with its own
    if (mesh.contains(axis)) r.integer(mesh, axis, 1, INT32_MAX, std::string("mesh.") + axis);
  r.object(manifest, "data_state", "data_state");
  if (manifest.contains("replica_positions")) {  // replicas that stepped on their own: one entry each, in dp order
    const nlohmann::json& positions = r.array(manifest, "replica_positions", "replica_positions");
    if (int64_t(positions.size()) != dp)
      r.fail("replica_positions", "expected one entry for each of mesh.dp's " + std::to_string(dp) + " replicas, found " +
                                      std::to_string(positions.size()));
    int64_t all_steps = 0;  // the run's step is every replica's steps over dp (the bound keeps the sum in range)
    for (size_t i = 0; i < positions.size(); ++i) {
      const std::string at = "replica_positions[" + std::to_string(i) + "]";
      const nlohmann::json& entry = positions[i];
      if (!entry.is_object()) r.fail(at, "expected an object, found " + ManifestReader::shown(entry));
      r.integer(entry, "dp_rank", int64_t(i), int64_t(i), at + ".dp_rank");
      all_steps += r.integer(entry, "replica_step", 0, kMaxManifestCount / dp, at + ".replica_step");
      r.integer(entry, "samples_taken", 0, kMaxManifestCount / dp, at + ".samples_taken");
    }
    if (all_steps / dp != step)
      r.fail("replica_positions", "the replicas' " + std::to_string(all_steps) + " steps over " + std::to_string(dp) +
                                      " replicas do not make the run's step " + std::to_string(step));
  }
  if (manifest.contains("data_positions")) {  // a data plugin's text per rank, in world-rank order
    const int64_t world = r.integer(r.object(manifest, "mesh", "mesh"), "world_size", 1, INT32_MAX, "mesh.world_size");
    const nlohmann::json& positions = r.array(manifest, "data_positions", "data_positions");
    if (int64_t(positions.size()) != world)
      r.fail("data_positions", "expected one entry for each of mesh.world_size's " + std::to_string(world) +
                                   " ranks, found " + std::to_string(positions.size()));
    for (size_t i = 0; i < positions.size(); ++i) {
      const std::string at = "data_positions[" + std::to_string(i) + "]";
      if (!positions[i].is_string()) r.fail(at, "expected a string, found " + ManifestReader::shown(positions[i]));
      if (int64_t(positions[i].get_ref<const std::string&>().size()) > kMaxDataPositionBytes)
        r.fail(at, "longer than " + std::to_string(kMaxDataPositionBytes) + " bytes");
    }
  }
  const nlohmann::json& optimizer = r.object(manifest, "optimizer", "optimizer");
  r.string(optimizer, "plugin", "optimizer.plugin");
  return r.integer(optimizer, "n_state_slots", 0, kMaxStateSlots, "optimizer.n_state_slots");
}

ManifestParams read_params(const ManifestReader& r, const nlohmann::json& manifest) {
  ManifestParams out;
  std::map<std::string, int64_t>& elements_of = out.elements_of;
  std::map<std::string, std::vector<int64_t>>& shape_of = out.shape_of;
  int64_t total_elements = 0;
  const nlohmann::json& params = r.array(manifest, "params", "params");
  if (params.empty()) r.fail("params", "empty; a checkpoint lists every parameter of its model");
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string at = "params[" + std::to_string(i) + "]";
    if (!params[i].is_object()) r.fail(at, "expected an object, found " + ManifestReader::shown(params[i]));
    const std::string name = r.string(params[i], "name", at + ".name");
    if (name.empty()) r.fail(at + ".name", "empty");
    const nlohmann::json& shape = r.array(params[i], "shape", at + ".shape");
    if (shape.size() > size_t(kMaxTensorDims))
      r.fail(at + ".shape", std::to_string(shape.size()) + " dimensions; expected at most " + std::to_string(kMaxTensorDims));
    int64_t elements = 1;
    for (size_t d = 0; d < shape.size(); ++d) {
      const int64_t size = r.integer(shape[d], 0, kMaxTensorElements, at + ".shape[" + std::to_string(d) + "]");
      if (size != 0 && elements > kMaxTensorElements / size)
        r.fail(at + ".shape", shape.dump() + " holds more than " + std::to_string(kMaxTensorElements) + " elements");
      elements *= size;
    }
    if (!elements_of.emplace(name, elements).second) r.fail(at + ".name", "\"" + name + "\" is listed twice");
    if (params[i].contains("frozen")) {
      if (!params[i].at("frozen").is_boolean())
        r.fail(at + ".frozen", "expected true or false, found " + ManifestReader::shown(params[i].at("frozen")));
      if (params[i].at("frozen").get<bool>()) out.frozen.insert(name);
    }
    for (const auto& size : shape) shape_of[name].push_back(size.get<int64_t>());
    total_elements += elements;
    if (total_elements > kMaxTensorElements)
      r.fail("params", "more than " + std::to_string(kMaxTensorElements) + " elements in all");
  }

  return out;
}

// The files every read must go through, by name, each with its size and checksum.
std::set<std::string> read_files(const ManifestReader& r, const nlohmann::json& manifest) {
  std::set<std::string> files;
  const nlohmann::json& file_list = r.array(manifest, "files", "files");
  for (size_t i = 0; i < file_list.size(); ++i) {
    const std::string at = "files[" + std::to_string(i) + "]";
    if (!file_list[i].is_object()) r.fail(at, "expected an object, found " + ManifestReader::shown(file_list[i]));
    const std::string name = r.string(file_list[i], "name", at + ".name");
    if (!is_plain_file_name(name))
      r.fail(at + ".name", "\"" + name + "\" is not a plain file name; expected a file directly inside the checkpoint "
                                         "folder (no '/', not \".\" or \"..\")");
    if (!files.insert(name).second) r.fail(at + ".name", "\"" + name + "\" is listed twice");
    r.integer(file_list[i], "bytes", 0, kMaxManifestCount, at + ".bytes");
    const std::string crc = r.string(file_list[i], "crc32c", at + ".crc32c");
    if (!is_crc_text(crc)) r.fail(at + ".crc32c", "\"" + crc + "\" is not 8 lowercase hex digits");
  }

  return files;
}

// The records of named arrays a plugin keeps beside its parameters, under `section`: a strategy's
// own per-rank arrays ("strategy_own_state", ABI 0.5, with their rank) and a model's rule-moved
// arrays ("model_state", ABI 0.19); each absent from older checkpoints.
void check_array_records(const ManifestReader& r, const nlohmann::json& manifest, const char* section, bool ranked,
                         const std::set<std::string>& files) {
  if (!manifest.contains(section)) return;
  const nlohmann::json& records = r.array(manifest, section, section);
  for (size_t i = 0; i < records.size(); ++i) {
    const std::string at = std::string(section) + "[" + std::to_string(i) + "]";
    if (!records[i].is_object()) r.fail(at, "expected an object, found " + ManifestReader::shown(records[i]));
    if (ranked) {
      r.integer(records[i], "rank", 0, INT32_MAX, at + ".rank");
      if (records[i].contains("tp_rank")) r.integer(records[i], "tp_rank", 0, INT32_MAX, at + ".tp_rank");
    }
    r.string(records[i], "name", at + ".name");
    r.integer(records[i], "count", 0, kMaxTensorElements, at + ".count");
    r.string(records[i], "key", at + ".key");
    const std::string file = r.string(records[i], "file", at + ".file");
    if (!files.count(file))
      r.fail(at + ".file", "\"" + file + "\" is not listed in \"files\"; every file read must be listed there "
                                         "with its size and checksum");
  }
}

void check_own_state_records(const ManifestReader& r, const nlohmann::json& manifest, const std::set<std::string>& files) {
  check_array_records(r, manifest, "strategy_own_state", true, files);
  check_array_records(r, manifest, "model_state", false, files);
}

// Every slice, in range of its tensor and its file listed, grouped by (tensor, kind).
std::map<std::pair<std::string, int64_t>, std::vector<Piece>> read_slices(const ManifestReader& r,
                                                                           const nlohmann::json& manifest,
                                                                           ManifestParams& params, int64_t slots,
                                                                           int64_t format_version,
                                                                           const std::set<std::string>& files) {
  const std::map<std::string, int64_t>& elements_of = params.elements_of;
  std::map<std::string, std::vector<int64_t>>& shape_of = params.shape_of;
  std::map<std::pair<std::string, int64_t>, std::vector<Piece>> pieces;
  const nlohmann::json& slices = r.array(manifest, "slices", "slices");
  for (size_t i = 0; i < slices.size(); ++i) {
    const std::string at = "slices[" + std::to_string(i) + "]";
    const nlohmann::json& slice = slices[i];
    if (!slice.is_object()) r.fail(at, "expected an object, found " + ManifestReader::shown(slice));
    const std::string tensor = r.string(slice, "tensor", at + ".tensor");
    auto param = elements_of.find(tensor);
    if (param == elements_of.end()) r.fail(at + ".tensor", "\"" + tensor + "\" is not one of the manifest's params");
    const std::string kind = r.string(slice, "kind", at + ".kind");
    const int64_t kind_number = kind_index(kind);
    if (kind_number < -1 || kind_number >= slots)
      r.fail(at + ".kind", "\"" + kind + "\"; expected \"param\"" +
                               (slots > 0 ? " or \"state0\" to \"state" + std::to_string(slots - 1) + "\"" : std::string()) +
                               " (optimizer.n_state_slots is " + std::to_string(slots) + ")");
    // Format 2: the slice's box inside the tensor; format 1: the whole tensor.
    const std::vector<int64_t>& tensor_shape = shape_of[tensor];
    Piece piece{std::vector<int64_t>(tensor_shape.size(), 0), tensor_shape, 0, 0, i};
    if (format_version >= 2) {
      const nlohmann::json& offset = r.array(slice, "offset", at + ".offset");
      const nlohmann::json& shape = r.array(slice, "shape", at + ".shape");
      if (offset.size() != tensor_shape.size() || shape.size() != tensor_shape.size())
        r.fail(at, "offset and shape have " + std::to_string(offset.size()) + " and " + std::to_string(shape.size()) +
                       " entries; \"" + tensor + "\" has " + std::to_string(tensor_shape.size()) + " dimensions");
      for (size_t d = 0; d < tensor_shape.size(); ++d) {
        const std::string dim = "[" + std::to_string(d) + "]";
        piece.offset[d] = r.integer(offset[d], 0, tensor_shape[d], at + ".offset" + dim);
        piece.shape[d] = r.integer(shape[d], 0, tensor_shape[d] - piece.offset[d], at + ".shape" + dim);
      }
    }
    const int64_t box_elements = volume(piece.shape);
    const int64_t begin = r.integer(slice, "begin", 0, box_elements, at + ".begin");
    const int64_t end = r.integer(slice, "end", 0, box_elements, at + ".end");
    if (end <= begin)
      r.fail(at, "[begin " + std::to_string(begin) + ", end " + std::to_string(end) + ") is empty; expected begin < end");
    const std::string file = r.string(slice, "file", at + ".file");
    if (!files.count(file))
      r.fail(at + ".file", "\"" + file + "\" is not listed in \"files\"; every file a slice reads must be listed there "
                                         "with its size and checksum");
    r.string(slice, "key", at + ".key");
    piece.begin = begin;
    piece.end = end;
    pieces[{tensor, kind_number}].push_back(std::move(piece));
  }

  return pieces;
}

// The slices of each (tensor, kind) tile it exactly: by flat range within each box, and the
// boxes disjoint with volumes adding up to the tensor.
void check_tiling(const ManifestReader& r, ManifestParams& params, int64_t slots,
                  const std::map<std::pair<std::string, int64_t>, std::vector<Piece>>& pieces) {
  const std::map<std::string, int64_t>& elements_of = params.elements_of;
  std::map<std::string, std::vector<int64_t>>& shape_of = params.shape_of;
  for (const auto& [name, elements] : elements_of) {
    if (elements == 0) continue;
    const int64_t kinds = params.frozen.count(name) ? 0 : slots;  // a frozen tensor has no state
    for (int64_t kind = -1; kind < kinds; ++kind) {
      const std::string kind_name = kind < 0 ? "param" : "state" + std::to_string(kind);
      const std::string what = "the " + kind_name + " slices of \"" + name + "\"";
      auto found = pieces.find({name, kind});
      if (found == pieces.end()) r.fail("slices", what + ": none; expected slices covering its " + std::to_string(elements) + " elements");
      // Slices of one box tile it by flat range; the boxes tile the tensor (disjoint, and their
      // volumes add up to it).
      std::map<std::pair<std::vector<int64_t>, std::vector<int64_t>>, std::vector<const Piece*>> by_box;
      for (const Piece& piece : found->second) by_box[{piece.offset, piece.shape}].push_back(&piece);
      int64_t boxes_volume = 0;
      std::vector<const Piece*> boxes;
      // Real layouts have a box per tp rank; bounding the count bounds the pairwise check below.
      if (by_box.size() > size_t(kMaxBoxesPerTensor))
        r.fail("slices", what + ": " + std::to_string(by_box.size()) + " distinct boxes; expected at most " +
                             std::to_string(kMaxBoxesPerTensor) + " (one per tensor-parallel rank)");
      for (auto& [box, sorted] : by_box) {
        std::sort(sorted.begin(), sorted.end(), [](const Piece* a, const Piece* b) { return a->begin < b->begin; });
        const int64_t box_elements = volume(box.second);
        const std::string in_box = box.second == shape_of[name] ? "" : " in " + box_text(*sorted[0]);
        int64_t next = 0;
        for (const Piece* piece : sorted) {
          const std::string at = "slices[" + std::to_string(piece->slice) + "]";
          if (piece->begin < next)
            r.fail(at, what + " overlap" + in_box + ": [" + std::to_string(piece->begin) + ", " + std::to_string(piece->end) +
                           ") starts before element " + std::to_string(next) + ", where the previous slice ended");
          if (piece->begin > next)
            r.fail(at, what + " leave a gap" + in_box + ": elements [" + std::to_string(next) + ", " +
                           std::to_string(piece->begin) + ") are in no slice");
          next = piece->end;
        }
        if (next != box_elements)
          r.fail("slices", what + " leave a gap" + in_box + ": elements [" + std::to_string(next) + ", " +
                               std::to_string(box_elements) + ") are in no slice");
        for (const Piece* other : boxes)
          if (boxes_meet(*other, *sorted[0]))
            r.fail("slices[" + std::to_string(sorted[0]->slice) + "]",
                   what + " overlap: " + box_text(*sorted[0]) + " meets " + box_text(*other) + " of slices[" +
                       std::to_string(other->slice) + "]");
        boxes.push_back(sorted[0]);
        boxes_volume += box_elements;
      }
      if (boxes_volume != elements)
        r.fail("slices", what + " leave a gap: their boxes hold " + std::to_string(boxes_volume) + " of the tensor's " +
                             std::to_string(elements) + " elements");
    }
  }
}

}  // namespace

void check_manifest_structure(const nlohmann::json& manifest, const std::string& manifest_path) {
  const ManifestReader r(manifest_path);
  if (!manifest.is_object()) r.fail("(top level)", "expected an object, found " + ManifestReader::shown(manifest));
  const int64_t slots = check_run_fields(r, manifest);
  const int64_t format_version = r.integer(manifest, "format_version", kOldestCheckpointFormatVersion,
                                           kCheckpointFormatVersion, "format_version");
  ManifestParams params = read_params(r, manifest);
  const std::set<std::string> files = read_files(r, manifest);
  check_own_state_records(r, manifest, files);
  check_tiling(r, params, slots, read_slices(r, manifest, params, slots, format_version, files));
}

}  // namespace keel
