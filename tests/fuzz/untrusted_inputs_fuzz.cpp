// A bounded, seeded mutation fuzzer (no libFuzzer) over the parsers that read input from
// elsewhere: a checkpoint's manifest and its loader, the safetensors reader, the run config, and
// a Hugging Face tokenizer.json (read, then run over text with special tokens and Unicode, and
// the ids decoded back).
// Each mutated input must end in success or a KeelError with a message; any other exception
// fails the run (the input is written beside the report), and a crash or hang fails the ctest
// (which bounds it with TIMEOUT). The same --seed and --count always try the same inputs.
// safetensors_tiling goes further: it knows which of its inputs are well formed, and requires
// the reader to accept exactly those and read every tensor from its own bytes. hf_folder mutates
// a Hugging Face checkpoint folder given as model.init_from: its config.json (which the llama
// plugin maps into the model section when the config is read) and its shard index (read by the
// import). hosts_file mutates `keel launch`'s hosts file and requires every host it accepts to be
// a plain name with a bounded slot count. documents runs hostile documents (long runs of one
// class, U+180E and other spaces, near misses of a 4 KiB added token, lines of 100k characters,
// bad UTF-8) through the seed tokenizers and through ones with costly patterns (.(?=.*$)); it
// runs under a 4 GiB address-space limit, so a blow-up is an allocation failure that must come
// out as a KeelError naming the document, and ctest's TIMEOUT bounds its time.
//
//   keel-fuzz manifest|safetensors|safetensors_tiling|config|tokenizer|documents|hf_folder|hosts_file --seed S --count N --work DIR
#include <nlohmann/json.hpp>

#include <sys/resource.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "config/run_config.h"
#include "host/errors.h"
#include "interop/huggingface.h"
#include "io/safetensors.h"
#include "launch/host_file.h"
#include "tokenize/tokenizer.h"
#include "train/trainer.h"

namespace fs = std::filesystem;

