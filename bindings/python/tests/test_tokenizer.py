"""keel.Tokenizer against the tokenizers library (the oracle, in the venv of
scripts/tokenizers-venv.sh): the same ids for Unicode-heavy text and special tokens, the same
text back from any ids (cut multi-byte characters, lone byte tokens, skipped specials), on the
byte-level BPE file of examples/data and on SentencePiece-style files of both decoder styles;
and generate's str prompts through a tokenizer, against the same generation from ids."""
import json
import pathlib
import random
import subprocess

import pytest

import keel
from test_hf_generate import BPE_TOKENIZER, oracle_python

ORACLE = pathlib.Path(__file__).parent / "oracles" / "hf_tokenizer_oracle.py"
TEXTS = [
    "",
    "def main():\n    return 0\n",
    "héllo <|endoftext|> 日本語 🚀 x",
    "Ελληνικά: Η γρήγορη καφέ αλεπού. Русский: Съешь же ещё этих булок.",
    "中文：我能吞下玻璃而不伤身体。数字１２３ and ٣٤٥ and ߁߂.",
    "العربية: أنا قادر على أكل الزجاج. हिन्दी: मैं काँच खा सकता हूँ।",
    "Emoji: 👩‍👩‍👧‍👦 ✔️ ∑∫√∞ “quotes” «guillemets» … 𝔸𝕓𝖈 e\u0301 ﬁ\u00a0nbsp",
    "  leading spaces, <s>specials</s> inside,\ttabs\r\nand trailing   ",
    "it's <unk> ‹not special› <|endoftext|><|endoftext|>",
]


@pytest.fixture(scope="module")
def tokenizers_python():
    return oracle_python("tokenizers-venv.sh", "tokenizers-venv", "KEEL_TOKENIZERS_VENV")


