"""Keel's llama model with experts against transformers' MixtralForCausalLM and
Qwen2MoeForCausalLM, the independent oracle, on the same weights and tokens, at odd sizes
(d_model 48; 5 experts; a Qwen2-MoE with experts 28 wide, a shared expert 44 wide, a dense layer
of 60 and top-3 weights not renormalised), tied and untied:
  - logits, the loss and every parameter's gradient at the initial weights, and the losses of 10
    AdamW steps (keel-probe against torch.optim.AdamW on the HF model), without and with the
    load-balancing loss (transformers' load_balancing_loss_func; Keel logs the cross-entropy and
    adds the balancing loss to the gradient only), and once with the router z-loss (the mean of
    logsumexp² over every sparse layer's router rows, written here in torch), and once with
    sigmoid scores (router_scores "sigmoid": Mixtral's block with its softmax made a sigmoid here,
    the only use of F in transformers' modeling_mixtral);
  - the step metrics the model reports (aux_loss, the balancing loss before its coefficient, and
    each sparse layer's expert load) against load_balancing_loss_func and the routers' top-k;
  - export: a Keel run's checkpoint through `keel export`, loaded by from_pretrained, gives the
    logits Keel computes from the same file;
  - init_from: transformers' save_pretrained read by Keel's model.init_from, the model section
    naming only the plugin (the experts' keys come from config.json), gives transformers' loss.

Usage: moe_vs_transformers.py --keel KEEL --probe KEEL_PROBE --venv HF_VENV
The oracle runs in HF_VENV with transformers 4.46.3 (Qwen2-MoE needs 4.40 or newer;
scripts/hf-venv.sh makes it); exits 77 (ctest's skip) only when that venv cannot be made for want
of PyPI.
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
                       run)

PIN = "transformers==4.46.3"
STEPS = 10
LOGITS_ATOL, LOGITS_RTOL = 1e-5, 1e-5
LOSS_RTOL = 1e-5
GRAD_REL_TO_MAX = 1e-4      # |keel - torch| <= 1e-4 · max|torch grad| of that tensor
STEP_LOSS_RTOL = 1e-5

COMMON = {"plugin": "llama", "d_model": 48, "n_head": 6, "n_kv_head": 2, "vocab_size": 300, "seq_len": 32,
          "rope_theta": 10000.0, "rms_eps": 1e-5}
MIXTRAL = dict(COMMON, n_layer=2, ffn_hidden=36, n_experts=5, n_experts_per_token=2)
QWEN2_MOE = dict(COMMON, n_layer=3, ffn_hidden=60, attention_bias=True, n_experts=5, n_experts_per_token=3,
                 expert_ffn_hidden=28, shared_expert_ffn_hidden=44, norm_topk_prob=False, mlp_only_layers=[1])
RUN = {
    "optimizer": {"plugin": "adamw", "lr": 1e-3, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1},
    "parallel": {"strategy": {"plugin": "ddp"}},
    "backend": {"plugin": "cpu"},
    "data": {"micro_batch": 4, "global_batch": 4, "seq_len": 32},
    "train": {"seed": 1337},
}
# (label, model section, tied, balancing loss coefficient, z-loss coefficient)
SIGMOID = dict(MIXTRAL, router_scores="sigmoid")
CASES = [
    ("mixtral-sigmoid-untied", SIGMOID, False, 0.0, 0.0),
    ("mixtral-tied", MIXTRAL, True, 0.0, 0.0),
    ("mixtral-untied-balanced", MIXTRAL, False, 0.02, 0.0),
    ("mixtral-untied-z", MIXTRAL, False, 0.02, 0.01),
    ("qwen2moe-tied-balanced", QWEN2_MOE, True, 0.05, 0.0),
    ("qwen2moe-untied", QWEN2_MOE, False, 0.0, 0.0),
]


def write_config(work, name, model, extra=None):
    config = dict(RUN, model=model)
    config.update(extra or {})
    path = os.path.join(work, name + ".json")
    with open(path, "w") as f:
        json.dump(config, f)
    return path


def keel_model(section, tied, aux, z):
    model = dict(section, tie_embeddings=tied)
    if aux:
        model["router_aux_loss_coef"] = aux
    if z:
        model["router_z_loss_coef"] = z
    return model


def hf_model(section, tied, aux):
    import torch
    import transformers
    m = section
    common = dict(vocab_size=m["vocab_size"], hidden_size=m["d_model"], intermediate_size=m["ffn_hidden"],
                  num_hidden_layers=m["n_layer"], num_attention_heads=m["n_head"],
                  num_key_value_heads=m["n_kv_head"], max_position_embeddings=m["seq_len"],
                  rms_norm_eps=m["rms_eps"], rope_theta=m["rope_theta"], tie_word_embeddings=tied,
                  num_experts_per_tok=m["n_experts_per_token"], output_router_logits=aux > 0,
                  router_aux_loss_coef=aux, attn_implementation="eager", torch_dtype=torch.float32)
    if m.get("attention_bias"):
        config = transformers.Qwen2MoeConfig(num_experts=m["n_experts"], moe_intermediate_size=m["expert_ffn_hidden"],
                                             shared_expert_intermediate_size=m["shared_expert_ffn_hidden"],
                                             norm_topk_prob=m["norm_topk_prob"], mlp_only_layers=m["mlp_only_layers"],
                                             decoder_sparse_step=1, use_sliding_window=False, **common)
        return transformers.Qwen2MoeForCausalLM(config).float()
    config = transformers.MixtralConfig(num_local_experts=m["n_experts"], sliding_window=None, **common)
    sigmoid_scores(m.get("router_scores") == "sigmoid")
    return transformers.MixtralForCausalLM(config).float()


def sigmoid_scores(on):
    """Mixtral's router scores: softmax (transformers' own), or a sigmoid (DeepSeek-V3's scoring)."""
    import types
    import torch
    import torch.nn.functional
    from transformers.models.mixtral import modeling_mixtral
    if not on:
        modeling_mixtral.F = torch.nn.functional
        return
    scores = types.SimpleNamespace(softmax=lambda logits, dim, dtype: torch.sigmoid(logits.to(dtype)))
    modeling_mixtral.F = scores


def losses_of(model, tokens, targets, aux, z):
    """(logits, cross-entropy, the objective whose gradient Keel computes)."""
    import importlib
    import torch
    import torch.nn.functional as F
    out = model(torch.as_tensor(tokens, dtype=torch.long), output_router_logits=True)
    logits = out.logits
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.as_tensor(targets, dtype=torch.long).reshape(-1))
    total = ce
    if aux:
        module = importlib.import_module(type(model).__module__)
        total = total + aux * module.load_balancing_loss_func(out.router_logits, model.config.num_experts
                                                              if hasattr(model.config, "num_experts")
                                                              else model.config.num_local_experts,
                                                              model.config.num_experts_per_tok, None)
    if z:
        rows = torch.cat(out.router_logits, dim=0)
        total = total + z * (torch.logsumexp(rows, dim=-1) ** 2).mean()
    return logits, ce, total


