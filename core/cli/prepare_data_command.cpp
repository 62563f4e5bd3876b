// `keel prepare-data`: its usage, its flags read into PrepareDataOptions, the report of what was
// found and written, and its failures turned into messages and exit codes. The shards themselves are written by data/prepare_data.cpp.
#include "prepare_data_command.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "data/prepare_data.h"
#include "data/shard_format.h"
#include "host/errors.h"
#include "host/plural.h"
#include "mesh/stop_signals.h"

namespace keel {

const char* const kPrepareDataUsage =
    "usage: keel prepare-data INPUT... --out DIR [--tokenizer PATH|bytes] [--val-fraction F] [--shard-tokens N]\n"
    "                          [--strict-text]\n"
    "  INPUT          text files or folders (read recursively; hidden entries and binary files are skipped)\n"
    "  --out DIR      where train_000000.bin, ... and val_000000.bin, ... are written\n"
    "  --val-fraction about this fraction of the bytes, in whole files, goes to validation (default 0.05)\n"
    "  --shard-tokens tokens per shard (default 100M; K, M and G suffixes allowed)\n"
    "  --tokenizer    'bytes' (the default: token = byte, vocabulary 256) or a Hugging Face tokenizer.json\n"
    "                 (byte-level BPE as GPT-2 and Llama 3 use, or SentencePiece-style BPE with byte\n"
    "                 fallback as Llama 2 uses)\n"
    "  --strict-text  with a tokenizer.json, a file in a folder that is not UTF-8 text is an error (by default it is\n"
    "                 skipped and counted); a file named as an INPUT is always an error\n"
    "Shards are llm.c's: uint16 tokens (magic 20240520) for vocabularies up to 65,535, else uint32\n"
    "tokens (Llama 3's format, magic 20240801).\n";

namespace {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

int64_t parse_token_count(const std::string& text) {
  size_t used = 0;
  double value = std::stod(text, &used);
  const std::string suffix = text.substr(used);
  if (suffix == "K" || suffix == "k") value *= 1e3;
  else if (suffix == "M" || suffix == "m") value *= 1e6;
  else if (suffix == "G" || suffix == "g") value *= 1e9;
  else if (!suffix.empty()) throw std::invalid_argument(text);
  if (!std::isfinite(value) || value < 1) throw std::invalid_argument(text);
  return int64_t(std::min(value, 9e18));
}

struct CommandLine {
  PrepareDataOptions options;
  std::string shard_tokens_note;  // set when the requested size was clamped
};

CommandLine parse_command_line(const std::vector<std::string>& args) {
  CommandLine line;
  PrepareDataOptions& options = line.options;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i], value;
    const size_t equals = arg.find('=');
    const bool is_flag = arg.rfind("--", 0) == 0;
    if (is_flag && equals != std::string::npos) value = arg.substr(equals + 1), arg = arg.substr(0, equals);
    auto take_value = [&]() {
      if (!value.empty()) return value;
      if (i + 1 >= args.size()) throw UsageError(arg + " needs a value");
      return args[++i];
    };
    if (arg == "--out") options.out_dir = take_value();
    else if (arg == "--val-fraction") {
      const std::string text = take_value();
      try {
        options.val_fraction = std::stod(text);
      } catch (const std::exception&) {
        throw UsageError("--val-fraction: expected a number in [0, 1), found '" + text + "'");
      }
      if (!(options.val_fraction >= 0 && options.val_fraction < 1))
        throw UsageError("--val-fraction: expected a number in [0, 1), found '" + text + "'");
    } else if (arg == "--shard-tokens") {
      const std::string text = take_value();
      try {
        options.shard_tokens = parse_token_count(text);
      } catch (const std::exception&) {
        throw UsageError("--shard-tokens: expected a positive token count such as 100M, found '" + text + "'");
      }
    } else if (arg == "--tokenizer") {
      options.tokenizer = take_value();
      if (options.tokenizer.empty()) throw UsageError("--tokenizer: expected 'bytes' or the path of a tokenizer.json");
    } else if (arg == "--strict-text") options.strict_text = true;
    else if (arg == "-h" || arg == "--help") throw UsageError("");
    else if (is_flag) throw UsageError("unknown option " + arg);
    else options.inputs.push_back(arg);
  }
  if (options.inputs.empty()) throw UsageError("no INPUT given: name text files or folders to tokenize");
  if (options.out_dir.empty()) throw UsageError("--out DIR is required");
  const int64_t clamped = std::clamp<int64_t>(options.shard_tokens, kMinShardTokens, kShardMaxTokens);
  if (clamped != options.shard_tokens)
    line.shard_tokens_note = "--shard-tokens " + std::to_string(options.shard_tokens) + " clamped to " +
                                std::to_string(clamped) + " (shards hold " + std::to_string(kMinShardTokens) +
                                " to 2^31-1 tokens)";
  options.shard_tokens = clamped;
  return line;
}

