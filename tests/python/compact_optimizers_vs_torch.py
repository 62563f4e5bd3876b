#!/usr/bin/env python3
"""The memory-efficient optimizers against PyTorch on the same GPT, weights and batches: the
losses of 10 steps of Keel's (keel-probe, one rank, constant lr, no clipping) against
- adafactor: transformers' own Adafactor (relative_step and warmup_init off), with its defaults
  and with beta1 0.9 and weight decay 0.01, within ADAFACTOR_RTOL per step;
- adamw8bit: a PyTorch rendering of the same update written here from the description (torch's
  AdamW arithmetic; both moments re-quantised after each step to 8-bit codes of bitsandbytes'
  dynamic map, built here again from its definition, per block of 2048 elements scaled by the
  block's absmax; a positive v never rounds to zero), within EIGHT_BIT_RTOL per step; and plain
  torch.optim.AdamW more than twice that away, so the comparison sees the quantisation.
Usage: compact_optimizers_vs_torch.py --probe KEEL_PROBE --venv HF_VENV
The transformers oracle runs in HF_VENV (scripts/hf-venv.sh makes it); exits 77 (ctest's skip)
only when that venv cannot be made for want of PyPI."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from hf_oracle import ensure_oracle  # noqa: E402

STEPS = 10
ADAFACTOR_RTOL = 2e-5
# A code that flips where a moment sits on a rounding boundary (gradients differ by ~1e-7 between
# Keel's backward and autograd) moves its element by one code step: the losses drift apart
# faster than fp32 AdamW's do (tests/python/test_gpt_vs_torch.py allows 1e-4 there).
EIGHT_BIT_RTOL = 5e-5
BLOCK = 2048


def probe(probe_bin, optimizer, work):
    """Keel's initial weights, batches, per-step losses and no-decay names under `optimizer`."""
    from test_gpt_vs_torch import read_safetensors, weights_of
    config = json.load(open(os.path.join(HERE, "gpt_probe_config.json")))
    config["optimizer"] = optimizer
    path = os.path.join(work, f"{optimizer['plugin']}-{len(os.listdir(work))}")
    with open(path + ".json", "w") as f:
        json.dump(config, f)
    p = subprocess.run([probe_bin, "--config", path + ".json", "--out", path + ".safetensors", "--steps", str(STEPS)],
                       capture_output=True, text=True)
    assert p.returncode == 0, f"keel-probe failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    tensors, metadata = read_safetensors(path + ".safetensors")
    batches = [(tensors["tokens"][i], tensors["targets"][i]) for i in range(STEPS)]
    return (weights_of(tensors), batches, tensors["losses"], json.loads(metadata["model_config"]),
            set(json.loads(metadata["no_decay"])))


def groups(params, no_decay, weight_decay):
    return [{"params": [p for n, p in params.items() if n not in no_decay], "weight_decay": weight_decay},
            {"params": [p for n, p in params.items() if n in no_decay], "weight_decay": 0.0}]


def compare(what, keel, torch_losses, rtol):
    import numpy as np
    relative = np.abs(np.asarray(keel) - torch_losses) / np.abs(torch_losses)
    for step, (k, t) in enumerate(zip(keel, torch_losses)):
        print(f"  {what} step {step + 1}: keel {k:.7f}  torch {t:.7f}")
    print(f"{what}: worst relative loss difference over {STEPS} steps {relative.max():.2e} (bound {rtol:g})")
    assert len(keel) == STEPS and relative.max() <= rtol, f"{what}: losses differ by up to {relative.max():.2e}"
    return relative.max()


def dynamic_map(signed):
    """bitsandbytes' dynamic map: per decimal exponent e = 0..6, 10^(e-6) x the midpoints of
    2^e (signed: each sign) or 2^(e+1) (unsigned) equal steps over [0.1, 1]; then 0 and 1. Keel
    gives -1 the place of the signed map's negative value nearest zero (so both signs reach the
    absmax)."""
    import numpy as np
    values = [0.0, 1.0]
    for e in range(7):
        edges = np.linspace(0.1, 1.0, (2 ** e if signed else 2 ** (e + 1)) + 1)
        mids = (edges[:-1] + edges[1:]) / 2 * 10.0 ** (e - 6)
        values += list(mids)
        if signed:
            values += list(-mids) if e > 0 else [-1.0]
    assert len(values) == 256
    return np.sort(np.asarray(values, dtype=np.float32))


