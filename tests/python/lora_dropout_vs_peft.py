"""LoRA's adapter dropout (model.lora.dropout) against PEFT's LoRA with its dropout modules drawing
Keel's documented masks: each adapter's lora_dropout is replaced by a module that computes the
mask of keel/backend.h dropout_dt from the seeds the core and the models derive (the rule written
again here, in numpy, from the headers' text: keel_support/common/dropout_mask.hpp's
dropout_site_seed, trainer.cpp's dropout_step_seed and pipeline_runner.cpp's per-micro-batch
seed). On gpt (GPT-2's Conv1D linears), llama (grouped-query attention) and Mixtral (experts; the
routed experts' masks keyed by each row's (token, slot) pair, read off the router's choice), every
linear targeted:
  - the first step's evaluation logits (no dropout) and loss, and every adapter's gradient;
  - 10 AdamW steps, Keel's losses against PEFT's within 1e-5;
  - the same PEFT run without dropout ends elsewhere, so the comparison sees the masks.

Usage: lora_dropout_vs_peft.py --probe KEEL_PROBE --venv VENV [--qwen2-moe]
The oracle runs in VENV (hf_oracle.FINETUNE_PINS); with --qwen2-moe it checks Qwen2-MoE alone (a
dense layer, routed experts, the shared expert and its gate) in a venv of MOE_FINETUNE_PINS
(Qwen2-MoE arrived in transformers 4.40). Exits 77 (ctest's skip) only when the venv cannot be
made for want of PyPI.
"""

import argparse
import json
import os
import re
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from hf_oracle import (FINETUNE_PINS, compare_adapter_gradients, compare_logits_and_loss, ensure_oracle,  # noqa: E402
                       run, train_losses)

STEPS = 10
P = 0.1
SEED = 1337
LOGITS_ATOL, LOGITS_RTOL, LOSS_RTOL = 1e-5, 1e-5, 1e-5
GRAD_REL_TO_MAX = 1e-4
STEP_LOSS_RTOL = 1e-5
# Which input of its block each module reads (keel_support::LoraInput): q, k and v share one mask,
# as gate and up do.
# A sparse MLP's routers and shared expert read the MLP's input and hidden; its routed experts
# read theirs as (token, slot) pairs (sites 4 and 5).
INPUT = {"q_proj": 0, "k_proj": 0, "v_proj": 0, "o_proj": 1, "gate_proj": 2, "up_proj": 2, "down_proj": 3,
         "attn.c_attn": 0, "attn.c_proj": 1, "mlp.c_fc": 2, "mlp.c_proj": 3, ".gate": 2, "shared_expert_gate": 2,
         "w1": 2, "w3": 2, "w2": 3}
PAIRS = 2  # a routed expert's site: its dense counterpart's + 2
EXPERT = re.compile(r"\.experts\.(\d+)\.")
# Qwen2-MoE (transformers 4.46.3) needs PEFT's release of that transformers: a venv of its own.
MOE_FINETUNE_PINS = "transformers==4.46.3 peft==0.13.2 accelerate==1.1.1"


