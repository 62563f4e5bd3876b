#!/usr/bin/env python3
"""End-to-end checks of `keel prepare-data --tokenizer`, run by ctest (tests/e2e/tokenizer.cmake).

  oracle   trains four tokenizers with PyPI's `tokenizers` (tests/e2e/tokenizer_oracle.py) and
           requires keel's shards to hold exactly its ids, token for token, for every document;
           the llama3 one passes 65,535 tokens, so its shards are Llama 3's uint32 format. keel
           trains from the shards and refuses a token id past model.vocab_size naming the shard
           and the id. Runs in the venv of scripts/tokenizers-venv.sh (exit 77: PyPI unreachable).
  edges    the same oracle on the inputs of issue 38: U+180E (whitespace to PCRE2, not to
           Oniguruma), pieces longer than the matcher's first windows (256 bytes, doubling), a lookahead at the
           window's edge, and a 4 KiB added token among near misses. Same venv.
  refuse   writes a small hand-made tokenizer.json broken one way (--case) and requires keel
           prepare-data to exit 1 with a message matching --pattern. Standard library only.
  out_of_memory  a 48 MB one-line document under a 192 MiB address-space limit: prepare-data
           fails naming the document and why (it was a bare std::bad_alloc), and a small one passes.
  folder_text  a folder holding a Latin-1 file and files over 1 MiB (UTF-8 cut by the check's
           chunks, and a bad byte past the first chunk): the bad ones are skipped and counted,
           --strict-text refuses naming file and byte. Standard library only."""
import argparse
import glob
import json
import math
import os
import re
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
FORMATS = {20240520: (1, "H"), 20240801: (7, "I")}  # magic: (version, struct code of a token)


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def must_run(cmd):
    p = run(cmd)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p.stdout


def read_shard(path):
    """(magic, tokens) of one shard, after checking the header and the file size."""
    data = open(path, "rb").read()
    header = struct.unpack("<256i", data[:1024])
    assert header[0] in FORMATS, f"{path}: magic {header[0]}"
    version, code = FORMATS[header[0]]
    assert header[1] == version, f"{path}: version {header[1]} for magic {header[0]}"
    assert all(v == 0 for v in header[3:]), f"{path}: header ints 3..255 are not zero"
    count, width = header[2], struct.calcsize(code)
    assert len(data) == 1024 + width * count, f"{path}: {len(data)} bytes for {count} tokens of {width} bytes"
    return header[0], struct.unpack(f"<{count}{code}", data[1024:])


def first_difference(keel_ids, oracle_ids):
    for i, (a, b) in enumerate(zip(keel_ids, oracle_ids)):
        if a != b:
            return i
    return None if len(keel_ids) == len(oracle_ids) else min(len(keel_ids), len(oracle_ids))


