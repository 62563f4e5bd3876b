"""Keel's LoRA (model.lora on the llama model) against PEFT's, the independent oracle, on the same
base weights, adapters and tokens: transformers' LlamaForCausalLM wrapped by peft.get_peft_model
with the same LoraConfig, Keel's initial adapters (A drawn, B zero) copied in.
  - the first step's logits, loss and every adapter's gradient (the base has none in either);
  - 10 AdamW steps on the adapters alone, Keel's losses against PEFT's (after the first step B is
    no longer zero, so A's gradients and the scaling enter every later loss);
for every linear targeted with rsLoRA's scaling and an untied head, and PEFT's default targets
(q_proj, v_proj) with a tied head.

and `keel export` of a LoRA run's checkpoint as a PEFT adapter folder that PeftModel.from_pretrained
loads onto its base to Keel's logits, read back by Keel as model.init_from.

Usage: lora_vs_peft.py --keel KEEL --probe KEEL_PROBE --venv VENV
The oracle runs in VENV (scripts/hf-venv.sh with hf_oracle.FINETUNE_PINS: transformers 4.38.2 and
PEFT 0.10.0, its release); exits 77 (ctest's skip) only when that venv cannot be made for want of PyPI.
"""

import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from hf_oracle import (FINETUNE_PINS, compare_adapter_gradients, compare_logits_and_loss, ensure_oracle, load_keel_weights, run,  # noqa: E402
                       train_losses)
from llama_vs_transformers import MODEL, hf_model  # noqa: E402  the llama oracle's model, its sizes
STEPS = 10
LOGITS_ATOL, LOGITS_RTOL = 1e-5, 1e-5
LOSS_RTOL = 1e-5
GRAD_REL_TO_MAX = 1e-4
STEP_LOSS_RTOL = 1e-5

RUN = {
    "optimizer": {"plugin": "adamw", "lr": 1e-3, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1},
    "parallel": {"strategy": {"plugin": "ddp"}},
    "backend": {"plugin": "cpu"},
    "data": {"micro_batch": 4, "global_batch": 4, "seq_len": 32},
    "train": {"seed": 1337},
}
CASES = [
    ("all-linear-rslora", False, {"r": 4, "alpha": 16, "target_modules": "all-linear", "use_rslora": True}),
    ("default-targets", True, {"r": 8, "alpha": 64}),
]
ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def peft_model(tied, lora, tensors):
    """transformers' model on Keel's base weights, wrapped by PEFT, Keel's adapters copied in."""
    import torch
    from peft import LoraConfig, get_peft_model
    base = hf_model(tied)
    load_keel_weights(base, {k: v for k, v in tensors.items() if ".lora_" not in k}, MODEL["vocab_size"])
    targets = lora.get("target_modules", ["q_proj", "v_proj"])
    model = get_peft_model(base, LoraConfig(r=lora["r"], lora_alpha=lora["alpha"], lora_dropout=lora.get("dropout", 0.0),
                                            target_modules=ALL_LINEAR if targets == "all-linear" else targets,
                                            use_rslora=lora.get("use_rslora", False)))
    adapters = {name: param for name, param in model.named_parameters() if param.requires_grad}
    expected = MODEL["n_layer"] * 2 * (len(ALL_LINEAR) if targets == "all-linear" else len(targets))
    assert len(adapters) == expected, f"PEFT made {len(adapters)} adapter tensors, expected {expected}"
    with torch.no_grad():
        for name, param in adapters.items():
            keel = tensors["param/" + keel_name(name)]
            assert keel.shape == tuple(param.shape), f"{name}: Keel {keel.shape}, PEFT {tuple(param.shape)}"
            param.copy_(torch.tensor(keel))
    return model, adapters


def keel_name(peft_name):
    """base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight -> Keel's name."""
    return peft_name.replace("base_model.model.", "", 1).replace(".default.", ".")


def loss_of(model, tokens, targets):
    import torch
    import torch.nn.functional as F
    logits = model(input_ids=torch.as_tensor(tokens, dtype=torch.long)).logits
    return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.as_tensor(targets, dtype=torch.long).reshape(-1))


