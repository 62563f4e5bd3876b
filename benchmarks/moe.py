#!/usr/bin/env python3
"""Mixture-of-experts llama against the dense llama of the same ACTIVE parameters, at 1, 2 and 4 ranks, in one run.

Dense: examples/moe.json with n_experts 0 (its llama: 4 layers, d_model 128, ffn_hidden 256, vocab 256).
MoE: the same with 8 experts, top-2, ffn_hidden 128 (Mixtral's layout: experts as wide as ffn_hidden), so a token
runs 2 x 128 = 256 hidden units per MLP, as the dense model does (the router's 128 x 8 weights per layer are the
only extra active parameters). The MoE runs with router_aux_loss_coef 0.01 (balancing loss on) and 0 (off), and
with loss-free balancing (router_bias_update_speed 0.001, no balancing loss) where the model has that key.
Each trains on the embedded corpus (data.source "text"), no download, 16 x 128 tokens a step. At 2 and 4 ranks
(mpirun, one thread each) the dense model runs ddp and the MoE expert parallelism with ep = ranks.
Measured per run: tokens/s (median step_ms after the first step), the loss at a few token counts, the expert
load (metrics.jsonl "model": expert_load.max_over_mean, the busiest expert's tokens over the mean per expert of
the worst sparse layer; 1 is perfect balance, 8 every pair on one expert) and aux_loss over training, and at
ep > 1 the all-to-all bytes rank 0 sends per step (ep_comm_bytes_per_step.all_to_all) against the formula for
evenly spread tokens: 4 exchanges (rows out and back, forward and backward) of the (ep-1)/ep of each
micro-batch's N*K rows that leave the rank, C fp32 values each, per sparse layer and micro-batch, plus the
per-expert counts (an int32 per other rank's expert, once per layer and micro-batch). A ratio above 1 is
imbalance: rank 0 sends more than its even share.

Run by hand after scripts/build.sh:  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE \\
    /usr/bin/python3 benchmarks/moe.py [--steps 200] [--ranks 1 2 4]
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
EXPERTS = ["model.n_experts=8", "model.n_experts_per_token=2", "model.ffn_hidden=128"]
RUNS = {  # name: the model keys set over examples/moe.json
    "dense": [],  # examples/moe.json's model without its expert keys
    "moe, aux on": EXPERTS + ["model.router_aux_loss_coef=0.01"],
    "moe, aux off": EXPERTS + ["model.router_aux_loss_coef=0"],
    "moe, loss-free": EXPERTS + ["model.router_aux_loss_coef=0", "model.router_bias_update_speed=0.001"],
}
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def run(name, sets, steps, ranks, work):
    """The run's metrics records, or None when this Keel refuses a key the run sets (a feature not built)."""
    tag = f"{name.replace(', ', '_').replace(' ', '_')}_x{ranks}"
    metrics = os.path.join(work, f"{tag}.jsonl")
    sets = sets + [f"train.steps={steps}", f"train.metrics_path=\"{metrics}\"", "train.log_every=1",
                   f"train.checkpoint.dir=\"{work}/{tag}\"", "train.sample_tokens=0", "train.eval_every=0",
                   "train.tensorboard_dir=\"none\""]
    if ranks > 1:  # the same global batch, split over the ranks
        sets.append(f"data.micro_batch={json.load(open(CONFIG))['data']['micro_batch'] // ranks}")
    if ranks > 1 and name != "dense":
        sets.append(f"parallel.ep={ranks}")
    config = json.load(open(CONFIG))
    if name == "dense":
        config["model"] = {k: v for k, v in config["model"].items() if "expert" not in k and "router" not in k}
    path = os.path.join(work, f"{tag}.json")
    json.dump(config, open(path, "w"))
    cmd = [KEEL, "run", path] + [a for s in sets for a in ("--set", s)]
    if ranks > 1:
        cmd = ["mpirun", "--oversubscribe", "-np", str(ranks)] + cmd
    env = dict(ENV, OMP_NUM_THREADS="2" if ranks == 1 else "1")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        if "unknown key" in done.stderr:
            return None
        sys.exit(f"moe benchmark run '{name}' at {ranks} ranks failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return [json.loads(line) for line in open(metrics) if line.strip() and '"step_ms"' in line]


def even_all_to_all_bytes(config, ranks):
    """Bytes rank 0 sends per step to the other ranks of its ep block when its tokens spread evenly."""
    model, data = config["model"], config["data"]
    C, E, K, L = model["d_model"], 8, 2, model["n_layer"]
    micro = data["micro_batch"] // ranks  # run() splits the global batch so
    steps_per_rank = data["global_batch"] // (micro * ranks)
    rows = micro * data["seq_len"] * K
    per_exchange = rows * (ranks - 1) / ranks * C * 4
    counts = 4 * (ranks - 1) * (E // ranks)  # int32 rows per expert of each other rank's, once per layer
    return L * steps_per_rank * (4 * per_exchange + counts)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    checkpoints = sorted({max(1, args.steps // 4), args.steps // 2, args.steps})
    config = json.load(open(CONFIG))
    print(f"llama 4 x d128 on the embedded corpus, {TOKENS_PER_STEP} tokens a step, {args.steps} steps, fp32 AdamW, "
          f"2 threads on one rank, one a rank under mpirun; tok/s from the median step after the first")
    loss_heads = "".join(f"{'loss@' + str(s * TOKENS_PER_STEP // 1000) + 'k':>11}" for s in checkpoints)
    load_heads = "".join(f"{'load@' + str(s):>9}" for s in checkpoints)
    print(f"{'run':>15} {'ranks':>5} {'tok/s':>8} {'vs dense':>9}{loss_heads}{load_heads} {'aux_loss@end':>13} "
          f"{'a2a B/step':>11} {'vs even':>8}")
    skipped = []
    with tempfile.TemporaryDirectory() as work:
        for ranks in args.ranks:
            dense_tok_s = None
            for name, sets in RUNS.items():
                rs = run(name, sets, args.steps, ranks, work)
                if rs is None:
                    skipped.append(name)
                    continue
                tok_s = TOKENS_PER_STEP * 1e3 / statistics.median(r["step_ms"] for r in rs[1:])
                dense_tok_s = dense_tok_s or tok_s
                by_step = {r["step"]: r for r in rs}
                losses = "".join(f"{by_step[s]['loss']:11.4f}" for s in checkpoints)
                model = [by_step[s].get("model", {}) for s in checkpoints]
                loads = "".join(f"{m['expert_load.max_over_mean']:9.3f}" if m else f"{'-':>9}" for m in model)
                aux = f"{model[-1]['aux_loss']:13.4f}" if model[-1] else f"{'-':>13}"
                sent = [r.get("ep_comm_bytes_per_step", {}).get("all_to_all") for r in rs[1:]]
                if ranks > 1 and name != "dense" and all(sent):
                    mean_sent = statistics.mean(sent)
                    a2a = f"{mean_sent:11.0f} {mean_sent / even_all_to_all_bytes(config, ranks):7.3f}x"
                else:
                    a2a = f"{'-':>11} {'-':>8}"
                print(f"{name:>15} {ranks:5d} {tok_s:8.0f} {tok_s / dense_tok_s:8.3f}x{losses}{loads}{aux} {a2a}")
    print("load = expert_load.max_over_mean (busiest expert's tokens over the mean, worst sparse layer; 1 = even, "
          "8 = one expert); a2a = all-to-all bytes rank 0 sent per step, vs even = against the formula for evenly "
          "spread tokens (module docstring).")
    if skipped:
        print(f"Not run (this Keel refuses a key they set): {sorted(set(skipped))}")


if __name__ == "__main__":
    main()
