#!/usr/bin/env python3
"""GPT-2 124M training step on the CPU: Keel against PyTorch, in one run.

Keel: `keel run benchmarks/gpt2_124m.json` (micro-batch 4, sequence 64, fp32 AdamW,
2 threads), median step time over 10 steps after one warm-up step; MFU against the OpenBLAS
sgemm peak the cpu backend measures at start-up in that same run. Both OpenBLAS settings:
the machine's preset OPENBLAS_CORETYPE kept ("env") and Keel's default ("auto").
PyTorch (Debian's python3-torch): the same model (tests/python/gpt_reference.py), batch,
optimizer and thread count, timed the same way, under the same two environments.

Run by hand, after scripts/build.sh:  /usr/bin/python3 benchmarks/gpt2_step_time.py
Prints a table; no pass/fail: these machines are noisy.
"""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEEL = os.path.join(ROOT, "build", "bin", "keel")
CONFIG = os.path.join(ROOT, "benchmarks", "gpt2_124m.json")
STEPS, WARMUP, THREADS, B, T = 11, 1, 2, 4, 64


def keel_run(coretype_policy, env):
    with tempfile.TemporaryDirectory() as work:
        metrics = os.path.join(work, "metrics.jsonl")
        cmd = [KEEL, "run", CONFIG, "--set", f'backend.openblas_coretype="{coretype_policy}"',
               "--set", f'train.metrics_path="{metrics}"', "--set", f"train.steps={STEPS}"]
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if p.returncode != 0:
            sys.exit(f"keel failed:\n{p.stdout}\n{p.stderr}")
        peak = float(re.search(r"peak ([0-9.e+]+) GFLOP/s", p.stdout).group(1))
        records = [json.loads(line) for line in open(metrics)]
        step_ms = statistics.median(r["step_ms"] for r in records[WARMUP:])
        mfu = statistics.median(r["mfu"] for r in records[WARMUP:])
        return step_ms / 1e3, peak, mfu


TORCH_CHILD = r"""
import json, math, os, statistics, sys, time
import numpy as np, torch
sys.path.insert(0, os.path.join(sys.argv[1], "tests", "python"))
import gpt_reference as ref
torch.set_num_threads(int(sys.argv[2]))
B, T, steps, warmup = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
config = {"n_layer": 12, "n_head": 12, "d_model": 768, "vocab_size": 50257, "seq_len": 1024}
C, Vp, rng = 768, ref.padded_vocab(50257), np.random.default_rng(0)
weights = {}
for name in ref.param_names(12):
    if name == "wte": shape = (Vp, C)
    elif name == "wpe": shape = (1024, C)
    elif name.endswith("qkv.weight"): shape = (3 * C, C)
    elif name.endswith("qkv.bias"): shape = (3 * C,)
    elif name.endswith("attn.proj.weight"): shape = (C, C)
    elif name.endswith("fc.weight"): shape = (4 * C, C)
    elif name.endswith("fc.bias"): shape = (4 * C,)
    elif name.endswith("mlp.proj.weight"): shape = (C, 4 * C)
    else: shape = (C,)
    weights[name] = (rng.standard_normal(shape) * 0.02).astype(np.float32)
params = ref.make_params(weights)
opt = torch.optim.AdamW(params.values(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)
times = []
for s in range(steps):
    tokens = torch.as_tensor(rng.integers(0, 256, (B, T)), dtype=torch.long)
    targets = torch.as_tensor(rng.integers(0, 256, (B, T)), dtype=torch.long)
    start = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    _, loss = ref.forward(params, tokens, config, targets)
    loss.backward()
    opt.step()
    times.append(time.perf_counter() - start)
print(json.dumps({"step_s": statistics.median(times[warmup:])}))
"""


def torch_run(env):
    p = subprocess.run(["/usr/bin/python3", "-c", TORCH_CHILD, ROOT, str(THREADS), str(B), str(T), str(STEPS),
                        str(WARMUP)], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"torch failed:\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])["step_s"]


def main():
    # The machines this was written for preset OPENBLAS_CORETYPE=Haswell; set it explicitly so
    # the comparison means the same wherever it runs.
    preset = os.environ.get("OPENBLAS_CORETYPE") or "Haswell"
    env_preset = dict(os.environ, OMP_NUM_THREADS=str(THREADS), OPENBLAS_CORETYPE=preset)
    env_clean = {k: v for k, v in env_preset.items() if k != "OPENBLAS_CORETYPE"}
    print(f"GPT-2 124M, micro-batch {B} x {T} tokens, fp32 AdamW, {THREADS} threads; "
          f"median of {STEPS - WARMUP} steps after {WARMUP} warm-up; OPENBLAS_CORETYPE preset: {preset}")
    rows = []
    for label, policy, env in (("keel, openblas_coretype=env (preset kept)", "env", env_preset),
                               ("keel, openblas_coretype=auto (default)", "auto", env_preset)):
        step_s, peak, mfu = keel_run(policy, env)
        rows.append((label, step_s, peak, mfu))
    torch_preset = torch_run(env_preset)
    torch_clean = torch_run(env_clean)
    print(f"{'':44s} {'step s':>8s} {'sgemm peak GFLOP/s':>19s} {'MFU':>6s} {'torch s':>8s} {'keel/torch speed':>17s}")
    for (label, step_s, peak, mfu), torch_s in zip(rows, (torch_preset, torch_clean)):
        print(f"{label:44s} {step_s:8.3f} {peak:19.1f} {100 * mfu:5.1f}% {torch_s:8.3f} {torch_s / step_s:16.2f}x")
    print("torch columns: the preset environment for the first row, OPENBLAS_CORETYPE unset for the second.")


if __name__ == "__main__":
    main()
