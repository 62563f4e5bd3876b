"""Keel's LoRA on the gpt model against PEFT's on transformers' GPT2LMHeadModel, whose linears are
Conv1D (stored (in, out), PEFT's fan_in_fan_out): the same base (saved by transformers, read by
Keel's model.init_from), Keel's initial adapters (A drawn, B zero) copied into PEFT's.
  - the first step's logits and loss, and every adapter's gradient (the base has none in either);
  - 10 AdamW steps on the adapters alone, Keel's losses against PEFT's;
for PEFT's default target (c_attn, whose B Keel declares (3, C, r) for tensor parallelism) and for
every linear with rsLoRA ("c_proj" is both attn.c_proj and mlp.c_proj, as PEFT matches it).
Then `keel export` of a run: the adapter folder PeftModel.from_pretrained loads to Keel's logits,
read back by Keel as model.init_from, and --merge against PEFT's merge_and_unload.

Usage: lora_gpt_vs_peft.py --keel KEEL --probe KEEL_PROBE --venv VENV
The oracle runs in VENV (hf_oracle.FINETUNE_PINS); exits 77 (ctest's skip) only when that venv cannot
be made for want of PyPI.
"""

import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from hf_oracle import FINETUNE_PINS, compare_adapter_gradients, compare_logits_and_loss, ensure_oracle, run, train_losses  # noqa: E402

STEPS = 10
LOGITS_ATOL, LOGITS_RTOL, LOSS_RTOL = 1e-5, 1e-5, 1e-5
GRAD_REL_TO_MAX = 1e-4
STEP_LOSS_RTOL = 1e-5
SIZES = {"n_layer": 2, "n_head": 4, "n_embd": 64, "vocab_size": 300, "n_positions": 32}
RUN = {
    "optimizer": {"plugin": "adamw", "lr": 1e-3, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1},
    "parallel": {"strategy": {"plugin": "ddp"}},
    "backend": {"plugin": "cpu"},
    "data": {"micro_batch": 4, "global_batch": 4, "seq_len": 32},
    "train": {"seed": 1337},
}
CASES = [
    ("c_attn", {"r": 8, "alpha": 32}),
    ("all-linear-rslora", {"r": 4, "alpha": 16, "target_modules": "all-linear", "use_rslora": True}),
]
# PEFT's module names -> Keel's (gpt_external_names.cpp).
KEEL_MODULE = {"attn.c_attn": "attn.qkv", "attn.c_proj": "attn.proj", "mlp.c_fc": "mlp.fc", "mlp.c_proj": "mlp.proj"}


def keel_name(peft_name):
    """base_model.model.transformer.h.0.attn.c_attn.lora_A.default.weight -> h.0.attn.qkv.lora_A.weight"""
    name = peft_name.replace("base_model.model.transformer.", "", 1).replace(".default.", ".")
    block, rest = name.split(".", 2)[:2], name.split(".", 2)[2]  # ["h", "0"], "attn.c_attn.lora_A.weight"
    module, factor = rest.rsplit(".", 2)[0], ".".join(rest.rsplit(".", 2)[1:])
    return ".".join(block) + "." + KEEL_MODULE[module] + "." + factor


