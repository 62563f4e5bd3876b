// Turns text into token shards, with the byte-level tokenizer (token = byte) or a Hugging Face
// tokenizer.json (core/src/tokenize). Documents are files: each goes whole to train or
// to validation, chosen by a hash of its path relative to the input (so the choice does not
// depend on where the folder lives), until about --val-fraction of the bytes are validation.
// Files are read in sorted path order, so the same inputs always give the same shards. The set
// is published all at once or not at all (shard_staging.h): a failure, SIGINT or SIGTERM leaves
// --out as it was, with no temporary file behind.
#include "data/prepare_data.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <utility>

#include "data/shard_format.h"
#include "data/utf8_file_check.h"
#include "data/shard_staging.h"
#include "data/shard_writer.h"
#include "host/errors.h"
#include "host/param_init.h"
#include "io/regular_file.h"
#include "tokenize/tokenizer.h"
#include "mesh/stop_signals.h"

namespace keel {

namespace {
namespace fs = std::filesystem;

constexpr size_t kBinaryProbeBytes = 8192;  // a NUL byte in the first 8 KiB marks a binary file
constexpr size_t kReadChunkBytes = 1 << 20;
constexpr size_t kMaxWholeDocumentBytes = size_t(1) << 31;  // a tokenizer.json tokenizer reads a document whole


KeelError read_error(const std::string& path, const std::string& doing) {
  return KeelError(KEEL_ERR_IO, path + ": cannot " + doing + " (" + std::strerror(errno) + ")");
}

// Reads up to kBinaryProbeBytes from the start of the file; throws naming the path if it cannot.
bool looks_binary(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw read_error(path, "read");
  char probe[kBinaryProbeBytes];
  const ssize_t n = ::read(fd, probe, sizeof(probe));
  const int saved = errno;
  ::close(fd);
  if (n < 0) {
    errno = saved;
    throw read_error(path, "read");
  }
  return std::memchr(probe, 0, size_t(n)) != nullptr;
}

// What a folder's files must be, beyond not binary: UTF-8 when the tokenizer reads Unicode.
struct FolderTextRule {
  bool utf8 = false;    // check each file's encoding
  bool strict = false;  // a file that fails is an error, not skipped
};

void add_file(const fs::path& path, const std::string& name, PrepareDataListing& listing, const FolderTextRule& rule = {}) {
  std::error_code error;
  const auto bytes = fs::file_size(path, error);
  if (error) throw KeelError(KEEL_ERR_IO, path.string() + ": cannot read (" + error.message() + ")");
  if (bytes == 0) {
    ++listing.empty_files;
  } else if (looks_binary(path.string())) {
    listing.binary_files.push_back(path.string());
  } else if (const int64_t bad = rule.utf8 ? first_invalid_utf8_byte(path.string()) : -1; bad >= 0) {
    if (rule.strict)
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, path.string() + ": byte offset " + std::to_string(bad) +
                                                     ": not valid UTF-8 (a tokenizer.json tokenizer reads Unicode "
                                                     "text; without --strict-text such a file in a folder is skipped)");
    listing.not_utf8_files.push_back(path.string() + " (byte " + std::to_string(bad) + ")");
  } else {
    listing.documents.push_back({path.string(), name, int64_t(bytes)});
  }
}

void add_folder(const fs::path& root, PrepareDataListing& listing, const FolderTextRule& rule) {
  std::error_code error;
  fs::recursive_directory_iterator it(root, error), end;
  if (error) throw KeelError(KEEL_ERR_IO, root.string() + ": cannot list folder (" + error.message() + ")");
  for (; it != end; it.increment(error)) {
    if (error) throw KeelError(KEEL_ERR_IO, it->path().string() + ": cannot list folder (" + error.message() + ")");
    if (it->path().filename().string().rfind('.', 0) == 0) {
      ++listing.hidden_entries;
      if (it->is_directory(error)) it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file(error))
      add_file(it->path(), it->path().lexically_relative(root).generic_string(), listing, rule);
  }
}

// One file reached by two paths (a folder and a file in it spelt another way, a symbolic link
// beside its target) is one document: read twice, its copies could land in both splits. The
// first path in sorted order keeps it; the others are listed as skipped.
void drop_files_reached_twice(PrepareDataListing& listing) {
  std::map<std::pair<dev_t, ino_t>, std::string> first_path;
  std::vector<PrepareDataDocument> kept;
  for (auto& doc : listing.documents) {
    struct stat st {};
    if (::stat(doc.path.c_str(), &st) != 0) throw read_error(doc.path, "read");
    const auto [at, fresh] = first_path.emplace(std::make_pair(st.st_dev, st.st_ino), doc.path);
    if (fresh)
      kept.push_back(std::move(doc));
    else
      listing.repeated_files.push_back(doc.path + " (the same file as " + at->second + ")");
  }
  listing.documents = std::move(kept);
}

PrepareDataListing list_documents(const std::vector<std::string>& inputs, const FolderTextRule& rule) {
  PrepareDataListing listing;
  for (const auto& input : inputs) {
    std::error_code error;
    const fs::file_status status = fs::status(input, error);
    if (status.type() == fs::file_type::not_found)
      throw KeelError(KEEL_ERR_MISSING_FILE, input + ": no such file or folder");
    if (error) throw KeelError(KEEL_ERR_IO, input + ": cannot read (" + error.message() + ")");
    if (fs::is_directory(status)) add_folder(input, listing, rule);
    else if (fs::is_regular_file(status)) add_file(input, fs::path(input).filename().string(), listing);
    else throw KeelError(KEEL_ERR_IO, input + ": not a regular file or folder");
  }
  auto& docs = listing.documents;
  std::sort(docs.begin(), docs.end(), [](const PrepareDataDocument& a, const PrepareDataDocument& b) { return a.path < b.path; });
  std::sort(listing.binary_files.begin(), listing.binary_files.end());
  std::sort(listing.not_utf8_files.begin(), listing.not_utf8_files.end());
  drop_files_reached_twice(listing);
  return listing;
}

// Documents in the order of a hash of their relative names go to validation until about
// `fraction` of the bytes are there; with two or more documents each split keeps at least one.
std::vector<bool> choose_validation(const std::vector<PrepareDataDocument>& docs, double fraction) {
  std::vector<bool> is_val(docs.size(), false);
  if (fraction <= 0 || docs.size() < 2) return is_val;
  std::vector<size_t> order(docs.size());
  std::vector<uint64_t> key(docs.size());
  for (size_t i = 0; i < docs.size(); ++i) order[i] = i, key[i] = mix64(hash_name(docs[i].name.c_str()));
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return key[a] != key[b] ? key[a] < key[b] : docs[a].path < docs[b].path;
  });
  int64_t total = 0;
  for (const auto& d : docs) total += d.bytes;
  const double target = fraction * double(total);
  int64_t val_bytes = 0;
  size_t val_docs = 0;
  for (size_t i : order) {
    if (val_docs + 1 >= docs.size() || (val_docs > 0 && double(val_bytes) >= target)) break;
    // Skip a document that would overshoot the target by more than it closes the gap.
    if (double(val_bytes + docs[i].bytes) - target > target - double(val_bytes)) continue;
    is_val[i] = true;
    val_bytes += docs[i].bytes;
    ++val_docs;
  }
  if (val_docs == 0) {  // every document is far larger than the target: take the smallest
    const size_t smallest = *std::min_element(order.begin(), order.end(), [&](size_t a, size_t b) {
      return docs[a].bytes < docs[b].bytes;
    });
    is_val[smallest] = true;
  }
  return is_val;
}

