"""Hugging Face interop from a live trainer, and top-k / top-p sampling.

export_hf's tensors are checked against GPT-2's layout as Hugging Face documents it, written out
here independently of Keel's interop code: transformer.* names, Conv1D weights stored (in, out),
so each Keel linear weight (out, in) transposed, Keel's (3, C, C) qkv as one (C, 3C) c_attn. load_hf takes a
folder or a state dict and undoes the same; a bad state dict changes nothing. Sampling: top_k 1
and a tiny top_p are greedy (the argmax of the logits at each position, computed here), and
top_k 5 never leaves the five most likely tokens, where plain sampling with the same seed does."""
import json
import struct

import numpy as np
import pytest

import keel


def read_safetensors(path):
    with open(path, "rb") as f:
        length = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(length))
        data = f.read()
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        assert entry["dtype"] == "F32", entry
        begin, end = entry["data_offsets"]
        tensors[name] = np.frombuffer(data[begin:end], dtype=np.float32).reshape(entry["shape"])
    return tensors


def hugging_face_layout(trainer, n_layer, vocab=256):
    """GPT-2's state dict as transformers names and stores it, from Keel's parameters."""
    p = {name: trainer.read_param(name) for name in trainer.param_shapes()}
    hf = {"transformer.wte.weight": p["wte"][:vocab], "transformer.wpe.weight": p["wpe"],
          "transformer.ln_f.weight": p["ln_f.weight"], "transformer.ln_f.bias": p["ln_f.bias"]}
    for i in range(n_layer):
        k, h = f"h.{i}.", f"transformer.h.{i}."
        for norm in ("ln_1", "ln_2"):
            hf[h + norm + ".weight"], hf[h + norm + ".bias"] = p[k + norm + ".weight"], p[k + norm + ".bias"]
        for keel_name, hf_name in (("attn.qkv", "attn.c_attn"), ("attn.proj", "attn.c_proj"),
                                   ("mlp.fc", "mlp.c_fc"), ("mlp.proj", "mlp.c_proj")):
            weight = p[k + keel_name + ".weight"]  # (out, in); Keel's qkv is (3, C, C): q, k, v stacked
            hf[h + hf_name + ".weight"] = weight.reshape(-1, weight.shape[-1]).T  # Conv1D: (in, out)
            hf[h + hf_name + ".bias"] = p[k + keel_name + ".bias"].reshape(-1)
    return hf


def test_export_hf_writes_gpt2s_layout_and_load_hf_reads_it_back(config, tmp_path):
    n_layer = config["model"]["n_layer"]
    trainer = keel.Trainer(config, verbose=False)
    trainer.step()
    trainer.export_hf(tmp_path / "hf")
    written = read_safetensors(tmp_path / "hf" / "model.safetensors")
    expected = hugging_face_layout(trainer, n_layer)
    assert set(written) - {"lm_head.weight"} == set(expected), sorted(set(written) ^ set(expected))
    for name, value in expected.items():
        np.testing.assert_array_equal(written[name], value, err_msg=name)
    hf_config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert (hf_config["n_layer"], hf_config["n_embd"], hf_config["vocab_size"]) == \
        (n_layer, config["model"]["d_model"], 256)

    # A fresh trainer (other weights) takes them back from the folder, and from a state dict.
    config["train"]["seed"] = 99
    other = keel.Trainer(config, verbose=False)
    assert not np.array_equal(other.read_param("wpe"), trainer.read_param("wpe"))
    other.load_hf(tmp_path / "hf")
    for name in trainer.param_shapes():
        np.testing.assert_array_equal(other.read_param(name), trainer.read_param(name), err_msg=name)
    halved = {name: value / 2 for name, value in written.items()}
    other.load_hf(halved)
    np.testing.assert_array_equal(hugging_face_layout(other, n_layer)["transformer.h.0.attn.c_attn.weight"],
                                  written["transformer.h.0.attn.c_attn.weight"] / 2)
    np.testing.assert_array_equal(other.read_param("wte")[:256], written["transformer.wte.weight"] / 2)

    # A state dict missing a tensor names it and changes nothing.
    before = other.read_param("ln_f.bias")
    broken = dict(halved)
    del broken["transformer.ln_f.bias"]
    with pytest.raises(keel.Error, match=r"transformer\.ln_f\.bias|ln_f\.bias"):
        other.load_hf(broken)
    np.testing.assert_array_equal(other.read_param("ln_f.bias"), before)


def greedy_reference(trainer, prompt, n):
    """Each next token the argmax of the logits at the last position, from trainer.logits (the
    contexts here stay shorter than data.seq_len)."""
    context = list(prompt)
    for _ in range(n):
        context.append(int(np.argmax(trainer.logits(np.asarray([context]))[0, -1])))
    return context[len(prompt):]


def test_top_k_and_top_p(config):
    trainer = keel.Trainer(config, verbose=False)
    for _ in range(3):
        trainer.step()
    prompt = list(b"def ")
    greedy = greedy_reference(trainer, prompt, 12)
    assert trainer.generate(prompt, 12, temperature=1.0, seed=3, top_k=1) == greedy
    assert trainer.generate(prompt, 12, temperature=1.0, seed=3, top_p=1e-9) == greedy

    def outside_top5(tokens):
        context, outside = list(prompt), 0
        for token in tokens:
            logits = trainer.logits(np.asarray([context]))[0, -1]
            outside += token not in set(np.argsort(-logits, kind="stable")[:5].tolist())
            context.append(token)
        return outside

    assert outside_top5(trainer.generate(prompt, 30, temperature=2.0, seed=5, top_k=5)) == 0
    assert outside_top5(trainer.generate(prompt, 30, temperature=2.0, seed=5)) > 0, \
        "plain sampling at temperature 2 never left the top 5: the check above could not fail"
    assert trainer.generate(prompt, 8, seed=7) == trainer.generate(prompt, 8, seed=7, top_k=0, top_p=1.0)
    with pytest.raises(keel.InvalidArgument, match=r"top_p in \(0, 1\]"):
        trainer.generate(prompt, 2, top_p=1.5)
