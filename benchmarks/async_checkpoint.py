#!/usr/bin/env python3
"""The training stall per checkpoint, synchronous against asynchronous (train.checkpoint.async),
on GPT-2 124M (benchmarks/gpt2_124m.json) with ZeRO-1 on 2 ranks, in one run: each rank holds
the 124M parameters and half the AdamW state; a save writes about 1.5 GB in all.

The stall is the time the training thread spends in the save (the step's `checkpoint` phase in
the metrics: the whole save when synchronous, the snapshot to host memory when asynchronous);
the asynchronous run also reports how long each background write took, and both runs' total
wall time shows what the background thread costs the steps it overlaps (2 cores here: it
competes with training for them). Saves every 2 steps, 8 steps, 1 thread per rank.
Run by hand after scripts/build.sh:  /usr/bin/python3 benchmarks/async_checkpoint.py [--dir DIR]
(DIR: where checkpoints go, default a temporary folder on /tmp). Prints a table; no pass/fail."""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEEL = os.path.join(ROOT, "build", "bin", "keel")
CONFIG = os.path.join(ROOT, "benchmarks", "gpt2_124m.json")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
for preset in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
    ENV.pop(preset, None)  # as on a user's machine


def run(work, mode):
    metrics = os.path.join(work, f"{mode}.jsonl")
    sets = ["parallel.strategy={\"plugin\": \"zero\", \"stage\": 1}", "backend.threads=1", "data.micro_batch=2",
            "train.steps=8", "train.checkpoint.every=2", "train.checkpoint.keep=2", "train.sample_tokens=0",
            "train.eval_every=0", "train.tensorboard_dir=\"none\"", f"train.metrics_path=\"{metrics}\"",
            f"train.checkpoint.dir=\"{work}/{mode}\"", f"train.checkpoint.async={'true' if mode == 'async' else 'false'}"]
    cmd = ["mpirun", "--oversubscribe", "-np", "2", KEEL, "run", CONFIG] + [a for s in sets for a in ("--set", s)]
    start = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    wall = time.time() - start
    if p.returncode != 0:
        sys.exit(f"{mode} run failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    records = [json.loads(l) for l in open(metrics) if l.strip()]
    stalls = [r["time_ms"]["checkpoint"] for r in records if "checkpoint" in r.get("time_ms", {})]
    steps = [r["step_ms"] for r in records]
    background = [int(m) for m in re.findall(r"written in the background in (\d+) ms", p.stdout)]
    shutil.rmtree(f"{work}/{mode}", ignore_errors=True)
    return stalls, steps, background, wall


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as work:
        sync = run(work, "sync")
        asynchronous = run(work, "async")
    print("GPT-2 124M, ZeRO-1 on 2 ranks, a save every 2 steps (steps 2, 4, 6, 8)")
    print(f"{'':>6} {'stall per save (ms)':>28} {'median':>8} {'background write (ms)':>24} {'run wall (s)':>13}")
    for name, (stalls, _, background, wall) in (("sync", sync), ("async", asynchronous)):
        print(f"{name:>6} {', '.join(f'{s:.0f}' for s in stalls):>28} {statistics.median(stalls):8.0f} "
              f"{', '.join(map(str, background)) or '-':>24} {wall:13.1f}")
    ratio = statistics.median(sync[0]) / max(statistics.median(asynchronous[0]), 1e-9)
    print(f"the asynchronous save stalls training {ratio:.1f}× less (median per save)")


if __name__ == "__main__":
    main()