def make_adamw8bit(torch):
    code_s, code_u = torch.from_numpy(dynamic_map(True)), torch.from_numpy(dynamic_map(False))

    def quantise(values, codes):
        """Per block of the flat tensor: (absmax, nearest code indices; ties to the lower)."""
        blocks = list(torch.split(values, BLOCK))
        absmax = torch.stack([b.abs().max() for b in blocks])
        indices = []
        for b, a in zip(blocks, absmax):
            if float(a) == 0.0:
                indices.append(torch.argmin((codes - 0.0).abs()).repeat(b.numel()))
            else:
                nearest = torch.argmin(((b / a)[:, None] - codes[None, :]).abs(), dim=1)
                if float(codes[0]) == 0.0:  # the unsigned map (v): a positive value keeps a nonzero code
                    nearest = torch.where((b > 0) & (nearest == 0), torch.ones_like(nearest), nearest)
                indices.append(nearest)
        return absmax, torch.cat(indices)

    def dequantise(absmax, indices, codes):
        scale = absmax.repeat_interleave(BLOCK)[:indices.numel()]
        return codes[indices] * scale

    class AdamW8bit(torch.optim.Optimizer):
        def __init__(self, params, lr, betas, eps, weight_decay):
            super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

        @torch.no_grad()
        def step(self):
            for group in self.param_groups:
                beta1, beta2 = group["betas"]
                for p in group["params"]:
                    state = self.state[p]
                    flat_g = p.grad.reshape(-1)
                    if not state:
                        state["t"] = 0
                        state["m"] = quantise(torch.zeros_like(flat_g), code_s)
                        state["v"] = quantise(torch.zeros_like(flat_g), code_u)
                    state["t"] += 1
                    t = state["t"]
                    m = dequantise(*state["m"], code_s)
                    v = dequantise(*state["v"], code_u)
                    m = m + (1 - beta1) * (flat_g - m)
                    v = beta2 * v + (1 - beta2) * flat_g * flat_g
                    denom = v.sqrt() / (1 - beta2 ** t) ** 0.5 + group["eps"]
                    flat_p = p.reshape(-1)
                    flat_p.mul_(1 - group["lr"] * group["weight_decay"])
                    flat_p.sub_(group["lr"] / (1 - beta1 ** t) * m / denom)
                    state["m"], state["v"] = quantise(m, code_s), quantise(v, code_u)

    return AdamW8bit


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--probe", required=True)
    parser.add_argument("--venv", required=True)
    args = parser.parse_args()
    ensure_oracle(args.venv)
    import torch
    from transformers.optimization import Adafactor
    import gpt_reference

    work = tempfile.mkdtemp(prefix="keel-compact-")
    for name, extra in (("adafactor (defaults)", {}), ("adafactor (beta1 0.9, weight decay 0.01)",
                                                       {"beta1": 0.9, "weight_decay": 0.01})):
        spec = dict({"plugin": "adafactor", "lr": 0.05}, **extra)
        weights, batches, keel, config, no_decay = probe(args.probe, spec, work)
        params = gpt_reference.make_params(weights)
        oracle = Adafactor(groups(params, no_decay, extra.get("weight_decay", 0.0)), lr=spec["lr"],
                           beta1=extra.get("beta1"), relative_step=False, warmup_init=False, scale_parameter=True)
        compare(name, keel, gpt_reference.train(params, batches, config, oracle), ADAFACTOR_RTOL)

    spec = {"plugin": "adamw8bit", "lr": 1e-2, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}
    weights, batches, keel, config, no_decay = probe(args.probe, spec, work)
    params = gpt_reference.make_params(weights)
    oracle = make_adamw8bit(torch)(groups(params, no_decay, spec["weight_decay"]), lr=spec["lr"],
                                   betas=tuple(spec["betas"]), eps=spec["eps"], weight_decay=spec["weight_decay"])
    worst = compare("adamw8bit", keel, gpt_reference.train(params, batches, config, oracle), EIGHT_BIT_RTOL)
    # The comparison must be able to tell quantised moments from fp32 ones.
    params = gpt_reference.make_params(weights)
    fp32 = torch.optim.AdamW(groups(params, no_decay, spec["weight_decay"]), lr=spec["lr"],
                             betas=tuple(spec["betas"]), eps=spec["eps"])
    import numpy as np
    plain = gpt_reference.train(params, batches, config, fp32)
    gap = (np.abs(np.asarray(keel) - plain) / np.abs(plain)).max()
    print(f"adamw8bit against fp32 AdamW: worst relative loss difference {gap:.2e}")
    assert gap > 2 * EIGHT_BIT_RTOL, "fp32 AdamW is within twice the bound of adamw8bit: the comparison cannot see the codes"
    print("OK")


if __name__ == "__main__":
    main()
