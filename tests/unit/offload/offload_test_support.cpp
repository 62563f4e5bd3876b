// Scratch folders live under the build folder (KEEL_OFFLOAD_TEST_FOLDER), on the disk the build
// is on: /tmp may be a tmpfs, which is not what the nvme engine is for.
#include "offload_test_support.hpp"

#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <random>
#include <vector>

#include "cpu_engine.hpp"
#include "nvme_engine.hpp"
#include "path_checks.hpp"

namespace offload_test {

ScratchFolder::ScratchFolder() {
  static std::atomic<int> count{0};
  path_ = std::string(KEEL_OFFLOAD_TEST_FOLDER) + "/scratch-" + std::to_string(getpid()) + "-" +
          std::to_string(count++);
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

ScratchFolder::~ScratchFolder() {
  std::error_code ignored;
  std::filesystem::permissions(path_, std::filesystem::perms::owner_all, ignored);
  std::filesystem::remove_all(path_, ignored);
}

void require_direct_io(const std::string& folder) {
  try {
    keel_offload::check_offload_folder(folder, 0);
  } catch (const std::exception& error) {
    FAIL() << "the nvme engine's tests need a folder that supports O_DIRECT, and the build folder's filesystem ("
           << keel_offload::filesystem_type_name(folder) << ") does not: " << error.what()
           << "\nbuild in a folder on a disk-backed filesystem (ext4, xfs) to run them";
  }
}

std::unique_ptr<keel_support::OffloadEngine> make_engine(const std::string& kind, const std::string& folder,
                                                         uint64_t capacity_bytes, uint32_t queue_depth,
                                                         uint64_t block_bytes) {
  if (kind == "cpu") {
    keel_offload::CpuEngineConfig config;
    config.capacity_bytes = capacity_bytes;
    return std::make_unique<keel_offload::CpuEngine>(config);
  }
  keel_offload::NvmeEngineConfig config;
  config.folder = folder;
  config.capacity_bytes = capacity_bytes;
  config.queue_depth = queue_depth;
  config.block_bytes = block_bytes;
  return std::make_unique<keel_offload::NvmeEngine>(config);
}

keel_support::AlignedBuffer random_bytes(uint64_t bytes, uint32_t seed) {
  keel_support::AlignedBuffer buffer(bytes, 4096);
  std::mt19937_64 generator(seed);
  for (uint64_t i = 0; i < bytes; i += 8) {
    uint64_t value = generator();
    for (uint64_t b = 0; b < 8 && i + b < bytes; ++b) buffer.data()[i + b] = static_cast<char>(value >> (8 * b));
  }
  return buffer;
}

int descriptor_of(const std::string& path) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    auto target = std::filesystem::read_symlink(entry.path(), error);
    if (!error && target == path) return std::stoi(entry.path().filename().string());
  }
  return -1;
}

std::string only_file_in(const std::string& folder) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(folder))
    if (entry.path().extension() == ".extent") files.push_back(entry.path().string());  // not the owner file
  return files.size() == 1 ? files[0] : std::string();
}

CaughtError error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const keel_support::StatusError& error) {
    return {error.code, error.what()};
  }
  ADD_FAILURE() << "expected an error, and the call succeeded";
  return {};
}

ChildResult run_in_private_mount_namespace(const std::function<std::string()>& check) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return {};
  pid_t child = fork();
  if (child == 0) {
    close(pipe_fds[0]);
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) _exit(77);
    std::string message;
    try {
      message = check();
    } catch (const std::exception& error) {
      message = std::string("unexpected exception: ") + error.what();
    }
    (void)!write(pipe_fds[1], message.data(), message.size());
    _exit(0);
  }
  close(pipe_fds[1]);
  std::string message;
  char chunk[4096];
  for (ssize_t n; (n = read(pipe_fds[0], chunk, sizeof chunk)) > 0;) message.append(chunk, static_cast<size_t>(n));
  close(pipe_fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) return {};  // no mount namespace to be had
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return {true, "the child process ended abnormally (wait status " + std::to_string(status) + ")"};
  }
  return {true, message};
}

}  // namespace offload_test
