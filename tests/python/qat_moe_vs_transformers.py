"""Quantization-aware training of a mixture-of-experts llama (model.qat {"weights": "int4"} on
Mixtral's layout: the attention projections, every expert's w1, w3, w2 and the router's gate,
each fake-quantized in groups of 16) against transformers' MixtralForCausalLM whose every one of
those linears computes F.linear(x, fq(W)) with test_qat_vs_torch.py's fake quantization
(torchao's rule, written there): the first step's logits, loss and every gradient, then five
AdamW steps.

Usage: qat_moe_vs_transformers.py --probe KEEL_PROBE --venv VENV (exits 77 without PyPI)
"""

import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from hf_oracle import compare_gradients, compare_logits_and_loss, ensure_oracle, load_keel_weights, run, train_losses  # noqa: E402
from moe_vs_transformers import MIXTRAL, PIN, RUN, hf_model  # noqa: E402

STEPS = 5
QAT = {"weights": "int4", "group_size": 16}
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "w1", "w2", "w3", "gate")


def loss_of(model, tokens, targets):
    import torch
    import torch.nn.functional as F
    logits = model(torch.as_tensor(tokens, dtype=torch.long)).logits
    return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.as_tensor(targets, dtype=torch.long).reshape(-1))


def quantized_model(tensors):
    """Mixtral on Keel's weights, every targeted linear computing with its weight fake-quantized."""
    import torch.nn.functional as F
    from test_qat_vs_torch import Int8DynActInt4Weight
    qat = Int8DynActInt4Weight()
    model = hf_model(MIXTRAL, False, 0.0)
    load_keel_weights(model, tensors, MIXTRAL["vocab_size"])
    patched = 0
    for name, module in model.model.layers.named_modules():
        if name.rsplit(".", 1)[-1] in LINEARS:
            module.forward = (lambda m: lambda x: F.linear(x, qat.weight(m.weight, None), m.bias))(module)
            patched += 1
    assert patched == MIXTRAL["n_layer"] * (5 + 3 * MIXTRAL["n_experts"]), patched
    return model


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--probe", required=True)
    parser.add_argument("--venv", required=True)
    args = parser.parse_args()
    ensure_oracle(args.venv, PIN)
    import numpy as np
    import torch
    from test_gpt_vs_torch import read_safetensors
    MIXTRAL.update(ffn_hidden=32)  # groups of 16 divide every input: d_model 48, the experts' 32 (hf_model reads it too)
    section = dict(MIXTRAL, tie_embeddings=False, qat=QAT)
    with tempfile.TemporaryDirectory(prefix="keel-qat-moe-") as work:
        path, out = os.path.join(work, "qat.json"), os.path.join(work, "probe.safetensors")
        with open(path, "w") as f:
            json.dump(dict(RUN, model=section), f)
        run([args.probe, "--config", path, "--out", out, "--steps", str(STEPS)])
        tensors, metadata = read_safetensors(out)
        V = MIXTRAL["vocab_size"]

        model = quantized_model(tensors)
        logits, loss = loss_of(model, tensors["tokens"][0], tensors["targets"][0])
        compare_logits_and_loss("mixtral int4", tensors, logits, loss, V, 1e-5, 1e-5, 1e-5)
        loss.backward()
        compare_gradients("mixtral int4", tensors, model, V, 1e-4)

        model = quantized_model(tensors)
        config = json.loads(metadata["optimizer"])
        no_decay = set(json.loads(metadata["no_decay"]))
        params = dict(model.named_parameters())
        groups = [{"params": [p for n, p in params.items() if n not in no_decay], "weight_decay": config["weight_decay"]},
                  {"params": [p for n, p in params.items() if n in no_decay], "weight_decay": 0.0}]
        optimizer = torch.optim.AdamW(groups, lr=config["lr"], betas=tuple(config["betas"]), eps=config["eps"])
        theirs = np.array(train_losses(model, optimizer, loss_of, tensors["tokens"], tensors["targets"], STEPS))
        relative = np.abs(tensors["losses"] - theirs) / np.abs(theirs)
        print("AdamW steps, relative difference:", relative)
        # Later steps: rounding-level weight differences may flip a value to the next level.
        assert np.all(relative <= 1e-4), relative
    print("PASSED: Mixtral QAT (experts and routers included) against transformers")


if __name__ == "__main__":
    main()
