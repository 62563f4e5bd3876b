"""Hugging Face interop: `keel export` and model.init_from, checked against GPT-2 as
transformers lays it out. A tiny gpt (vocab 300, so wte's padded rows are exercised) trains a
few steps with checkpoints; its export must carry HF's names, shapes (Conv1D weights stored
(in, out)) and config.json, and give the same logits as Keel when run by an HF-layout PyTorch
GPT-2 written here from transformers' modeling_gpt2 (and, when it can be installed, by
transformers' own GPT2LMHeadModel). Then the round trip and the refusals of bad files.

Needs $KEEL_BIN (the keel CLI) and $KEEL_PROBE_BIN (keel-probe); skips with the reason printed
when either is unset. The transformers oracle runs in the venv $KEEL_HF_VENV, made by
scripts/hf-venv.sh on first use; it skips with the reason when that cannot be done.
"""

import atexit
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_reference  # noqa: E402
from test_gpt_vs_torch import read_safetensors  # noqa: E402

try:
    import pytest
except ImportError:  # run as a plain script
    pytest = None

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PROBE_CONFIG = os.path.join(HERE, "gpt_probe_config.json")
TRAIN_STEPS = 4
LOGITS_RTOL, LOGITS_ATOL = 1e-4, 1e-5  # fp32 on both sides, sums in different orders


def _skip(reason):
    if pytest is not None:
        pytest.skip(reason)
    print("SKIPPED:", reason)
    raise SystemExit(0)


def _binaries():
    keel, probe = os.environ.get("KEEL_BIN"), os.environ.get("KEEL_PROBE_BIN")
    if not keel or not probe:
        _skip("KEEL_BIN and KEEL_PROBE_BIN must be set (the keel CLI and keel-probe) to test export and import")
    return keel, probe


