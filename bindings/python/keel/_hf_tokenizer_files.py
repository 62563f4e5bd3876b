"""The tokenizer beside a Hugging Face export: Trainer.export_hf(folder, tokenizer=...) copies the
tokenizer the data was prepared with (a tokenizer.json, or a folder holding one with its
tokenizer_config.json and special_tokens_map.json) into the export and sets bos/eos/pad in
config.json and generation_config.json to its special tokens' ids, so transformers' generate
stops at the tokenizer's end of text and pads with an id inside the vocabulary.

The files are read as untrusted input: tokenizer.json at most the core's 512 MiB, the others
1 MiB; a special id outside the model's vocabulary is refused naming the file."""
import json
import os
import shutil

from keel._keel import InvalidArgument

TOKENIZER_LIMIT_BYTES = 512 << 20  # core/src/tokenize/tokenizer_file_limits.h's max_file_bytes
SIDE_FILE_LIMIT_BYTES = 1 << 20
SIDE_FILES = ("tokenizer_config.json", "special_tokens_map.json")
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


def _token_ids(tokenizer_json, path):
    """content -> id of the added tokens and the model's vocabulary."""
    ids = {}
    vocab = tokenizer_json.get("model", {}).get("vocab") if isinstance(tokenizer_json.get("model"), dict) else None
    if isinstance(vocab, dict):
        ids.update((k, v) for k, v in vocab.items() if isinstance(v, int))
    added = tokenizer_json.get("added_tokens", [])
    if not isinstance(added, list):
        raise InvalidArgument(f"{path}: added_tokens must be a list")
    for token in added:
        if isinstance(token, dict) and isinstance(token.get("content"), str) and isinstance(token.get("id"), int):
            ids[token["content"]] = token["id"]
    return ids


def _configured(side, role):
    """tokenizer_config.json's bos_token / eos_token: a str, or {"content": str}."""
    value = side.get(role)
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _special_ids(tokenizer_json, side, path):
    ids = _token_ids(tokenizer_json, path)
    eos = _configured(side, "eos_token") or next((t for t in END_OF_TEXT if t in ids), None)
    bos = _configured(side, "bos_token") or next((t for t in START_OF_TEXT if t in ids), None)
    if bos is None and eos in ("<|endoftext|>",):  # GPT-2's one token opens and ends a text
        bos = eos
    for role, token in (("eos_token", eos), ("bos_token", bos)):
        if token is not None and token not in ids:
            raise InvalidArgument(f"{path}: {role} {token!r} is not a token of the tokenizer")
    return (ids[bos] if bos else None), (ids[eos] if eos else None), bos, eos


def attach(folder, tokenizer):
    """Copies `tokenizer` (a tokenizer.json or a folder with one) into the export `folder` and
    writes its special ids into folder/config.json and folder/generation_config.json."""
    source = os.fspath(tokenizer)
    source_dir = source if os.path.isdir(source) else None
    tokenizer_path = os.path.join(source, "tokenizer.json") if source_dir else source
    if not os.path.isfile(tokenizer_path):
        raise InvalidArgument(f"export_hf: tokenizer {source!r}: expected a tokenizer.json or a folder holding one")
    tokenizer_json = _read_json(tokenizer_path, TOKENIZER_LIMIT_BYTES)
    side = {}
    side_config = os.path.join(source_dir, "tokenizer_config.json") if source_dir else None
    if side_config and os.path.isfile(side_config):
        side = _read_json(side_config, SIDE_FILE_LIMIT_BYTES)
    bos_id, eos_id, bos, eos = _special_ids(tokenizer_json, side, side_config if side else tokenizer_path)

    config_path = os.path.join(folder, "config.json")
    config = _read_json(config_path, SIDE_FILE_LIMIT_BYTES)
    for role, token_id in (("bos_token_id", bos_id), ("eos_token_id", eos_id)):
        if token_id is not None and not 0 <= token_id < config["vocab_size"]:
            raise InvalidArgument(f"{tokenizer_path}: {role} {token_id} lies outside the model's vocabulary "
                                  f"({config['vocab_size']}): not the tokenizer the model was trained with")
    config["bos_token_id"], config["eos_token_id"] = bos_id, eos_id
    generation = {"bos_token_id": bos_id, "eos_token_id": eos_id, "pad_token_id": config.get("pad_token_id", eos_id)}

    shutil.copyfile(tokenizer_path, os.path.join(folder, "tokenizer.json"))
    for name in SIDE_FILES:
        if source_dir and os.path.isfile(os.path.join(source_dir, name)):
            shutil.copyfile(os.path.join(source_dir, name), os.path.join(folder, name))
    if not side:  # transformers' AutoTokenizer needs a class and the roles
        side = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": config.get("n_positions",
                                                                                        config.get("max_position_embeddings"))}
        side.update({k: v for k, v in (("bos_token", bos), ("eos_token", eos)) if v is not None})
        _write_json(os.path.join(folder, "tokenizer_config.json"), side)
    _write_json(config_path, config)
    _write_json(os.path.join(folder, "generation_config.json"), generation)


def _write_json(path, value):
    temporary = f"{path}.tmp-{os.getpid()}"
    with open(temporary, "w") as out:
        out.write(json.dumps(value, indent=2) + "\n")
    os.replace(temporary, path)
