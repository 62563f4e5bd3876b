// keel._keel.Tokenizer: the core's tokenizer (abi/keel/embed.h, keel_tokenizer_*), the one
// `keel prepare-data --tokenizer` runs, so ids from Python are the ids of the shards.
// keel/_tokenizer.py adds what a Hugging Face folder says beside the file (eos, bos). Encoding
// and decoding run with the GIL released, under the tokenizer's own lock (one call at a time,
// as the C API asks).
#include <pybind11/stl.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "keel_python.hpp"

namespace keel_python {
namespace {

class Tokenizer {
 public:
  explicit Tokenizer(const std::string& spec) {
    keel_tokenizer* opened = nullptr;
    check(locked([&] { return keel_tokenizer_open(spec.c_str(), &opened); }));
    native_.reset(opened, keel_tokenizer_destroy);
    check(locked([&] { return keel_tokenizer_vocab_size(native_.get(), &vocab_size_); }));
  }

  std::vector<int32_t> encode(const std::string& text) {
    std::vector<int32_t> ids;
    check(locked([&] {
      const int32_t* out = nullptr;
      size_t count = 0;
      const keel_status status = keel_tokenizer_encode(native_.get(), text.data(), text.size(), &out, &count);
      if (status == KEEL_OK) ids.assign(out, out + count);
      return status;
    }));
    return ids;
  }

  // The decoded bytes (UTF-8 for a tokenizer.json; any bytes for "bytes").
  std::string decode(const std::vector<int32_t>& ids, bool skip_special) {
    std::string text;
    check(locked([&] {
      const char* out = nullptr;
      size_t length = 0;
      const keel_status status = keel_tokenizer_decode(native_.get(), ids.data(), ids.size(), skip_special, &out, &length);
      if (status == KEEL_OK) text.assign(out, length);
      return status;
    }));
    return text;
  }

  std::optional<int32_t> token_to_id(const std::string& token) {
    int32_t id = -1;
    const keel_status status = locked([&] { return keel_tokenizer_token_id(native_.get(), token.c_str(), &id); });
    if (status == KEEL_ERR_NOT_FOUND) return std::nullopt;
    check(status);
    return id;
  }

  // (token, special), or nullopt when no token has the id.
  std::optional<std::pair<std::string, bool>> token(int32_t id) {
    std::pair<std::string, bool> found;
    const keel_status status = locked([&] {
      const char* text = nullptr;
      int32_t special = 0;
      const keel_status s = keel_tokenizer_token(native_.get(), id, &text, &special);
      if (s == KEEL_OK) found = {text, special != 0};
      return s;
    });
    if (status == KEEL_ERR_NOT_FOUND) return std::nullopt;
    check(status);
    return found;
  }

  int64_t vocab_size() const { return vocab_size_; }

 private:
  template <typename Call>
  keel_status locked(Call&& call) {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> hold(mutex_);
    return call();
  }

  std::shared_ptr<keel_tokenizer> native_;
  int64_t vocab_size_ = 0;
  std::mutex mutex_;
};

py::str as_str(const std::string& bytes) {
  return py::reinterpret_steal<py::str>(PyUnicode_DecodeUTF8(bytes.data(), py::ssize_t(bytes.size()), "replace"));
}

}  // namespace

void bind_tokenizer(py::module_& module) {
  py::class_<Tokenizer>(module, "Tokenizer",
                        "Keel's tokenizer, the one `keel prepare-data --tokenizer` runs: \"bytes\" (token = byte,\n"
                        "vocabulary 256) or a Hugging Face tokenizer.json (byte-level BPE as GPT-2 and Llama 3 have\n"
                        "it, SentencePiece-style BPE as Llama 2 has it; docs/data.md). Its ids equal the tokenizers\n"
                        "library's encode(text, add_special_tokens=False), and decode its decode.")
      .def(py::init([](const py::object& spec) {
             return std::make_unique<Tokenizer>(py::module_::import("os").attr("fspath")(spec).cast<std::string>());
           }),
           py::arg("spec"))
      .def(
          "encode",
          [](Tokenizer& t, const py::object& text) {
            if (!py::isinstance<py::str>(text) && !py::isinstance<py::bytes>(text))
              throw py::type_error("Tokenizer.encode: expected a str (or bytes), found " +
                                   std::string(py::str(py::type::of(text).attr("__name__"))));
            return t.encode(py::isinstance<py::str>(text) ? text.cast<std::string>()
                                                          : std::string(text.cast<py::bytes>()));
          },
          py::arg("text"),
          "The ids of `text` (a str; bytes for the \"bytes\" tokenizer), special tokens written in it\n"
          "included, no BOS/EOS added.")
      .def(
          "decode",
          [](Tokenizer& t, const std::vector<int32_t>& ids, bool skip_special_tokens) {
            return as_str(t.decode(ids, skip_special_tokens));
          },
          py::arg("ids"), py::arg("skip_special_tokens") = false,
          "The text of `ids` through the file's decoder; special tokens are kept unless\n"
          "skip_special_tokens. Invalid UTF-8 (a cut multi-byte character) becomes U+FFFD. An id that\n"
          "is no token raises keel.InvalidArgument naming it.")
      .def("token_to_id", &Tokenizer::token_to_id, py::arg("token"),
           "The id of `token` (an added token's content, or a token of the vocabulary), or None.")
      .def(
          "id_to_token",
          [](Tokenizer& t, int32_t id) -> py::object {
            auto found = t.token(id);
            return found ? py::object(py::str(found->first)) : py::object(py::none());
          },
          py::arg("id"), "The token whose id is `id` (the vocabulary's string), or None.")
      .def(
          "is_special",
          [](Tokenizer& t, int32_t id) {
            auto found = t.token(id);
            return found && found->second;
          },
          py::arg("id"), "Whether `id` is a special added token (decode's skip_special_tokens leaves those out).")
      .def_property_readonly("vocab_size", &Tokenizer::vocab_size,
                             "One past the largest id, added tokens included (what model.vocab_size must reach).");
}

}  // namespace keel_python