namespace {

// A tiny model whose checkpoint is a few hundred kilobytes, so one load takes milliseconds.
const char* const kTinyConfig = R"({
  "model": {"plugin": "gpt", "n_layer": 1, "n_head": 2, "d_model": 16, "vocab_size": 256, "seq_len": 16},
  "optimizer": {"plugin": "adamw", "lr": 1e-3},
  "parallel": {"strategy": {"plugin": "ddp"}},
  "backend": {"plugin": "cpu"},
  "data": {"source": "text", "text_max_bytes": 65536, "micro_batch": 2, "seq_len": 16, "val_batches": 1},
  "lr_schedule": {"warmup_steps": 1, "decay": "cosine"},
  "train": {"steps": 2, "seed": 7, "log_every": 1, "tensorboard_dir": "none", "sample_tokens": 0}
})";

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  size_t below(size_t n) { return n ? size_t(rng_() % n) : 0; }

  // Values that have broken parsers before: signs, int32/int64/uint64 edges, huge floats,
  // fractions, path tricks, wrong types, and nesting deeper than any real file.
  nlohmann::json interesting_value() {
    switch (below(24)) {
      case 0: return 0;
      case 1: return -1;
      case 2: return 1;
      case 3: return INT32_MAX;
      case 4: return int64_t(INT32_MAX) + 1;
      case 5: return int64_t(1) << 53;
      case 6: return int64_t(1) << 62;
      case 7: return INT64_MAX;
      case 8: return INT64_MIN;
      case 9: return UINT64_MAX;
      case 10: return 1e300;
      case 11: return -1e300;
      case 12: return 0.5;
      case 13: return "";
      case 14: return "../../outside";
      case 15: return "/dev/zero";
      case 16: return nlohmann::json::array();
      case 17: return nlohmann::json::object();
      case 18: return nullptr;
      case 19: return true;
      case 20: return std::string(4096, 'x');
      case 21: return "state0";
      case 22: {
        nlohmann::json deep = nlohmann::json::array();
        for (int d = 0; d < 200; ++d) deep = nlohmann::json::array({deep});
        return deep;
      }
      default: return int64_t(rng_() >> below(64));
    }
  }

  // One structural change to a random node: replace it, delete it, or duplicate an element.
  void mutate_tree(nlohmann::json& root) {
    std::vector<nlohmann::json::json_pointer> nodes;
    collect(root, nlohmann::json::json_pointer(), nodes);
    const nlohmann::json::json_pointer at = nodes[below(nodes.size())];
    if (at.empty()) {
      root = interesting_value();
      return;
    }
    nlohmann::json& parent = root[at.parent_pointer()];
    switch (below(4)) {
      case 0:
        if (parent.is_object()) parent.erase(at.back());
        else if (parent.is_array()) parent.erase(size_t(std::stoul(at.back())));
        break;
      case 1:
        if (parent.is_array()) parent.push_back(root[at]);
        else parent[at.back() + "_extra"] = interesting_value();
        break;
      default:
        root[at] = interesting_value();
    }
  }

  // One to four byte-level changes.
  void mutate_bytes(std::string& text) {
    for (size_t n = 1 + below(4); n > 0; --n) {
      const size_t pos = below(text.size() + 1);
      switch (below(6)) {
        case 0:
          if (pos < text.size()) text[pos] = char(text[pos] ^ (1 << below(8)));
          break;
        case 1:
          if (pos < text.size()) text[pos] = char(rng_());
          break;
        case 2: text.erase(pos, below(32)); break;
        case 3: text.insert(pos, text.substr(below(text.size()), below(64))); break;
        case 4: text.insert(pos, interesting_value().dump()); break;
        default: text.resize(below(text.size() + 1)); break;
      }
    }
  }

  // A tree mutation when the text is JSON (most of the time), else bytes.
  std::string mutate(const std::string& json_text) {
    if (below(3) != 0) {
      nlohmann::json tree = nlohmann::json::parse(json_text);
      for (size_t n = 1 + below(3); n > 0; --n) mutate_tree(tree);
      return tree.dump();
    }
    std::string text = json_text;
    mutate_bytes(text);
    return text;
  }

 private:
  static void collect(const nlohmann::json& node, const nlohmann::json::json_pointer& at,
                      std::vector<nlohmann::json::json_pointer>& out) {
    out.push_back(at);
    if (node.is_object())
      for (auto it = node.begin(); it != node.end(); ++it) collect(it.value(), at / it.key(), out);
    else if (node.is_array())
      for (size_t i = 0; i < node.size(); ++i) collect(node[i], at / i, out);
  }

  std::mt19937_64 rng_;
};

struct Tally {
  int64_t accepted = 0, refused = 0;
};

// Runs one input; false (after reporting) when it ended in anything but success or a KeelError.
bool try_input(const std::string& target, int64_t index, const std::string& input, const std::string& work,
               const std::function<void()>& body, Tally& tally) {
  try {
    body();
    ++tally.accepted;
    return true;
  } catch (const keel::KeelError& e) {
    if (std::strlen(e.what()) > 0) {
      ++tally.refused;
      return true;
    }
    std::cerr << "FAIL: " << target << " input " << index << ": a KeelError with an empty message\n";
  } catch (const std::exception& e) {
    std::cerr << "FAIL: " << target << " input " << index << ": escaped as " << typeid(e).name() << ": " << e.what() << "\n";
  }
  const std::string saved = work + "/failing-" + target + "-" + std::to_string(index);
  write_text(saved, input);
  std::cerr << "the input is in " << saved << "\n";
  return false;
}

// A real checkpoint of the tiny model, saved once: its manifest and rank file are the seeds.
struct Checkpoint {
  std::unique_ptr<keel::Trainer> trainer;
  std::string folder;
};