void print_listing(const CommandLine& line, const PrepareDataListing& listing, std::ostream& out) {
  int64_t bytes = 0;
  for (const auto& d : listing.documents) bytes += d.bytes;
  out << "prepare-data: " << plural(int64_t(listing.documents.size()), "document") << ", " << bytes << " bytes, from "
      << line.options.inputs.size() << " input(s); skipped " << listing.binary_files.size() << " binary file(s), "
      << listing.empty_files << " empty file(s), " << listing.hidden_entries << " hidden file(s) or folder(s)";
  if (!listing.not_utf8_files.empty()) out << ", " << listing.not_utf8_files.size() << " file(s) not UTF-8 text";
  if (!listing.repeated_files.empty()) out << ", " << listing.repeated_files.size() << " file(s) reached twice";
  out << "\n";
  const size_t shown = std::min<size_t>(listing.binary_files.size(), 10);
  for (size_t i = 0; i < shown; ++i) out << "  skipped binary (contains a NUL byte): " << listing.binary_files[i] << "\n";
  if (listing.binary_files.size() > shown)
    out << "  ... and " << listing.binary_files.size() - shown << " more binary file(s)\n";
  const size_t shown_text = std::min<size_t>(listing.not_utf8_files.size(), 10);
  for (size_t i = 0; i < shown_text; ++i) out << "  skipped, not UTF-8 text: " << listing.not_utf8_files[i] << "\n";
  const size_t shown_repeated = std::min<size_t>(listing.repeated_files.size(), 10);
  for (size_t i = 0; i < shown_repeated; ++i) out << "  skipped, read once already: " << listing.repeated_files[i] << "\n";
  if (!line.shard_tokens_note.empty()) out << "  note: " << line.shard_tokens_note << "\n";
  const ShardFormat format = shard_format_for(listing.tokenizer->vocab_size());
  out << "tokenizer: " << listing.tokenizer->describe() << "; shards of uint" << format.token_bytes * 8
      << " tokens (magic " << format.magic << ", version " << format.version << ")\n";
}

void print_split(const std::string& split, const PreparedSplit& s, std::ostream& out) {
  out << split << ": " << plural(int64_t(s.documents), "document") << ", " << plural(s.tokens, "token") << " in "
      << s.files.size() << " shard(s)";
  if (!s.files.empty()) out << ": " << s.files.front() << (s.files.size() > 1 ? " ... " + s.files.back() : "");
  out << "\n";
  if (s.stale_removed) out << "  removed " << s.stale_removed << " stale " << split << " shard(s) of an earlier run\n";
}

void prepare(const CommandLine& line, std::ostream& out) {
  const PrepareDataOptions& options = line.options;
  const PrepareDataListing listing = list_prepare_data_inputs(options);
  print_listing(line, listing, out);
  const PreparedShards shards = write_prepared_shards(options, listing);
  print_split("train", shards.train, out);
  print_split("val", shards.val, out);
  if (shards.val.documents == 0)
    out << "  no validation split (" << listing.documents.size() << " document(s), --val-fraction "
        << options.val_fraction << "): data.val can point at the train shards\n";
  out << "train with data.source \"shards\", data.train \"" << options.out_dir << "/train_*.bin\", data.val \""
      << options.out_dir << "/val_*.bin\" and model.vocab_size >= " << listing.tokenizer->vocab_size() << std::endl;
  if (!listing.not_utf8_files.empty())
    out << "note: skipped " << listing.not_utf8_files.size() << " file(s) in the input folders that are not UTF-8 text "
        << "(listed above; --strict-text makes such a file an error)" << std::endl;
}

}  // namespace

int prepare_data_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  install_stop_signal_handlers();
  try {
    prepare(parse_command_line(args), out);
    return 0;
  } catch (const StopRequested& e) {
    err << "keel prepare-data: " << e.what() << "; nothing published, the output folder is as it was" << std::endl;
    return 128 + e.signal_number;
  } catch (const UsageError& e) {
    if (!*e.what()) {  // --help
      out << kPrepareDataUsage;
      return 0;
    }
    err << "keel prepare-data: " << e.what() << "\n" << kPrepareDataUsage;
    return 2;
  } catch (const KeelError& e) {
    err << "keel prepare-data: error: " << e.what() << std::endl;
    return 1;
  } catch (const std::exception& e) {
    err << "keel prepare-data: error: " << e.what() << std::endl;
    return 1;
  }
}

}  // namespace keel