def check_oracle(keel, config, workdir, **_):
    import tokenizer_oracle as oracle
    from tokenizers import Tokenizer
    corpus = oracle.make_corpus(workdir)
    total_bytes = sum(os.path.getsize(p) for p in oracle.documents(corpus))
    paths = oracle.build_tokenizers(workdir, corpus)
    for name, path in paths.items():
        tok = Tokenizer.from_file(path)
        vocab = tok.get_vocab_size(with_added_tokens=True)
        out = os.path.join(workdir, f"shards_{name}")
        log = must_run([keel, "prepare-data", corpus, "--out", out, "--tokenizer", path, "--val-fraction", "0",
                        "--shard-tokens", "200000"])
        assert f"model.vocab_size >= {vocab}" in log, f"{name}: the summary does not say vocabulary {vocab}:\n{log}"
        shards = [read_shard(f) for f in sorted(glob.glob(out + "/train_*.bin"))]
        keel_ids = [t for _, tokens in shards for t in tokens]
        expected, bounds = oracle.oracle_ids(path, corpus)
        want_magic = 20240801 if vocab > 65535 else 20240520
        assert {magic for magic, _ in shards} == {want_magic}, f"{name}: vocabulary {vocab} in shards of magic {shards[0][0]}"
        assert len(expected) > 100_000, f"{name}: the oracle gave only {len(expected)} ids"
        at = first_difference(keel_ids, expected)
        if at is not None:
            doc, start = max((b for b in bounds if b[1] <= at), key=lambda b: b[1])
            sys.exit(f"FAIL: {name}: keel's {len(keel_ids)} ids differ from tokenizers' {len(expected)} at id {at} "
                     f"({doc}, its id {at - start}): keel {[tok.id_to_token(t) for t in keel_ids[at:at + 6]]}, "
                     f"tokenizers {[tok.id_to_token(t) for t in expected[at:at + 6]]}")
        byte_fallback = sum(3 <= t < 259 for t in keel_ids) if name in ("llama2", "metaspace") else 0
        past_u16 = sum(t > 65535 for t in keel_ids)
        print(f"{name}: vocabulary {vocab}, {len(shards)} shard(s) of magic {want_magic}: {len(keel_ids)} ids for "
              f"{total_bytes} bytes equal tokenizers' id for id ({byte_fallback} byte-fallback ids, {past_u16} ids > 65535)")
        if name == "llama3":
            assert past_u16 > 0, "no id past 65535 in the uint32 shards"
        if name in ("llama2", "metaspace"):
            assert byte_fallback > 100, f"{name}: only {byte_fallback} byte-fallback ids"

    # keel trains from uint32 shards, and refuses an id past the vocabulary naming shard and id.
    out = os.path.join(workdir, "shards_llama3")
    settings = ["data.source=\"shards\"", f"data.train=\"{out}/train_*.bin\"", f"data.val=\"{out}/train_000000.bin\"",
                "train.log_every=1", "train.sample_tokens=0", "data.val_batches=1", "train.checkpoint.every=0",
                f"train.metrics_path=\"{workdir}/llama3.jsonl\"", "train.tensorboard_dir=\"none\""]
    sets = [a for s in settings for a in ("--set", s)]
    p = run([keel, "run", config, "--set", "train.steps=1"] + sets)
    first_big = min(i for i, t in enumerate(read_shard(out + "/train_000000.bin")[1]) if t >= 256)
    token = read_shard(out + "/train_000000.bin")[1][first_big]
    expected = f"{out}/train_000000.bin: offset {1024 + 4 * first_big}: token {token}"
    print(p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "(no stderr)")
    assert p.returncode != 0 and expected in p.stderr and "model.vocab_size 256" in p.stderr, \
        f"expected a refusal naming {expected!r}:\n{p.stderr}"
    vocab = Tokenizer.from_file(paths["llama3"]).get_vocab_size(with_added_tokens=True)
    must_run([keel, "run", config, "--set", "train.steps=2", "--set", f"model.vocab_size={vocab}"] + sets)
    losses = [json.loads(line)["loss"] for line in open(f"{workdir}/llama3.jsonl") if '"loss"' in line]
    print(f"trained 2 steps on the uint32 shards: loss {losses[0]:.3f} (ln {vocab} = {math.log(vocab):.3f})")
    assert abs(losses[0] - math.log(vocab)) < 1.5, f"initial loss {losses[0]} is not near ln {vocab}"


# A small byte-level BPE tokenizer.json, the base of every refusal case.
def base_tokenizer():
    chars = [chr(c) for c in range(ord("!"), ord("~") + 1)] + ["Ġ", "Ċ", "ĉ"]
    vocab = {c: i for i, c in enumerate(chars)}
    merges = ["Ġ t", "h e", "Ġt he"]
    for m in merges:
        vocab["".join(m.split(" "))] = len(vocab)
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": len(vocab), "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": True}],
            "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
            "post_processor": None, "decoder": None,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": vocab, "merges": merges}}


def _dedupe_id(t):
    t["model"]["vocab"]["he"] = t["model"]["vocab"]["!"]


