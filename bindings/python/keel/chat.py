"""Chat data for fine-tuning: JSONL conversations rendered with a tokenizer's chat template, into
Keel's masked token shards (docs/data.md §1, docs/finetuning.md), where only the assistant's
tokens are learned.

Why Python: chat templates are Jinja programs, and transformers renders them with the jinja2
library in its sandbox; rendering them with the same library (ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, tojson, raise_exception) gives the same text, where a Jinja of our
own in C++ would be a second interpreter to keep equal. The text is then tokenized by Keel's own
tokenizer (keel.Tokenizer), so the ids are the ones `keel prepare-data` would give.

    keel.chat.prepare_chat(["conversations.jsonl"], "data/chat", tokenizer="tok_folder", seq_len=512)

Each line is {"messages": [{"role", "content"}, ...]} or {"prompt", "completion"}. A conversation
is rendered whole; the assistant's tokens of turn i are those the conversation up to and with
turn i adds to the conversation before it with the generation prompt, as TRL's completion-only
training takes them. A prompt/completion pair is the two texts one after the other (the
completion learned, then the end-of-text token where the tokenizer has one), with no template.
Every conversation becomes one sample: its tokens, then padding (never learned) to seq_len, so
the sampler's windows of seq_len + 1 tokens each hold one conversation, which starts at position
0 and attends to nothing of another. A conversation longer than seq_len is cut there (counted in
the report)."""
import hashlib
import json
import os
import struct

from keel._keel import InvalidArgument

MAGIC, VERSION, HAS_MASK, PACKED = 20261128, 1, 1, 2  # core/src/data/shard_format.h
LEARNED, DOCUMENT_START = 1, 2  # a mask byte's bits
HEADER_INTS = 256
MAX_LINE_BYTES = 16 << 20  # one conversation
MAX_CONFIG_BYTES = 4 << 20  # tokenizer_config.json with its templates


def _token_text(value):
    """tokenizer_config.json names a special token as a string or as {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _read_json(path, limit, what):
    if not os.path.isfile(path):
        raise InvalidArgument(f"{path}: no {what} there")
    if os.path.getsize(path) > limit:
        raise InvalidArgument(f"{path}: {os.path.getsize(path)} bytes, more than the {limit} a {what} may have")
    with open(path, encoding="utf-8") as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            raise InvalidArgument(f"{path}: not JSON: {e}") from None


class ChatTemplate:
    """A tokenizer folder's chat template (tokenizer_config.json "chat_template", or its "default"
    among named ones) with the special tokens it may use, rendered as transformers renders it."""

    def __init__(self, folder, template=None):
        config_path = os.path.join(folder, "tokenizer_config.json")
        config = _read_json(config_path, MAX_CONFIG_BYTES, "tokenizer_config.json") if template is None or \
            os.path.isfile(config_path) else {}
        if template is None:
            template = config.get("chat_template")
            if isinstance(template, list):  # [{"name", "template"}, ...]
                named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
                template = named.get("default")
            if not isinstance(template, str):
                raise InvalidArgument(f"{config_path}: chat_template: expected a template (a string, or a list with one "
                                      f"named \"default\"); found {json.dumps(template)[:80]}")
        try:
            import jinja2
            from jinja2.sandbox import ImmutableSandboxedEnvironment
        except ImportError:
            raise InvalidArgument("keel.chat needs jinja2 to render chat templates: pip install 'keel[chat]' "
                                  "(or jinja2)") from None

        def raise_exception(message):
            raise jinja2.exceptions.TemplateError(message)

        def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
            return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                              sort_keys=sort_keys)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        self._errors = (jinja2.exceptions.TemplateError,)
        try:
            self._template = env.from_string(template)
        except jinja2.exceptions.TemplateSyntaxError as e:
            raise InvalidArgument(f"{config_path}: chat_template: line {e.lineno}: {e.message}") from None
        self.special = {key: _token_text(config.get(key))
                        for key in ("bos_token", "eos_token", "unk_token", "pad_token")}
        self.special = {k: v for k, v in self.special.items() if v is not None}

    def render(self, messages, add_generation_prompt, where):
        try:
            return self._template.render(messages=messages, add_generation_prompt=add_generation_prompt, **self.special)
        except self._errors as e:
            raise InvalidArgument(f"{where}: the chat template cannot render this conversation: {e}") from None


def conversation_tokens(tokenizer, template, messages, where):
    """(ids, learned) of one conversation: learned[i] is 1 where ids[i] is an assistant's token."""
    if not isinstance(messages, list) or not messages:
        raise InvalidArgument(f"{where}: \"messages\" must be a non-empty list of {{\"role\", \"content\"}}")
    for k, m in enumerate(messages):
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            raise InvalidArgument(f"{where}: messages[{k}] must be {{\"role\": str, \"content\": str}}; found "
                                  f"{json.dumps(m)[:80]}")
    turns = [k for k, m in enumerate(messages) if m["role"] == "assistant"]
    if not turns:
        raise InvalidArgument(f"{where}: the conversation has no assistant turn, so nothing would be learned")
    ids = tokenizer.encode(template.render(messages, False, where))
    learned = [0] * len(ids)
    for k in turns:
        before = tokenizer.encode(template.render(messages[:k], True, where)) if k else []
        upto = tokenizer.encode(template.render(messages[: k + 1], False, where))
        if upto[: len(before)] != before or ids[: len(upto)] != upto:
            raise InvalidArgument(f"{where}: the chat template renders turn {k} differently once later turns follow, so "
                                  "the assistant's tokens cannot be told apart (each turn's text must extend the "
                                  "one before)")
        for i in range(len(before), len(upto)):
            learned[i] = 1
    return ids, learned