def save_base(path):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(7)
    config = GPT2Config(**SIZES, activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    GPT2LMHeadModel(config).save_pretrained(path, safe_serialization=True)


def base_model(path):
    from transformers import GPT2LMHeadModel
    return GPT2LMHeadModel.from_pretrained(path, attn_implementation="eager").float()


def peft_model(base_dir, lora, tensors):
    """PEFT on the saved base, Keel's adapters copied in (reshaped: Keel's qkv B is (3, C, r))."""
    import torch
    from peft import LoraConfig, get_peft_model
    targets = lora.get("target_modules", ["c_attn"])
    all_linear = ["c_attn", "c_proj", "c_fc"]
    model = get_peft_model(base_model(base_dir),
                           LoraConfig(r=lora["r"], lora_alpha=lora["alpha"], lora_dropout=lora.get("dropout", 0.0), fan_in_fan_out=True,
                                      target_modules=all_linear if targets == "all-linear" else targets,
                                      use_rslora=lora.get("use_rslora", False)))
    adapters = {name: param for name, param in model.named_parameters() if param.requires_grad}
    expected = SIZES["n_layer"] * 2 * (4 if targets == "all-linear" else 1)
    assert len(adapters) == expected, f"PEFT made {len(adapters)} adapter tensors, expected {expected}"
    with torch.no_grad():
        for name, param in adapters.items():
            keel = tensors["param/" + keel_name(name)]
            assert keel.size == param.numel(), f"{name}: Keel {keel.shape}, PEFT {tuple(param.shape)}"
            param.copy_(torch.tensor(keel).reshape(param.shape))
    return model, adapters


def loss_of(model, tokens, targets):
    import torch
    import torch.nn.functional as F
    logits = model(input_ids=torch.as_tensor(tokens, dtype=torch.long)).logits
    return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.as_tensor(targets, dtype=torch.long).reshape(-1))


def write_json(path, value):
    with open(path, "w") as f:
        json.dump(value, f)
    return path


def check(work, probe, base_dir, label, lora):
    import numpy as np
    import torch
    from test_gpt_vs_torch import read_safetensors
    config = dict(RUN, model={"plugin": "gpt", "init_from": base_dir, "lora": lora})
    out = os.path.join(work, label + ".safetensors")
    run([probe, "--config", write_json(os.path.join(work, label + ".json"), config), "--out", out,
         "--steps", str(STEPS)])
    tensors, _ = read_safetensors(out)
    for name, value in tensors.items():
        if name.startswith("grad/") and ".lora_" not in name:
            assert not value.any(), f"{label}: frozen {name} has a gradient"
    b_zero = [n for n in tensors if n.startswith("param/") and ".lora_B." in n]
    assert b_zero and all(not tensors[n].any() for n in b_zero), f"{label}: lora_B must start at zero"

    model, adapters = peft_model(base_dir, lora, tensors)
    tokens, targets = tensors["tokens"], tensors["targets"]
    logits, loss = loss_of(model, tokens[0], targets[0])
    compare_logits_and_loss(label, tensors, logits, loss, SIZES["vocab_size"], LOGITS_ATOL, LOGITS_RTOL, LOSS_RTOL)
    loss.backward()
    compare_adapter_gradients(label, tensors, adapters, keel_name, GRAD_REL_TO_MAX)

    model, adapters = peft_model(base_dir, lora, tensors)
    with torch.no_grad():
        _, untrained_last = loss_of(model, tokens[STEPS - 1], targets[STEPS - 1])
    optimizer = torch.optim.AdamW(list(adapters.values()), lr=RUN["optimizer"]["lr"],
                                  betas=tuple(RUN["optimizer"]["betas"]), eps=RUN["optimizer"]["eps"],
                                  weight_decay=RUN["optimizer"]["weight_decay"])
    peft_losses = np.array(train_losses(model, optimizer, loss_of, tokens, targets, STEPS))
    relative = np.abs(tensors["losses"] - peft_losses) / np.abs(peft_losses)
    for step in range(STEPS):
        print(f"  step {step}: keel {tensors['losses'][step]:.7f} peft {peft_losses[step]:.7f} rel {relative[step]:.1e}")
    moved = abs(peft_losses[-1] - float(untrained_last)) / float(untrained_last)
    print(f"{label}: the adapters moved the last batch's loss by {moved:.1e} (relative)")
    assert moved > 30 * STEP_LOSS_RTOL, f"{label}: the adapters barely trained (loss moved {moved:.1e})"
    assert np.all(relative <= STEP_LOSS_RTOL), f"{label}: AdamW steps differ by up to {relative.max():.2e}"


