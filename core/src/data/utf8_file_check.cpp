// first_invalid_utf8_byte: each chunk is checked up to its last whole character; the bytes of
// a character cut by the chunk's end are carried to the front of the next chunk.
#include "data/utf8_file_check.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>
#include <vector>

#include "host/errors.h"
#include "tokenize/tokenizer.h"

namespace keel {
namespace {

constexpr size_t kChunkBytes = size_t(1) << 20;

// Where the last character of `text` begins if the text ends before that character does; else
// text.size().
size_t whole_characters_end(std::string_view text) {
  for (size_t back = 1; back <= 3 && back <= text.size(); ++back) {
    const unsigned char c = static_cast<unsigned char>(text[text.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t length = c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    return length > back ? text.size() - back : text.size();
  }
  return text.size();
}

}  // namespace

int64_t first_invalid_utf8_byte(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw KeelError(KEEL_ERR_IO, path + ": cannot read (" + std::strerror(errno) + ")");
  std::vector<char> buffer(kChunkBytes + 4);
  size_t carried = 0;
  int64_t chunk_start = 0;  // file offset of buffer[0]
  for (;;) {
    const ssize_t n = ::read(fd, buffer.data() + carried, kChunkBytes);
    if (n < 0) {
      const int why = errno;
      ::close(fd);
      throw KeelError(KEEL_ERR_IO, path + ": cannot read (" + std::strerror(why) + ")");
    }
    const std::string_view text(buffer.data(), carried + size_t(n));
    const size_t checked = n == 0 ? text.size() : whole_characters_end(text);
    const size_t bad = find_invalid_utf8(text.substr(0, checked));
    if (bad != std::string_view::npos || n == 0) {
      ::close(fd);
      return bad == std::string_view::npos ? -1 : chunk_start + int64_t(bad);
    }
    carried = text.size() - checked;
    std::memmove(buffer.data(), buffer.data() + checked, carried);
    chunk_start += int64_t(checked);
  }
}

}  // namespace keel