def _run(command, cwd=None, expect_ok=True):
    result = subprocess.run(command, capture_output=True, text=True, cwd=cwd)
    if expect_ok:
        assert result.returncode == 0, (
            f"{' '.join(command)} failed with {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def write_safetensors(path, tensors):
    """{name: numpy array} as safetensors (F32, or BOOL for bool arrays)."""
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        if array.dtype == np.bool_:
            dtype, blob = "BOOL", np.ascontiguousarray(array).tobytes()
        else:
            dtype, blob = "F32", np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


# ---------------------------------------------------------------------------------------------
# One trained run and its export, shared by the tests of this file.

_cache = {}


def trained_export():
    """Trains TRAIN_STEPS steps with checkpoints, exports the checkpoint root (its `latest`).
    Returns a dict: work dir, keel and probe paths, hf folder, its tensors and metadata."""
    if "export" in _cache:
        return _cache["export"]
    keel, probe = _binaries()
    work = tempfile.mkdtemp(prefix="keel-hf-")
    atexit.register(shutil.rmtree, work, ignore_errors=True)
    with open(PROBE_CONFIG) as f:
        config = json.load(f)
    config["data"]["text_max_bytes"] = 1 << 17
    config["train"].update({"steps": TRAIN_STEPS, "log_every": 1, "metrics_path": os.path.join(work, "metrics.jsonl"),
                            "tensorboard_dir": "none",
                            "checkpoint": {"dir": os.path.join(work, "ckpt"), "every": TRAIN_STEPS, "keep": 2}})
    config_path = os.path.join(work, "train.json")
    with open(config_path, "w") as f:
        json.dump(config, f)
    _run([keel, "run", config_path], cwd=work)
    hf_dir = os.path.join(work, "hf")
    result = _run([keel, "export", os.path.join(work, "ckpt"), "--out", os.path.join(hf_dir, "model.safetensors")])
    assert "exported" in result.stdout, result.stdout
    tensors, metadata = read_safetensors(os.path.join(hf_dir, "model.safetensors"))
    _cache["export"] = {"work": work, "keel": keel, "probe": probe, "config_path": config_path, "hf_dir": hf_dir,
                        "tensors": tensors, "metadata": metadata, "model": config["model"]}
    return _cache["export"]


def probe_from(init_from, name):
    """keel-probe with model.init_from = init_from: (tensors, result)."""
    e = trained_export()
    out = os.path.join(e["work"], name + ".safetensors")
    result = _run([e["probe"], "--config", PROBE_CONFIG, "--out", out, "--steps", "1", "--init-from", init_from],
                  expect_ok=False)
    tensors = read_safetensors(out)[0] if result.returncode == 0 else None
    return tensors, result


def hf_names(n_layer):
    names = ["transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight", "transformer.ln_f.bias"]
    for i in range(n_layer):
        names += [f"transformer.h.{i}.{s}" for s in (
            "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
            "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
            "mlp.c_proj.weight", "mlp.c_proj.bias")]
    return names


# ---------------------------------------------------------------------------------------------
# GPT-2 as transformers' modeling_gpt2 computes it, on HF names: Conv1D is x @ W + b with W
# stored (in, out); the LM head is the token embedding.

def hf_gpt2_logits(weights, tokens, config):
    w = {name: torch.tensor(a) for name, a in weights.items()}
    tokens = torch.as_tensor(tokens, dtype=torch.long)
    B, T = tokens.shape
    C, n_head, eps = config["n_embd"], config["n_head"], config["layer_norm_epsilon"]
    hs = C // n_head

    def conv1d(x, prefix):
        return x @ w[prefix + ".weight"] + w[prefix + ".bias"]

    def layer_norm(x, prefix):
        return F.layer_norm(x, (C,), w[prefix + ".weight"], w[prefix + ".bias"], eps)

    x = w["transformer.wte.weight"][tokens] + w["transformer.wpe.weight"][:T]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(config["n_layer"]):
        h = f"transformer.h.{i}."
        q, k, v = conv1d(layer_norm(x, h + "ln_1"), h + "attn.c_attn").split(C, dim=2)
        q, k, v = (t.view(B, T, n_head, hs).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(hs)
        scores = torch.where(causal, scores, torch.tensor(torch.finfo(scores.dtype).min))
        y = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + conv1d(y, h + "attn.c_proj")
        m = gpt_reference.gelu_tanh(conv1d(layer_norm(x, h + "ln_2"), h + "mlp.c_fc"))  # gelu_new
        x = x + conv1d(m, h + "mlp.c_proj")
    x = layer_norm(x, "transformer.ln_f")
    return (x @ w["transformer.wte.weight"].T).numpy()  # (B,T,V)


# ---------------------------------------------------------------------------------------------

def test_export_has_hf_names_shapes_and_config():
    e = trained_export()
    m, tensors = e["model"], e["tensors"]
    V, C, L, T = m["vocab_size"], m["d_model"], m["n_layer"], m["seq_len"]
    assert sorted(tensors) == sorted(hf_names(L))
    assert e["metadata"] == {"format": "pt"}
    assert tensors["transformer.wte.weight"].shape == (V, C)  # the padded rows are cut
    assert tensors["transformer.wpe.weight"].shape == (T, C)
    for i in range(L):
        h = f"transformer.h.{i}."
        assert tensors[h + "attn.c_attn.weight"].shape == (C, 3 * C)  # Conv1D: (in, out)
        assert tensors[h + "attn.c_attn.bias"].shape == (3 * C,)
        assert tensors[h + "attn.c_proj.weight"].shape == (C, C)
        assert tensors[h + "mlp.c_fc.weight"].shape == (C, 4 * C)
        assert tensors[h + "mlp.c_proj.weight"].shape == (4 * C, C)
        # trained, not the initial ones/zeros: the export is of the checkpoint, not a fresh model
        assert np.max(np.abs(tensors[h + "ln_1.weight"] - 1)) > 1e-4
        assert np.max(np.abs(tensors[h + "attn.c_attn.bias"])) > 1e-4

    with open(os.path.join(e["hf_dir"], "config.json")) as f:
        config = json.load(f)
    assert config["model_type"] == "gpt2" and config["architectures"] == ["GPT2LMHeadModel"]
    assert (config["vocab_size"], config["n_positions"], config["n_embd"], config["n_layer"], config["n_head"]) == \
        (V, T, C, L, m["n_head"])
    assert config["n_inner"] is None and config["activation_function"] == "gelu_new"
    assert config["layer_norm_epsilon"] == 1e-5 and config["tie_word_embeddings"] is True
    assert config["resid_pdrop"] == config["embd_pdrop"] == config["attn_pdrop"] == 0
    assert config["torch_dtype"] == "float32"
    # Only GPT-2's 50257 vocabulary has them; null, not absent, or transformers takes GPT-2's 50256 (issue 41).
    assert config["bos_token_id"] is None and config["eos_token_id"] is None
    with open(os.path.join(e["hf_dir"], "generation_config.json")) as f:
        assert json.load(f) == {"bos_token_id": None, "eos_token_id": None, "pad_token_id": None}
    assert not [n for n in os.listdir(e["hf_dir"]) if ".tmp" in n], "temporary files left behind"


def test_init_from_reads_hf_layout_back():
    e = trained_export()
    keel, hf = probe_from(os.path.join(e["hf_dir"], "model.safetensors"), "imported")
    assert hf.returncode == 0, hf.stderr
    tensors, V = e["tensors"], e["model"]["vocab_size"]
    assert np.array_equal(keel["param/wte"][:V], tensors["transformer.wte.weight"])
    assert not np.any(keel["param/wte"][V:]), "padded vocabulary rows must be zero"
    for i in range(e["model"]["n_layer"]):
        c_attn = tensors[f"transformer.h.{i}.attn.c_attn.weight"]  # (C, 3C); Keel's qkv is (3, C, C)
        assert np.array_equal(keel[f"param/h.{i}.attn.qkv.weight"], c_attn.T.reshape(3, c_attn.shape[0], -1))
        assert np.array_equal(keel[f"param/h.{i}.attn.qkv.bias"], tensors[f"transformer.h.{i}.attn.c_attn.bias"].reshape(3, -1))
        assert np.array_equal(keel[f"param/h.{i}.mlp.proj.weight"], tensors[f"transformer.h.{i}.mlp.c_proj.weight"].T)
        assert np.array_equal(keel[f"param/h.{i}.ln_2.bias"], tensors[f"transformer.h.{i}.ln_2.bias"])


def test_init_from_a_folder_takes_the_sizes_from_its_config_json():
    """The export folder (config.json + model.safetensors) as model.init_from, the model section
    naming no size: the dimensions come from config.json, the weights equal the file's import;
    a size that disagrees with config.json is refused naming both values."""
    e = trained_export()
    with open(PROBE_CONFIG) as f:
        config = json.load(f)
    config["model"] = {"plugin": "gpt"}
    bare = os.path.join(e["work"], "bare.json")
    with open(bare, "w") as f:
        json.dump(config, f)
    out = os.path.join(e["work"], "from-folder.safetensors")
    result = _run([e["probe"], "--config", bare, "--out", out, "--steps", "1", "--init-from", e["hf_dir"]])
    tensors, metadata = read_safetensors(out)
    model = json.loads(metadata["model_config"])
    for key in ("n_layer", "n_head", "d_model", "vocab_size", "seq_len"):
        assert model[key] == e["model"][key], f"model.{key}: {model[key]} from config.json, {e['model'][key]} trained"
    from_file, _ = probe_from(os.path.join(e["hf_dir"], "model.safetensors"), "from-file")
    assert float(tensors["loss0"][0]) == float(from_file["loss0"][0])
    config["model"] = {"plugin": "gpt", "n_head": e["model"]["n_head"] * 2}
    with open(bare, "w") as f:
        json.dump(config, f)
    result = _run([e["probe"], "--config", bare, "--out", out, "--steps", "1", "--init-from", e["hf_dir"]],
                  expect_ok=False)
    assert result.returncode != 0
    assert f"model.n_head is {e['model']['n_head'] * 2}, but config.json's \"n_head\" is {e['model']['n_head']}" \
        in result.stderr, result.stderr


def test_init_from_refuses_config_keys_that_change_gpt2():
    """config.json keys that change GPT-2's function are refused by name (they used to be trained
    as plain GPT-2); Keel's own values and the training-only dropout keys pass."""
    e = trained_export()
    with open(PROBE_CONFIG) as f:
        config = json.load(f)
    config["model"] = {"plugin": "gpt"}
    bare = os.path.join(e["work"], "bare-keys.json")
    with open(bare, "w") as f:
        json.dump(config, f)
    with open(os.path.join(e["hf_dir"], "config.json")) as f:
        hf_config = json.load(f)
    cases = [("scale_attn_weights", False, True), ("scale_attn_by_inverse_layer_idx", True, False),
             ("add_cross_attention", True, False), ("layer_norm_epsilon", 1e-6, 1e-5)]
    out = os.path.join(e["work"], "keys.safetensors")
    for key, changed, keels in cases:
        for value, accepted in ((keels, True), (changed, False)):
            folder = os.path.join(e["work"], f"hf-{key}-{value}")
            shutil.copytree(e["hf_dir"], folder, dirs_exist_ok=True)
            with open(os.path.join(folder, "config.json"), "w") as f:
                json.dump(dict(hf_config, **{key: value}, resid_pdrop=0.1), f)
            result = _run([e["probe"], "--config", bare, "--out", out, "--steps", "1", "--init-from", folder],
                          expect_ok=accepted)
            if not accepted:
                assert result.returncode != 0, f"{key}={value} was accepted"
                assert f'"{key}" is {json.dumps(value)}' in result.stderr, result.stderr


def test_hf_layout_gpt2_gives_keel_logits():
    e = trained_export()
    keel, result = probe_from(os.path.join(e["hf_dir"], "model.safetensors"), "imported")
    assert result.returncode == 0, result.stderr
    with open(os.path.join(e["hf_dir"], "config.json")) as f:
        config = json.load(f)
    tokens, V = keel["tokens"][0], config["vocab_size"]
    keel_logits = keel["logits"]                        # (B,T,Vp)
    assert not np.any(keel_logits[..., V:]), "logits of padded vocabulary rows must be zero"
    logits = hf_gpt2_logits(e["tensors"], tokens, config)
    worst = np.max(np.abs(keel_logits[..., :V] - logits))
    assert np.allclose(keel_logits[..., :V], logits, rtol=LOGITS_RTOL, atol=LOGITS_ATOL), \
        f"logits differ by up to {worst:.3e}"


def test_round_trip_is_byte_identical():
    """export → init_from (a run with lr 0, which keeps the weights) → export: same bytes."""
    e = trained_export()
    first = os.path.join(e["hf_dir"], "model.safetensors")
    root = os.path.join(e["work"], "ckpt-again")
    _run([e["keel"], "run", e["config_path"], "--set", "model.init_from=" + json.dumps(first),
          "--set", "optimizer.lr=0", "--set", "train.steps=1", "--set", "train.checkpoint.every=1",
          "--set", "train.checkpoint.dir=" + json.dumps(root)], cwd=e["work"])
    steps = [d for d in os.listdir(root) if d.startswith("step-")]
    assert len(steps) == 1, os.listdir(root)
    second = os.path.join(e["work"], "hf-again", "model.safetensors")
    _run([e["keel"], "export", os.path.join(root, steps[0]), "--out", second])  # a step folder this time
    again, _ = read_safetensors(second)
    assert sorted(again) == sorted(e["tensors"])
    for name, array in e["tensors"].items():
        assert again[name].tobytes() == array.tobytes(), f"{name} changed in the round trip"
    with open(first, "rb") as a, open(second, "rb") as b:
        assert a.read() == b.read()


def _bad_file(name, tensors):
    path = os.path.join(trained_export()["work"], name + ".safetensors")
    write_safetensors(path, tensors)
    return path


def test_init_from_refuses_a_missing_tensor():
    tensors = dict(trained_export()["tensors"])
    del tensors["transformer.h.1.mlp.c_fc.bias"]
    _, result = probe_from(_bad_file("missing", tensors), "missing-probe")
    assert result.returncode != 0
    assert 'tensor "transformer.h.1.mlp.c_fc.bias" (Keel\'s h.1.mlp.fc.bias) is missing' in result.stderr, result.stderr
    assert "missing.safetensors" in result.stderr


def test_init_from_refuses_a_wrong_shape():
    tensors = dict(trained_export()["tensors"])
    tensors["transformer.h.0.attn.c_attn.weight"] = tensors["transformer.h.0.attn.c_attn.weight"].T.copy()  # Keel's layout
    _, result = probe_from(_bad_file("shape", tensors), "shape-probe")
    assert result.returncode != 0
    assert ('tensor "transformer.h.0.attn.c_attn.weight" (Keel\'s h.0.attn.qkv.weight): expected shape [64, 192] '
            "(Keel's [3, 64, 64] as [192, 64], transposed), found [192, 64]") in result.stderr, result.stderr


def test_init_from_refuses_tensors_of_a_bigger_model():
    tensors = dict(trained_export()["tensors"])
    tensors["transformer.h.2.ln_1.weight"] = np.ones(64, np.float32)  # a third block the config lacks
    _, result = probe_from(_bad_file("bigger", tensors), "bigger-probe")
    assert result.returncode != 0
    assert "does not have: transformer.h.2.ln_1.weight" in result.stderr, result.stderr


def test_init_from_refuses_an_untied_lm_head():
    tensors = dict(trained_export()["tensors"])
    tensors["lm_head.weight"] = tensors["transformer.wte.weight"] + 1
    _, result = probe_from(_bad_file("untied", tensors), "untied-probe")
    assert result.returncode != 0
    assert "lm_head.weight differs from transformer.wte.weight" in result.stderr, result.stderr


def test_init_from_accepts_hub_names_and_ignores_buffers():
    """The gpt2 download's style: no "transformer." prefix, the causal-mask buffers of older
    transformers, a tied lm_head.weight. The weights read must be the same."""
    e = trained_export()
    T = e["model"]["seq_len"]
    tensors = {name[len("transformer."):]: a for name, a in e["tensors"].items()}
    tensors["lm_head.weight"] = e["tensors"]["transformer.wte.weight"]
    for i in range(e["model"]["n_layer"]):
        tensors[f"h.{i}.attn.bias"] = np.tril(np.ones((1, 1, T, T), dtype=np.bool_))
        tensors[f"h.{i}.attn.masked_bias"] = np.array(-1e4, dtype=np.float32)
    hub, result = probe_from(_bad_file("hub", tensors), "hub-probe")
    assert result.returncode == 0, result.stderr
    ours, result = probe_from(os.path.join(e["hf_dir"], "model.safetensors"), "imported")
    assert result.returncode == 0, result.stderr
    for name in ours:
        if name.startswith("param/"):
            assert np.array_equal(hub[name], ours[name]), name


def test_export_command_line_errors():
    keel, _ = _binaries()
    result = _run([keel, "export", "/nonexistent/ckpt"], expect_ok=False)
    assert result.returncode == 2 and "--out" in result.stderr, result.stderr
    result = _run([keel, "export", "/nonexistent/ckpt", "--out", "/tmp/never.safetensors"], expect_ok=False)
    assert result.returncode == 1 and "/nonexistent/ckpt" in result.stderr, result.stderr


def test_export_carries_the_tokenizer():
    """--tokenizer: the tokenizer.json copied byte for byte, its end-of-text id written as bos, eos
    and pad, a tokenizer_config.json made for AutoTokenizer; an id past the vocabulary refused,
    naming the file, with no tokenizer file written."""
    e = trained_export()
    bpe = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "data", "stdlib-bpe-4k.json")
    with open(bpe) as f:
        tokenizer = json.load(f)
    end_of_text = next(t["id"] for t in tokenizer["added_tokens"] if t["content"] == "<|endoftext|>")
    assert end_of_text < e["model"]["vocab_size"]
    folder = os.path.join(e["work"], "hf-tokenizer")
    _run([e["keel"], "export", os.path.join(e["work"], "ckpt"), "--out", os.path.join(folder, "model.safetensors"),
          "--tokenizer", bpe])
    with open(os.path.join(folder, "tokenizer.json"), "rb") as f, open(bpe, "rb") as g:
        assert f.read() == g.read()
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(folder, "generation_config.json")) as f:
        generation = json.load(f)
    with open(os.path.join(folder, "tokenizer_config.json")) as f:
        side = json.load(f)
    assert (config["bos_token_id"], config["eos_token_id"]) == (end_of_text, end_of_text), config
    assert generation == {"bos_token_id": end_of_text, "eos_token_id": end_of_text, "pad_token_id": end_of_text}
    assert side["tokenizer_class"] == "PreTrainedTokenizerFast" and side["eos_token"] == "<|endoftext|>", side

    tokenizer["added_tokens"][0]["id"] = 4095
    bad = os.path.join(e["work"], "bad-tokenizer.json")
    with open(bad, "w") as f:
        json.dump(tokenizer, f)
    refused = os.path.join(e["work"], "hf-refused")
    result = _run([e["keel"], "export", os.path.join(e["work"], "ckpt"), "--out",
                   os.path.join(refused, "model.safetensors"), "--tokenizer", bad], expect_ok=False)
    assert result.returncode == 1 and "_token_id 4095 lies outside the model's vocabulary (300)" in result.stderr, \
        result.stderr
    assert not os.path.exists(os.path.join(refused, "tokenizer.json"))


