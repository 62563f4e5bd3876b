// Listing, naming and pruning checkpoint folders, and resolving what a user named.
#include "checkpoint/checkpoint_paths.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "host/errors.h"
#include "host/log.h"
#include "io/regular_file.h"

namespace keel {
namespace fs = std::filesystem;

std::string step_folder_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return name;
}

std::vector<std::string> complete_checkpoints(const std::string& root) {
  std::vector<std::string> found;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(root, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) == 0 && !entry.is_symlink(error) && fs::exists(entry.path() / "manifest.json", error))
      found.push_back(entry.path().string());
  }
  std::sort(found.begin(), found.end());  // zero-padded step numbers sort by step
  return found;
}

void prune_checkpoints(const std::string& root, int32_t keep, const std::string& protect) {
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(root, error))
    if (entry.path().filename().string().rfind(".tmp-", 0) == 0) fs::remove_all(entry.path(), error);
  std::vector<std::string> complete = complete_checkpoints(root);
  for (size_t i = 0; i + size_t(keep) < complete.size(); ++i) {
    if (fs::equivalent(complete[i], protect, error)) continue;
    fs::remove_all(complete[i], error);
    if (error) log_warn("could not delete old checkpoint " + complete[i] + ": " + error.message());
  }
}

namespace {

// What `latest` names, checked: a step-<digits> folder directly inside the root. The pointer is
// read only if it is a regular file (never a FIFO or device, which would block or never end).
std::string read_latest_pointer(const fs::path& pointer) {
  const std::vector<unsigned char> bytes = read_regular_file(pointer.string(), "the 'latest' pointer", Symlinks::refuse, 4096);
  std::string name(bytes.begin(), bytes.end());
  name = name.substr(0, name.find('\n'));
  const std::string digits = name.rfind("step-", 0) == 0 ? name.substr(5) : "";
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    throw KeelError(KEEL_ERR_IO, pointer.string() + ": names '" + name + "'; expected the name of a step-NNNNNNNN folder "
                                                    "directly inside " + pointer.parent_path().string());
  return name;
}

// Checkpoints are step folders directly inside the root, never links: a link could stand in for
// the newest step and load a checkpoint from anywhere. The fallback refuses a root holding one
// rather than pass over it, as `latest` naming one is refused.
void refuse_symlinked_steps(const std::string& root) {
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(root, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) != 0 || !entry.is_symlink(error)) continue;
    const fs::path target = fs::read_symlink(entry.path(), error);
    throw KeelError(KEEL_ERR_IO, entry.path().string() + ": a symbolic link among the checkpoints of " + root +
                                     (target.empty() ? "" : " (to " + target.string() + ")") +
                                     "; checkpoints are step folders directly inside the root, never links: remove "
                                     "it, or name the checkpoint folder to load");
  }
}

}  // namespace

std::string resolve_checkpoint(const std::string& path) {
  std::error_code error;
  if (fs::symlink_status(path, error).type() == fs::file_type::not_found)
    throw KeelError(KEEL_ERR_MISSING_FILE, path + ": no such checkpoint folder");
  if (error) throw KeelError(KEEL_ERR_IO, path + ": cannot look at the checkpoint folder: " + error.message());
  if (fs::exists(fs::path(path) / "manifest.json", error)) return path;
  const fs::path pointer = fs::path(path) / "latest";
  if (fs::exists(fs::symlink_status(pointer, error))) {
    const std::string name = read_latest_pointer(pointer);
    const fs::path target = fs::path(path) / name;
    if (fs::is_symlink(target, error))
      throw KeelError(KEEL_ERR_IO, pointer.string() + ": names '" + name + "', a symbolic link; expected a step folder "
                                                      "directly inside " + path);
    if (fs::exists(target / "manifest.json", error)) return target.string();
    // The pointer is replaced atomically after its target is complete, so this happens only if
    // the target was removed by hand; the newest complete checkpoint is the honest answer.
    log_warn(pointer.string() + " names '" + name + "', which is not a complete checkpoint; using the newest complete one");
  }
  refuse_symlinked_steps(path);
  std::vector<std::string> complete = complete_checkpoints(path);
  if (!complete.empty()) return complete.back();
  throw KeelError(KEEL_ERR_NOT_FOUND, path + ": no checkpoint here (expected a folder with manifest.json, or a "
                                             "checkpoint root with a 'latest' pointer or step-* folders)");
}

}  // namespace keel
