"""keel.chat (chat data for fine-tuning) against transformers' apply_chat_template, the oracle, run
in the fine-tuning oracles' venv (scripts/hf-venv.sh with tests/python/hf_oracle.py's
FINETUNE_PINS): the same ids for three template styles (ChatML; Llama 3's headers
with a BOS; Mistral's [INST] with the system prompt folded into the first user turn), on this
repository's own BPE tokenizer with the templates' special tokens added. The learned tokens are
the assistants' (each assistant's content, and nothing of a user's, inside them); the masked
shards train (a run's loss falls) and their loss is the mean over the learned tokens; bad input
is refused naming the file and line."""
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

import keel
import keel.chat

REPO = pathlib.Path(__file__).resolve().parents[3]
SPECIAL = ["<|im_start|>", "<|im_end|>", "<s>", "</s>", "[INST]", "[/INST]", "<|begin_of_text|>",
           "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
LLAMA3 = ("{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
          "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")
MISTRAL = ("{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set system = messages[0]['content'] %}"
           "{% set messages = messages[1:] %}{% else %}{% set system = '' %}{% endif %}"
           "{% for message in messages %}{% if message['role'] == 'user' %}"
           "{% if loop.first and system %}{{ '[INST] ' + system + '\\n\\n' + message['content'] + ' [/INST]' }}"
           "{% else %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% endif %}"
           "{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] + eos_token }}"
           "{% else %}{{ raise_exception('only user and assistant turns after the system prompt') }}{% endif %}"
           "{% endfor %}")
STYLES = {"chatml": (CHATML, {"eos_token": "<|im_end|>"}),
          "llama3": (LLAMA3, {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
          "mistral": (MISTRAL, {"bos_token": "<s>", "eos_token": "</s>"})}
CONVERSATIONS = [
    [{"role": "system", "content": "You answer in one line."},
     {"role": "user", "content": "What does os.path.join do?"},
     {"role": "assistant", "content": "It joins path parts with the separator."},
     {"role": "user", "content": "And os.path.split?"},
     {"role": "assistant", "content": "It splits off the last part of a path."}],
    [{"role": "user", "content": "Name a sorting function."},
     {"role": "assistant", "content": "sorted() returns a new list."}],
]


def tokenizer_folder(tmp_path, style):
    template, special = STYLES[style]
    tokenizer = json.loads((REPO / "examples" / "data" / "stdlib-bpe-4k.json").read_text())
    # Merges as "a b" strings, the form every tokenizers release reads (the oracle's is older).
    tokenizer["model"]["merges"] = [m if isinstance(m, str) else " ".join(m) for m in tokenizer["model"]["merges"]]
    base = len(tokenizer["model"]["vocab"])
    for k, content in enumerate(SPECIAL):
        tokenizer["added_tokens"].append({"id": base + k, "content": content, "single_word": False, "lstrip": False,
                                          "rstrip": False, "normalized": False, "special": True})
    folder = tmp_path / style
    folder.mkdir()
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    (folder / "tokenizer_config.json").write_text(json.dumps(dict(special, chat_template=template)))
    return folder


def transformers_ids(folder, style, conversations):
    build = pathlib.Path(os.environ.get("KEEL_TEST_BUILD_DIR", REPO / "build"))
    venv = build / "hf-venv-finetune"  # the venv of tests/python/hf_oracle.py's FINETUNE_PINS
    pins = next(line.split('"')[1] for line in (REPO / "tests" / "python" / "hf_oracle.py").read_text().splitlines()
                if line.startswith("FINETUNE_PINS"))
    made = subprocess.run(["bash", str(REPO / "scripts" / "hf-venv.sh"), str(venv), pins], capture_output=True, text=True)
    if made.returncode == 77:
        pytest.skip("no transformers venv (PyPI out of reach)")
    assert made.returncode == 0, made.stderr
    template, special = STYLES[style]
    request = {"tokenizer": str(folder / "tokenizer.json"), "special": special, "template": template,
               "conversations": conversations}
    done = subprocess.run([str(venv / "bin" / "python"), str(pathlib.Path(__file__).parent / "oracles" /
                                                            "hf_chat_template.py")],
                          input=json.dumps(request), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["ids"]


@pytest.mark.parametrize("style", sorted(STYLES))
def test_ids_equal_transformers_apply_chat_template_and_only_the_assistant_is_learned(tmp_path, style):
    folder = tokenizer_folder(tmp_path, style)
    tokenizer = keel.Tokenizer(str(folder))
    template = keel.chat.ChatTemplate(str(folder))
    expected = transformers_ids(folder, style, CONVERSATIONS)
    for messages, theirs in zip(CONVERSATIONS, expected):
        ids, learned = keel.chat.conversation_tokens(tokenizer, template, messages, "test")
        assert ids == theirs, f"{style}: keel {ids} != transformers {theirs}"
        spans = tokenizer.decode([i for i, flag in zip(ids, learned) if flag])
        for m in messages:
            if m["role"] == "assistant":
                assert m["content"] in spans, f"{style}: {m['content']!r} not learned in {spans!r}"
            else:
                assert m["content"] not in spans, f"{style}: {m['role']} text learned: {spans!r}"
    print(f"{style}: {len(CONVERSATIONS)} conversations, ids equal transformers'")


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_masked_shards_train_and_their_loss_is_over_the_assistant_tokens(tmp_path):
    folder = tokenizer_folder(tmp_path, "chatml")
    data = write_jsonl(tmp_path / "chat.jsonl", [{"messages": m} for m in CONVERSATIONS] * 20 + [{"prompt": "Q: sum of 2 and 3?", "completion": " 5"}])
    report = keel.chat.prepare_chat([data], tmp_path / "shards", str(folder), seq_len=64, val_fraction=0.1)
    assert report["train"] + report["val"] == 41 and report["learned_tokens"] > 0 and report["val"] >= 1
    tokenizer = keel.Tokenizer(str(folder))
    config = {"model": {"plugin": "llama", "n_layer": 2, "d_model": 64, "n_head": 4, "ffn_hidden": 128,
                        "vocab_size": tokenizer.vocab_size, "seq_len": 64},
              "data": {"source": "shards", "train": str(tmp_path / "shards" / "train_*.bin"),
                       "val": str(tmp_path / "shards" / "val_*.bin"), "micro_batch": 4, "global_batch": 8,
                       "seq_len": 64},
              "optimizer": {"plugin": "adamw", "lr": 3e-3},
              "train": {"steps": 30, "log_every": 30, "seed": 3, "metrics_path": str(tmp_path / "m.jsonl"),
                        "tensorboard_dir": "none", "sample_tokens": 0}}
    with keel.Trainer(config, verbose=False) as trainer:
        first = trainer.step()["loss"]
        trainer.train(29)
        last = [json.loads(l) for l in open(tmp_path / "m.jsonl")][-1]["loss"]
    assert last < 0.5 * first, f"the masked run did not learn: {first} -> {last}"
    # The shard's mask: each sample's learned tokens are an assistant's (or the completion).
    raw = (tmp_path / "shards" / "train_000000.bin").read_bytes()
    header = np.frombuffer(raw[:1024], dtype="<i4")
    assert header[0] == 20261128 and header[3] == 2 and header[4] == 1
    n = int(header[2])
    tokens = np.frombuffer(raw[1024:1024 + 2 * n], dtype="<u2")
    learned = np.frombuffer(raw[1024 + 2 * n:], dtype=np.uint8)
    assert len(learned) == n and 0 < learned.sum() < n / 2
    assert "Name a sorting function." not in tokenizer.decode([int(t) for t, f in zip(tokens, learned) if f])


def test_bad_conversations_are_refused_with_the_file_and_line(tmp_path):
    folder = tokenizer_folder(tmp_path, "mistral")
    cases = [({"messages": [{"role": "user", "content": "hi"}]}, "no assistant turn"),
             ({"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "content": "x"},
                            {"role": "assistant", "content": "ok"}]}, "cannot render this conversation"),
             ({"messages": [{"role": "user"}]}, r"messages\[0\] must be"),
             ({"text": "plain"}, "expected")]
    for record, message in cases:
        path = write_jsonl(tmp_path / "bad.jsonl", [{"messages": CONVERSATIONS[1]}, record])
        with pytest.raises(keel.InvalidArgument, match=rf"bad.jsonl:2: .*{message}"):
            keel.chat.prepare_chat([path], tmp_path / "out", str(folder), seq_len=64)
    (tmp_path / "broken.jsonl").write_text("{not json\n")
    with pytest.raises(keel.InvalidArgument, match="broken.jsonl:1: not a JSON object"):
        keel.chat.prepare_chat([tmp_path / "broken.jsonl"], tmp_path / "out", str(folder), seq_len=64)
    bad_template = tmp_path / "badtpl"
    bad_template.mkdir()
    (bad_template / "tokenizer.json").write_text((folder / "tokenizer.json").read_text())
    (bad_template / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{% for %}"}))
    with pytest.raises(keel.InvalidArgument, match="chat_template: line 1"):
        keel.chat.ChatTemplate(str(bad_template))


def test_masked_shards_cut_short_or_mixed_with_plain_ones_are_refused(tmp_path):
    folder = tokenizer_folder(tmp_path, "chatml")
    data = write_jsonl(tmp_path / "chat.jsonl", [{"messages": m} for m in CONVERSATIONS] * 4)
    keel.chat.prepare_chat([data], tmp_path / "shards", str(folder), seq_len=64, val_fraction=0.2)
    config = {"model": {"plugin": "llama", "n_layer": 1, "d_model": 32, "n_head": 2, "ffn_hidden": 64,
                        "vocab_size": keel.Tokenizer(str(folder)).vocab_size, "seq_len": 64},
              "data": {"source": "shards", "train": str(tmp_path / "shards" / "train_*.bin"),
                       "val": str(tmp_path / "shards" / "val_*.bin"), "micro_batch": 2, "seq_len": 64},
              "train": {"steps": 1, "tensorboard_dir": "none", "sample_tokens": 0}}
    shard = tmp_path / "shards" / "val_000000.bin"
    whole = shard.read_bytes()
    shard.write_bytes(whole[:-10])
    with pytest.raises(keel.Error, match="val_000000.bin: truncated: .* bytes with the loss mask"):
        keel.Trainer(config, verbose=False)
    # Shards laid out for another sequence length than the run's.
    shard.write_bytes(whole)
    with pytest.raises(keel.Error, match=r"laid out one every 64 tokens .* data.seq_len is 32"):
        keel.Trainer(dict(config, data=dict(config["data"], seq_len=32), model=dict(config["model"], seq_len=32)),
                      verbose=False)
    # A plain llm.c shard (magic 20240520) as the validation split of masked training data.
    plain = np.zeros(256, dtype="<i4")
    plain[:3] = [20240520, 1, 65]
    shard.write_bytes(plain.tobytes() + np.arange(65, dtype="<u2").tobytes())
    with pytest.raises(keel.Error, match="one has a loss mask and the other none"):
        keel.Trainer(config, verbose=False)


SHORT_CHATS = [[{"role": "user", "content": q}, {"role": "assistant", "content": a}] for q, a in [
    ("Name a sorting function.", "sorted() returns a new list."),
    ("What does len do?", "It counts the items."),
    ("How do I open a file?", "Call open(path) inside a with block, so it closes."),
    ("What is a tuple?", "A sequence that cannot change."),
    ("Which module reads JSON?", "json: json.loads reads a string, json.load a file."),
    ("How do I join strings?", "sep.join(parts)."),
    ("What does zip do?", "It walks several iterables in step and yields tuples."),
    ("What is None?", "The value of nothing."),
    ("How do I copy a list?", "list(items) or items[:] makes a shallow copy."),
    ("What does enumerate give?", "Pairs of an index and an item."),
]]


def run_losses(tmp_path, shards, micro_batch, vocab, steps):
    config = {"model": {"plugin": "llama", "n_layer": 2, "d_model": 64, "n_head": 4, "n_kv_head": 2,
                        "ffn_hidden": 128, "vocab_size": vocab, "seq_len": 96},
              "data": {"source": "shards", "train": str(shards / "train_*.bin"), "micro_batch": micro_batch,
                       "global_batch": micro_batch, "seq_len": 96},
              "optimizer": {"plugin": "adamw", "lr": 3e-3},
              "train": {"steps": steps, "log_every": steps, "seed": 5, "tensorboard_dir": "none", "sample_tokens": 0,
                        "metrics_path": str(tmp_path / f"{shards.name}.jsonl")}}
    with keel.Trainer(config, verbose=False) as trainer:
        return [trainer.step() for _ in range(steps)]


def test_packed_conversations_train_as_the_same_conversations_unpacked(tmp_path):
    """Several conversations per sample, each kept to itself (attention and positions restart at
    its first token): a step over the whole set, packed, has the unpacked step's loss and gradient
    norm, and so do the steps after it, whose weights came from those gradients."""
    folder = tokenizer_folder(tmp_path, "chatml")
    vocab = keel.Tokenizer(str(folder)).vocab_size
    data = write_jsonl(tmp_path / "chat.jsonl", [{"messages": m} for m in SHORT_CHATS])
    plain = keel.chat.prepare_chat([data], tmp_path / "plain", str(folder), seq_len=96, val_fraction=0)
    packed = keel.chat.prepare_chat([data], tmp_path / "packed", str(folder), seq_len=96, val_fraction=0, pack=True)
    assert plain["samples"]["train"] == len(SHORT_CHATS) and plain["learned_tokens"] == packed["learned_tokens"]
    assert packed["samples"]["train"] <= len(SHORT_CHATS) // 2, packed  # packing did put several in a sample
    header = np.frombuffer((tmp_path / "packed" / "train_000000.bin").read_bytes()[:1024], dtype="<i4")
    assert header[4] == 3  # a loss mask, packed
    want = run_losses(tmp_path, tmp_path / "plain", plain["samples"]["train"], vocab, 4)
    got = run_losses(tmp_path, tmp_path / "packed", packed["samples"]["train"], vocab, 4)
    for step, (w, g) in enumerate(zip(want, got), 1):
        assert g["loss"] == pytest.approx(w["loss"], rel=1e-5), f"step {step}: packed {g['loss']} != {w['loss']}"
        assert g["grad_norm"] == pytest.approx(w["grad_norm"], rel=1e-4), f"step {step}: grad norm {g} != {w}"
    assert got[-1]["loss"] < got[0]["loss"]
    print(f"packed {packed['samples']['train']} samples, unpacked {plain['samples']['train']}: losses",
          [round(g["loss"], 6) for g in got])


def test_qlora_base_has_no_zero_copy_view(tmp_path):
    """An NF4 tensor lives dequantized only while its layer is in use: Trainer.tensor refuses it
    (naming read_param), while an adapter's view still works."""
    config = {"model": {"plugin": "llama", "n_layer": 1, "d_model": 64, "n_head": 4, "ffn_hidden": 128,
                        "vocab_size": 256, "seq_len": 16,
                        "lora": {"r": 4, "target_modules": ["q_proj"], "quantize_base": "nf4"}},
              "data": {"source": "text", "text_root": str(REPO / "README.md"), "micro_batch": 1, "global_batch": 1,
                       "seq_len": 16},
              "train": {"steps": 1, "tensorboard_dir": "none", "sample_tokens": 0,
                        "metrics_path": str(tmp_path / "m.jsonl")}}
    with keel.Trainer(config, verbose=False) as trainer:
        with pytest.raises(keel.Error, match="no zero-copy view of a tensor kept in NF4"):
            trainer.tensor("model.layers.0.self_attn.q_proj.weight")
        assert np.asarray(trainer.tensor("model.layers.0.self_attn.q_proj.lora_A.weight")).shape == (4, 64)