def completion_tokens(tokenizer, prompt, completion, where):
    if not isinstance(prompt, str) or not isinstance(completion, str):
        raise InvalidArgument(f"{where}: \"prompt\" and \"completion\" must both be strings")
    head, tail = tokenizer.encode(prompt), tokenizer.encode(completion)
    if tokenizer.eos_token_id is not None:
        tail = tail + [tokenizer.eos_token_id]
    if not tail:
        raise InvalidArgument(f"{where}: the completion is empty, so nothing would be learned")
    return head + tail, [0] * len(head) + [1] * len(tail)


def write_masked_shard(path, ids, mask, identity, token_bytes, seq_len, packed=False):
    """Keel's masked shard (core/src/data/shard_format.h), written under a temporary name first.
    mask: one byte per token, LEARNED where it is learned, DOCUMENT_START on each conversation's
    first token when packed."""
    if len(ids) > 2**31 - 1:
        raise InvalidArgument(f"{path}: {len(ids)} tokens, more than a shard's 2^31 - 1; split the conversations "
                              "over several calls")
    header = [0] * HEADER_INTS
    flags = HAS_MASK | (PACKED if packed else 0)
    header[0], header[1], header[2], header[3], header[4] = MAGIC, VERSION, len(ids), token_bytes, flags
    header[5] = seq_len  # one conversation every seq_len tokens: the run's data.seq_len must be this
    header[8:16] = struct.unpack("<8i", identity)
    temporary = f"{path}.tmp-{os.getpid()}"
    with open(temporary, "wb") as out:
        out.write(struct.pack(f"<{HEADER_INTS}i", *header))
        out.write(struct.pack(f"<{len(ids)}{'H' if token_bytes == 2 else 'I'}", *ids))
        out.write(bytes(mask))
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)