Checkpoint make_checkpoint(const std::string& work) {
  Checkpoint c;
  keel::RunConfig config = keel::RunConfig::from_json_text(kTinyConfig, "<fuzz>");
  c.trainer = std::make_unique<keel::Trainer>(std::move(config));
  c.trainer->train_step();
  c.folder = keel::save_checkpoint(c.trainer->state_view(), c.trainer->position(), work + "/root", 1);
  return c;
}

int fuzz_manifest(Mutator& mutate, int64_t count, const std::string& work, Tally& tally) {
  Checkpoint c = make_checkpoint(work);
  const std::string manifest_path = c.folder + "/manifest.json", original = read_text(manifest_path);
  const std::string root = fs::path(c.folder).parent_path().string();
  for (int64_t i = 0; i < count; ++i) {
    const bool pointer = mutate.below(8) == 0;  // now and then the `latest` pointer instead
    const std::string input = pointer ? std::string("step-00000001\n") : mutate.mutate(original);
    std::string latest = input;
    if (pointer) mutate.mutate_bytes(latest);
    write_text(manifest_path, pointer ? original : input);
    write_text(root + "/latest", pointer ? latest : "step-00000001\n");
    if (!try_input("manifest", i, pointer ? latest : input, work,
                   [&] {
                     const std::string folder = keel::resolve_checkpoint(root);
                     keel::config_from_checkpoint(folder);  // what export reads first
                     c.trainer->resume_at(keel::load_checkpoint(c.trainer->state_view(), folder));
                   },
                   tally))
      return 1;
  }
  return 0;
}

int fuzz_safetensors(Mutator& mutate, int64_t count, const std::string& work, Tally& tally) {
  Checkpoint c = make_checkpoint(work);
  const std::string original = read_text(c.folder + "/rank00000.safetensors");
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, original.data(), 8);
  const std::string header = original.substr(8, header_bytes), data = original.substr(8 + header_bytes);
  for (int64_t i = 0; i < count; ++i) {
    std::string input;
    if (mutate.below(2) == 0) {  // a new header (a mutated tree, or bytes), its length kept honest or not
      const std::string new_header = mutate.mutate(header);
      uint64_t length = new_header.size();
      if (mutate.below(8) == 0) length = mutate.interesting_value().is_number_unsigned() ? UINT64_MAX : length + 1;
      input.assign(reinterpret_cast<const char*>(&length), 8);
      input += new_header + data;
    } else {
      input = original;
      mutate.mutate_bytes(input);
    }
    auto body = [&] {
      keel::SafetensorsFile file("<fuzz input>", std::vector<unsigned char>(input.begin(), input.end()));
      for (const std::string& name : file.names()) {
        const auto& tensor = file.tensor(name);
        if (tensor.dtype != "F32") continue;
        std::vector<float> values(tensor.bytes / 4 + 1);
        file.read_f32(name, 0, int64_t(tensor.bytes / 4), values.data());
        const int64_t begin = int64_t(mutate.below(values.size() + 2)) - 1, wanted = int64_t(mutate.below(values.size() + 2)) - 1;
        try {
          file.read_f32(name, begin, wanted, values.data());  // may ask past the end: must refuse
        } catch (const keel::KeelError&) {
        }
      }
    };
    if (!try_input("safetensors", i, input, work, body, tally)) return 1;
  }
  return 0;
}

// One tensor of a generated file: its elements and the data_offsets its header gives.
struct TiledTensor {
  std::string name;
  int64_t elements;
  uint64_t begin, end;
};

// What the safetensors format requires, written independently of the reader: offsets that,
// sorted, run from byte 0 to the end of the data with no gap or overlap, each range the size
// its shape needs.
bool tiles_exactly(std::vector<TiledTensor> tensors, uint64_t data_bytes) {
  std::sort(tensors.begin(), tensors.end(),
            [](const TiledTensor& a, const TiledTensor& b) { return std::make_pair(a.begin, a.end) < std::make_pair(b.begin, b.end); });
  uint64_t next = 0;
  for (const TiledTensor& t : tensors) {
    if (t.begin != next || t.end < t.begin || t.end - t.begin != uint64_t(t.elements) * 4) return false;
    next = t.end;
  }
  return next == data_bytes;
}