# case: how to break the base file (a function of the parsed JSON, or raw text).
REFUSAL_CASES = {
    "nfkc_normalizer": lambda t: t.update(normalizer={"type": "NFKC"}),
    "nested_unknown_normalizer": lambda t: t.update(normalizer={"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "_"}, {"type": "Lowercase"}]}),
    "regex_replace": lambda t: t.update(normalizer={"type": "Replace", "pattern": {"Regex": " +"}, "content": " "}),
    "whitespace_pre_tokenizer": lambda t: t.update(pre_tokenizer={"type": "Whitespace"}),
    "split_contiguous": lambda t: t.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Contiguous", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}),
    "bad_regex": lambda t: t.update(pre_tokenizer={"type": "Split", "pattern": {"Regex": "(\\p{L}+"},
                                                   "behavior": "Isolated", "invert": False}),
    "byte_level_not_last": lambda t: t.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        {"type": "Split", "pattern": {"String": "x"}, "behavior": "Isolated", "invert": False}]}),
    "wordpiece_model": lambda t: t["model"].update(type="WordPiece"),
    "unigram_model": lambda t: t["model"].update(type="Unigram"),
    "dropout": lambda t: t["model"].update(dropout=0.1),
    "subword_prefix": lambda t: t["model"].update(continuing_subword_prefix="##"),
    "duplicate_id": _dedupe_id,
    "negative_id": lambda t: t["model"]["vocab"].update({"!": -1}),
    "huge_id": lambda t: t["model"]["vocab"].update({"!": 1 << 40}),
    "fractional_id": lambda t: t["model"]["vocab"].update({"!": 1.5}),
    "long_token": lambda t: t["model"]["vocab"].update({"x" * 5000: 999}),
    "merge_unknown_token": lambda t: t["model"]["merges"].append("Ġ zz"),
    "merge_result_unknown": lambda t: t["model"]["merges"].append("! !"),
    "merge_bad_form": lambda t: t["model"]["merges"].append("a b c"),
    "merge_repeated": lambda t: t["model"]["merges"].append("h e"),
    "unknown_unk": lambda t: t["model"].update(unk_token="<unk>"),
    "unknown_model_key": lambda t: t["model"].update(frobnicate=True),
    "unknown_top_key": lambda t: t.update(frobnicate=1),
    "added_lstrip": lambda t: t["added_tokens"][0].update(lstrip=True),
    "added_duplicate_id": lambda t: t["added_tokens"].append(dict(t["added_tokens"][0], content="<|other|>")),
    "added_id_clash": lambda t: t["added_tokens"][0].update(id=0),
    "added_empty": lambda t: t["added_tokens"][0].update(content=""),
    "truncated": "truncate",
    "too_deep": "deep",
    "not_utf8_document": "bad_document",
    "character_outside_vocabulary": "unknown_character",
    "folder_as_tokenizer": "folder",
    "missing_tokenizer": "missing",
}


def check_refuse(keel, workdir, case, pattern, **_):
    spec = base_tokenizer()
    action = REFUSAL_CASES[case]
    doc = os.path.join(workdir, "doc.txt")
    with open(doc, "w", encoding="utf-8") as f:
        f.write("the theme<|endoftext|> then\n")
    text = None
    if callable(action):
        action(spec)
    elif action == "truncate":
        text = json.dumps(spec)[:700]
    elif action == "deep":
        spec["decoder"] = json.loads("[" * 200 + "]" * 200)
    elif action == "bad_document":
        with open(doc, "wb") as f:
            f.write(b"the caf\xe9 is here\n")  # Latin-1, not UTF-8
    elif action == "unknown_character":
        spec["pre_tokenizer"] = None  # raw characters reach the model: "é" is not in the vocabulary
        with open(doc, "w", encoding="utf-8") as f:
            f.write("theé\n")
    path = os.path.join(workdir, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text if text is not None else json.dumps(spec, ensure_ascii=False))
    if action == "folder":
        path = workdir
    elif action == "missing":
        path = os.path.join(workdir, "absent.json")
    out = os.path.join(workdir, "out")
    p = run([keel, "prepare-data", doc, "--out", out, "--tokenizer", path])
    print(f"keel prepare-data --tokenizer ({case}) -> {p.returncode}: {p.stderr.strip()}")
    assert p.returncode == 1, f"exit {p.returncode}, expected 1"
    assert re.search(pattern, p.stderr), f"stderr does not match {pattern!r}"
    assert not glob.glob(out + "/*.bin"), "a refused run wrote shards"


