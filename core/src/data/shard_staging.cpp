// The staging folder and the swap of shard sets (see shard_staging.h). The swap moves the old
// set out before the new one comes in, so even a process killed outright in the middle of it
// leaves DIR holding shards of one run only (the old ones wait in .prepare-replaced-<pid>).
#include "data/shard_staging.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <regex>
#include <utility>

#include "host/errors.h"
#include "io/durable_files.h"

namespace keel {
namespace {
namespace fs = std::filesystem;

// DIR's entries named <split>_NNNNNN.bin, by name.
std::vector<std::string> shard_names(const std::string& dir, const std::string& split) {
  const std::regex shard_name(split + "_[0-9]{6}\\.bin");
  std::vector<std::string> names;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (std::regex_match(name, shard_name)) names.push_back(name);
  }
  if (error) throw KeelError(KEEL_ERR_IO, dir + ": cannot list folder (" + error.message() + ")");
  return names;
}

struct Move {
  std::string from, to;
};

// Renames each move in order; on a failure renames back those done and throws naming the file.
void move_all_or_none(const std::vector<Move>& moves, std::vector<Move>& done) {
  for (const Move& move : moves) {
    if (std::rename(move.from.c_str(), move.to.c_str()) != 0) {
      const std::string reason = std::strerror(errno);
      for (auto it = done.rbegin(); it != done.rend(); ++it) std::rename(it->to.c_str(), it->from.c_str());
      done.clear();
      throw KeelError(KEEL_ERR_IO, move.from + ": cannot move to " + move.to + " (" + reason + ")");
    }
    done.push_back(move);
  }
}

}  // namespace

ShardStaging::ShardStaging(std::string out_dir)
    : out_dir_(std::move(out_dir)), staging_dir_(out_dir_ + "/.prepare-staging-" + std::to_string(::getpid())) {
  std::error_code error;
  fs::remove_all(staging_dir_, error);  // a folder of this name can only be a dead run's with our pid
  if (!fs::create_directory(staging_dir_, error))
    throw KeelError(KEEL_ERR_IO, staging_dir_ + ": cannot create the staging folder (" +
                                     (error ? error.message() : "it exists") + ")");
}

ShardStaging::~ShardStaging() {
  std::error_code ignored;
  fs::remove_all(staging_dir_, ignored);
}

std::vector<int64_t> ShardStaging::publish(const std::vector<std::string>& splits) {
  const std::string replaced_dir = out_dir_ + "/.prepare-replaced-" + std::to_string(::getpid());
  std::vector<Move> old_out, new_in;
  std::vector<int64_t> unmatched;
  for (const std::string& split : splits) {
    const std::vector<std::string> old_names = shard_names(out_dir_, split);
    const std::vector<std::string> new_names = shard_names(staging_dir_, split);
    int64_t without_counterpart = 0;
    for (const std::string& name : old_names) {
      old_out.push_back({out_dir_ + "/" + name, replaced_dir + "/" + name});
      without_counterpart += fs::exists(staging_dir_ + "/" + name) ? 0 : 1;
    }
    for (const std::string& name : new_names) new_in.push_back({staging_dir_ + "/" + name, out_dir_ + "/" + name});
    unmatched.push_back(without_counterpart);
  }
  std::error_code error;
  fs::remove_all(replaced_dir, error);
  if (!fs::create_directory(replaced_dir, error))
    throw KeelError(KEEL_ERR_IO, replaced_dir + ": cannot create (" + (error ? error.message() : "it exists") + ")");
  std::vector<Move> moved_out, moved_in;
  try {
    move_all_or_none(old_out, moved_out);
    move_all_or_none(new_in, moved_in);
  } catch (const KeelError&) {
    for (auto it = moved_out.rbegin(); it != moved_out.rend(); ++it) std::rename(it->to.c_str(), it->from.c_str());
    fs::remove_all(replaced_dir, error);
    throw;
  }
  fsync_path(out_dir_);  // the new names survive a crash before the old shards are gone
  fs::remove_all(replaced_dir, error);
  return unmatched;
}

}  // namespace keel
