// The tokenizer beside a Hugging Face export (keel export --tokenizer, embed.h
// keel_trainer_export_hf_tokenizer, Python's Trainer.export_hf(tokenizer=...)): the tokenizer the
// data was prepared with is copied into the export, and its special tokens' ids become config.json's
// and generation_config.json's bos/eos/pad, so transformers' generate stops at its end of text and
// pads inside the vocabulary.
#pragma once

#include <string>

namespace keel {

// `tokenizer`: a tokenizer.json, or a folder holding one (its tokenizer_config.json and
// special_tokens_map.json are copied too, and name the roles). `folder`: an export holding
// config.json. The files are untrusted: regular files only, tokenizer.json at most 512 MiB, the
// others 1 MiB; a role naming no token of the tokenizer, or an id outside config.json's vocab_size,
// is refused naming the file. Throws KeelError (KEEL_ERR_INVALID_ARGUMENT, KEEL_ERR_IO).
void attach_hf_tokenizer(const std::string& folder, const std::string& tokenizer);

}  // namespace keel