def check_base_accepted(keel, workdir, **_):
    """The refusal cases' base file is itself accepted, and its ids are the hand-computed ones."""
    path = os.path.join(workdir, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(base_tokenizer(), f, ensure_ascii=False)
    doc = os.path.join(workdir, "doc.txt")
    with open(doc, "w", encoding="utf-8") as f:
        f.write("the theme<|endoftext|> then\n")
    out = os.path.join(workdir, "out")
    must_run([keel, "prepare-data", doc, "--out", out, "--tokenizer", path])
    vocab = base_tokenizer()["model"]["vocab"]
    ids = read_shard(out + "/train_000000.bin")[1]
    # "the" → t h e → t he; " theme" → Ġthe m e; <|endoftext|>; " then" → Ġthe n; "\n" → Ċ
    want = [vocab["t"], vocab["he"], vocab["Ġthe"], vocab["m"], vocab["e"], len(vocab), vocab["Ġthe"], vocab["n"], vocab["Ċ"]]
    assert list(ids) == want, f"ids {list(ids)}, expected {want}"


# Split patterns for `edges`, each with Oniguruma's \s or \S in a different place.
EDGE_PATTERNS = [r"\s+(?!\S)|\s+", r"[^\s]+|\s", r"[[:space:]]+", r"\S+", r"\p{L}+|\p{N}+|[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
                 r"x(?!y)"]
LONG_ADDED = "<" + "q" * 4094 + ">"  # 4096 bytes


def edge_documents():
    mvs = "\u180e"
    return {
        "mongolian.txt": f"a{mvs}b c{mvs} {mvs}{mvs}d\u2000e\u00a0f\u3000g{mvs}\n" * 50,
        "long_runs.txt": "a" + " " * 10000 + "b" + "\n" * 5000 + "c" + "w" * 20000 + " 7" + "9" * 9000 + "\n",
        "window_edge.txt": "b" * 4095 + "xy" + "b" * 4094 + "x z" + "x" * 9000,
        "added.txt": "qq" + LONG_ADDED + "x" + LONG_ADDED[:-1] + " " + "<" + "q" * 5000 + ">" + LONG_ADDED * 3,
    }


def check_edges(keel, workdir, **_):
    from tokenizers import Tokenizer, Regex, pre_tokenizers, trainers, AddedToken
    from tokenizers.models import BPE
    docs = edge_documents()
    for name, text in docs.items():
        with open(os.path.join(workdir, name), "w", encoding="utf-8") as f:
            f.write(text)
    for i, pattern in enumerate(EDGE_PATTERNS + ["gpt2"]):
        tok = Tokenizer(BPE())
        split = [] if pattern == "gpt2" else [pre_tokenizers.Split(Regex(pattern), behavior="isolated")]
        tok.pre_tokenizer = pre_tokenizers.Sequence(split + [pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                                                      use_regex=pattern == "gpt2")])
        trainer = trainers.BpeTrainer(vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      show_progress=False)
        # Trained on short text: runs of thousands of one letter would merge into tokens past 4 KiB.
        tok.train_from_iterator([docs["mongolian.txt"], "a b  c   d \n\n x y xy z 79 7 ww qq <q> " * 50], trainer)
        tok.add_special_tokens([AddedToken(LONG_ADDED, special=True, normalized=False)])
        path = os.path.join(workdir, f"edge{i}.json")
        tok.save(path)
        for name, text in docs.items():
            out = os.path.join(workdir, f"out{i}_{name}")
            must_run([keel, "prepare-data", os.path.join(workdir, name), "--out", out, "--tokenizer", path,
                      "--val-fraction", "0"])
            keel_ids = list(read_shard(out + "/train_000000.bin")[1])
            expected = tok.encode(text, add_special_tokens=False).ids
            at = first_difference(keel_ids, expected)
            assert at is None, (f"pattern {pattern!r}, {name}: keel's ids differ from tokenizers' at id {at}: "
                                f"keel {[tok.id_to_token(t) for t in keel_ids[at:at + 4]]}, "
                                f"tokenizers {[tok.id_to_token(t) for t in expected[at:at + 4]]}")
        print(f"pattern {pattern!r}: {len(docs)} documents equal tokenizers' ids")
    # The long added token is in the ids 4 times (not in the near misses), so the check above saw it.
    added_id = tok.token_to_id(LONG_ADDED)
    assert tok.encode(docs["added.txt"], add_special_tokens=False).ids.count(added_id) == 4


def byte_level_alphabet():
    """GPT-2's 256 characters standing for bytes: printable Latin-1 for itself, the rest from U+0100."""
    printable = [b for b in range(256) if ord("!") <= b <= ord("~") or 0xA1 <= b <= 0xAC or b >= 0xAE]
    spare = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(spare)) for b in range(256)]