// Files of 1 to 5 F32 tensors laid out back to back in a random order, then perturbed: offsets
// moved (gaps, overlaps, unaligned or shared ranges), stray bytes between header and data, a
// buffer cut short or grown. The reader must refuse, with a message naming the file, exactly the
// files that do not tile, and read every tensor of the others from its own bytes.
int fuzz_safetensors_tiling(Mutator& mutate, int64_t count, const std::string& work, Tally& tally) {
  for (int64_t i = 0; i < count; ++i) {
    std::vector<TiledTensor> tensors(1 + mutate.below(5));
    for (size_t t = 0; t < tensors.size(); ++t) tensors[t] = {"t" + std::to_string(t), int64_t(mutate.below(9)), 0, 0};
    std::vector<size_t> order(tensors.size());
    for (size_t t = 0; t < order.size(); ++t) order[t] = t;
    for (size_t t = order.size(); t > 1; --t) std::swap(order[t - 1], order[mutate.below(t)]);
    uint64_t data_bytes = 0;
    for (size_t t : order) {
      tensors[t].begin = data_bytes;
      data_bytes += uint64_t(tensors[t].elements) * 4;
      tensors[t].end = data_bytes;
    }
    std::vector<float> values(data_bytes / 4);
    for (size_t v = 0; v < values.size(); ++v) values[v] = float(i % 1000) + float(v) / 16;
    std::string data(reinterpret_cast<const char*>(values.data()), data_bytes), stray;
    for (size_t n = mutate.below(3); n > 0; --n) {  // none, one or two perturbations
      TiledTensor& t = tensors[mutate.below(tensors.size())];
      const uint64_t shift = 1 + mutate.below(8);
      switch (mutate.below(6)) {
        case 0:  // a tensor moved later or earlier, whole
          if (mutate.below(2) || t.begin < shift) t.begin += shift, t.end += shift;
          else t.begin -= shift, t.end -= shift;
          break;
        case 1: t = {t.name, t.elements, tensors[0].begin, tensors[0].begin + uint64_t(t.elements) * 4}; break;  // shared bytes
        case 2: stray.assign(shift, '\x7f'); break;  // bytes between the header and the data
        case 3: data.resize(data.size() > shift ? data.size() - shift : 0); break;  // a short buffer
        case 4: data.append(shift, '\0'); break;  // a long buffer
        default: t.end += shift; break;  // a range longer than its shape
      }
    }
    nlohmann::json header = nlohmann::json::object();
    for (const TiledTensor& t : tensors)
      header[t.name] = {{"dtype", "F32"}, {"shape", {t.elements}}, {"data_offsets", {t.begin, t.end}}};
    std::string text = header.dump();
    while (text.size() % 8) text += ' ';
    const uint64_t length = text.size();
    std::string input(reinterpret_cast<const char*>(&length), 8);
    input += text + stray + data;
    const bool well_formed = tiles_exactly(tensors, stray.size() + data.size());

    auto body = [&] {
      std::unique_ptr<keel::SafetensorsFile> file;
      try {
        file = std::make_unique<keel::SafetensorsFile>("<fuzz input>", std::vector<unsigned char>(input.begin(), input.end()));
      } catch (const keel::KeelError& e) {
        const std::string message = e.what();
        if (well_formed) throw std::logic_error("a well-formed file was refused: " + message);
        if (message.rfind("<fuzz input>: not a valid safetensors file: ", 0) != 0 || message.size() < 60)
          throw std::logic_error("the refusal does not name the file and what is wrong: " + message);
        throw;
      }
      if (!well_formed) throw std::logic_error("a file whose tensors do not tile its data was accepted");
      const std::string stored = stray + data;
      for (const TiledTensor& t : tensors) {
        std::vector<float> read(size_t(t.elements)), expected(size_t(t.elements));
        file->read_f32(t.name, 0, t.elements, read.data());
        std::memcpy(expected.data(), stored.data() + t.begin, size_t(t.elements) * 4);
        if (std::memcmp(read.data(), expected.data(), size_t(t.elements) * 4) != 0)
          throw std::logic_error("tensor " + t.name + " was not read from its own bytes");
      }
    };
    if (!try_input("safetensors_tiling", i, input, work, body, tally)) return 1;
  }
  return 0;
}