# ---------------------------------------------------------------------------------------------
# The strongest oracle: transformers itself loads the exported folder.

_HF_SCRIPT = r"""
import sys, numpy as np, torch
from transformers import GPT2LMHeadModel
model, info = GPT2LMHeadModel.from_pretrained(sys.argv[1], output_loading_info=True)
model.eval()
missing = [k for k in info["missing_keys"] if k != "lm_head.weight"]  # tied to wte
assert not missing and not info["unexpected_keys"] and not info["mismatched_keys"], f"loading info: {info}"
with torch.no_grad():
    logits = model(torch.as_tensor(np.load(sys.argv[2]), dtype=torch.long)).logits
np.save(sys.argv[3], logits.numpy())
"""


def _transformers_python():
    venv = os.environ.get("KEEL_HF_VENV")
    if not venv:
        _skip("KEEL_HF_VENV is not set: no venv with transformers to load the export with")
    result = subprocess.run(["bash", os.path.join(REPO, "scripts", "hf-venv.sh"), venv], capture_output=True, text=True)
    if result.returncode != 0:
        _skip(f"no transformers venv at {venv} (scripts/hf-venv.sh exited {result.returncode}: "
              f"{(result.stderr or result.stdout).strip()[-400:]})")
    return os.path.join(venv, "bin", "python")


def test_transformers_gpt2_gives_keel_logits():
    python = _transformers_python()
    e = trained_export()
    keel, result = probe_from(os.path.join(e["hf_dir"], "model.safetensors"), "imported")
    assert result.returncode == 0, result.stderr
    V = e["model"]["vocab_size"]
    tokens_path, logits_path = os.path.join(e["work"], "tokens.npy"), os.path.join(e["work"], "hf_logits.npy")
    np.save(tokens_path, keel["tokens"][0].astype(np.int64))
    _run([python, "-c", _HF_SCRIPT, e["hf_dir"], tokens_path, logits_path])
    logits = np.load(logits_path)
    assert logits.shape == keel["logits"][..., :V].shape
    worst = np.max(np.abs(keel["logits"][..., :V] - logits))
    print(f"transformers GPT2LMHeadModel vs Keel: max |logit difference| {worst:.3e}")
    assert np.allclose(keel["logits"][..., :V], logits, rtol=LOGITS_RTOL, atol=LOGITS_ATOL), \
        f"logits differ by up to {worst:.3e}"


if __name__ == "__main__":
    for name, test in list(globals().items()):
        if name.startswith("test_") and callable(test):
            test()
            print("ok", name)