@pytest.fixture(scope="module")
def made_files(tokenizers_python, tmp_path_factory):
    folder = tmp_path_factory.mktemp("tokenizers")
    done = subprocess.run([tokenizers_python, str(ORACLE), "make", str(folder)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def oracle(python, path, texts, decode):
    request = json.dumps({"tokenizer": str(path), "texts": texts, "decode": decode})
    done = subprocess.run([python, str(ORACLE), "answer", "-"], input=request, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def id_sequences(tok, encoded):
    """What decode is asked: each text's ids, every prefix of the Unicode ones (a character cut
    between byte tokens), and random ids (lone byte tokens, specials anywhere)."""
    rng = random.Random(41)
    sequences = [list(ids) for ids in encoded]
    sequences += [ids[:k] for ids in encoded[2:7] for k in range(1, len(ids))]
    sequences += [[rng.randrange(tok.vocab_size) for _ in range(rng.randint(1, 40))] for _ in range(200)]
    return sequences


@pytest.mark.parametrize("name", ["stdlib-bpe-4k", "llama2", "metaspace", "plain"])
def test_ids_and_text_equal_the_tokenizers_library(name, made_files, tokenizers_python):
    path = BPE_TOKENIZER if name == "stdlib-bpe-4k" else made_files[name]
    tok = keel.Tokenizer(path)
    encoded = [tok.encode(t) for t in TEXTS]
    sequences = id_sequences(tok, encoded)
    expected = oracle(tokenizers_python, path, TEXTS, sequences)
    for text, mine, theirs in zip(TEXTS, encoded, expected["ids"]):
        assert mine == theirs, f"{name}: encode({text!r})"
    assert max(max(ids, default=0) for ids in encoded) >= 256, "merges must be in play"
    for ids, theirs, theirs_skipping in zip(sequences, expected["decoded"], expected["decoded_skipping"]):
        assert tok.decode(ids) == theirs, f"{name}: decode({ids})"
        assert tok.decode(ids, skip_special_tokens=True) == theirs_skipping, f"{name}: decode({ids}, skip)"
    # Round trip: the byte-level file gives every text back; the others as the library does.
    for text, ids, theirs in zip(TEXTS, encoded, expected["decoded"]):
        assert tok.decode(ids) == theirs
        if name == "stdlib-bpe-4k":
            assert theirs == text


def test_special_ids_vocabulary_and_lookups(made_files, tmp_path):
    gpt2 = keel.Tokenizer(BPE_TOKENIZER)
    assert (gpt2.vocab_size, gpt2.eos_token_id, gpt2.bos_token_id) == (4096, 0, 0)  # <|endoftext|> is id 0
    assert gpt2.token_to_id("<|endoftext|>") == 0 and gpt2.is_special(0) and not gpt2.is_special(300)
    assert gpt2.id_to_token(gpt2.token_to_id("Ġx")) == "Ġx" and gpt2.token_to_id("no such token") is None
    llama2 = keel.Tokenizer(made_files["llama2"])
    assert (llama2.eos_token_id, llama2.bos_token_id, llama2.vocab_size) == (2, 1, 856)
    # A Hugging Face folder: tokenizer_config.json names the roles.
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "tokenizer.json").write_bytes(pathlib.Path(made_files["llama2"]).read_bytes())
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": {"content": "<unk>"}, "bos_token": "</s>"}))
    assert (keel.Tokenizer(folder).eos_token_id, keel.Tokenizer(folder).bos_token_id) == (0, 2)
    bytes_tok = keel.Tokenizer("bytes")
    assert bytes_tok.encode("é") == [0xC3, 0xA9] and bytes_tok.decode([0xC3]) == "\ufffd"
    assert (bytes_tok.vocab_size, bytes_tok.eos_token_id) == (256, None)


def test_bad_input_is_refused_naming_it(made_files, tmp_path):
    tok = keel.Tokenizer(BPE_TOKENIZER)
    with pytest.raises(keel.InvalidArgument, match=r"id 5000 at index 1 is no token"):
        tok.decode([5, 5000])
    with pytest.raises(keel.InvalidArgument, match=r"id -1 at index 0 is negative"):
        tok.decode([-1])
    with pytest.raises(keel.InvalidArgument, match="byte offset 2: not valid UTF-8"):
        tok.encode(b"ab\xff")
    with pytest.raises(TypeError, match="expected a str"):
        tok.encode(12)
    with pytest.raises(keel.InvalidArgument, match="a folder without a tokenizer.json"):
        keel.Tokenizer(tmp_path)
    with pytest.raises(keel.MissingFile):
        keel.Tokenizer(tmp_path / "missing.json")
    wordpiece = json.loads(pathlib.Path(made_files["llama2"]).read_text())
    wordpiece["decoder"] = {"type": "WordPiece", "prefix": "##", "cleanup": True}
    (tmp_path / "wordpiece.json").write_text(json.dumps(wordpiece))
    odd = keel.Tokenizer(tmp_path / "wordpiece.json")  # it still encodes, as prepare-data reads it
    assert odd.encode("the river") == keel.Tokenizer(made_files["llama2"]).encode("the river")
    with pytest.raises(keel.Unsupported, match=r"decoder\.type \"WordPiece\": Keel decodes ByteLevel"):
        odd.decode([5])


def bpe_trainer(config, **kwargs):
    config["model"]["vocab_size"] = 4096  # the BPE tokenizer's vocabulary
    trainer = keel.Trainer(config, verbose=False, **kwargs)
    trainer.train(3)
    return trainer


def test_generate_takes_str_prompts_through_a_tokenizer(config):
    """A str prompt is the tokenizer's ids and the result the text of the generated ids; stop
    strings and the tokenizer's end of text cut it where the unstopped generation completes them."""
    tok = keel.Tokenizer(BPE_TOKENIZER)
    trainer = bpe_trainer(config)
    prompt = "def main():\n    "
    ids = trainer.generate(tok.encode(prompt), 30, temperature=1.0, seed=5, eos_token_id=[])
    text = trainer.generate(prompt, 30, temperature=1.0, seed=5, tokenizer=tok, eos_token_id=[])
    assert isinstance(text, str) and text == tok.decode(ids)
    assert max(ids) >= 256, "BPE tokens must be generated"
    # The same through the Trainer's own tokenizer, given as a path; batches of str prompts.
    own = keel.Trainer(config, verbose=False, tokenizer=BPE_TOKENIZER)
    for name in own.param_shapes():
        own.write_param(name, trainer.read_param(name))
    assert own.generate(prompt, 30, temperature=1.0, seed=5, eos_token_id=[]) == text
    assert trainer.generate([prompt, "import os"], 8, seed=2, tokenizer=BPE_TOKENIZER, eos_token_id=[]) == [
        trainer.generate(prompt, 8, seed=2, tokenizer=tok, eos_token_id=[]),
        trainer.generate("import os", 8, seed=2, tokenizer=tok, eos_token_id=[])]
    # A stop string ends generation at the first token whose text completes it.
    stop = next(c for c in text[3:] if c.strip())
    cut = trainer.generate(prompt, 30, temperature=1.0, seed=5, tokenizer=tok, eos_token_id=[], stop=stop)
    first = next(k for k in range(1, len(ids) + 1) if stop in tok.decode(ids[:k]))
    assert cut == tok.decode(ids[:first])
    # The tokenizer's end of text stops by default (eos_token_id None), as transformers' does.
    end = ids[4]
    with_eos = trainer.generate(prompt, 30, temperature=1.0, seed=5, tokenizer=tok, eos_token_id=end)
    assert with_eos == tok.decode(ids[:ids.index(end) + 1])
    assert trainer.generate(prompt, 30, temperature=1.0, seed=5, tokenizer=tok) == \
        tok.decode(trainer.generate(tok.encode(prompt), 30, temperature=1.0, seed=5, eos_token_id=tok.eos_token_id))


def test_generate_refuses_a_str_prompt_without_a_fitting_tokenizer(config):
    trainer = bpe_trainer(config)
    with pytest.raises(keel.InvalidArgument, match=r"needs a tokenizer for this model \(vocab 4096\)"):
        trainer.generate("def ", 4)
    with pytest.raises(keel.MissingFile, match="missing.json"):
        keel.Trainer(config, verbose=False, tokenizer="missing.json")
    small = keel.Trainer(config | {"model": dict(config["model"], vocab_size=256)}, verbose=False)
    with pytest.raises(keel.InvalidArgument, match=r"has 4096 tokens, more than the model's vocabulary \(256\)"):
        small.generate("def ", 4, tokenizer=BPE_TOKENIZER)