int fuzz_config(Mutator& mutate, int64_t count, const std::string& work, Tally& tally, const std::string& seed_config,
                bool keep_going) {
  const std::string original = seed_config.empty() ? std::string(kTinyConfig) : read_text(seed_config);
  int status = 0;
  for (int64_t i = 0; i < count; ++i) {
    const std::string input = mutate.mutate(original);
    if (!try_input("config", i, input, work, [&] { keel::RunConfig::from_json_text(input, "<fuzz>.json"); }, tally)) {
      status = 1;
      if (!keep_going) break;
    }
  }
  return status;
}

// Two small tokenizer.json seeds: byte-level BPE with GPT-2's pre-tokenizer and an added token,
// and SentencePiece-style BPE (Prepend + Replace, byte fallback, unk) behind a Split.
const char* const kTokenizerSeeds[] = {
    R"({"version": "1.0", "added_tokens": [{"id": 12, "content": "<|eot|>", "single_word": false, "lstrip": false,
        "rstrip": false, "normalized": false, "special": true}], "normalizer": null,
      "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\p{L}+|\\p{N}{1,3}|\\s+(?!\\S)|\\s+|[^\\s\\p{L}\\p{N}]+"},
         "behavior": "Isolated", "invert": false},
        {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": false}]},
      "post_processor": null, "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true},
      "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "fuse_unk": false, "byte_fallback": false,
        "ignore_merges": true, "vocab": {"<unk>": 13, "a": 0, "b": 1, "Ġ": 2, "Ċ": 3, "Ã": 4, "©": 5, "1": 6, "Ġa": 7, "ab": 8, "Ġab": 9,
        "2": 10, "12": 11}, "merges": ["Ġ a", "a b", "Ġa b", ["1", "2"]]}})",
    R"({"added_tokens": [{"id": 1, "content": "<s>", "special": true, "normalized": false}],
      "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
      "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true},
      "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0},
        {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first"}]},
      "model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>", "fuse_unk": true,
        "vocab": {"<unk>": 0, "<s>": 1, "<0xC3>": 2, "<0xA9>": 3, "<0x0A>": 4, "▁": 5, "a": 6, "b": 7, "▁a": 8, "▁ab": 9},
        "merges": ["▁ a", "▁a b"]}})"};

// Tokenizers whose patterns or tokens cost the most per byte, beside the two seeds.
std::vector<std::string> hostile_tokenizers() {
  auto split_then_bytes = [](const std::string& regex) {
    return R"({"added_tokens": [{"id": 300, "content": ")" + std::string("<") + std::string(4094, 'q') +
           R"(>", "special": true, "normalized": false}],
      "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": )" + nlohmann::json(regex).dump() + R"(}, "behavior": "Isolated", "invert": false},
        {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},
      "model": {"type": "BPE", "unk_token": "<unk>", "vocab": {"<unk>": 0, "a": 1, "q": 2, "Ġ": 3, "aa": 4},
                "merges": ["a a"]}})";
  };
  return {split_then_bytes(".(?=.*$)"), split_then_bytes("\\s+(?!\\S)|\\s+|[^\\s]+"),
          split_then_bytes("(?:a|aa)+(?=x)|."), split_then_bytes("[[:space:]]*$|\\S")};
}