// Checked between writes: a stop signal ends the run before anything is published.
void stop_if_signalled() {
  if (const int signal_number = pending_stop_signal())
    throw StopRequested(signal_number, "stopped by " + signal_name(signal_number));
}

// A tokenizer that encodes in chunks (bytes) streams the file; any other reads it whole, since
// where a BPE word ends depends on what follows.
void write_document(const PrepareDataDocument& doc, const Tokenizer& tokenizer, ShardWriter& writer) {
  std::vector<uint32_t> tokens;
  if (!tokenizer.encodes_in_chunks()) {
    std::vector<unsigned char> text;
    try {
      text = read_regular_file(doc.path, "document", Symlinks::follow, kMaxWholeDocumentBytes);
    } catch (const std::bad_alloc&) {
      throw KeelError(KEEL_ERR_OUT_OF_MEMORY, doc.path + ": out of memory reading this document of " +
                                                  std::to_string(doc.bytes) + " bytes whole for the tokenizer");
    }
    tokenizer.encode(std::string_view(reinterpret_cast<const char*>(text.data()), text.size()), doc.path, tokens);
    writer.append(tokens.data(), int64_t(tokens.size()));
    return;
  }
  const int fd = ::open(doc.path.c_str(), O_RDONLY);
  if (fd < 0) throw read_error(doc.path, "read");
  std::vector<char> bytes(kReadChunkBytes);
  for (;;) {
    const ssize_t n = ::read(fd, bytes.data(), bytes.size());
    if (n < 0) {
      const int saved = errno;
      ::close(fd);
      errno = saved;
      throw read_error(doc.path, "read");
    }
    if (n == 0) break;
    tokens.clear();
    tokenizer.encode(std::string_view(bytes.data(), size_t(n)), doc.path, tokens);
    try {
      writer.append(tokens.data(), int64_t(tokens.size()));
      stop_if_signalled();
    } catch (...) {
      ::close(fd);
      throw;
    }
  }
  ::close(fd);
}