def check(work, probe, label, tied, lora):
    import numpy as np
    import torch
    from test_gpt_vs_torch import read_safetensors
    config = dict(RUN, model=dict(MODEL, tie_embeddings=tied, lora=lora))
    path = os.path.join(work, label + ".json")
    with open(path, "w") as f:
        json.dump(config, f)
    out = os.path.join(work, label + ".safetensors")
    run([probe, "--config", path, "--out", out, "--steps", str(STEPS)])
    tensors, _ = read_safetensors(out)
    # The base is frozen: Keel forms no gradient for it.
    for name, value in tensors.items():
        if name.startswith("grad/") and ".lora_" not in name:
            assert not value.any(), f"{label}: frozen {name} has a gradient"
    b_zero = [n for n in tensors if n.startswith("param/") and ".lora_B." in n]
    assert b_zero and all(not tensors[n].any() for n in b_zero), f"{label}: lora_B must start at zero"

    model, adapters = peft_model(tied, lora, tensors)
    tokens, targets = tensors["tokens"], tensors["targets"]
    logits, loss = loss_of(model, tokens[0], targets[0])
    compare_logits_and_loss(label, tensors, logits, loss, MODEL["vocab_size"], LOGITS_ATOL, LOGITS_RTOL, LOSS_RTOL)
    loss.backward()
    compare_adapter_gradients(label, tensors, adapters, keel_name, GRAD_REL_TO_MAX)

    # AdamW on the adapters alone, from the same start. The last batch's loss under the initial
    # adapters (the base's, B being zero) shows the steps moved the model far more than the bound.
    model, adapters = peft_model(tied, lora, tensors)
    with torch.no_grad():
        _, untrained_last = loss_of(model, tokens[STEPS - 1], targets[STEPS - 1])
    optimizer = torch.optim.AdamW(list(adapters.values()), lr=RUN["optimizer"]["lr"],
                                  betas=tuple(RUN["optimizer"]["betas"]), eps=RUN["optimizer"]["eps"],
                                  weight_decay=RUN["optimizer"]["weight_decay"])
    peft_losses = train_losses(model, optimizer, loss_of, tokens, targets, STEPS)
    keel_losses = tensors["losses"]
    relative = np.abs(keel_losses - np.array(peft_losses)) / np.abs(np.array(peft_losses))
    for step in range(STEPS):
        print(f"  step {step}: keel {keel_losses[step]:.7f} peft {peft_losses[step]:.7f} rel {relative[step]:.1e}")
    moved = abs(peft_losses[-1] - float(untrained_last)) / float(untrained_last)
    print(f"{label}: the adapters moved the last batch's loss by {moved:.1e} (relative)")
    assert moved > 30 * STEP_LOSS_RTOL, f"{label}: the adapters barely trained (loss moved {moved:.1e})"
    assert np.all(relative <= STEP_LOSS_RTOL), f"{label}: AdamW steps differ by up to {relative.max():.2e}"