int fuzz_tokenizer(Mutator& mutate, int64_t count, const std::string& work, Tally& tally) {
  // U+180E and the start of the 4 KiB added token; long runs are the documents target's (a
  // hostile seed's .(?=.*$) is meant to refuse them).
  const std::string text = "ab ab12 a\n<|eot|>b\xC3\xA9 <s> a  b\n\n123 \xF0\x9F\x9A\x80z \xE1\xA0\x8E aa x <qqq";
  const std::string path = work + "/tokenizer.json";
  std::vector<std::string> seeds(std::begin(kTokenizerSeeds), std::end(kTokenizerSeeds));
  for (const auto& hostile : hostile_tokenizers()) seeds.push_back(hostile);
  for (const auto& seed : seeds) {  // each seed itself is accepted
    write_text(path, seed);
    std::vector<uint32_t> ids;
    const auto tokenizer = keel::open_tokenizer(path);
    tokenizer->encode(text, "<fuzz text>", ids);
    tokenizer->decode(ids, false);
  }
  for (int64_t i = 0; i < count; ++i) {
    const std::string input = mutate.mutate(seeds[mutate.below(seeds.size())]);
    write_text(path, input);
    const bool ok = try_input("tokenizer", i, input, work, [&] {
      const auto tokenizer = keel::open_tokenizer(path);
      std::vector<uint32_t> ids;
      tokenizer->encode(text, "<fuzz text>", ids);
      for (uint32_t id : ids)
        if (int64_t(id) >= tokenizer->vocab_size())
          throw std::logic_error("id " + std::to_string(id) + " past the vocabulary " + std::to_string(tokenizer->vocab_size()));
      // Decoding, too, meets the mutated decoder (refused as a KeelError when Keel cannot run it).
      tokenizer->decode(ids, false);
      tokenizer->decode(ids, true);
    }, tally);
    if (!ok) return 1;
  }
  return 0;
}

// A document of random pieces, some repeated thousands of times: up to about 200 KB.
std::string hostile_document(Mutator& mutate) {
  static const char* const pieces[] = {"a", "aa", " ", "  ", "\n", "\xE1\xA0\x8E", "\xE2\x80\x80", "\xC2\xA0", "<|eot|>",
                                       "<|eot", "<s>", "12", "\xC3\xA9", "\xF0\x9F\x9A\x80", "q", "<qqqq", "x", "\xFF"};
  const size_t count = sizeof(pieces) / sizeof(pieces[0]);
  std::string text;
  for (size_t n = 1 + mutate.below(12); n > 0; --n) {
    const char* piece = pieces[mutate.below(count - (mutate.below(8) == 0 ? 0 : 1))];  // bad UTF-8 now and then
    const size_t repeat = mutate.below(4) == 0 ? 1 + mutate.below(100'000) : 1 + mutate.below(4);
    for (size_t r = 0; r < repeat && text.size() < 200'000; ++r) text += piece;
  }
  if (mutate.below(6) == 0) text += "<" + std::string(4094, 'q') + (mutate.below(2) ? ">" : "");
  return text;
}

int fuzz_documents(Mutator& mutate, int64_t count, const std::string& work, Tally& tally) {
  const rlimit address_space{rlim_t(4) << 30, rlim_t(4) << 30};
  if (::setrlimit(RLIMIT_AS, &address_space) != 0) std::cerr << "note: no address-space limit (setrlimit failed)\n";
  std::vector<std::unique_ptr<keel::Tokenizer>> tokenizers;
  std::vector<std::string> sources(std::begin(kTokenizerSeeds), std::end(kTokenizerSeeds));
  for (const auto& text : hostile_tokenizers()) sources.push_back(text);
  for (size_t t = 0; t < sources.size(); ++t) {
    const std::string path = work + "/tokenizer" + std::to_string(t) + ".json";
    write_text(path, sources[t]);
    tokenizers.push_back(keel::open_tokenizer(path));
  }
  for (int64_t i = 0; i < count; ++i) {
    const std::string document = hostile_document(mutate);
    const keel::Tokenizer& tokenizer = *tokenizers[mutate.below(tokenizers.size())];
    const bool ok = try_input("documents", i, document, work, [&] {
      std::vector<uint32_t> ids;
      tokenizer.encode(document, "<fuzz document>", ids);
      for (uint32_t id : ids)
        if (int64_t(id) >= tokenizer.vocab_size())
          throw std::logic_error("id " + std::to_string(id) + " past the vocabulary " + std::to_string(tokenizer.vocab_size()));
    }, tally);
    if (!ok) return 1;
  }
  return 0;
}

// The tiny llama whose export seeds hf_folder.
const char* const kTinyLlama = R"({
  "model": {"plugin": "llama", "n_layer": 1, "d_model": 16, "n_head": 4, "n_kv_head": 2, "ffn_hidden": 24,
            "vocab_size": 256, "seq_len": 16},
  "optimizer": {"plugin": "adamw", "lr": 1e-3},
  "parallel": {"strategy": {"plugin": "ddp"}},
  "backend": {"plugin": "cpu"},
  "data": {"source": "text", "text_max_bytes": 65536, "micro_batch": 2, "seq_len": 16, "val_batches": 1},
  "train": {"steps": 2, "seed": 7, "log_every": 1, "tensorboard_dir": "none", "sample_tokens": 0}
})";

