"""What keel.Tokenizer reads of a Hugging Face tokenizer folder beside its tokenizer.json: the
roles (bos_token, eos_token) of tokenizer_config.json, or, for a tokenizer.json alone, the end- and
start-of-text tokens of the families in use. The same rule, in the core, picks the ids an export
writes (core/src/interop/hf_tokenizer_files.cpp: Trainer.export_hf(tokenizer=...), keel export
--tokenizer).

The files are read as untrusted input: at most 1 MiB."""
import json
import os

from keel._keel import InvalidArgument

SIDE_FILE_LIMIT_BYTES = 1 << 20
# A tokenizer.json alone names no roles: the end- and start-of-text tokens of the families in use.
END_OF_TEXT = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>")
START_OF_TEXT = ("<|begin_of_text|>", "<s>", "<bos>")


def _read_json(path, limit):
    size = os.path.getsize(path)
    if size > limit:
        raise InvalidArgument(f"{path}: {size} bytes; at most {limit} are read")
    try:
        with open(path, encoding="utf-8") as source:
            value = json.load(source)
    except (ValueError, UnicodeDecodeError) as error:
        raise InvalidArgument(f"{path}: not JSON ({error})") from error
    if not isinstance(value, dict):
        raise InvalidArgument(f"{path}: expected a JSON object at the top level")
    return value


def _configured(side, role):
    """tokenizer_config.json's bos_token / eos_token: a str, or {"content": str}."""
    value = side.get(role)
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None
