"""Builds the corpus and the tokenizers that tests/e2e/tokenizer_checks.py and
benchmarks/tokenizer_throughput.py compare Keel against, with PyPI's `tokenizers` (the oracle,
which also trains the test tokenizers, so nothing but the pip package is downloaded):
  gpt2         byte-level BPE, ByteLevel pre-tokenizer (GPT-2's regex), <|endoftext|>
  llama3       byte-level BPE, Split with Llama 3's regex then ByteLevel, ignore_merges, and
               70,000 added special tokens, so the vocabulary passes 65,535 (uint32 shards)
  llama2       SentencePiece-style BPE as Llama 2's file has it: normalizer Prepend "▁" +
               Replace " "→"▁", no pre-tokenizer, byte_fallback with <0x00>..<0xFF> at ids
               3..258, unk <unk> fused, a small alphabet so byte fallback happens
  metaspace    the same model behind a Metaspace pre-tokenizer (prepend_scheme "first")
The corpus: part of this machine's Python standard library, generated prose, and Unicode text
in several scripts, a few MB in all, with special tokens inside some documents."""
import json
import os
import random
import shutil
import sysconfig

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
STDLIB_PACKAGES = ("json", "email", "http", "logging", "asyncio", "concurrent", "xml", "urllib", "importlib")
EXTRA_SPECIAL = 70_000

WORDS = ("the of and to in is was for that with as on by at from this be are or an it not which have "
         "river mountain quickly slowly bright shadow garden window thought language model token merge "
         "vocabulary training believe gathered whisper northern ancient library question answer").split()
UNICODE_SAMPLES = [
    "Ελληνικά: Η γρήγορη καφέ αλεπού πηδά πάνω από τον τεμπέλη σκύλο.",
    "Русский: Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "日本語: いろはにほへと ちりぬるを わかよたれそ つねならむ。東京は晴れ。",
    "中文：我能吞下玻璃而不伤身体。数字１２３ and ٣٤٥ and ߁߂.",
    "العربية: أنا قادر على أكل الزجاج و هذا لا يؤلمني.",
    "हिन्दी: मैं काँच खा सकता हूँ और मुझे उससे कोई चोट नहीं पहुंचती।",
    "한국어: 나는 유리를 먹을 수 있어요. 그래도 아프지 않아요.",
    "Emoji: 🚀🔥 👩‍👩‍👧‍👦 ✔️ ∑∫√∞ ≠ ≤ ≥ — “quotes” ‘single’ «guillemets» …",
    "Latin: naïve café résumé façade Œuvre Ångström ß ÿ Ł ğ ș ț ǅ ﬁ",
    "Tabs\tand  double  spaces,   triple,\r\nCRLF lines\r\n\n\nblank lines    ",
    "Combining: e\u0301 a\u0308 n\u0303 ; fullwidth ＡＢＣ ｱｲｳ; math 𝔸𝕓𝖈; nbsp\u00a0here",
    "It's they're we've I'm you'll he'd IT'S THEY'RE 'S 'T",
]