int fuzz_hf_folder(Mutator& mutate, int64_t count, const std::string& work, Tally& tally) {
  // The seed folder: the tiny llama exported, its one file named as a shard of an index.
  keel::Trainer trainer(keel::RunConfig::from_json_text(kTinyLlama, "<fuzz>"));
  const std::string folder = work + "/hf", shard = "model-00001-of-00001.safetensors";
  keel::export_huggingface(trainer.parameters(), folder + "/model.safetensors");
  fs::rename(folder + "/model.safetensors", folder + "/" + shard);
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  for (const auto& name : keel::SafetensorsFile(folder + "/" + shard).names()) index["weight_map"][name] = shard;
  const std::string config_seed = read_text(folder + "/config.json"), index_seed = index.dump(1);
  nlohmann::json run = nlohmann::json::parse(kTinyLlama);
  run["model"] = {{"plugin", "llama"}, {"init_from", folder}};  // every size from config.json
  const std::string run_text = run.dump();
  auto restore = [&] {
    write_text(folder + "/config.json", config_seed);
    write_text(folder + "/model.safetensors.index.json", index_seed);
  };
  restore();
  keel::import_huggingface(trainer.parameters(), keel::RunConfig::from_json_text(run_text, "<fuzz>").model_init_from);
  for (int64_t i = 0; i < count; ++i) {
    const bool config = i % 2 == 0;  // config.json and the index in turn, the other left whole
    restore();
    const std::string input = mutate.mutate(config ? config_seed : index_seed);
    write_text(folder + (config ? "/config.json" : "/model.safetensors.index.json"), input);
    const bool ok = try_input("hf_folder", i, input, work, [&] {
      const keel::RunConfig completed = keel::RunConfig::from_json_text(run_text, "<fuzz>.json");
      if (!config) keel::import_huggingface(trainer.parameters(), completed.model_init_from);
    }, tally);
    if (!ok) return 1;
  }
  return 0;
}

}  // namespace