def check_export_and_continue(work, keel, probe):
    """A LoRA run on a base that transformers saved: `keel export` writes the adapters as a PEFT
    folder, which PeftModel.from_pretrained loads onto that base to Keel's logits; Keel reads the
    folder back as model.init_from (the base its adapter_config.json names, the adapters, and
    model.lora from it), with a model section that names nothing but the plugin."""
    import numpy as np
    import torch
    from peft import PeftModel
    from transformers import LlamaForCausalLM
    from test_gpt_vs_torch import read_safetensors
    torch.manual_seed(5)
    lora = {"r": 4, "alpha": 16, "target_modules": ["q_proj", "v_proj", "down_proj"]}
    base_dir = os.path.join(work, "base")
    hf_model(False).save_pretrained(base_dir, safe_serialization=True)
    run_dir = os.path.join(work, "lora-run")
    train = dict(RUN, model={"plugin": "llama", "init_from": base_dir, "lora": lora},
                 optimizer=dict(RUN["optimizer"], lr=1e-2),
                 train={"seed": 3, "steps": 4, "metrics_path": os.path.join(run_dir, "metrics.jsonl"),
                        "tensorboard_dir": "none", "checkpoint": {"dir": os.path.join(run_dir, "checkpoints"), "every": 4}})
    train_path = os.path.join(work, "lora-run.json")
    with open(train_path, "w") as f:
        json.dump(train, f)
    run([keel, "run", train_path])
    adapter_dir = os.path.join(work, "adapter")
    bad = run_status([keel, "export", os.path.join(run_dir, "checkpoints"), "--out", os.path.join(adapter_dir, "model.safetensors")])
    assert bad.returncode != 0 and "--out must name its adapter_model.safetensors" in bad.stderr, bad.stderr
    run([keel, "export", os.path.join(run_dir, "checkpoints"), "--out", os.path.join(adapter_dir, "adapter_model.safetensors")])
    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        adapter_config = json.load(f)
    assert adapter_config["base_model_name_or_path"] == os.path.abspath(base_dir), adapter_config
    assert sorted(adapter_config["target_modules"]) == sorted(lora["target_modules"]), adapter_config

    # Keel's logits with the trained adapters, read back through model.init_from.
    bare = dict(RUN, model={"plugin": "llama", "init_from": adapter_dir})
    bare_path = os.path.join(work, "continue.json")
    with open(bare_path, "w") as f:
        json.dump(bare, f)
    out = os.path.join(work, "continue.safetensors")
    run([probe, "--config", bare_path, "--out", out, "--steps", "1"])
    tensors, metadata = read_safetensors(out)
    keel_model = json.loads(metadata["model_config"])
    assert keel_model["lora"]["r"] == 4 and keel_model["lora"]["alpha"] == 16, keel_model
    trained_b = [n for n in tensors if n.startswith("param/") and ".lora_B." in n]
    assert trained_b and all(tensors[n].any() for n in trained_b), "the adapters read back are the trained ones"

    # A section that disagrees with the adapter is refused, naming the key and both values.
    mismatch = dict(RUN, model={"plugin": "llama", "init_from": adapter_dir, "lora": {"r": 8}})
    mismatch_path = os.path.join(work, "mismatch.json")
    with open(mismatch_path, "w") as f:
        json.dump(mismatch, f)
    refused = run_status([keel, "validate", mismatch_path])
    assert refused.returncode != 0 and "model.lora.r is 8, but the adapter's r is 4" in refused.stderr, refused.stderr

    # An adapter of a kind Keel does not compute (DoRA) is refused, not read as plain LoRA.
    dora_dir = os.path.join(work, "dora")
    os.makedirs(dora_dir)
    with open(os.path.join(dora_dir, "adapter_config.json"), "w") as f:
        json.dump(dict(adapter_config, use_dora=True), f)
    with open(os.path.join(adapter_dir, "adapter_model.safetensors"), "rb") as f, \
            open(os.path.join(dora_dir, "adapter_model.safetensors"), "wb") as g:
        g.write(f.read())
    dora = dict(RUN, model={"plugin": "llama", "init_from": dora_dir})
    with open(os.path.join(work, "dora.json"), "w") as f:
        json.dump(dora, f)
    refused = run_status([keel, "validate", os.path.join(work, "dora.json")])
    assert refused.returncode != 0 and "use_dora is true: DoRA's magnitude vectors" in refused.stderr, refused.stderr

    model = PeftModel.from_pretrained(LlamaForCausalLM.from_pretrained(base_dir, attn_implementation="eager").float(),
                                      adapter_dir)
    with torch.no_grad():
        logits, loss = loss_of(model, tensors["tokens"][0], tensors["targets"][0])
    compare_logits_and_loss("PEFT from_pretrained(keel export)", tensors, logits, loss, MODEL["vocab_size"],
                            LOGITS_ATOL, LOGITS_RTOL, LOSS_RTOL)
    # Keel's adapters, byte for byte what PEFT loaded.
    for name, param in model.named_parameters():
        if ".lora_" in name:
            assert np.array_equal(param.detach().numpy(), tensors["param/" + keel_name(name)]), name

    # --merge: the full model, which transformers loads without PEFT, to the same logits, and
    # weights equal to PEFT's own merge_and_unload.
    merged_dir = os.path.join(work, "merged")
    run([keel, "export", os.path.join(run_dir, "checkpoints"), "--merge", "--out", os.path.join(merged_dir, "model.safetensors")])
    merged = LlamaForCausalLM.from_pretrained(merged_dir, attn_implementation="eager").float()
    with torch.no_grad():
        logits, loss = loss_of(merged, tensors["tokens"][0], tensors["targets"][0])
    compare_logits_and_loss("keel export --merge", tensors, logits, loss, MODEL["vocab_size"],
                            LOGITS_ATOL, LOGITS_RTOL, LOSS_RTOL)
    theirs = model.merge_and_unload().state_dict()
    worst = max(float((merged.state_dict()[k] - theirs[k]).abs().max()) for k in theirs if "rotary" not in k)
    print(f"keel export --merge: weights max |keel - PEFT merge_and_unload| {worst:.2e}")
    assert worst <= 1e-6, f"merged weights differ from PEFT's by {worst:.2e}"


def run_status(command):
    import subprocess
    return subprocess.run(command, capture_output=True, text=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--keel", required=True)
    parser.add_argument("--probe", required=True)
    parser.add_argument("--venv", required=True)
    args = parser.parse_args()
    ensure_oracle(args.venv, FINETUNE_PINS)
    with tempfile.TemporaryDirectory() as work:
        for label, tied, lora in CASES:
            check(work, args.probe, label, tied, lora)
        check_export_and_continue(work, args.keel, args.probe)
    print("lora_vs_peft: OK")


if __name__ == "__main__":
    main()
