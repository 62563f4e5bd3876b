#!/usr/bin/env python3
"""Mixture-of-experts llama against the dense llama of the same ACTIVE parameters, on one rank, in one run.

Dense: examples/moe.json with n_experts 0 (its llama: 4 layers, d_model 128, ffn_hidden 256, vocab 256).
MoE: the same with 8 experts, top-2, ffn_hidden 128 (Mixtral's layout: experts as wide as ffn_hidden), so a token runs 2 x 128 = 256 hidden units per MLP,
as the dense model does (the router's 128 x 8 weights per layer are the only extra active parameters).
The MoE runs twice: router_aux_loss_coef 0.01 (balancing loss on) and 0 (off). All three train on the embedded
corpus (data.source "text"), no download, 16 x 128 tokens a step, 2 threads.
Measured per run: tokens/s (median step_ms after the first step), the loss at a few token counts, and the expert
load (metrics.jsonl "model": expert_load.max_over_mean, the busiest expert's tokens over the mean per expert of
the worst sparse layer; 1 is perfect balance, 8 every pair on one expert) and aux_loss over training.
Not measured, because it does not exist yet: loss-free balancing (a per-expert bias), and expert parallelism:
RANKS and the all-to-all columns (metrics comm_bytes_per_step.all_to_all against the formula) are where those
rows go when ep lands; today only rank 1 runs and there is no all-to-all.

Run by hand after scripts/build.sh:  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE \\
    /usr/bin/python3 benchmarks/moe.py [--steps 200]
Prints a table; no pass/fail (these machines are noisy)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEEL = os.path.join(ROOT, "build", "bin", "keel")
CONFIG = os.path.join(ROOT, "examples", "moe.json")
TOKENS_PER_STEP = 16 * 128
RANKS = (1,)  # (1, 2, 4) once expert parallelism exists
RUNS = {  # name: the model keys set over examples/moe.json
    "dense": [],  # examples/moe.json's model without its expert keys
    "moe, aux on": ["model.n_experts=8", "model.n_experts_per_token=2", "model.ffn_hidden=128",
                    "model.router_aux_loss_coef=0.01"],
    "moe, aux off": ["model.n_experts=8", "model.n_experts_per_token=2", "model.ffn_hidden=128",
                     "model.router_aux_loss_coef=0"],
}


def run(name, sets, steps, work):
    tag = name.replace(", ", "_").replace(" ", "_")
    metrics = os.path.join(work, f"{tag}.jsonl")
    sets = sets + [f"train.steps={steps}", f"train.metrics_path=\"{metrics}\"", "train.log_every=1",
                   f"train.checkpoint.dir=\"{work}/{tag}\"", "train.sample_tokens=0", "train.eval_every=0",
                   "train.tensorboard_dir=\"none\""]
    config = json.load(open(CONFIG))
    if name == "dense":
        config["model"] = {k: v for k, v in config["model"].items() if "expert" not in k and "router" not in k}
    path = os.path.join(work, f"{tag}.json")
    json.dump(config, open(path, "w"))
    cmd = [KEEL, "run", path] + [a for s in sets for a in ("--set", s)]
    env = dict(os.environ, OMP_NUM_THREADS="2")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"moe benchmark run '{name}' failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return [json.loads(line) for line in open(metrics) if line.strip() and '"step_ms"' in line]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    checkpoints = sorted({max(1, args.steps // 4), args.steps // 2, args.steps})
    print(f"llama 4 x d128 on the embedded corpus, {TOKENS_PER_STEP} tokens a step, {args.steps} steps, fp32 AdamW, "
          f"2 threads, ranks {RANKS}; tok/s from the median step after the first")
    results = {}
    with tempfile.TemporaryDirectory() as work:
        for name, sets in RUNS.items():
            results[name] = run(name, sets, args.steps, work)
    tok_s = {n: TOKENS_PER_STEP * 1e3 / statistics.median(r["step_ms"] for r in rs[1:]) for n, rs in results.items()}
    loss_heads = "".join(f"{'loss@' + str(s * TOKENS_PER_STEP // 1000) + 'k':>11}" for s in checkpoints)
    load_heads = "".join(f"{'load@' + str(s):>9}" for s in checkpoints)
    print(f"{'run':>13} {'tok/s':>8} {'vs dense':>9}{loss_heads}{load_heads} {'aux_loss@end':>13} {'a2a B/step':>11}")
    for name, rs in results.items():
        by_step = {r["step"]: r for r in rs}
        losses = "".join(f"{by_step[s]['loss']:11.4f}" for s in checkpoints)
        model = [by_step[s].get("model", {}) for s in checkpoints]
        loads = "".join(f"{m['expert_load.max_over_mean']:9.3f}" if m else f"{'-':>9}" for m in model)
        aux = f"{model[-1]['aux_loss']:13.4f}" if model[-1] else f"{'-':>13}"
        print(f"{name:>13} {tok_s[name]:8.0f} {tok_s[name] / tok_s['dense']:8.3f}x{losses}{loads}{aux} {'n/a':>11}")
    print("load = expert_load.max_over_mean (busiest expert's tokens over the mean, worst sparse layer; 1 = even, "
          "8 = one expert).\nNot measured: loss-free balancing (not built yet); expert parallelism (ep, ranks 2 and 4, "
          "all-to-all bytes against the formula: no ep yet, so a2a is n/a).")


if __name__ == "__main__":
    main()