def make_corpus(root, stdlib_bytes=2_500_000, seed=20261125):
    """Copies stdlib packages until about stdlib_bytes of .py text, adds prose and Unicode
    documents (some containing special tokens); returns the folder."""
    rng = random.Random(seed)
    stdlib = sysconfig.get_paths()["stdlib"]
    corpus = os.path.join(root, "corpus")
    os.makedirs(corpus, exist_ok=True)
    total = 0
    for package in STDLIB_PACKAGES:
        if total >= stdlib_bytes:
            break
        for dirpath, dirs, files in os.walk(os.path.join(stdlib, package)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
            for name in sorted(files):
                if not name.endswith(".py") or total >= stdlib_bytes:
                    continue
                src = os.path.join(dirpath, name)
                dst = os.path.join(corpus, "stdlib", os.path.relpath(src, stdlib))
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                shutil.copyfile(src, dst)
                total += os.path.getsize(dst)
    os.makedirs(os.path.join(corpus, "prose"), exist_ok=True)
    for i in range(40):
        paragraphs = []
        for _ in range(rng.randint(5, 30)):
            sentences = []
            for _ in range(rng.randint(2, 8)):
                words = [rng.choice(WORDS) for _ in range(rng.randint(4, 18))]
                if rng.random() < 0.3:
                    words.insert(rng.randrange(len(words)), str(rng.randint(0, 10**rng.randint(1, 7))))
                sentences.append(" ".join(words).capitalize() + rng.choice([".", "!", "?", "...", ";"]))
            paragraphs.append(" ".join(sentences))
        text = "\n\n".join(paragraphs) + "\n"
        if i % 4 == 0:  # special tokens inside the text, as a document separator would be
            text = text.replace("\n\n", "\n<|endoftext|>\n", 3).replace(" the ", " <s>the ", 2)
            text += "<|reserved_special_token_69999|><|begin_of_text|> trailing</s>"
        with open(os.path.join(corpus, "prose", f"prose_{i:03d}.txt"), "w", encoding="utf-8") as f:
            f.write(text)
    os.makedirs(os.path.join(corpus, "unicode"), exist_ok=True)
    for i in range(20):
        lines = [rng.choice(UNICODE_SAMPLES) for _ in range(rng.randint(20, 200))]
        with open(os.path.join(corpus, "unicode", f"unicode_{i:03d}.txt"), "w", encoding="utf-8", newline="") as f:
            f.write("\n".join(lines) + ("\n" if i % 2 else ""))
    return corpus


def documents(corpus):
    """What keel prepare-data reads, in its order: non-hidden, non-empty files without a NUL
    byte in their first 8 KiB, sorted by path."""
    docs = []
    for dirpath, dirs, files in os.walk(corpus):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            path = os.path.join(dirpath, name)
            data = open(path, "rb").read()
            if not name.startswith(".") and data and b"\0" not in data[:8192]:
                docs.append(path)
    return sorted(docs)


def _texts(corpus):
    for path in documents(corpus):
        yield open(path, "rb").read().decode("utf-8")


def train_gpt2(corpus, vocab_size=6000):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>"], show_progress=False)
    tok.train_from_iterator(_texts(corpus), trainer)
    return tok


def train_llama3(corpus, vocab_size=8000):
    from tokenizers import AddedToken, Regex, Tokenizer, models, pre_tokenizers, trainers, decoders
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|begin_of_text|>", "<|end_of_text|>"], show_progress=False)
    tok.train_from_iterator(_texts(corpus), trainer)
    tok.add_special_tokens([AddedToken(f"<|reserved_special_token_{i}|>", special=True, normalized=False)
                            for i in range(EXTRA_SPECIAL)])
    return tok


def train_sentencepiece(corpus, vocab_size=4000):
    """Trained behind Metaspace (as SentencePiece splits at spaces while training); returns
    (llama2-style tokenizer, metaspace tokenizer), both with <0xNN> at ids 3..258."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>"], limit_alphabet=150,
                                  show_progress=False)
    tok.train_from_iterator(_texts(corpus), trainer)
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    renumbered = {t: i for t, i in vocab.items() if i < 3}
    renumbered.update({f"<0x{b:02X}>": 3 + b for b in range(256)})
    renumbered.update({t: i + 256 for t, i in vocab.items() if i >= 3})
    spec["model"]["vocab"] = renumbered
    for added in spec["added_tokens"]:
        added["id"] = renumbered[added["content"]]
    spec["model"]["byte_fallback"] = True
    spec["decoder"] = None
    llama2 = dict(spec, normalizer={"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
        pre_tokenizer=None)
    metaspace = dict(spec, normalizer=None, pre_tokenizer={
        "type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": True})
    return Tokenizer.from_str(json.dumps(llama2)), Tokenizer.from_str(json.dumps(metaspace))


def build_tokenizers(root, corpus):
    """Trains the four tokenizers and saves them as ROOT/<name>.json; returns {name: path}."""
    llama2, metaspace = train_sentencepiece(corpus)
    made = {"gpt2": train_gpt2(corpus), "llama3": train_llama3(corpus), "llama2": llama2, "metaspace": metaspace}
    paths = {}
    for name, tok in made.items():
        paths[name] = os.path.join(root, f"{name}.json")
        tok.save(paths[name])
    return paths


def oracle_ids(tokenizer_path, corpus):
    """tokenizers' ids for every document, concatenated in prepare-data's order."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokenizer_path)
    ids, bounds = [], []
    for path in documents(corpus):
        bounds.append((path, len(ids)))
        ids.extend(tok.encode(open(path, "rb").read().decode("utf-8"), add_special_tokens=False).ids)
    return ids, bounds