def splitmix64(z):
    import numpy as np
    z = np.asarray(z, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def microbatch_seed(step, dp=0, microbatch=0):
    import numpy as np
    run_seed = splitmix64(np.uint64(SEED) ^ np.uint64(0x6B65656C64726F70))
    step_seed = splitmix64(splitmix64(run_seed ^ np.uint64(step)) ^ np.uint64(dp))
    return splitmix64(step_seed ^ np.uint64(microbatch)) | np.uint64(1)


def keep_mask(seed, block, site, rows, cols, p):
    """`rows`: how many (rows 0, 1, ...), or each row's key."""
    import numpy as np
    site_seed = splitmix64(np.uint64(seed) ^ np.uint64((block << 8) | site))
    row_keys = np.arange(rows, dtype=np.uint64) if np.isscalar(rows) else np.asarray(rows, dtype=np.uint64)
    key = (row_keys[:, None] << np.uint64(32)) | np.arange(cols, dtype=np.uint64)[None, :]
    h = splitmix64(site_seed ^ splitmix64(key))
    return (h >> np.uint64(40)).astype(np.float64) / 16777216.0 >= float(np.float32(p))


class Step:
    seed = None  # the micro-batch seed of the step being run; None: no dropout


def hash_dropout(block, site, p, step, row_keys=None):
    """`row_keys()`: the keys of the rows the module sees (a routed expert's pairs); None: 0, 1, ..."""
    import numpy as np
    import torch

    class HashDropout(torch.nn.Module):
        def forward(self, x):
            if not self.training or step.seed is None:
                return x
            rows, cols = x.numel() // x.shape[-1], x.shape[-1]
            if row_keys is not None:
                keys = row_keys()
                assert len(keys) == rows, f"{len(keys)} pair keys for {rows} rows"
                rows = keys
            scale = np.float32(1.0 / (1.0 - float(np.float32(p))))
            kept = keep_mask(step.seed, block, site, rows, cols, p).astype(np.float32) * scale
            return x * torch.from_numpy(kept).reshape(x.shape)
    return HashDropout()


class Routing:
    """A Mixtral block's last routing, taken from its router's output as transformers' block takes
    it (softmax, top-k); expert e's rows are where(one_hot(choice)[..., e].T), ordered by slot, then
    token: their pair keys are token·K + slot."""

    def __init__(self, k):
        self.k, self.choice = k, None

    def hook(self, module, inputs, logits):
        import torch
        self.choice = torch.topk(torch.softmax(logits.detach().float(), dim=1), self.k, dim=-1).indices

    def pair_keys(self, expert):
        import torch
        slot, token = torch.where((self.choice == expert).T)
        return (token * self.k + slot).numpy()


def install_masks(model, p, step):
    """Every adapter's lora_dropout draws Keel's mask for its block and input."""
    routing = {}  # block: Routing
    for name, module in model.named_modules():
        if hasattr(module, "experts") and hasattr(module, "gate") and hasattr(module, "top_k"):  # a sparse MLP
            block = int(re.search(r"\.layers\.(\d+)\.", name).group(1))
            routing[block] = Routing(module.top_k)
            module.gate.register_forward_hook(routing[block].hook)
    swapped = 0
    for name, module in model.named_modules():
        if hasattr(module, "lora_dropout") and "default" in module.lora_dropout:
            block = int(re.search(r"\.(?:layers|h)\.(\d+)\.", name).group(1))
            site = next(v for k, v in INPUT.items() if name.endswith(k))
            expert = EXPERT.search(name)
            site += PAIRS if expert else 0
            keys = (lambda r=routing[block], e=int(expert.group(1)): r.pair_keys(e)) if expert else None
            module.lora_dropout["default"] = hash_dropout(block, site, p, step, keys)
            swapped += 1
    assert swapped, "no lora_dropout module found"
    return swapped


def losses_of(model, adapters, loss_of, tokens, targets, step, with_dropout):
    import torch
    optimizer = torch.optim.AdamW(list(adapters.values()), lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    model.train()

    def set_seed(s):
        step.seed = microbatch_seed(s) if with_dropout else None
    return train_losses(model, optimizer, loss_of, tokens, targets, STEPS, set_seed)


def check(work, probe, label, config, make_peft, keel_name, loss_of, V):
    import numpy as np
    from test_gpt_vs_torch import read_safetensors
    path = os.path.join(work, label + ".json")
    with open(path, "w") as f:
        json.dump(config, f)
    out = os.path.join(work, label + ".safetensors")
    run([probe, "--config", path, "--out", out, "--steps", str(STEPS)])
    tensors, _ = read_safetensors(out)
    tokens, targets = tensors["tokens"], tensors["targets"]
    step = Step()

    model, adapters = make_peft(tensors)
    print(f"{label}: {install_masks(model, P, step)} lora_dropout modules draw Keel's masks")
    model.eval()  # the probe's logits are evaluation's: no dropout
    logits, _ = loss_of(model, tokens[0], targets[0])
    model.train()
    step.seed = microbatch_seed(0)
    _, loss = loss_of(model, tokens[0], targets[0])
    compare_logits_and_loss(label, tensors, logits, loss, V, LOGITS_ATOL, LOGITS_RTOL, LOSS_RTOL)
    loss.backward()
    compare_adapter_gradients(label, tensors, adapters, keel_name, GRAD_REL_TO_MAX)

    model, adapters = make_peft(tensors)
    install_masks(model, P, step)
    peft_losses = np.array(losses_of(model, adapters, loss_of, tokens, targets, step, True))
    model, adapters = make_peft(tensors)
    install_masks(model, P, step)
    undropped = np.array(losses_of(model, adapters, loss_of, tokens, targets, step, False))
    relative = np.abs(tensors["losses"] - peft_losses) / np.abs(peft_losses)
    for s in range(STEPS):
        print(f"  step {s}: keel {tensors['losses'][s]:.7f} peft {peft_losses[s]:.7f} rel {relative[s]:.1e} "
              f"(no dropout {undropped[s]:.7f})")
    apart = float(np.max(np.abs(undropped - peft_losses) / np.abs(peft_losses)))
    print(f"{label}: without dropout PEFT's losses differ by up to {apart:.1e} (relative)")
    assert apart > 30 * STEP_LOSS_RTOL, f"{label}: dropout barely changed the losses ({apart:.1e}): nothing compared"
    assert np.all(relative <= STEP_LOSS_RTOL), f"{label}: AdamW steps differ by up to {relative.max():.2e}"


def peft_qwen2_moe(lora, tensors):
    """transformers' Qwen2-MoE with Keel's base weights and PEFT's adapters on every linear (Keel's
    all-linear: the dense layer's, each routed expert's, the shared expert's, the routers'), Keel's
    initial adapters copied in: (model, adapters)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from hf_oracle import load_keel_weights
    from lora_vs_peft import keel_name
    from moe_vs_transformers import QWEN2_MOE, hf_model
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "gate",
               "shared_expert_gate"]
    base = hf_model(QWEN2_MOE, False, 0.0)
    load_keel_weights(base, {k: v for k, v in tensors.items() if ".lora_" not in k}, QWEN2_MOE["vocab_size"])
    model = get_peft_model(base, LoraConfig(r=lora["r"], lora_alpha=lora["alpha"], lora_dropout=lora["dropout"],
                                            target_modules=targets))
    adapters = {n: p for n, p in model.named_parameters() if p.requires_grad}
    ours = [n for n in tensors if n.startswith("param/") and ".lora_" in n]
    assert len(adapters) == len(ours), f"PEFT made {len(adapters)} adapters, Keel {len(ours)}"
    with torch.no_grad():
        for n, p in adapters.items():
            p.copy_(torch.tensor(tensors["param/" + keel_name(n)]))
    return model, adapters


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--probe", required=True)
    parser.add_argument("--venv", required=True)
    parser.add_argument("--qwen2-moe", action="store_true",
                        help="Qwen2-MoE alone (a dense layer, routed and shared experts), in a venv of MOE_FINETUNE_PINS")
    args = parser.parse_args()
    lora = {"r": 4, "alpha": 16, "target_modules": "all-linear", "dropout": P}
    if args.qwen2_moe:
        ensure_oracle(args.venv, MOE_FINETUNE_PINS)
        import lora_vs_peft as llama
        import moe_vs_transformers as moe
        with tempfile.TemporaryDirectory() as work:
            check(work, args.probe, "qwen2-moe-all-linear",
                  dict(moe.RUN, train={"seed": SEED}, model=dict(moe.QWEN2_MOE, tie_embeddings=False, lora=lora)),
                  lambda tensors: peft_qwen2_moe(lora, tensors), llama.keel_name, llama.loss_of,
                  moe.QWEN2_MOE["vocab_size"])
        print("lora_dropout_vs_peft --qwen2-moe: OK")
        return
    ensure_oracle(args.venv, FINETUNE_PINS)
    import lora_gpt_vs_peft as gpt
    import lora_moe_vs_peft as moe
    import lora_vs_peft as llama
    from llama_vs_transformers import MODEL
    with tempfile.TemporaryDirectory() as work:
        base_dir = os.path.join(work, "gpt-base")
        gpt.save_base(base_dir)
        check(work, args.probe, "gpt-all-linear",
              dict(gpt.RUN, train={"seed": SEED}, model={"plugin": "gpt", "init_from": base_dir, "lora": lora}),
              lambda tensors: gpt.peft_model(base_dir, lora, tensors), gpt.keel_name, gpt.loss_of,
              gpt.SIZES["vocab_size"])
        check(work, args.probe, "llama-all-linear",
              dict(llama.RUN, train={"seed": SEED}, model=dict(MODEL, tie_embeddings=False, lora=lora)),
              lambda tensors: llama.peft_model(False, lora, tensors), llama.keel_name, llama.loss_of,
              MODEL["vocab_size"])
        # Mixtral: the attention's, the router's and every routed expert's adapters dropped.
        check(work, args.probe, "mixtral-all-linear",
              dict(moe.RUN, train={"seed": SEED}, model=dict(moe.MIXTRAL, tie_embeddings=False, lora=lora)),
              lambda tensors: moe.peft_mixtral(lora, tensors, "mixtral-all-linear"), llama.keel_name, llama.loss_of,
              moe.MIXTRAL["vocab_size"])
    print("lora_dropout_vs_peft: OK")


if __name__ == "__main__":
    main()
