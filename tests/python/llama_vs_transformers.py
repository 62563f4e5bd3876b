"""Keel's llama model against transformers' LlamaForCausalLM, the independent oracle, on the same
weights and tokens, for a tied and an untied head at odd sizes (d_model 48, not a multiple of
64; 2 key/value heads for 6 query heads; vocabulary 300, which Keel pads to 384):
  - logits, the loss and every parameter's gradient at the initial weights, and the losses of 10
    AdamW steps (keel-probe against torch.optim.AdamW on the HF model);
  - export: a Keel run's checkpoint through `keel export`, loaded by LlamaForCausalLM
    .from_pretrained, gives the logits Keel computes from the same file (keel-probe --init-from);
  - init_from: a LlamaForCausalLM saved by transformers' save_pretrained, read by Keel's
    model.init_from, gives transformers' loss: one fp32 file, and the folder itself saved in
    bf16 and sharded (model.safetensors.index.json), with the model section naming no
    dimension (they come from config.json); a dimension that disagrees with config.json, and an
    index naming a file outside the folder, are refused with the reason.

Usage: llama_vs_transformers.py --keel KEEL --probe KEEL_PROBE --venv HF_VENV
The oracle runs in HF_VENV (scripts/hf-venv.sh makes it: Debian's torch, transformers from
PyPI); exits 77 (ctest's skip) only when that venv cannot be made for want of PyPI.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from hf_oracle import (compare_gradients, compare_logits_and_loss, ensure_oracle, load_keel_weights,  # noqa: E402
                       run, train_losses)

STEPS = 10
# fp32 on both sides, sums in different orders (Keel's blocked matmuls and attention against
# torch's): logits agree to about 1e-6 absolute at these magnitudes.
LOGITS_ATOL, LOGITS_RTOL = 1e-5, 1e-5
LOSS_RTOL = 1e-5            # one scalar, a mean of B·T fp32 terms
GRAD_REL_TO_MAX = 1e-4      # |keel - torch| <= 1e-4 · max|torch grad| of that tensor
STEP_LOSS_RTOL = 1e-5       # per AdamW step, over 10 steps

MODEL = {"plugin": "llama", "n_layer": 2, "d_model": 48, "n_head": 6, "n_kv_head": 2, "ffn_hidden": 100,
         "vocab_size": 300, "seq_len": 32, "rope_theta": 10000.0, "rms_eps": 1e-5}
RUN = {
    "optimizer": {"plugin": "adamw", "lr": 1e-3, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1},
    "parallel": {"strategy": {"plugin": "ddp"}},
    "backend": {"plugin": "cpu"},
    "data": {"micro_batch": 4, "global_batch": 4, "seq_len": 32},
    "train": {"seed": 1337},
}


def write_config(work, name, tied, extra=None):
    config = dict(RUN, model=dict(MODEL, tie_embeddings=tied))
    config.update(extra or {})
    path = os.path.join(work, name + ".json")
    with open(path, "w") as f:
        json.dump(config, f)
    return path


def hf_model(tied):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=MODEL["vocab_size"], hidden_size=MODEL["d_model"],
                         intermediate_size=MODEL["ffn_hidden"], num_hidden_layers=MODEL["n_layer"],
                         num_attention_heads=MODEL["n_head"], num_key_value_heads=MODEL["n_kv_head"],
                         max_position_embeddings=MODEL["seq_len"], rms_norm_eps=MODEL["rms_eps"],
                         rope_theta=MODEL["rope_theta"], tie_word_embeddings=tied, attention_bias=False,
                         attn_implementation="eager", torch_dtype=torch.float32)
    return LlamaForCausalLM(config).float()


def loss_of(model, tokens, targets):
    import torch
    import torch.nn.functional as F
    logits = model(torch.as_tensor(tokens, dtype=torch.long)).logits
    return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.as_tensor(targets, dtype=torch.long).reshape(-1))


def check_probe(work, probe_bin, tied):
    from test_gpt_vs_torch import read_safetensors
    label = "tied" if tied else "untied"
    out = os.path.join(work, f"probe-{label}.safetensors")
    run([probe_bin, "--config", write_config(work, label, tied), "--out", out, "--steps", str(STEPS)])
    tensors, metadata = read_safetensors(out)
    model = hf_model(tied)
    load_keel_weights(model, tensors, MODEL["vocab_size"])
    compare_logits_loss_and_gradients(label, tensors, model, expected_gradients=2 + 9 * MODEL["n_layer"] + (0 if tied else 1))
    # AdamW: a fresh model on Keel's initial weights, Keel's decay groups.
    model = hf_model(tied)
    load_keel_weights(model, tensors, MODEL["vocab_size"])
    compare_adamw_steps(label, tensors, metadata, model, lambda name: name.endswith("norm.weight"))


def compare_logits_loss_and_gradients(label, tensors, model, expected_gradients):
    """The probe's first forward and backward (tensors) against `model` on the same tokens: logits
    (none in the padded vocabulary), loss, and every parameter's gradient, by name."""
    V = MODEL["vocab_size"]
    tokens, targets = tensors["tokens"], tensors["targets"]
    logits, loss = loss_of(model, tokens[0], targets[0])
    compare_logits_and_loss(label, tensors, logits, loss, V, LOGITS_ATOL, LOGITS_RTOL, LOSS_RTOL)
    loss.backward()
    compared = compare_gradients(label, tensors, model, V, GRAD_REL_TO_MAX)
    assert compared == expected_gradients, f"{label}: compared {compared} gradients, expected {expected_gradients}"


