// prepare-data's all-or-nothing publication of a set of shards. Readers find shards by a glob
// over the output folder (data.train "DIR/train_*.bin"), and every shard carries the same kind
// of header, so a rerun that stopped half way must never leave its shards beside an earlier
// run's: they would be read as one set. The run writes every shard into a hidden staging folder
// inside DIR (the same file system, so renames suffice; hidden, so no glob sees it), and only
// once every split is complete does it swap the sets: DIR's shards of those splits move into a
// hidden folder, the staged ones are renamed in, the old ones are removed. A failure or a stop
// signal before the swap leaves DIR as it was, and the staging folder goes with the run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace keel {

class ShardStaging {
 public:
  // Creates OUT/.prepare-staging-<pid>; throws KeelError naming it when it cannot.
  explicit ShardStaging(std::string out_dir);
  // Removes the staging folder with whatever is still in it (a failed run's shards and temporaries).
  ~ShardStaging();
  ShardStaging(const ShardStaging&) = delete;
  ShardStaging& operator=(const ShardStaging&) = delete;

  // Where the run writes its shards (ShardWriter's DIR).
  const std::string& dir() const { return staging_dir_; }

  // Replaces OUT's <split>_NNNNNN.bin of every split in `splits` by the staged ones. Returns, per
  // split, how many of OUT's earlier shards had no staged counterpart (removed, not replaced). When
  // a rename fails, what was moved is put back and the KeelError names the file.
  std::vector<int64_t> publish(const std::vector<std::string>& splits);

 private:
  std::string out_dir_, staging_dir_;
};

}  // namespace keel
