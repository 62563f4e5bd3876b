// Turns text into token shards, with the byte-level tokenizer (token = byte) or a Hugging Face
// tokenizer.json (core/src/tokenize). Documents are files: each goes whole to train or
// to validation, chosen by a hash of its path relative to the input (so the choice does not
// depend on where the folder lives), until about --val-fraction of the bytes are validation.
// Files are read in sorted path order, so the same inputs always give the same shards. The set
// is published all at once or not at all (shard_staging.h): a failure, SIGINT or SIGTERM leaves
// --out as it was, with no temporary file behind.
#include "data/prepare_data.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "data/shard_format.h"
#include "data/utf8_file_check.h"
#include "data/shard_staging.h"
#include "data/shard_writer.h"
#include "host/errors.h"
#include "host/param_init.h"
#include "host/plural.h"
#include "io/regular_file.h"
#include "tokenize/tokenizer.h"
#include "mesh/stop_signals.h"

namespace keel {

namespace {
namespace fs = std::filesystem;

constexpr size_t kBinaryProbeBytes = 8192;  // a NUL byte in the first 8 KiB marks a binary file
constexpr size_t kReadChunkBytes = 1 << 20;
constexpr size_t kMaxWholeDocumentBytes = size_t(1) << 31;  // a tokenizer.json tokenizer reads a document whole

struct Document {
  std::string path;       // as found, for reading and messages
  std::string name;       // relative to its input, for the validation choice
  int64_t bytes = 0;
};

struct Listing {
  std::vector<Document> documents;
  std::vector<std::string> binary_files;
  std::vector<std::string> not_utf8_files;  // "PATH (byte N)", skipped from folders when the tokenizer reads Unicode
  int64_t hidden_entries = 0, empty_files = 0;
};

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

void add_file(const fs::path& path, const std::string& name, Listing& listing, const FolderTextRule& rule = {}) {
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

void add_folder(const fs::path& root, Listing& listing, const FolderTextRule& rule) {
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

Listing list_documents(const std::vector<std::string>& inputs, const FolderTextRule& rule) {
  Listing listing;
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
  std::sort(docs.begin(), docs.end(), [](const Document& a, const Document& b) { return a.path < b.path; });
  std::sort(listing.binary_files.begin(), listing.binary_files.end());
  std::sort(listing.not_utf8_files.begin(), listing.not_utf8_files.end());
  docs.erase(std::unique(docs.begin(), docs.end(), [](const Document& a, const Document& b) { return a.path == b.path; }),
             docs.end());
  return listing;
}

// Documents in the order of a hash of their relative names go to validation until about
// `fraction` of the bytes are there; with two or more documents each split keeps at least one.
std::vector<bool> choose_validation(const std::vector<Document>& docs, double fraction) {
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
void write_document(const Document& doc, const Tokenizer& tokenizer, ShardWriter& writer) {
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

struct SplitSummary {
  size_t documents = 0;
  int64_t tokens = 0;
  std::vector<std::string> files;
  int64_t stale_removed = 0;
};

// Writes the split's shards into the staging folder; `files` name where they will be published.
SplitSummary write_split(const PrepareDataOptions& options, const std::string& staging_dir, const Tokenizer& tokenizer,
                         const std::string& split, const Listing& listing, const std::vector<bool>& is_val,
                         bool want_val) {
  ShardWriter writer(staging_dir, split, options.shard_tokens, shard_format_for(tokenizer.vocab_size()));
  SplitSummary summary;
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

void print_listing(const PrepareDataOptions& options, const Listing& listing, std::ostream& out) {
  int64_t bytes = 0;
  for (const auto& d : listing.documents) bytes += d.bytes;
  out << "prepare-data: " << plural(int64_t(listing.documents.size()), "document") << ", " << bytes << " bytes, from "
      << options.inputs.size() << " input(s); skipped " << listing.binary_files.size() << " binary file(s), "
      << listing.empty_files << " empty file(s), " << listing.hidden_entries << " hidden file(s) or folder(s)";
  if (!listing.not_utf8_files.empty()) out << ", " << listing.not_utf8_files.size() << " file(s) not UTF-8 text";
  out << "\n";
  const size_t shown = std::min<size_t>(listing.binary_files.size(), 10);
  for (size_t i = 0; i < shown; ++i) out << "  skipped binary (contains a NUL byte): " << listing.binary_files[i] << "\n";
  if (listing.binary_files.size() > shown)
    out << "  ... and " << listing.binary_files.size() - shown << " more binary file(s)\n";
  const size_t shown_text = std::min<size_t>(listing.not_utf8_files.size(), 10);
  for (size_t i = 0; i < shown_text; ++i) out << "  skipped, not UTF-8 text: " << listing.not_utf8_files[i] << "\n";
  if (!options.shard_tokens_note.empty()) out << "  note: " << options.shard_tokens_note << "\n";
}

void print_split(const std::string& split, const SplitSummary& s, std::ostream& out) {
  out << split << ": " << plural(int64_t(s.documents), "document") << ", " << plural(s.tokens, "token") << " in " << s.files.size() << " shard(s)";
  if (!s.files.empty()) out << ": " << s.files.front() << (s.files.size() > 1 ? " ... " + s.files.back() : "");
  out << "\n";
  if (s.stale_removed) out << "  removed " << s.stale_removed << " stale " << split << " shard(s) of an earlier run\n";
}

}  // namespace

void prepare_data(const PrepareDataOptions& options, std::ostream& out) {
  const std::unique_ptr<Tokenizer> tokenizer = open_tokenizer(options.tokenizer);  // refuse a bad file before any work
  const Listing listing = list_documents(options.inputs, {tokenizer->reads_unicode(), options.strict_text});
  if (listing.documents.empty())
    throw KeelError(KEEL_ERR_NOT_FOUND, "no text documents found in " + options.inputs.front() +
                                            (options.inputs.size() > 1 ? " and the other inputs" : "") +
                                            " (binary, empty and hidden files are skipped)");
  std::error_code error;
  fs::create_directories(options.out_dir, error);
  if (error || !fs::is_directory(options.out_dir))
    throw KeelError(KEEL_ERR_IO, options.out_dir + ": cannot create the output folder (" +
                                     (error ? error.message() : "a file of that name exists") + ")");
  print_listing(options, listing, out);
  const ShardFormat format = shard_format_for(tokenizer->vocab_size());
  out << "tokenizer: " << tokenizer->describe() << "; shards of uint" << format.token_bytes * 8 << " tokens (magic "
      << format.magic << ", version " << format.version << ")\n";
  const std::vector<bool> is_val = choose_validation(listing.documents, options.val_fraction);
  SplitSummary train, val;
  {
    ShardStaging staging(options.out_dir);
    train = write_split(options, staging.dir(), *tokenizer, "train", listing, is_val, false);
    val = write_split(options, staging.dir(), *tokenizer, "val", listing, is_val, true);
    stop_if_signalled();
    const std::vector<int64_t> removed = staging.publish({"train", "val"});
    train.stale_removed = removed[0];
    val.stale_removed = removed[1];
  }
  print_split("train", train, out);
  print_split("val", val, out);
  if (val.documents == 0) out << "  no validation split (" << listing.documents.size() << " document(s), --val-fraction "
                              << options.val_fraction << "): data.val can point at the train shards\n";
  out << "train with data.source \"shards\", data.train \"" << options.out_dir << "/train_*.bin\", data.val \""
      << options.out_dir << "/val_*.bin\" and model.vocab_size >= " << tokenizer->vocab_size() << std::endl;
  if (!listing.not_utf8_files.empty())
    out << "note: skipped " << listing.not_utf8_files.size() << " file(s) in the input folders that are not UTF-8 text "
        << "(listed above; --strict-text makes such a file an error)" << std::endl;
}

}  // namespace keel