def check_export(work, keel, probe, base_dir):
    """A run's adapters through `keel export`: PEFT loads them onto the base to Keel's logits (Keel
    reading the folder back as model.init_from), and --merge equals PEFT's merge_and_unload."""
    import numpy as np
    import torch
    from peft import PeftModel
    from test_gpt_vs_torch import read_safetensors
    lora = {"r": 4, "alpha": 8, "target_modules": ["c_attn", "c_proj"]}
    run_dir = os.path.join(work, "gpt-lora-run")
    train = dict(RUN, model={"plugin": "gpt", "init_from": base_dir, "lora": lora},
                 optimizer=dict(RUN["optimizer"], lr=1e-2),
                 train={"seed": 3, "steps": 4, "metrics_path": os.path.join(run_dir, "metrics.jsonl"),
                        "tensorboard_dir": "none", "checkpoint": {"dir": os.path.join(run_dir, "checkpoints"), "every": 4}})
    run([keel, "run", write_json(os.path.join(work, "gpt-lora-run.json"), train)])
    adapter_dir = os.path.join(work, "gpt-adapter")
    run([keel, "export", os.path.join(run_dir, "checkpoints"), "--out", os.path.join(adapter_dir, "adapter_model.safetensors")])
    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        adapter_config = json.load(f)
    assert adapter_config["fan_in_fan_out"] is True, adapter_config

    bare = dict(RUN, model={"plugin": "gpt", "init_from": adapter_dir})
    out = os.path.join(work, "gpt-continue.safetensors")
    run([probe, "--config", write_json(os.path.join(work, "gpt-continue.json"), bare), "--out", out, "--steps", "1"])
    tensors, metadata = read_safetensors(out)
    assert json.loads(metadata["model_config"])["lora"]["r"] == 4
    trained_b = [n for n in tensors if n.startswith("param/") and ".lora_B." in n]
    assert trained_b and all(tensors[n].any() for n in trained_b), "the adapters read back are the trained ones"

    model = PeftModel.from_pretrained(base_model(base_dir), adapter_dir)
    with torch.no_grad():
        logits, loss = loss_of(model, tensors["tokens"][0], tensors["targets"][0])
    compare_logits_and_loss("PEFT from_pretrained(keel export), gpt", tensors, logits, loss, SIZES["vocab_size"],
                            LOGITS_ATOL, LOGITS_RTOL, LOSS_RTOL)
    for name, param in model.named_parameters():
        if ".lora_" in name:
            ours = tensors["param/" + keel_name(name)]
            assert np.array_equal(param.detach().numpy(), ours.reshape(param.shape)), name

    merged_dir = os.path.join(work, "gpt-merged")
    run([keel, "export", os.path.join(run_dir, "checkpoints"), "--merge", "--out", os.path.join(merged_dir, "model.safetensors")])
    merged = base_model(merged_dir)
    with torch.no_grad():
        logits, loss = loss_of(merged, tensors["tokens"][0], tensors["targets"][0])
    compare_logits_and_loss("keel export --merge, gpt", tensors, logits, loss, SIZES["vocab_size"],
                            LOGITS_ATOL, LOGITS_RTOL, LOSS_RTOL)
    theirs = model.merge_and_unload().state_dict()
    worst = max(float((merged.state_dict()[k] - theirs[k]).abs().max()) for k in theirs if not k.endswith(".attn.bias"))
    print(f"keel export --merge (gpt): weights max |keel - PEFT merge_and_unload| {worst:.2e}")
    assert worst <= 1e-6, f"merged weights differ from PEFT's by {worst:.2e}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--keel", required=True)
    parser.add_argument("--probe", required=True)
    parser.add_argument("--venv", required=True)
    args = parser.parse_args()
    ensure_oracle(args.venv, FINETUNE_PINS)
    with tempfile.TemporaryDirectory() as work:
        base_dir = os.path.join(work, "gpt2-base")
        save_base(base_dir)
        for label, lora in CASES:
            check(work, args.probe, base_dir, label, lora)
        check_export(work, args.keel, args.probe, base_dir)
    print("lora_gpt_vs_peft: OK")


if __name__ == "__main__":
    main()
