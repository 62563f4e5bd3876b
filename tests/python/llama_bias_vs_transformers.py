"""Keel's llama model with biases against transformers, the independent oracle:
  - Qwen2ForCausalLM (q, k, v biases, none on o_proj), tied and untied, and a LlamaForCausalLM
    with mlp_bias (gate, up, down biases; on a transformers older than 4.41, whose LlamaConfig
    ignores mlp_bias, its MLP gets biased nn.Linear layers, which is what mlp_bias builds);
  - each is made by transformers at odd sizes (d_model 48, 2 key/value heads for 6 query heads,
    vocabulary 300), its biases drawn at random so they matter, saved by save_pretrained, and
    read by Keel's model.init_from with a model section naming nothing but the plugin: logits, the
    loss and every parameter's gradient, then 10 AdamW steps' losses against torch.optim.AdamW;
  - export: a Keel run from that folder, through `keel export`, read back by transformers
    (AutoModelForCausalLM for Qwen2, so config.json's model_type picks the class), gives the
    logits Keel computes from the exported file;
  - refusals: Qwen2's use_sliding_window true, and Llama's attention_bias (it biases o_proj too).

Usage: llama_bias_vs_transformers.py --keel KEEL --probe KEEL_PROBE --venv HF_VENV
Exits 77 (ctest's skip) only when the oracle's venv cannot be made for want of PyPI.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from hf_oracle import ensure_oracle  # noqa: E402
from llama_vs_transformers import (LOGITS_ATOL, LOGITS_RTOL, LOSS_RTOL, MODEL, RUN, STEPS,  # noqa: E402
                                   compare_adamw_steps, compare_logits_loss_and_gradients, loss_of, run)

BIAS_STD = 0.1  # transformers zeroes biases at init; random ones make every bias reach the logits


def hf_config_kwargs(tied):
    import torch
    return dict(vocab_size=MODEL["vocab_size"], hidden_size=MODEL["d_model"], intermediate_size=MODEL["ffn_hidden"],
                num_hidden_layers=MODEL["n_layer"], num_attention_heads=MODEL["n_head"],
                num_key_value_heads=MODEL["n_kv_head"], max_position_embeddings=MODEL["seq_len"],
                rms_norm_eps=MODEL["rms_eps"], rope_theta=MODEL["rope_theta"], tie_word_embeddings=tied,
                attn_implementation="eager", torch_dtype=torch.float32)


def give_mlp_biases(model):
    """LlamaConfig.mlp_bias on a transformers that predates it: the MLP's Linear layers with bias."""
    import torch
    for layer in model.model.layers:
        mlp = layer.mlp
        if mlp.gate_proj.bias is not None:
            return model  # this transformers reads mlp_bias itself
        for name in ("gate_proj", "up_proj", "down_proj"):
            old = getattr(mlp, name)
            new = torch.nn.Linear(old.in_features, old.out_features, bias=True)
            with torch.no_grad():
                new.weight.copy_(old.weight)
                new.bias.zero_()
            setattr(mlp, name, new)
    return model


def hf_model(kind, tied):
    if kind == "qwen2":
        from transformers import Qwen2Config, Qwen2ForCausalLM
        return Qwen2ForCausalLM(Qwen2Config(**hf_config_kwargs(tied))).float()
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(**hf_config_kwargs(tied), attention_bias=False, mlp_bias=True)
    return give_mlp_biases(LlamaForCausalLM(config).float())


def bias_names(kind):
    parts = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj") if kind == "qwen2" else \
        ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
    return {f"model.layers.{i}.{p}.bias" for i in range(MODEL["n_layer"]) for p in parts}


def saved_model(work, kind, tied, seed):
    """A random transformers model with random biases, and the folder save_pretrained made of it."""
    import torch
    torch.manual_seed(seed)
    model = hf_model(kind, tied)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(".bias"):
                param.normal_(0.0, BIAS_STD)
    assert {n for n, _ in model.named_parameters() if n.endswith(".bias")} == bias_names(kind)
    folder = os.path.join(work, f"saved-{kind}-{'tied' if tied else 'untied'}")
    model.save_pretrained(folder, safe_serialization=True)
    return model, folder


def write_run_config(work, name, extra=None):
    config = dict(RUN, model={"plugin": "llama"})
    config.update(extra or {})
    path = os.path.join(work, name + ".json")
    with open(path, "w") as f:
        json.dump(config, f)
    return path


def check_against_oracle(work, probe_bin, kind, tied):
    """Keel from the saved folder: logits, loss, every gradient, AdamW steps, as transformers."""
    import numpy as np
    from test_gpt_vs_torch import read_safetensors
    label = f"{kind} {'tied' if tied else 'untied'}"
    model, folder = saved_model(work, kind, tied, seed=5 if tied else 6)
    out = os.path.join(work, f"probe-{kind}-{tied}.safetensors")
    run([probe_bin, "--config", write_run_config(work, f"bare-{kind}-{tied}"), "--out", out, "--steps", str(STEPS),
         "--init-from", folder])
    tensors, metadata = read_safetensors(out)
    keel_model = json.loads(metadata["model_config"])
    assert keel_model.get("attention_bias") == (kind == "qwen2") and keel_model.get("mlp_bias") == (kind != "qwen2"), \
        f"{label}: the biases from config.json: {keel_model}"
    V = MODEL["vocab_size"]
    for name, param in model.named_parameters():  # the import is the saved model, bit for bit
        keel_param = tensors["param/" + name]
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            keel_param = keel_param[:V]
        assert np.array_equal(keel_param, param.detach().numpy()), f"{label}: {name} not read as saved"
    compare_logits_loss_and_gradients(label, tensors, model,
                                      expected_gradients=2 + 9 * MODEL["n_layer"] + (0 if tied else 1) + len(bias_names(kind)))
    # AdamW from the same saved weights, with Keel's decay groups: no decay on norms and biases.
    model, _ = saved_model(work, kind, tied, seed=5 if tied else 6)
    compare_adamw_steps(label, tensors, metadata, model, lambda n: n.endswith("norm.weight") or n.endswith(".bias"))
    return folder


