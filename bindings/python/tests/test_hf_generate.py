"""export_hf's special ids and generation_config.json, checked by transformers itself: the export
loads with AutoModelForCausalLM, generates greedily without a warning (no pad id picked after the
fact, none outside the vocabulary) and gives the tokens Keel's own greedy generate gives on the
same weights; with the tokenizer the data was prepared with, the tokenizer travels beside the
weights and generation stops at its end of text, from prompts the `tokenizers` package encodes
with the copied file. transformers and tokenizers run in their own venvs (scripts/hf-venv.sh and
scripts/tokenizers-venv.sh, as tests/python/test_hf_export.py's and the e2e tokenizer checks'
oracles: the transformers venv's tokenizers is too old for this tokenizer.json); skipped, saying
why, only when a venv cannot be made."""
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

import keel

REPO = pathlib.Path(__file__).resolve().parents[3]
BPE_TOKENIZER = REPO / "examples" / "data" / "stdlib-bpe-4k.json"
NEW_TOKENS = 12


def oracle_python(script, venv_name, variable):
    """The interpreter of build/<venv_name> (or $variable), made by scripts/<script> on first use."""
    venv = os.environ.get(variable) or os.path.join(os.environ.get("KEEL_TEST_BUILD_DIR", REPO / "build"), venv_name)
    made = subprocess.run(["bash", str(REPO / "scripts" / script), venv], capture_output=True, text=True)
    if made.returncode == 77:
        pytest.skip(f"no {venv_name} (PyPI out of reach): {(made.stdout + made.stderr).strip()[-300:]}")
    assert made.returncode == 0, made.stderr[-2000:]
    return os.path.join(venv, "bin", "python")