// Writes the split's shards into the staging folder; `files` name where they will be published.
PreparedSplit write_split(const PrepareDataOptions& options, const std::string& staging_dir, const Tokenizer& tokenizer,
                         const std::string& split, const PrepareDataListing& listing, const std::vector<bool>& is_val,
                         bool want_val) {
  ShardWriter writer(staging_dir, split, options.shard_tokens, shard_format_for(tokenizer.vocab_size()));
  PreparedSplit summary;
  for (size_t i = 0; i < listing.documents.size(); ++i) {
    if (is_val[i] != want_val) continue;
    stop_if_signalled();
    write_document(listing.documents[i], tokenizer, writer);
    ++summary.documents;
  }
  writer.finish();
  summary.tokens = writer.tokens();
  for (size_t i = 0; i < writer.files().size(); ++i)
    summary.files.push_back(ShardWriter::shard_path(options.out_dir, split, int64_t(i)));
  return summary;
}

}  // namespace

PrepareDataListing list_prepare_data_inputs(const PrepareDataOptions& options) {
  std::unique_ptr<Tokenizer> tokenizer = open_tokenizer(options.tokenizer);  // refuse a bad file before any work
  PrepareDataListing listing = list_documents(options.inputs, {tokenizer->reads_unicode(), options.strict_text});
  listing.tokenizer = std::move(tokenizer);
  if (listing.documents.empty())
    throw KeelError(KEEL_ERR_NOT_FOUND, "no text documents found in " + options.inputs.front() +
                                            (options.inputs.size() > 1 ? " and the other inputs" : "") +
                                            " (binary, empty and hidden files are skipped)");
  std::error_code error;
  fs::create_directories(options.out_dir, error);
  if (error || !fs::is_directory(options.out_dir))
    throw KeelError(KEEL_ERR_IO, options.out_dir + ": cannot create the output folder (" +
                                     (error ? error.message() : "a file of that name exists") + ")");
  return listing;
}

PreparedShards write_prepared_shards(const PrepareDataOptions& options, const PrepareDataListing& listing) {
  const Tokenizer& tokenizer = *listing.tokenizer;
  const std::vector<bool> is_val = choose_validation(listing.documents, options.val_fraction);
  PreparedShards shards;
  ShardStaging staging(options.out_dir);
  shards.train = write_split(options, staging.dir(), tokenizer, "train", listing, is_val, false);
  shards.val = write_split(options, staging.dir(), tokenizer, "val", listing, is_val, true);
  stop_if_signalled();
  const std::vector<int64_t> removed = staging.publish({"train", "val"});
  shards.train.stale_removed = removed[0];
  shards.val.stale_removed = removed[1];
  return shards;
}

}  // namespace keel
