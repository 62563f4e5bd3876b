// The embedded default corpus: the bytes of the Python standard library's .py files, which
// every machine of this kind has, so the quick start trains without a download. Files are
// read in sorted order up to a byte budget; the last val_fraction of the bytes is validation.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "config/run_config.h"
#include "data/token_source.h"
#include "host/errors.h"
#include "io/regular_file.h"

namespace keel {
namespace fs = std::filesystem;

class ByteSource : public TokenSource {
 public:
  ByteSource(std::shared_ptr<const std::string> bytes, int64_t begin, int64_t end, std::string what)
      : bytes_(std::move(bytes)), begin_(begin), end_(end), what_(std::move(what)) {}
  int64_t num_tokens() const override { return end_ - begin_; }
  int32_t max_token() const override { return 255; }
  void read(int64_t start, int64_t count, int32_t* out) const override {
    const unsigned char* p = reinterpret_cast<const unsigned char*>(bytes_->data()) + begin_ + start;
    for (int64_t i = 0; i < count; ++i) out[i] = p[i];
  }
  std::string describe() const override { return what_; }

 private:
  std::shared_ptr<const std::string> bytes_;
  int64_t begin_, end_;
  std::string what_;
};

// The newest /usr/lib/python3.X folder.
std::string default_text_root() {
  std::vector<std::string> candidates;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator("/usr/lib", error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("python3.", 0) == 0 && fs::exists(entry.path() / "os.py")) candidates.push_back(entry.path().string());
  }
  if (candidates.empty())
    throw KeelError(KEEL_ERR_NOT_FOUND, "data.text_root: no Python standard library found under /usr/lib/python3.*; "
                                        "set data.text_root to a folder of text files");
  std::sort(candidates.begin(), candidates.end(), [](const std::string& a, const std::string& b) {
    return std::stoi(a.substr(a.rfind('.') + 1)) < std::stoi(b.substr(b.rfind('.') + 1));
  });
  return candidates.back();
}

std::vector<std::string> text_files_under(const std::string& root) {
  std::vector<std::string> files;
  std::error_code error;
  const std::string expected = "expected a folder of .py, .txt or .md files, or one such file";
  struct stat st {};
  if (::stat(root.c_str(), &st) != 0) {  // follows a symlink: what it names must be a folder or a file
    const int why = errno;
    throw KeelError(why == ENOENT ? KEEL_ERR_MISSING_FILE : KEEL_ERR_NOT_FOUND, "data.text_root: " + root +
                                            (why == ENOENT ? " does not exist" : ": " + std::string(std::strerror(why))) +
                                            "; " + expected);
  }
  if (S_ISREG(st.st_mode)) return {root};
  // A device or FIFO would never end (/dev/zero) or block the read: refused by what it is.
  if (!S_ISDIR(st.st_mode))
    throw KeelError(KEEL_ERR_INVALID_CONFIG, "data.text_root: " + root + " is " + file_type_name(st.st_mode) + "; " + expected);
  for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::skip_permission_denied, error);
       it != fs::recursive_directory_iterator(); it.increment(error)) {
    if (error) break;
    const auto ext = it->path().extension().string();
    if (it->is_regular_file() && (ext == ".py" || ext == ".txt" || ext == ".md")) files.push_back(it->path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

DataSplits open_text_data(const DataConfig& config) {
  const std::string root = config.text_root.empty() ? default_text_root() : config.text_root;
  auto bytes = std::make_shared<std::string>();
  // Each file is read straight into the corpus, up to the room left: no second copy of it.
  for (const auto& file : text_files_under(root)) {
    std::error_code error;
    const uintmax_t file_bytes = fs::file_size(file, error);
    if (error) continue;
    const size_t before = bytes->size();
    const size_t wanted = size_t(std::min<uintmax_t>(file_bytes, size_t(config.text_max_bytes) - before));
    try {
      bytes->resize(before + wanted);
    } catch (const std::bad_alloc&) {
      throw KeelError(KEEL_ERR_OUT_OF_MEMORY, "data.text_root: out of memory reading " + file + " after " +
                                                  std::to_string(before) + " bytes of text (lower data.text_max_bytes)");
    }
    std::ifstream in(file, std::ios::binary);
    in.read(bytes->data() + before, std::streamsize(wanted));
    bytes->resize(before + size_t(in.gcount()));
    if (bytes->size() >= size_t(config.text_max_bytes)) break;
  }
  if (bytes->size() < 4096)
    throw KeelError(KEEL_ERR_IO, "data.text_root: " + root + " holds only " + std::to_string(bytes->size()) +
                                     " bytes of .py/.txt/.md text; at least 4096 are needed");
  const int64_t total = int64_t(bytes->size());
  const int64_t split = total - int64_t(double(total) * config.val_fraction);
  std::string what = "text under " + root;
  return {std::make_shared<ByteSource>(bytes, 0, split, what + " (train)"),
          std::make_shared<ByteSource>(bytes, split, total, what + " (validation)")};
}

DataSplits open_shard_data(const DataConfig& config);  // token_shards.cpp

DataSplits open_data(const DataConfig& config) {
  return config.source == "shards" ? open_shard_data(config) : open_text_data(config);
}

}  // namespace keel
