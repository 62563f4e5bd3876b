"""Quantization-aware training with quantized activations (model.qat {"weights": "int4",
"activations": "int8"}, torchao's 8da4w scheme) on Keel's gpt model, against the PyTorch GPT of
gpt_reference.py with fake quantization written here from torchao's rules: weights symmetric in
groups of 16 input columns, each linear's input per token asymmetric int8, the gradients passing
straight through. The first step's logits, loss and every gradient, then five AdamW steps.

Run: KEEL_PROBE_BIN=build/bin/keel-probe /usr/bin/python3 -m pytest -q tests/python
"""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_reference  # noqa: E402
from test_gpt_vs_torch import PROBE_CONFIG, _skip, read_safetensors, weights_of  # noqa: E402

STEPS = 5
GROUP = 16
EPS = torch.finfo(torch.float32).eps


def straight_through(x, quantized):
    """quantized in the forward; the gradient of x unchanged in the backward."""
    return x + (quantized - x).detach()


class Int8DynActInt4Weight:
    """torchao's rules: weights by get_group_qparams_symmetric (scale = amax / 7.5, floored at
    eps; q = clamp(round(w * (1 / scale)), -8, 7), the reciprocal as quantize_affine takes it); inputs
    by _choose_qparams_per_token_asymmetric
    (the range widened to hold 0, scale = range / 255, the zero point from the end that errs
    less, clamped and rounded; q = clamp(round(x * (1 / scale)) + zero, -128, 127))."""

    def weight(self, w, module):
        groups = w.reshape(-1, GROUP)
        scale = torch.clamp(groups.abs().amax(dim=1, keepdim=True) / 7.5, min=EPS)
        q = torch.clamp(torch.round(groups * (1.0 / scale)), -8, 7)
        return straight_through(w, (q * scale).reshape(w.shape))

    def input(self, x, module):
        lo = torch.clamp(x.amin(dim=-1, keepdim=True), max=0.0)
        hi = torch.clamp(x.amax(dim=-1, keepdim=True), min=0.0)
        scale = torch.clamp((hi - lo) / 255.0, min=EPS)
        from_lo, from_hi = lo / scale, hi / scale
        zero = torch.where((-128 + from_lo) + (127 + from_hi) > 0, -128 - from_lo, 127 - from_hi)
        zero = torch.round(torch.clamp(zero, -128, 127))
        q = torch.clamp(torch.round(x * (1.0 / scale)) + zero, -128, 127)
        return straight_through(x, (q - zero) * scale)


def run_probe(qat):
    probe_bin = os.environ.get("KEEL_PROBE_BIN")
    if not probe_bin:
        _skip("KEEL_PROBE_BIN is not set: point it at the keel-probe binary to compare Keel with PyTorch")
    with open(PROBE_CONFIG) as f:
        config = json.load(f)
    config["model"]["qat"] = qat
    work = tempfile.mkdtemp(prefix="keel-qat-probe-")
    path, out = os.path.join(work, "config.json"), os.path.join(work, "probe.safetensors")
    with open(path, "w") as f:
        json.dump(config, f)
    result = subprocess.run([probe_bin, "--config", path, "--out", out, "--steps", str(STEPS)], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr
    tensors, metadata = read_safetensors(out)
    return tensors, metadata, json.loads(metadata["model_config"])


def test_quantized_activations_match_torch():
    tensors, metadata, config = run_probe({"weights": "int4", "group_size": GROUP, "activations": "int8"})
    weights, qat = weights_of(tensors), Int8DynActInt4Weight()
    tokens, targets = tensors["tokens"], tensors["targets"]
    logits, loss, grads = gpt_reference.loss_and_grads(weights, tokens[0], targets[0], config, qat=qat)
    worst = float(np.max(np.abs(tensors["logits"] - logits)))
    print(f"logits max |keel - torch| {worst:.2e}; loss keel {tensors['losses'][0]:.7f} torch {loss:.7f}")
    assert worst <= 1e-4, f"logits differ by up to {worst:.3e}"
    assert abs(float(tensors["losses"][0]) - loss) <= 1e-5 * abs(loss)
    for name, theirs in grads.items():
        scale = float(np.max(np.abs(theirs)))
        error = float(np.max(np.abs(tensors["grad/" + name] - theirs)))
        assert error <= 1e-3 * max(scale, 1e-12), f"{name}: gradient off by {error:.2e} (max |g| {scale:.2e})"

    # Without the activations' quantization the model computes something else, by far more than
    # Keel and torch differ: the check bites.
    plain_logits, _, _ = gpt_reference.loss_and_grads(weights, tokens[0], targets[0], config, qat=WeightsOnly())
    effect = float(np.max(np.abs(plain_logits - logits)))
    print(f"the activations' quantization moves the logits by up to {effect:.2e}")
    assert effect > 20 * max(worst, 1e-6), (effect, worst)

    opt = json.loads(metadata["optimizer"])
    torch_losses = gpt_reference.train_adamw(weights, [(tokens[i], targets[i]) for i in range(STEPS)], config,
                                             lr=opt["lr"], betas=opt["betas"], eps=opt["eps"],
                                             weight_decay=opt["weight_decay"],
                                             no_decay=json.loads(metadata["no_decay"]), qat=qat)
    relative = np.abs(tensors["losses"] - torch_losses) / np.abs(torch_losses)
    print("AdamW steps, relative difference:", relative)
    assert np.all(relative <= 1e-4), relative


class WeightsOnly(Int8DynActInt4Weight):
    def input(self, x, module):
        return x
