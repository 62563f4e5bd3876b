#!/usr/bin/env python3
"""The communication-efficient strategies and the memory-efficient optimizers side by side, in
one run: one model, one data stream, one token budget, 4 ranks under mpirun, ddp + AdamW as the
baseline, each strategy with AdamW inside (A-EDiT's intervals in seconds), and ddp with adamw8bit and with adafactor (AdamW's
peak lr, no parameter scaling), on the same seed and data. For each: the final validation loss, the tokens it took to
reach the baseline's final validation loss (at the evaluations, every --eval-every steps), the
bytes the data-parallel group moved (the metrics' comm_bytes_per_step, logged every step and
summed; evaluation traffic is not counted, so the sync intervals are chosen not to land on an
evaluation), the median step time, and the optimizer-state bytes per rank (strategy_bytes). Then
`keel plot` draws validation loss against tokens and against bytes for every run on one chart.
Run by hand after scripts/build.sh (about 10 minutes on 2 cores):
    python3 benchmarks/comm_efficient.py [--steps 300] [--out runs/comm-efficient]
The model is the quick start's GPT (4 layers, d_model 128, 0.8M parameters, byte-level, T 128),
16 sequences a step (4 per rank); 4 ranks on a 2-core machine share the cores, so step times
compare the algorithms' work, not a network. No pass/fail: it prints the table."""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DDP = {"plugin": "ddp"}
RUNS = [  # (name, parallel.strategy, optimizer or None for the quick start's AdamW)
    ("ddp", DDP, None),
    ("topk-0.05", {"plugin": "topk", "ratio": 0.05}, None),
    ("powersgd-r4", {"plugin": "powersgd", "rank": 4}, None),
    ("diloco-h16", {"plugin": "diloco", "sync_every": 16}, None),
    ("edit-h16", {"plugin": "edit", "sync_every": 16, "clip_norm": 1.0}, None),
    # A-EDiT: intervals of 1.2 s of each replica's training time, about edit-h16's 16 steps here
    ("a-edit-1.2s", {"plugin": "edit", "sync_seconds": 1.2, "clip_norm": 1.0}, None),
    ("ddp-adamw8bit", DDP, {"plugin": "adamw8bit", "lr": 2e-3, "betas": [0.9, 0.95], "weight_decay": 0.1}),
    ("ddp-adafactor", DDP, {"plugin": "adafactor", "lr": 2e-3, "scale_parameter": False}),
]


def run(args, name, strategy, optimizer):
    folder = os.path.join(args.out, name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    sets = [f"parallel.strategy={json.dumps(strategy)}", f"train.steps={args.steps}", "train.log_every=1",
            f"train.eval_every={args.eval_every}", "train.sample_tokens=0", "data.micro_batch=4",
            "data.global_batch=16", "data.val_batches=8", f"train.metrics_path=\"{folder}/metrics.jsonl\"",
            f"train.checkpoint.dir=\"{folder}/checkpoints\"", "train.tensorboard_dir=\"none\""]
    if optimizer:
        sets.append(f"optimizer={json.dumps(optimizer)}")
    cmd = [args.mpirun, "--oversubscribe", "-np", "4", args.keel, "run", os.path.join(ROOT, "examples/quickstart.json")]
    cmd += [a for s in sets for a in ("--set", s)]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"{name} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    rows = [json.loads(l) for l in open(f"{folder}/metrics.jsonl") if l.strip()]
    print(f"  {name}: done", flush=True)
    return folder, rows


def step_ms(row):
    """A line's time per step of the run; an A-EDiT line is one interval of replica_steps (4 ranks)."""
    return row["step_ms"] / (sum(row["replica_steps"]) / 4) if "replica_steps" in row else row["step_ms"]


def summary(rows, target):
    vals = [(r["tokens"], r["val_loss"]) for r in rows if "val_loss" in r]
    reach = next((tokens for tokens, v in vals if v <= target), None) if target is not None else None
    return {"final_val": vals[-1][1], "reach": reach, "tokens": rows[-1]["tokens"],
            "bytes": sum(sum(r.get("comm_bytes_per_step", {}).values()) for r in rows),
            "step_ms": statistics.median(step_ms(r) for r in rows[1:]),
            "state": rows[-1]["strategy_bytes"]["optimizer_state"]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--keel", default=os.path.join(ROOT, "build", "bin", "keel"))
    parser.add_argument("--mpirun", default=shutil.which("mpirun"))
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--out", default=os.path.join(ROOT, "runs", "comm-efficient"))
    args = parser.parse_args()
    if not args.mpirun:
        sys.exit("mpirun is not installed (apt-get install openmpi-bin)")
    print(f"{len(RUNS)} runs of {args.steps} steps x 16 sequences x 128 tokens on 4 ranks:", flush=True)
    results = {name: run(args, name, strategy, optimizer) for name, strategy, optimizer in RUNS}
    base = summary(results["ddp"][1], None)
    print(f"\n| run | final val loss | tokens to ddp's {base['final_val']:.4f} | bytes moved | vs ddp | "
          f"step ms (median) | optimizer state B/rank |")
    print("|---|---|---|---|---|---|---|")
    for name, (folder, rows) in results.items():
        s = summary(rows, base["final_val"])
        reach = f"{s['reach']:,}" if s["reach"] is not None else f"not within {s['tokens']:,}"
        print(f"| {name} | {s['final_val']:.4f} | {reach} | {s['bytes'] / 1e6:,.1f} MB | {s['bytes'] / base['bytes']:.3f} | "
              f"{s['step_ms']:.1f} | {s['state']:,} |")
    metrics = [os.path.join(folder, "metrics.jsonl") for folder, _ in results.values()]
    for axis in ("tokens", "comm_bytes"):
        out = os.path.join(args.out, f"val_loss_vs_{axis}.svg")
        cmd = [args.keel, "plot", *metrics, "--x", axis, "--y", "val_loss", "--out", out,
               "--title", f"validation loss against {axis.replace('_', ' ')}, 4 ranks"]
        subprocess.run(cmd, check=True, capture_output=True)
        print(f"\n{' '.join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c for c in cmd)}")


if __name__ == "__main__":
    main()