def tokenizers_encode(tokenizer_path, texts):
    python = oracle_python("tokenizers-venv.sh", "tokenizers-venv", "KEEL_TOKENIZERS_VENV")
    code = ("import json, sys, tokenizers; t = tokenizers.Tokenizer.from_file(sys.argv[1]); "
            "print(json.dumps([t.encode(s).ids for s in json.loads(sys.argv[2])]))")
    done = subprocess.run([python, "-c", code, str(tokenizer_path), json.dumps(texts)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def transformers_generate(folder, prompts):
    script = pathlib.Path(__file__).parent / "oracles" / "hf_greedy_generate.py"
    request = json.dumps({"prompts": prompts, "new_tokens": NEW_TOKENS})
    python = oracle_python("hf-venv.sh", "hf-venv", "KEEL_HF_VENV")
    done = subprocess.run([python, str(script), str(folder), request], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, TRANSFORMERS_OFFLINE="1", HF_HUB_OFFLINE="1"))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def trained(config, steps=6):
    """A few steps, then noise on every weight: a model this young only repeats the space, and
    the comparison needs varied tokens with clear margins between the likeliest two."""
    trainer = keel.Trainer(config, verbose=False)
    trainer.train(steps)
    rng = np.random.default_rng(7)
    for weights in trainer.parameters().values():
        weights += rng.normal(0.0, 0.2, weights.shape).astype(np.float32)
    return trainer


def test_a_byte_level_export_generates_in_transformers_as_in_keel(config, tmp_path):
    trainer = trained(config)
    trainer.export_hf(tmp_path / "hf")
    written = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert (written["bos_token_id"], written["eos_token_id"]) == (None, None)  # bytes have no end of text
    assert json.loads((tmp_path / "hf" / "generation_config.json").read_text()) == {
        "bos_token_id": None, "eos_token_id": None, "pad_token_id": None}
    prompts = [list(b"def main():\n    "), list(b"import os\n")]
    keel_ids = [trainer.generate(p, NEW_TOKENS, temperature=0.0, seed=1) for p in prompts]
    hf = transformers_generate(tmp_path / "hf", prompts)
    print("keel", keel_ids, "transformers", hf["generated"])
    assert len({t for ids in keel_ids for t in ids}) > 4, "the generated tokens must vary"
    assert hf["generated"] == keel_ids
    assert not [w for w in hf["warnings"] if "pad_token_id" in w or "eos_token_id" in w], hf["warnings"]


def test_a_bpe_export_carries_its_tokenizer_and_stops_at_its_end_of_text(config, tmp_path):
    config["model"]["vocab_size"] = 4096  # the BPE tokenizer's vocabulary; the data's bytes lie inside it
    trainer = trained(config)
    tokenizer = json.loads(BPE_TOKENIZER.read_text())
    end_of_text = next(t["id"] for t in tokenizer["added_tokens"] if t["content"] == "<|endoftext|>")
    trainer.export_hf(tmp_path / "hf", tokenizer=BPE_TOKENIZER)
    written = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert (written["bos_token_id"], written["eos_token_id"]) == (end_of_text, end_of_text)
    assert json.loads((tmp_path / "hf" / "generation_config.json").read_text()) == {
        "bos_token_id": end_of_text, "eos_token_id": end_of_text, "pad_token_id": end_of_text}
    assert (tmp_path / "hf" / "tokenizer.json").read_bytes() == BPE_TOKENIZER.read_bytes()

    prompts = tokenizers_encode(tmp_path / "hf" / "tokenizer.json", ["def main():\n    return 0\n", "import os"])
    assert all(prompts) and max(max(p) for p in prompts) >= 256, "the BPE merges must be in play"
    hf = transformers_generate(tmp_path / "hf", prompts)
    assert not [w for w in hf["warnings"] if "pad_token_id" in w or "eos_token_id" in w], hf["warnings"]
    assert (hf["eos_token_id"], hf["pad_token_id"]) == (end_of_text, end_of_text)
    keel_ids = [trainer.generate(p, NEW_TOKENS, temperature=0.0, seed=1, eos_token_id=end_of_text) for p in prompts]
    print("keel", keel_ids, "transformers", hf["generated"])
    assert len({t for ids in keel_ids for t in ids}) > 4, "the generated tokens must vary"
    assert all(ids[-1] == end_of_text or len(ids) == NEW_TOKENS for ids in keel_ids)
    assert hf["generated"] == keel_ids


def test_export_hf_takes_the_trainers_own_tokenizer(config, tmp_path):
    """A Trainer given its tokenizer exports it without being told again; a byte-level one writes none."""
    config["model"]["vocab_size"] = 4096
    end_of_text = keel.Tokenizer(BPE_TOKENIZER).eos_token_id
    trainer = keel.Trainer(config, tokenizer=BPE_TOKENIZER, verbose=False)
    trainer.export_hf(tmp_path / "hf")
    assert (tmp_path / "hf" / "tokenizer.json").read_bytes() == BPE_TOKENIZER.read_bytes()
    written = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert end_of_text is not None and written["eos_token_id"] == end_of_text
    config["model"]["vocab_size"] = 256
    keel.Trainer(config, tokenizer="bytes", verbose=False).export_hf(tmp_path / "bytes")
    assert not (tmp_path / "bytes" / "tokenizer.json").exists()
    assert json.loads((tmp_path / "bytes" / "config.json").read_text())["eos_token_id"] is None


def test_export_hf_refuses_a_tokenizer_the_model_cannot_hold(config, tmp_path):
    trainer = keel.Trainer(config, verbose=False)  # vocab 256
    bad = json.loads(BPE_TOKENIZER.read_text())
    bad["added_tokens"][0]["id"] = 4095
    bad["model"]["vocab"] = {k: v for k, v in bad["model"]["vocab"].items() if v != 0}
    (tmp_path / "tokenizer.json").write_text(json.dumps(bad))
    with pytest.raises(keel.InvalidArgument, match=r"tokenizer\.json.*(bos|eos)_token_id 4095.*vocabulary \(256\)"):
        trainer.export_hf(tmp_path / "hf", tokenizer=tmp_path / "tokenizer.json")
    with pytest.raises(keel.InvalidArgument, match="expected a tokenizer.json"):
        trainer.export_hf(tmp_path / "hf", tokenizer=tmp_path / "nothing-here")