def check_folder_text(keel, workdir, **_):
    path = os.path.join(workdir, "tokenizer.json")
    spec = base_tokenizer()
    for c in byte_level_alphabet():
        spec["model"]["vocab"].setdefault(c, len(spec["model"]["vocab"]) + 1)
    spec["added_tokens"][0]["id"] = len(spec["model"]["vocab"]) + 1
    with open(path, "w", encoding="utf-8") as f:
        json.dump(spec, f, ensure_ascii=False)
    folder = os.path.join(workdir, "corpus")
    os.makedirs(os.path.join(folder, "sub"))
    good = "the theme then\n"
    with open(os.path.join(folder, "a.txt"), "w", encoding="utf-8") as f:
        f.write(good)
    with open(os.path.join(folder, "sub", "latin1.txt"), "wb") as f:
        f.write(b"the caf\xe9\n")
    mib = 1 << 20
    with open(os.path.join(folder, "straddle.txt"), "wb") as f:  # "é" cut by the first 1 MiB chunk: valid
        f.write(b"t" * (mib - 1) + "é".encode() + b"he\n")
    with open(os.path.join(folder, "late_bad.txt"), "wb") as f:  # a lone continuation byte past 1 MiB
        f.write(b"t" * (mib + 5) + b"\x80the\n")
    out = os.path.join(workdir, "out")
    log = must_run([keel, "prepare-data", folder, "--out", out, "--tokenizer", path, "--val-fraction", "0"])
    print(log)
    assert "2 documents" in log and "2 file(s) not UTF-8 text" in log, log
    assert f"skipped, not UTF-8 text: {folder}/late_bad.txt (byte {mib + 5})" in log, log
    assert f"skipped, not UTF-8 text: {folder}/sub/latin1.txt (byte 7)" in log, log
    assert log.strip().splitlines()[-1].startswith("note: skipped 2 file(s) in the input folders that are not UTF-8"), log
    ids = read_shard(out + "/train_000000.bin")[1]
    assert len(ids) > mib // 2, f"{len(ids)} ids: straddle.txt is missing"
    p = run([keel, "prepare-data", folder, "--out", out + "_strict", "--tokenizer", path, "--strict-text"])
    named = (f"{folder}/late_bad.txt: byte offset {mib + 5}", f"{folder}/sub/latin1.txt: byte offset 7")  # the first found
    assert p.returncode == 1 and any(f"{n}: not valid UTF-8" in p.stderr for n in named), p.stderr
    assert not glob.glob(out + "_strict/*.bin"), "a refused run wrote shards"
    # The byte tokenizer reads any bytes: nothing is skipped.
    log = must_run([keel, "prepare-data", folder, "--out", out + "_bytes", "--val-fraction", "0"])
    assert "4 documents" in log and "not UTF-8" not in log, log


def check_out_of_memory(keel, workdir, **_):
    import resource
    path = os.path.join(workdir, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(base_tokenizer(), f, ensure_ascii=False)
    big, small = os.path.join(workdir, "big.txt"), os.path.join(workdir, "small.txt")
    with open(big, "w") as f:
        f.write("the theme then " * (48 << 16))  # 48 MiB on one line: ids alone take about 200 MB
    with open(small, "w") as f:
        f.write("the theme then\n")
    limit = 192 << 20

    def limited(cmd):
        return subprocess.run(cmd, capture_output=True, text=True,
                              preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    p = limited([keel, "prepare-data", small, "--out", os.path.join(workdir, "out_small"), "--tokenizer", path])
    assert p.returncode == 0, f"the small document failed under the limit:\n{p.stderr}"
    p = limited([keel, "prepare-data", big, "--out", os.path.join(workdir, "out_big"), "--tokenizer", path])
    print(p.stderr.strip())
    assert p.returncode == 1 and f"{big}: out of memory" in p.stderr, f"exit {p.returncode}:\n{p.stderr}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("check", choices=["oracle", "edges", "refuse", "base_accepted", "folder_text", "out_of_memory"])
    parser.add_argument("--keel", required=True)
    parser.add_argument("--config", help="oracle: the run config to train with")
    parser.add_argument("--venv", help="oracle: the venv of scripts/tokenizers-venv.sh")
    parser.add_argument("--case", choices=sorted(REFUSAL_CASES))
    parser.add_argument("--pattern")
    args = parser.parse_args()
    if args.check in ("oracle", "edges") and not os.environ.get("KEEL_IN_TOKENIZERS_VENV"):
        script = os.path.join(HERE, "..", "..", "scripts", "tokenizers-venv.sh")
        code = subprocess.run(["bash", script, args.venv]).returncode
        if code != 0:
            sys.exit(code)  # 77: skipped, PyPI out of reach
        os.environ["KEEL_IN_TOKENIZERS_VENV"] = "1"
        python = os.path.join(args.venv, "bin", "python")
        os.execv(python, [python] + sys.argv)
    sys.path.insert(0, HERE)
    with tempfile.TemporaryDirectory() as workdir:
        {"oracle": check_oracle, "edges": check_edges, "refuse": check_refuse, "base_accepted": check_base_accepted,
         "folder_text": check_folder_text, "out_of_memory": check_out_of_memory}[args.check](
            keel=args.keel, config=args.config, workdir=workdir, case=args.case, pattern=args.pattern)
    print("PASS")


if __name__ == "__main__":
    main()
