#!/usr/bin/env python3
"""GPT-2 124M training step on the CPU: Keel against PyTorch, in one run, in the environment a
user's machine has.

Keel: `keel run benchmarks/gpt2_124m.json` (micro-batch 4, sequence 64, fp32 AdamW,
2 threads), median step time over 10 steps after one warm-up step; MFU against the OpenBLAS
sgemm peak the cpu backend measures at start-up in that same run (2048² products, best of 5).
PyTorch (Debian's python3-torch): the same model (tests/python/gpt_reference.py), batch,
optimizer and thread count, timed the same way. NumPy's sgemm on the same product size gives
an independent peak to hold Keel's against.

Every measurement runs with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset, as on a user's
machine (these build machines preset both). When this shell presets them, a second table shows
what the presets cost each side: Keel with its default policy ("auto", which unsets them) and
with "env" (kept), PyTorch with them kept.

Run by hand, after scripts/build.sh:  /usr/bin/python3 benchmarks/gpt2_step_time.py
Prints tables; no pass/fail: these machines are noisy.
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


PRESET_VARIABLES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def keel_run(coretype_policy, env):
    with tempfile.TemporaryDirectory() as work:
        metrics = os.path.join(work, "metrics.jsonl")
        cmd = [KEEL, "run", CONFIG, "--set", f'backend.openblas_coretype="{coretype_policy}"',
               "--set", f'train.metrics_path="{metrics}"', "--set", f"train.steps={STEPS}"]
        p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=env)
        if p.returncode != 0:
            sys.exit(f"keel failed:\n{p.stdout}\n{p.stderr}")
        peak = float(re.search(r"peak ([0-9.e+]+) GFLOP/s", p.stdout).group(1))
        kernels = re.search(r"OpenBLAS kernels ([A-Za-z0-9_]+)", p.stdout + p.stderr)
        records = [json.loads(line) for line in open(metrics)]
        step_ms = statistics.median(r["step_ms"] for r in records[WARMUP:])
        mfu = statistics.median(r["mfu"] for r in records[WARMUP:])
        return step_ms / 1e3, peak, mfu, kernels.group(1) if kernels else "?"


NUMPY_PEAK = r"""
import time, numpy as np
n = 2048
a, b = np.full((n, n), 0.5, np.float32), np.full((n, n), 0.25, np.float32)
for _ in range(2): a @ b.T
best = min((lambda t: (a @ b.T, time.perf_counter() - t)[1])(time.perf_counter()) for _ in range(5))
print(2 * n ** 3 / best / 1e9)
"""


def numpy_peak_gflops(env):
    p = subprocess.run(["/usr/bin/python3", "-c", NUMPY_PEAK], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"numpy failed:\n{p.stderr}")
    return float(p.stdout.strip().splitlines()[-1])


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
    presets = {k: os.environ[k] for k in PRESET_VARIABLES if os.environ.get(k)}
    env_user = {k: v for k, v in os.environ.items() if k not in PRESET_VARIABLES}
    env_user["OMP_NUM_THREADS"] = str(THREADS)
    print(f"GPT-2 124M, micro-batch {B} x {T} tokens, fp32 AdamW, {THREADS} threads; median of "
          f"{STEPS - WARMUP} steps after {WARMUP} warm-up; OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset")
    step_s, peak, mfu, kernels = keel_run("auto", env_user)
    torch_s = torch_run(env_user)
    numpy_peak = numpy_peak_gflops(env_user)
    print(f"{'':24s} {'step s':>8s} {'kernels':>10s} {'sgemm peak GFLOP/s':>19s} {'MFU':>6s} {'speed vs torch':>15s}")
    print(f"{'keel (default policy)':24s} {step_s:8.3f} {kernels:>10s} {peak:19.1f} {100 * mfu:5.1f}% "
          f"{torch_s / step_s:14.2f}x")
    print(f"{'pytorch':24s} {torch_s:8.3f} {'':>10s} {'':>19s} {100 * mfu * step_s / torch_s:5.1f}% {1.0:14.2f}x")
    print(f"numpy sgemm peak (2048², best of 5, same environment): {numpy_peak:.1f} GFLOP/s; "
          f"keel's measured peak / numpy's: {peak / numpy_peak:.2f}")
    if not presets:
        print("(this shell presets neither variable: no second table)")
        return
    env_preset = dict(env_user, **presets)
    described = " ".join(f"{k}={v}" for k, v in presets.items())
    print(f"\nWith this machine's presets {described}:")
    for label, policy in (("keel, auto (unsets them)", "auto"), ("keel, env (keeps them)", "env")):
        s_, p_, m_, k_ = keel_run(policy, env_preset)
        print(f"{label:24s} {s_:8.3f} {k_:>10s} {p_:19.1f} {100 * m_:5.1f}%  ({s_ / step_s:.2f}x the unset step)")
    t_ = torch_run(env_preset)
    print(f"{'pytorch, presets kept':24s} {t_:8.3f}  ({t_ / torch_s:.2f}x its unset step)")


if __name__ == "__main__":
    main()