def compare_first_step(label, tensors, model, V, aux, z):
    tokens, targets = tensors["tokens"], tensors["targets"]
    logits, ce, total = losses_of(model, tokens[0], targets[0], aux, z)
    compare_logits_and_loss(label, tensors, logits, ce, V, LOGITS_ATOL, LOGITS_RTOL, LOSS_RTOL, objective=total)
    total.backward()
    routers = (".gate.weight", "shared_expert_gate.weight")
    compared = compare_gradients(label, tensors, model, V, GRAD_REL_TO_MAX,
                                 shown=lambda name, relative: relative > GRAD_REL_TO_MAX or name.endswith(routers))
    print(f"{label}: {compared} gradients compared")


def compare_adamw_steps(label, tensors, metadata, model, aux, z):
    import numpy as np
    import torch
    optimizer_config = json.loads(metadata["optimizer"])
    no_decay = set(json.loads(metadata["no_decay"]))
    params = dict(model.named_parameters())
    assert no_decay == {n for n in params if n.endswith("norm.weight") or n.endswith(".bias")}, no_decay
    groups = [{"params": [p for n, p in params.items() if n not in no_decay], "weight_decay": optimizer_config["weight_decay"]},
              {"params": [p for n, p in params.items() if n in no_decay], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=optimizer_config["lr"], betas=tuple(optimizer_config["betas"]),
                                  eps=optimizer_config["eps"])
    tokens, targets = tensors["tokens"], tensors["targets"]
    torch_losses = []
    for step in range(STEPS):
        optimizer.zero_grad(set_to_none=True)
        _, ce, total = losses_of(model, tokens[step], targets[step], aux, z)
        total.backward()
        optimizer.step()
        torch_losses.append(float(ce))
    keel_losses = tensors["losses"]
    relative = np.abs(keel_losses - np.array(torch_losses)) / np.abs(np.array(torch_losses))
    print(f"{label}: {STEPS} AdamW steps, worst relative loss difference {relative.max():.1e} "
          f"(keel {keel_losses[-1]:.7f} transformers {torch_losses[-1]:.7f} at the last)")
    assert np.all(relative <= STEP_LOSS_RTOL), f"{label}: AdamW steps differ by up to {relative.max():.2e}"


def compare_model_metrics(label, tensors, metadata, model, section):
    """The step metrics Keel's model reports (metadata model_metrics, the probe's first step at the
    initial weights): aux_loss against transformers' load_balancing_loss_func, and each sparse
    layer's expert load (busiest expert's pairs over the mean) against the top-k of its router."""
    import importlib
    import torch
    metrics = json.loads(metadata["model_metrics"])[0]
    E, K = section["n_experts"], section["n_experts_per_token"]
    with torch.no_grad():
        out = model(torch.as_tensor(tensors["tokens"][0], dtype=torch.long), output_router_logits=True)
        module = importlib.import_module(type(model).__module__)
        want = float(module.load_balancing_loss_func(out.router_logits, E, K, None))
    print(f"{label}: aux_loss keel {metrics['aux_loss']:.7f} transformers {want:.7f}")
    assert abs(metrics["aux_loss"] - want) <= LOSS_RTOL * abs(want), f"{label}: aux_loss differs"
    sparse = [layer for layer in range(section["n_layer"]) if layer not in section.get("mlp_only_layers", [])]
    loads = []
    for layer, logits in zip(sparse, out.router_logits):
        chosen = torch.topk(logits, K, dim=-1).indices.reshape(-1)
        counts = torch.bincount(chosen, minlength=E).double()
        loads.append(float(counts.max() * E / counts.sum()))
        assert metrics[f"expert_load.layer{layer}"] == loads[-1], f"{label}: layer {layer}'s load {metrics}"
    assert metrics["expert_load.max_over_mean"] == max(loads), f"{label}: worst load {metrics}"
    print(f"{label}: expert load per sparse layer {loads} as Keel reports")


def check_probe(work, probe_bin, label, section, tied, aux, z):
    from test_gpt_vs_torch import read_safetensors
    out = os.path.join(work, f"probe-{label}.safetensors")
    run([probe_bin, "--config", write_config(work, label, keel_model(section, tied, aux, z)), "--out", out,
         "--steps", str(STEPS)])
    tensors, metadata = read_safetensors(out)
    V = section["vocab_size"]
    model = hf_model(section, tied, aux)
    load_keel_weights(model, tensors, V)
    compare_first_step(label, tensors, model, V, aux, z)
    if section.get("router_scores") != "sigmoid":  # load_balancing_loss_func softmaxes the logits
        compare_model_metrics(label, tensors, metadata, model, section)
    model = hf_model(section, tied, aux)
    load_keel_weights(model, tensors, V)
    compare_adamw_steps(label, tensors, metadata, model, aux, z)


def check_export_and_init_from(work, keel, probe_bin, label, section, tied, aux):
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM
    from test_gpt_vs_torch import read_safetensors
    V = section["vocab_size"]
    model_section = keel_model(section, tied, aux, 0.0)
    run_dir = os.path.join(work, f"run-{label}")
    config = write_config(work, f"train-{label}", model_section,
                          {"train": {"seed": 7, "steps": 3, "metrics_path": os.path.join(run_dir, "metrics.jsonl"),
                                     "tensorboard_dir": "none",
                                     "checkpoint": {"dir": os.path.join(run_dir, "checkpoints"), "every": 3}}})
    run([keel, "run", config])
    hf_dir = os.path.join(work, f"export-{label}")
    run([keel, "export", os.path.join(run_dir, "checkpoints"), "--out", os.path.join(hf_dir, "model.safetensors")])
    theirs = AutoModelForCausalLM.from_pretrained(hf_dir, attn_implementation="eager").float()
    expected = "Qwen2MoeForCausalLM" if section.get("attention_bias") else "MixtralForCausalLM"
    assert type(theirs).__name__ == expected, type(theirs).__name__
    assert theirs.config.tie_word_embeddings == tied and theirs.config.router_aux_loss_coef == aux
    out = os.path.join(work, f"probe-export-{label}.safetensors")
    run([probe_bin, "--config", write_config(work, label, model_section), "--out", out, "--steps", "1",
         "--init-from", os.path.join(hf_dir, "model.safetensors")])
    tensors, _ = read_safetensors(out)
    with torch.no_grad():
        logits, ce, _ = losses_of(theirs, tensors["tokens"][0], tensors["targets"][0], 0.0, 0.0)
    worst = float(np.max(np.abs(tensors["logits"][..., :V] - logits.numpy())))
    print(f"{label}: export -> {expected}.from_pretrained logits max |diff| {worst:.2e}")
    assert np.allclose(tensors["logits"][..., :V], logits.numpy(), atol=LOGITS_ATOL, rtol=LOGITS_RTOL)
    assert abs(float(tensors["loss0"][0]) - float(ce)) <= LOSS_RTOL * abs(float(ce))

    # transformers' own save_pretrained, read by init_from with a section naming only the plugin.
    torch.manual_seed(11)
    saved = os.path.join(work, f"hf-saved-{label}")
    hf_model(section, tied, aux).save_pretrained(saved, safe_serialization=True)
    theirs = AutoModelForCausalLM.from_pretrained(saved, attn_implementation="eager").float()
    bare = write_config(work, f"bare-{label}", {"plugin": "llama"})
    out = os.path.join(work, f"probe-hf-{label}.safetensors")
    run([probe_bin, "--config", bare, "--out", out, "--steps", "1", "--init-from", saved])
    tensors, metadata = read_safetensors(out)
    taken = json.loads(metadata["model_config"])
    for key in ("n_experts", "n_experts_per_token", "expert_ffn_hidden", "shared_expert_ffn_hidden", "norm_topk_prob",
                "mlp_only_layers", "router_aux_loss_coef"):
        want = section.get(key, {"expert_ffn_hidden": section["ffn_hidden"], "norm_topk_prob": True,
                                 "shared_expert_ffn_hidden": 0, "mlp_only_layers": []}.get(key))
        want = aux if key == "router_aux_loss_coef" else want
        assert taken.get(key, want) == want, f"{label}: model.{key} from config.json: {taken.get(key)} != {want}"
    with torch.no_grad():
        _, ce, _ = losses_of(theirs, tensors["tokens"][0], tensors["targets"][0], 0.0, 0.0)
    print(f"{label}: init_from save_pretrained: loss keel {float(tensors['loss0'][0]):.7f} transformers {float(ce):.7f}")
    assert abs(float(tensors["loss0"][0]) - float(ce)) <= LOSS_RTOL * abs(float(ce))

    # A router Keel does not compute is refused by name: Mixtral's jitter noise, a non-softmax scoring.
    with open(os.path.join(saved, "config.json")) as f:
        hf_config = json.load(f)
    for key, value, needle in (("router_jitter_noise", 0.1, "Keel's router adds no noise"),
                               ("scoring_func", "sigmoid", "\"scoring_func\" is \"sigmoid\"")):
        with open(os.path.join(saved, "config.json"), "w") as f:
            json.dump(dict(hf_config, **{key: value}), f)
        result = subprocess.run([probe_bin, "--config", bare, "--out", out, "--steps", "1", "--init-from", saved],
                                capture_output=True, text=True)
        assert result.returncode != 0 and needle in result.stderr, f"{label}: {key} {value}: {result.stderr[-800:]}"
    print(f"{label}: a config.json with router jitter noise or sigmoid scoring is refused")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--keel", required=True)
    parser.add_argument("--probe", required=True)
    parser.add_argument("--venv", required=True)
    parser.add_argument("--only", help="run the cases whose label contains this")
    args = parser.parse_args()
    ensure_oracle(args.venv, PIN)
    with tempfile.TemporaryDirectory(prefix="keel-moe-oracle-") as work:
        for label, section, tied, aux, z in CASES:
            if args.only and args.only not in label:
                continue
            check_probe(work, args.probe, label, section, tied, aux, z)
            if z == 0.0 and section.get("router_scores") != "sigmoid":  # transformers has no sigmoid router
                check_export_and_init_from(work, args.keel, args.probe, label, section, tied, aux)
    print("PASSED: llama with experts against transformers' Mixtral and Qwen2-MoE")


if __name__ == "__main__":
    main()
