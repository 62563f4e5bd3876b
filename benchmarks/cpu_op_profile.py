#!/usr/bin/env python3
"""Where a CPU training step goes: GPT-2 124M at micro-batch 4 x 64 tokens (fp32 AdamW, 2
threads), one row per backend op, with its time per step and how near it runs to the machine's
limit: GFLOP/s against the sgemm peak the backend measures at start-up, GB/s against STREAM's
triad (build/bin/keel-optimizer-bandwidth) measured in the same run.

The cpu backend's op_profile times every slot and counts the work it was asked for (products'
FLOPs; bytes read plus written once). Two runs of 3 and 8 steps are differenced, so start-up,
the end-of-run evaluation and the checkpoint cancel and what remains is 5 steps. What the
backend does not run (the adamw plugin's update, the strategy's bookkeeping) is the remainder
of the step, with the optimizer phase from the metrics beside it.

Run by hand, after scripts/build.sh:  /usr/bin/python3 benchmarks/cpu_op_profile.py [--batch B --seq T]
(OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset, as on a user's machine). No pass/fail.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEEL = os.path.join(ROOT, "build", "bin", "keel")
BANDWIDTH = os.path.join(ROOT, "build", "bin", "keel-optimizer-bandwidth")
ADAMW = os.path.join(ROOT, "build", "lib", "keel", "plugins", "libkeel-adamw.so")
CONFIG = os.path.join(ROOT, "benchmarks", "gpt2_124m.json")
THREADS = 2
SHORT, LONG = 3, 13
ROW = re.compile(r"\[backend cpu\] info: (\w+)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s")


def profiled_run(env, steps, B, T):
    with tempfile.TemporaryDirectory() as work:
        metrics = os.path.join(work, "metrics.jsonl")
        cmd = [KEEL, "run", CONFIG, "--set", f"train.steps={steps}", "--set", "backend.op_profile=true",
               "--set", f"data.micro_batch={B}", "--set", f"data.global_batch={B}", "--set", f"data.seq_len={T}",
               "--set", f'train.metrics_path="{metrics}"', "--set", "train.log_every=1",
               "--set", f'train.checkpoint.dir="{os.path.join(work, "checkpoints")}"']
        p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=env)
        if p.returncode != 0:
            sys.exit(f"keel failed:\n{p.stdout}\n{p.stderr}")
        out = p.stdout + p.stderr
        ops = {m.group(1): (int(m.group(2)), float(m.group(3)), float(m.group(4)), float(m.group(5)))
               for m in ROW.finditer(out) if m.group(1) not in ("op", "total")}
        peak = float(re.search(r"peak ([0-9.e+]+) GFLOP/s", out).group(1))
        params = int(re.search(r"(\d+) parameters", out).group(1))
        records = [r for r in (json.loads(line) for line in open(metrics)) if "step_ms" in r]
        return ops, peak, params, records


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4, help="micro-batch (4)")
    parser.add_argument("--seq", type=int, default=64, help="sequence length (64)")
    args = parser.parse_args()
    B, T = args.batch, args.seq
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    env["OMP_NUM_THREADS"] = str(THREADS)
    short, _, _, _ = profiled_run(env, SHORT, B, T)
    ops, peak, params, records = profiled_run(env, LONG, B, T)
    p = subprocess.run([BANDWIDTH, "--plugin", ADAMW, "--n", str(1 << 25), "--repeats", "5"], capture_output=True,
                       text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"keel-optimizer-bandwidth failed:\n{p.stderr}")
    triad = json.loads(p.stdout.strip().splitlines()[-1])["triad_gbs"]

    steps = LONG - SHORT
    timed = records[SHORT:]  # the steps the difference holds
    step_ms = statistics.mean(r["step_ms"] for r in timed)
    phase = {k: statistics.mean(r["time_ms"][k] for r in timed) for k in ("forward", "backward", "optimizer")}
    rows, set_up = [], []
    for op, (calls, ms, gflop, gb) in ops.items():
        c0, ms0, gf0, gb0 = short.get(op, (0, 0.0, 0.0, 0.0))
        calls, ms, gflop, gb = (calls - c0) / steps, (ms - ms0) / steps, (gflop - gf0) / steps, (gb - gb0) / steps
        if calls <= 0:
            continue
        # Called at set-up too (allocating and filling the arenas, loading the weights), for
        # longer than three steps' calls take: its per-step share is lost in the set-up's noise,
        # so it is named but counted in the remainder. (The end-of-run evaluation's forward is
        # in both runs, about one step's worth, and cancels.)
        if c0 > calls * SHORT and ms0 - SHORT * ms > 3 * max(ms, 0.0):
            set_up.append(op)
        else:
            rows.append((op, calls, ms, gflop, gb))
    rows.sort(key=lambda r: -r[2])
    print(f"GPT-2 124M, {B} x {T} tokens, fp32 AdamW, {THREADS} threads: per step (runs of {LONG} and {SHORT} steps "
          f"differenced); sgemm peak {peak:.1f} GFLOP/s (keel's start-up measurement), STREAM triad "
          f"{triad:.1f} GB/s ({THREADS} threads)")
    print(f"{'op':26s} {'calls':>6s} {'ms':>8s} {'share':>6s} {'GFLOP/s':>8s} {'% peak':>7s} {'GB/s':>7s} "
          f"{'% triad':>8s}")
    total_ms = 0.0
    for op, calls, ms, gflop, gb in rows:
        total_ms += ms
        s = max(ms, 1e-9) / 1e3
        flops = f"{gflop / s:8.1f} {100 * gflop / s / peak:6.1f}%" if gflop > 0 else f"{'-':>8s} {'-':>7s}"
        bandwidth = f"{gb / s:7.1f} {100 * gb / s / triad:7.1f}%" if gb > 0 else f"{'-':>7s} {'-':>8s}"
        print(f"{op:26s} {calls:6.0f} {ms:8.2f} {100 * ms / step_ms:5.1f}% {flops} {bandwidth}")
    rest = step_ms - total_ms
    adamw_gb = 28.0 * params / 1e9
    print(f"{'the rest':26s} {'':6s} {rest:8.2f} {100 * rest / step_ms:5.1f}%   (the adamw plugin's update, the "
          f"strategy's bookkeeping, and the ops whose time is mostly set-up: {', '.join(sorted(set_up))})")
    print(f"{'step':26s} {'':6s} {step_ms:8.2f} 100.0%   mean of the last {len(timed)} steps of the {LONG}-step run")
    print(f"phases (metrics, mean): forward {phase['forward']:.1f} ms, backward {phase['backward']:.1f} ms, "
          f"optimizer {phase['optimizer']:.1f} ms (AdamW over {params} parameters moves {adamw_gb:.2f} GB: "
          f"{adamw_gb / (phase['optimizer'] / 1e3):.1f} GB/s, {100 * adamw_gb / (phase['optimizer'] / 1e3) / triad:.0f}% "
          f"of the triad)")


if __name__ == "__main__":
    main()