def prepare_chat(inputs, out, tokenizer, seq_len, val_fraction=0.05, template=None, pack=False):
    """Writes out/train_000000.bin and out/val_000000.bin (Keel's masked shards) from JSONL files of
    conversations; returns a report {"train": n, "val": n, "truncated": n, "learned_tokens": n,
    "samples": {"train": n, "val": n}}. Each sample is seq_len tokens: one conversation and its
    padding, or with pack=True as many whole conversations as fit, in order (a packed shard: the
    model restarts positions and attention at each one, docs/finetuning.md).
    tokenizer: a Hugging Face folder (tokenizer.json, tokenizer_config.json with chat_template);
    template: a Jinja template to use instead of the folder's. Raises keel.InvalidArgument naming
    the file and line of a conversation that is malformed, has no assistant turn, or cannot be
    rendered."""
    from keel import Tokenizer

    if not isinstance(seq_len, int) or not 1 <= seq_len <= 1 << 20:
        raise InvalidArgument(f"seq_len must be an integer from 1 to 1048576, found {seq_len!r}")
    if not 0 <= val_fraction < 1:
        raise InvalidArgument(f"val_fraction must lie in [0, 1), found {val_fraction!r}")
    tok = Tokenizer(tokenizer)
    chat = ChatTemplate(tokenizer if os.path.isdir(tokenizer) else os.path.dirname(tokenizer), template)
    with open(tok.path, "rb") as f:
        identity = hashlib.sha256(f.read()).digest()
    token_bytes = 2 if tok.vocab_size <= 65535 else 4
    pad = tok.eos_token_id if tok.eos_token_id is not None else 0
    splits = {"train": ([], []), "val": ([], [])}
    report = {"train": 0, "val": 0, "truncated": 0, "learned_tokens": 0}
    filled = {"train": seq_len, "val": seq_len}  # tokens in each split's last sample

    def close_sample(split):
        tokens, flags = splits[split]
        tokens += [pad] * (seq_len - filled[split])
        flags += [0] * (seq_len - filled[split])
        filled[split] = seq_len

    for path in [os.fspath(p) for p in inputs]:
        with open(path, "rb") as f:
            for number, raw in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""), 1):
                where = f"{path}:{number}"
                if len(raw) > MAX_LINE_BYTES:
                    raise InvalidArgument(f"{where}: a line of more than {MAX_LINE_BYTES} bytes")
                if not raw.strip():
                    continue
                try:
                    record = json.loads(raw)
                except (json.JSONDecodeError, UnicodeDecodeError) as e:
                    raise InvalidArgument(f"{where}: not a JSON object: {e}") from None
                if isinstance(record, dict) and "messages" in record:
                    ids, learned = conversation_tokens(tok, chat, record["messages"], where)
                elif isinstance(record, dict) and "prompt" in record and "completion" in record:
                    ids, learned = completion_tokens(tok, record["prompt"], record["completion"], where)
                else:
                    raise InvalidArgument(f"{where}: expected {{\"messages\": [...]}} or {{\"prompt\", \"completion\"}}")
                if len(ids) > seq_len:
                    ids, learned = ids[:seq_len], learned[:seq_len]
                    report["truncated"] += 1
                # A sample's first token is never a target of its own window, and the previous
                # window's last target (past its padding) must not learn it.
                learned[0] = 0
                split = "val" if int.from_bytes(hashlib.sha256(raw).digest()[:8], "little") / 2**64 < val_fraction \
                    else "train"
                if not pack or filled[split] + len(ids) > seq_len:
                    close_sample(split)
                    filled[split] = 0
                tokens, flags = splits[split]
                tokens += ids
                flags += [LEARNED * bit for bit in learned]
                if pack:
                    flags[-len(ids)] |= DOCUMENT_START
                filled[split] += len(ids)
                report[split] += 1
                report["learned_tokens"] += sum(learned)
    for split in splits:
        close_sample(split)
    samples = {split: len(tokens) // seq_len for split, (tokens, _) in splits.items()}
    if val_fraction > 0 and not report["val"] and samples["train"] > 1:  # a small set still gets a val split
        train_tokens, train_flags = splits["train"]
        moved = sum(1 for flag in train_flags[-seq_len:] if flag & DOCUMENT_START) if pack else 1
        splits["val"] = (train_tokens[-seq_len:], train_flags[-seq_len:])
        del train_tokens[-seq_len:], train_flags[-seq_len:]
        report["train"], report["val"] = report["train"] - moved, moved
        samples = {"train": samples["train"] - 1, "val": 1}
    report["samples"] = samples
    if not report["train"]:
        raise InvalidArgument(f"{', '.join(map(str, inputs))}: no conversation for training")
    os.makedirs(out, exist_ok=True)
    for split, (tokens, flags) in splits.items():
        if not tokens:
            continue
        # One more padding token: the last window is seq_len + 1 tokens long.
        write_masked_shard(os.path.join(out, f"{split}_000000.bin"), tokens + [pad], flags + [0], identity, token_bytes,
                           seq_len, pack)
    return report


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="python -m keel.chat", description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", help="JSONL files of conversations")
    parser.add_argument("--out", required=True)
    parser.add_argument("--tokenizer", required=True, help="a Hugging Face tokenizer folder with a chat_template")
    parser.add_argument("--seq-len", type=int, required=True)
    parser.add_argument("--val-fraction", type=float, default=0.05)
    parser.add_argument("--pack", action="store_true", help="several whole conversations per sample")
    args = parser.parse_args()
    print(json.dumps(prepare_chat(args.inputs, args.out, args.tokenizer, args.seq_len, args.val_fraction,
                                  pack=args.pack)))
