"""Keel's LoRA on a mixture-of-experts llama (Mixtral's layout) against PEFT's on transformers'
MixtralForCausalLM, the same base weights and Keel's initial adapters copied in: adapters on the
attention projections and every expert's w1, w3, w2 (each expert its own A and B), and on every
linear with rsLoRA (the routers' gate included, as PEFT's all-linear takes it). The first step's
logits, loss and every adapter's gradient; then 10 AdamW steps on the adapters alone.

Usage: lora_moe_vs_peft.py --probe KEEL_PROBE --venv VENV
The oracle runs in VENV (hf_oracle.FINETUNE_PINS: transformers 4.38.2, PEFT 0.10.0); exits 77
(ctest's skip) only when that venv cannot be made for want of PyPI.
"""

import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from hf_oracle import (FINETUNE_PINS, compare_adapter_gradients, compare_logits_and_loss, ensure_oracle,  # noqa: E402
                       load_keel_weights, run, train_losses)
from lora_vs_peft import keel_name, loss_of  # noqa: E402
from moe_vs_transformers import MIXTRAL, RUN, hf_model  # noqa: E402

STEPS = 10
ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "w1", "w3", "w2", "gate"]
CASES = [
    ("experts", {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj", "w1", "w3", "w2"]}),
    ("all-linear-rslora", {"r": 4, "alpha": 16, "target_modules": "all-linear", "use_rslora": True}),
]


def peft_mixtral(lora, tensors, label):
    """transformers' Mixtral with Keel's base weights and PEFT's adapters on the modules `lora` names
    (Keel's "all-linear" spelled out), Keel's initial adapters copied in: (model, adapters)."""
    import torch
    from peft import LoraConfig, get_peft_model
    targets = ALL_LINEAR if lora["target_modules"] == "all-linear" else lora["target_modules"]
    per_layer = sum(MIXTRAL["n_experts"] if t in ("w1", "w3", "w2") else 1 for t in targets)
    base = hf_model(MIXTRAL, False, 0.0)
    load_keel_weights(base, {k: v for k, v in tensors.items() if ".lora_" not in k}, MIXTRAL["vocab_size"])
    model = get_peft_model(base, LoraConfig(r=lora["r"], lora_alpha=lora["alpha"], lora_dropout=lora.get("dropout", 0.0),
                                            target_modules=targets, use_rslora=lora.get("use_rslora", False)))
    adapters = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert len(adapters) == MIXTRAL["n_layer"] * 2 * per_layer, f"{label}: PEFT made {len(adapters)} adapters"
    with torch.no_grad():
        for n, p in adapters.items():
            p.copy_(torch.tensor(tensors["param/" + keel_name(n)]))
    return model, adapters


def check(work, probe, label, lora):
    import numpy as np
    import torch
    from test_gpt_vs_torch import read_safetensors
    config = dict(RUN, model=dict(MIXTRAL, tie_embeddings=False, lora=lora))
    path, out = os.path.join(work, label + ".json"), os.path.join(work, label + ".safetensors")
    with open(path, "w") as f:
        json.dump(config, f)
    run([probe, "--config", path, "--out", out, "--steps", str(STEPS)])
    tensors, _ = read_safetensors(out)
    for name, value in tensors.items():
        if name.startswith("grad/") and ".lora_" not in name:
            assert not value.any(), f"{label}: frozen {name} has a gradient"
    V = MIXTRAL["vocab_size"]

    model, adapters = peft_mixtral(lora, tensors, label)
    logits, loss = loss_of(model, tensors["tokens"][0], tensors["targets"][0])
    compare_logits_and_loss(label, tensors, logits, loss, V, 1e-5, 1e-5, 1e-5)
    loss.backward()
    compare_adapter_gradients(label, tensors, adapters, keel_name, 1e-4, "adapter gradients (experts' included)")

    model, adapters = peft_mixtral(lora, tensors, label)
    optimizer = torch.optim.AdamW(list(adapters.values()), lr=RUN["optimizer"]["lr"],
                                  betas=tuple(RUN["optimizer"]["betas"]), eps=RUN["optimizer"]["eps"],
                                  weight_decay=RUN["optimizer"]["weight_decay"])
    theirs = np.array(train_losses(model, optimizer, loss_of, tensors["tokens"], tensors["targets"], STEPS))
    relative = np.abs(tensors["losses"] - theirs) / np.abs(theirs)
    moved = abs(theirs[-1] - theirs[0]) / theirs[0]
    print(f"{label}: AdamW steps within {relative.max():.1e} relative (losses moved {moved:.1e})")
    assert moved > 30 * 1e-5, f"{label}: the adapters barely trained (loss moved {moved:.1e})"
    assert np.all(relative <= 1e-5), relative


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--probe", required=True)
    parser.add_argument("--venv", required=True)
    args = parser.parse_args()
    ensure_oracle(args.venv, FINETUNE_PINS)
    with tempfile.TemporaryDirectory() as work:
        for label, lora in CASES:
            check(work, args.probe, label, lora)
    print("lora_moe_vs_peft: OK")


if __name__ == "__main__":
    main()