def read_exported(kind, hf_dir):
    """transformers' reading of Keel's export: Qwen2 by model_type; mlp_bias also on an old transformers."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM
    config = json.load(open(os.path.join(hf_dir, "config.json")))
    if kind == "qwen2":
        assert config["model_type"] == "qwen2" and config["architectures"] == ["Qwen2ForCausalLM"], config
        assert config["use_sliding_window"] is False, config
        model = AutoModelForCausalLM.from_pretrained(hf_dir, attn_implementation="eager").float()
        assert type(model).__name__ == "Qwen2ForCausalLM", type(model)
        return model
    assert config["model_type"] == "llama" and config["mlp_bias"] is True and config["attention_bias"] is False, config
    from test_gpt_vs_torch import read_safetensors
    hf_config = LlamaConfig.from_pretrained(hf_dir)
    hf_config._attn_implementation = "eager"
    model = give_mlp_biases(LlamaForCausalLM(hf_config).float())
    tensors, _ = read_safetensors(os.path.join(hf_dir, "model.safetensors"))
    state = {k: torch.tensor(v) for k, v in tensors.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    allowed = {"lm_head.weight"} if hf_config.tie_word_embeddings else set()
    assert not unexpected and set(missing) <= allowed, f"export: missing {missing}, unexpected {unexpected}"
    if hf_config.tie_word_embeddings:
        model.tie_weights()
    return model


def check_export(work, keel, probe_bin, kind, tied, folder):
    import numpy as np
    import torch
    from test_gpt_vs_torch import read_safetensors
    label = f"{kind} {'tied' if tied else 'untied'}"
    run_dir = os.path.join(work, f"run-{kind}-{tied}")
    config = write_run_config(work, f"train-{kind}-{tied}",
                              {"train": {"seed": 7, "steps": 3, "metrics_path": os.path.join(run_dir, "metrics.jsonl"),
                                         "tensorboard_dir": "none",
                                         "checkpoint": {"dir": os.path.join(run_dir, "checkpoints"), "every": 3}}})
    with open(config) as f:
        section = json.load(f)
    section["model"]["init_from"] = folder
    with open(config, "w") as f:
        json.dump(section, f)
    run([keel, "run", config])
    hf_dir = os.path.join(work, f"export-{kind}-{tied}")
    run([keel, "export", os.path.join(run_dir, "checkpoints"), "--out", os.path.join(hf_dir, "model.safetensors")])
    model = read_exported(kind, hf_dir)
    assert model.config.tie_word_embeddings == tied
    out = os.path.join(work, f"probe-export-{kind}-{tied}.safetensors")
    run([probe_bin, "--config", write_run_config(work, f"bare-export-{kind}-{tied}"), "--out", out, "--steps", "1",
         "--init-from", hf_dir])
    tensors, _ = read_safetensors(out)
    trained = tensors["param/" + sorted(bias_names(kind))[0]]
    saved = read_safetensors(os.path.join(folder, "model.safetensors"))[0][sorted(bias_names(kind))[0]]
    assert not np.array_equal(trained, saved), f"{label}: 3 steps left the biases as saved"
    with torch.no_grad():
        logits, loss = loss_of(model, tensors["tokens"][0], tensors["targets"][0])
    V = MODEL["vocab_size"]
    worst = float(np.max(np.abs(tensors["logits"][..., :V] - logits.numpy())))
    print(f"{label}: export -> transformers logits max |diff| {worst:.2e}")
    assert np.allclose(tensors["logits"][..., :V], logits.numpy(), atol=LOGITS_ATOL, rtol=LOGITS_RTOL)
    assert abs(float(tensors["loss0"][0]) - float(loss)) <= LOSS_RTOL * abs(float(loss))


def check_refusals(work, probe_bin):
    """config.json features Keel's llama lacks are refused by name."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(3)
    cases = [
        (Qwen2ForCausalLM(Qwen2Config(**hf_config_kwargs(False), use_sliding_window=True)),
         "\"use_sliding_window\" is true"),
        (LlamaForCausalLM(LlamaConfig(**hf_config_kwargs(False), attention_bias=True)),
         "Llama's attention_bias biases o_proj too"),
    ]
    for i, (model, expected) in enumerate(cases):
        folder = os.path.join(work, f"refused-{i}")
        model.save_pretrained(folder, safe_serialization=True)
        result = subprocess.run([probe_bin, "--config", write_run_config(work, f"refused-{i}"), "--out",
                                 os.path.join(work, "refused.safetensors"), "--steps", "1", "--init-from", folder],
                                capture_output=True, text=True)
        assert result.returncode != 0 and expected in result.stderr, result.stderr
        print(f"refused: {expected}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--keel", required=True)
    parser.add_argument("--probe", required=True)
    parser.add_argument("--venv", required=True)
    args = parser.parse_args()
    ensure_oracle(args.venv)
    with tempfile.TemporaryDirectory(prefix="keel-llama-bias-oracle-") as work:
        for kind, tied in (("qwen2", False), ("qwen2", True), ("llama-mlp-bias", False)):
            folder = check_against_oracle(work, args.probe, kind, tied)
            check_export(work, args.keel, args.probe, kind, tied, folder)
        check_refusals(work, args.probe)
    print("PASSED: llama with biases (Qwen2, mlp_bias) against transformers")


if __name__ == "__main__":
    main()