// keel launch's hosts file: whatever it reads must be a host name the launcher cannot mistake for
// an option, with a bounded slot count.
int fuzz_hosts_file(Mutator& mutate, int64_t count, const std::string& work, Tally& tally) {
  const std::string original = "node1 slots=2\nnode2 slots=4  # the second rack\n# a comment\n\n10.0.0.3\n";
  const std::string path = work + "/hosts";
  for (int64_t i = 0; i < count; ++i) {
    std::string input = original;  // not JSON: byte-level changes only
    mutate.mutate_bytes(input);
    write_text(path, input);
    const bool ok = try_input("hosts_file", i, input, work, [&] {
      for (const keel::LaunchHost& host : keel::read_host_file(path))
        if (host.name.empty() || host.name[0] == '-' || host.name.find_first_of(" \t\n,;:'\"$`") != std::string::npos ||
            host.slots < 1 || host.slots > 4096 ||
            (!host.site.empty() && (host.site[0] == '-' || host.site.find_first_of(" \t\n,;:'\"$`{}[]") != std::string::npos)))
          throw std::runtime_error("accepted host '" + host.name + "' with " + std::to_string(host.slots) +
                                   " slots, site '" + host.site + "'");
    }, tally);
    if (!ok) return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  std::string target, work, seed_config;
  bool keep_going = false;  // report every failing input, not only the first (config only)
  uint64_t seed = 1;
  int64_t count = 100;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--seed" && i + 1 < argc) seed = std::stoull(argv[++i]);
    else if (arg == "--count" && i + 1 < argc) count = std::stoll(argv[++i]);
    else if (arg == "--work" && i + 1 < argc) work = argv[++i];
    else if (arg == "--config" && i + 1 < argc) seed_config = argv[++i];
    else if (arg == "--keep-going") keep_going = true;
    else if (target.empty() && arg[0] != '-') target = arg;
    else {
      std::cerr << "usage: keel-fuzz manifest|safetensors|safetensors_tiling|config|tokenizer|documents|hf_folder|hosts_file --seed S --count N --work DIR [--config SEED.json]\n";
      return 2;
    }
  }
  if (target.empty() || work.empty()) {
    std::cerr << "usage: keel-fuzz manifest|safetensors|safetensors_tiling|config|tokenizer|documents|hf_folder|hosts_file --seed S --count N --work DIR [--config SEED.json]\n";
    return 2;
  }
  work = (fs::path(work) / target).string();
  fs::remove_all(work);
  fs::create_directories(work);
  Mutator mutate(seed);
  Tally tally;
  int status = 2;
  try {
    if (target == "manifest") status = fuzz_manifest(mutate, count, work, tally);
    else if (target == "safetensors") status = fuzz_safetensors(mutate, count, work, tally);
    else if (target == "safetensors_tiling") status = fuzz_safetensors_tiling(mutate, count, work, tally);
    else if (target == "config") status = fuzz_config(mutate, count, work, tally, seed_config, keep_going);
    else if (target == "tokenizer") status = fuzz_tokenizer(mutate, count, work, tally);
    else if (target == "documents") status = fuzz_documents(mutate, count, work, tally);
    else if (target == "hf_folder") status = fuzz_hf_folder(mutate, count, work, tally);
    else if (target == "hosts_file") status = fuzz_hosts_file(mutate, count, work, tally);
    else std::cerr << "unknown target " << target << "\n";
  } catch (const std::exception& e) {  // setting up the seed inputs failed: not a finding
    std::cerr << "FAIL: " << target << ": could not prepare the seed input: " << e.what() << "\n";
    return 1;
  }
  std::cout << target << ": seed " << seed << ", " << count << " inputs: " << tally.accepted << " accepted, "
            << tally.refused << " refused with a KeelError" << (status == 0 ? "" : "; FAILED") << std::endl;
  // Inputs that all parse (or all fail) mean the mutations did not reach the interesting paths.
  if (status == 0 && count >= 100 && (tally.refused == 0 || (target != "manifest" && tally.accepted == 0))) {
    std::cerr << "FAIL: " << target << ": the mutations never " << (tally.refused == 0 ? "failed" : "succeeded") << "\n";
    return 1;
  }
  return status;
}
