"""Chat data for the LoRA example, made from this machine's own Python standard library (no
download): for each documented public function of a few modules, a user asks what it does and
the assistant answers with the first sentence of its docstring. Writes the conversations as JSONL,
a tokenizer folder (the repository's 4096-token BPE with a plain-text chat template whose turns
end with <|endoftext|>, so the base model's vocabulary serves unchanged), and Keel's masked
shards through keel.chat.

Usage: python make_chat_data.py OUT_DIR SEQ_LEN"""
import importlib
import inspect
import json
import os
import pathlib
import re
import sys

import keel.chat

REPO = pathlib.Path(__file__).resolve().parents[2]
MODULES = ["os.path", "json", "re", "string", "textwrap", "shutil", "itertools", "functools", "math", "statistics",
           "random", "bisect", "heapq", "fnmatch", "glob", "base64", "binascii", "zlib", "copy", "operator",
           "calendar", "difflib", "html", "urllib.parse", "ipaddress", "uuid", "secrets", "hashlib", "hmac", "struct"]
TEMPLATE = ("{% for message in messages %}{{ '### ' + message['role'] + ':\\n' + message['content'] + '\\n' }}"
            "{% if message['role'] == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}"
            "{% if add_generation_prompt %}{{ '### assistant:\\n' }}{% endif %}")


def first_sentence(doc):
    text = " ".join(doc.strip().split("\n\n")[0].split())
    match = re.match(r"(.+?[.!?])(\s|$)", text)
    return (match.group(1) if match else text)[:200]


def conversations():
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name, value in sorted(vars(module).items()):
            if name.startswith("_") or not callable(value) or not inspect.getdoc(value):
                continue
            home = getattr(value, "__module__", None) or module.__name__
            if home.lstrip("_").split(".")[0] != module.__name__.lstrip("_").split(".")[0] and not inspect.isbuiltin(value):
                continue  # imported from elsewhere
            answer = first_sentence(inspect.getdoc(value))
            if len(answer) < 12:
                continue
            yield {"messages": [{"role": "user", "content": f"What does {module_name}.{name} do?"},
                                {"role": "assistant", "content": answer}]}


def main():
    out, seq_len = pathlib.Path(sys.argv[1]), int(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = out / "tokenizer"
    tokenizer.mkdir(exist_ok=True)
    # Merges as "a b" strings, which every tokenizers release reads (PEFT's transformers pins an old one).
    bpe = json.loads((REPO / "examples" / "data" / "stdlib-bpe-4k.json").read_text())
    bpe["model"]["merges"] = [m if isinstance(m, str) else " ".join(m) for m in bpe["model"]["merges"]]
    (tokenizer / "tokenizer.json").write_text(json.dumps(bpe, ensure_ascii=False))
    (tokenizer / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>", "chat_template": TEMPLATE}))
    data = out / "conversations.jsonl"
    records = list(conversations())
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    report = keel.chat.prepare_chat([data], out, str(tokenizer), seq_len=seq_len, val_fraction=0.05)
    print(f"{len(records)} conversations from {len(MODULES)} standard-library modules -> {out}: {json.dumps(report)}")


if __name__ == "__main__":
    main()
