// A TensorBoard event file for one run: `tensorboard --logdir DIR` plots its scalars. The file
// name follows TensorFlow's pattern (events.out.tfevents.<seconds>.<host>.<pid><suffix>), which
// is how TensorBoard finds it.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace keel {

class TensorBoardWriter {
 public:
  // Creates `dir` and a new event file in it whose first record is the file version.
  explicit TensorBoardWriter(const std::string& dir);
  // Buffers one scalar; written to disk by flush(), which throws KeelError if the bytes do not get there.
  void scalar(int64_t step, const std::string& tag, double value);
  void flush();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace keel