def compare_adamw_steps(label, tensors, metadata, model, undecayed):
    """The probe's STEPS AdamW steps against torch's AdamW on `model` (Keel's starting weights),
    with Keel's decay groups, which must be the parameters `undecayed(name)` picks."""
    import numpy as np
    import torch
    optimizer_config = json.loads(metadata["optimizer"])
    no_decay = set(json.loads(metadata["no_decay"]))
    params = dict(model.named_parameters())
    assert no_decay == {n for n in params if undecayed(n)}, no_decay
    groups = [{"params": [p for n, p in params.items() if n not in no_decay], "weight_decay": optimizer_config["weight_decay"]},
              {"params": [p for n, p in params.items() if n in no_decay], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=optimizer_config["lr"], betas=tuple(optimizer_config["betas"]),
                                  eps=optimizer_config["eps"])
    tokens, targets = tensors["tokens"], tensors["targets"]
    torch_losses = train_losses(model, optimizer, loss_of, tokens, targets, STEPS)
    keel_losses = tensors["losses"]
    assert len(keel_losses) == STEPS
    relative = np.abs(keel_losses - np.array(torch_losses)) / np.abs(np.array(torch_losses))
    for step in range(STEPS):
        print(f"  step {step}: keel {keel_losses[step]:.7f} transformers {torch_losses[step]:.7f} rel {relative[step]:.1e}")
    assert np.all(relative <= STEP_LOSS_RTOL), f"{label}: AdamW steps differ by up to {relative.max():.2e}"


def check_export_and_init_from(work, keel, probe_bin, tied):
    import numpy as np
    import torch
    from transformers import LlamaForCausalLM
    from test_gpt_vs_torch import read_safetensors
    label = "tied" if tied else "untied"
    # A short Keel run, its checkpoint exported.
    run_dir = os.path.join(work, f"run-{label}")
    config = write_config(work, f"train-{label}", tied,
                          {"train": {"seed": 7, "steps": 3, "metrics_path": os.path.join(run_dir, "metrics.jsonl"),
                                     "tensorboard_dir": "none",
                                     "checkpoint": {"dir": os.path.join(run_dir, "checkpoints"), "every": 3}}})
    run([keel, "run", config])
    hf_dir = os.path.join(work, f"export-{label}")
    run([keel, "export", os.path.join(run_dir, "checkpoints"), "--out", os.path.join(hf_dir, "model.safetensors")])
    model = LlamaForCausalLM.from_pretrained(hf_dir, attn_implementation="eager").float()
    assert model.config.tie_word_embeddings == tied
    # Keel's logits and loss from the same file, read back by model.init_from.
    out = os.path.join(work, f"probe-export-{label}.safetensors")
    run([probe_bin, "--config", write_config(work, label, tied), "--out", out, "--steps", "1",
         "--init-from", os.path.join(hf_dir, "model.safetensors")])
    tensors, _ = read_safetensors(out)
    with torch.no_grad():
        logits, loss = loss_of(model, tensors["tokens"][0], tensors["targets"][0])
    V = MODEL["vocab_size"]
    worst = float(np.max(np.abs(tensors["logits"][..., :V] - logits.numpy())))
    print(f"{label}: export -> from_pretrained logits max |diff| {worst:.2e}")
    assert np.allclose(tensors["logits"][..., :V], logits.numpy(), atol=LOGITS_ATOL, rtol=LOGITS_RTOL)
    assert abs(float(tensors["loss0"][0]) - float(loss)) <= LOSS_RTOL * abs(float(loss))

    # transformers' own save_pretrained of a random model, read by Keel's init_from.
    torch.manual_seed(11)
    theirs = hf_model(tied)
    saved = os.path.join(work, f"hf-saved-{label}")
    theirs.save_pretrained(saved, safe_serialization=True)
    out = os.path.join(work, f"probe-hf-{label}.safetensors")
    run([probe_bin, "--config", write_config(work, label, tied), "--out", out, "--steps", "1",
         "--init-from", os.path.join(saved, "model.safetensors")])
    tensors, _ = read_safetensors(out)
    with torch.no_grad():
        _, loss = loss_of(theirs, tensors["tokens"][0], tensors["targets"][0])
    print(f"{label}: init_from save_pretrained: loss keel {float(tensors['loss0'][0]):.7f} transformers {float(loss):.7f}")
    assert abs(float(tensors["loss0"][0]) - float(loss)) <= LOSS_RTOL * abs(float(loss))


def check_init_from_folder(work, probe_bin, tied):
    """A Hub-style download: config.json, bf16 tensors in shards; Keel's section names no size."""
    import torch
    from transformers import LlamaForCausalLM
    from test_gpt_vs_torch import read_safetensors
    label = "tied" if tied else "untied"
    torch.manual_seed(23)
    folder = os.path.join(work, f"hub-{label}")
    hf_model(tied).to(torch.bfloat16).save_pretrained(folder, safe_serialization=True, max_shard_size="60KB")
    assert os.path.exists(os.path.join(folder, "model.safetensors.index.json")), os.listdir(folder)
    shards = [f for f in os.listdir(folder) if f.endswith(".safetensors")]
    assert len(shards) > 1, f"expected several shards, found {shards}"
    # transformers' own reading of the folder, widened to fp32 (bf16 -> fp32 is exact).
    theirs = LlamaForCausalLM.from_pretrained(folder, torch_dtype=torch.float32, attn_implementation="eager")
    bare = dict(RUN, model={"plugin": "llama"})
    config = os.path.join(work, f"bare-{label}.json")
    with open(config, "w") as f:
        json.dump(bare, f)
    out = os.path.join(work, f"probe-hub-{label}.safetensors")
    run([probe_bin, "--config", config, "--out", out, "--steps", "1", "--init-from", folder])
    tensors, metadata = read_safetensors(out)
    keel_model = json.loads(metadata["model_config"])
    for key, value in (("n_layer", MODEL["n_layer"]), ("d_model", MODEL["d_model"]), ("n_kv_head", MODEL["n_kv_head"]),
                       ("ffn_hidden", MODEL["ffn_hidden"]), ("tie_embeddings", tied)):
        assert keel_model.get(key) == value, f"{label}: model.{key} from config.json: {keel_model.get(key)} != {value}"
    with torch.no_grad():
        _, loss = loss_of(theirs, tensors["tokens"][0], tensors["targets"][0])
    print(f"{label}: init_from a bf16 folder of {len(shards)} shards: loss keel {float(tensors['loss0'][0]):.7f} "
          f"transformers {float(loss):.7f}")
    assert abs(float(tensors["loss0"][0]) - float(loss)) <= LOSS_RTOL * abs(float(loss))

    # A dimension the section gives must agree with config.json.
    wrong = dict(RUN, model={"plugin": "llama", "n_layer": 3})
    with open(config, "w") as f:
        json.dump(wrong, f)
    result = subprocess.run([probe_bin, "--config", config, "--out", out, "--steps", "1", "--init-from", folder],
                            capture_output=True, text=True)
    assert result.returncode != 0 and "model.n_layer is 3, but config.json's \"num_hidden_layers\" is 2" in result.stderr, \
        result.stderr
    # A shard index is untrusted: its file names stay inside the folder.
    index_path = os.path.join(folder, "model.safetensors.index.json")
    index = json.load(open(index_path))
    first = next(iter(index["weight_map"]))
    index["weight_map"][first] = "../" + index["weight_map"][first]
    with open(index_path, "w") as f:
        json.dump(index, f)
    with open(config, "w") as f:
        json.dump(bare, f)
    result = subprocess.run([probe_bin, "--config", config, "--out", out, "--steps", "1", "--init-from", folder],
                            capture_output=True, text=True)
    assert result.returncode != 0 and "a shard must be a file name inside the folder" in result.stderr, result.stderr
    print(f"{label}: a disagreeing n_layer and an index naming ../ are refused")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--keel", required=True)
    parser.add_argument("--probe", required=True)
    parser.add_argument("--venv", required=True)
    args = parser.parse_args()
    ensure_oracle(args.venv)
    with tempfile.TemporaryDirectory(prefix="keel-llama-oracle-") as work:
        for tied in (True, False):
            check_probe(work, args.probe, tied)
            check_export_and_init_from(work, args.keel, args.probe, tied)
            check_init_from_folder(work, args.probe, tied)
    print("PASSED: llama against transformers (tied and untied)")


if __name__ == "__main__":
    main()
