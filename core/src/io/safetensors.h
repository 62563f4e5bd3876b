// safetensors files (an 8-byte little-endian header length, a JSON header, raw little-endian
// data): the tensor format of checkpoints, exports and test probes.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <functional>
#include <string>
#include <vector>

#include "io/regular_file.h"

namespace keel {

// The most header bytes the reader takes: Hugging Face's own bound (safetensors' MAX_HEADER_SIZE).
constexpr uint64_t kMaxSafetensorsHeaderBytes = 100000000;

struct SafetensorsEntry {
  std::string name;
  std::string dtype;              // "F32", "I32"
  std::vector<int64_t> shape;
  const void* data = nullptr;     // borrowed until write_safetensors returns
  size_t bytes = 0;
  // When data is NULL: called once, as the writer reaches this entry, for exactly `bytes` bytes.
  // A checkpoint streams its tensors through this, so it never holds a whole model in memory (an
  // offloaded model may be larger than RAM).
  std::function<std::vector<float>()> produce;
};

// Writes the file in one pass; metadata values must be strings. The file is fsync'ed before
// returning, so a caller that renames it afterwards never exposes a partial file.
void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                       const nlohmann::json& metadata = nlohmann::json::object());

// A whole safetensors file read into memory and checked as Hugging Face's reader checks it:
// header length (at most kMaxSafetensorsHeaderBytes), JSON, dtypes, shapes against byte ranges,
// and data_offsets that, sorted, tile the data exactly (from byte 0, no gap, no overlap, ending
// where the file ends). Every error names the file and what is wrong.
class SafetensorsFile {
 public:
  // Reads `path` (a regular file only: a FIFO or device is refused, never waited on). The length
  // and the header are read and checked first, the data only once the header's tensors tile it,
  // so a bogus number never makes it allocate; a file larger than memory is refused by its size.
  explicit SafetensorsFile(const std::string& path, Symlinks symlinks = Symlinks::follow);
  // Parses bytes already in memory; `path` names them in errors.
  SafetensorsFile(const std::string& path, std::vector<unsigned char> bytes);
  struct Tensor {
    std::string dtype;
    std::vector<int64_t> shape;
    const unsigned char* data = nullptr;
    size_t bytes = 0;
    uint64_t data_offset = 0;  // where its bytes begin, from the start of the data (data_offsets[0])
  };
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  // Throws KeelError(KEEL_ERR_NOT_FOUND) naming the file when absent.
  const Tensor& tensor(const std::string& name) const;
  // Copies an F32 tensor (or elements [begin, begin+count) of it) into out.
  void read_f32(const std::string& name, int64_t begin, int64_t count, float* out) const;
  // Copies a whole F32, BF16 or F16 tensor into out as fp32 (exactly: each is a subset of fp32).
  void read_as_f32(const std::string& name, float* out) const;
  const nlohmann::json& metadata() const { return metadata_; }
  std::vector<std::string> names() const;
  const std::string& path() const { return path_; }
  // The file's bytes as read: a caller that checksums them has checked exactly what was parsed.
  const std::vector<unsigned char>& file_bytes() const { return bytes_; }

 private:
  uint64_t checked_header_bytes(uint64_t file_bytes) const;  // from the first 8 of bytes_
  void parse_header(uint64_t header_bytes, uint64_t file_bytes);
  void point_tensors_at_data(uint64_t header_bytes);

  std::string path_;
  std::vector<unsigned char> bytes_;
  std::map<std::string, Tensor> tensors_;
  nlohmann::json metadata_ = nlohmann::json::object();
};

}  // namespace keel
