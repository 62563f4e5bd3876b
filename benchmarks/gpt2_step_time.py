#!/usr/bin/env python3
"""CPU training speed: GPT-2 124M steps, Keel against PyTorch, and the quick-start model's
tokens/s, in one run, in the environment a user's machine has.

Keel: `keel run benchmarks/gpt2_124m.json` (fp32 AdamW, 2 threads) at micro-batch 4 x 64 tokens
and 8 x 256, median step time after one warm-up step, with each way of threading the products
(backend.gemm_threading: "partition", the default, where Keel splits each product over its
threads; "openblas", where OpenBLAS threads it with its own pool, as before issue 25). MFU is
against the OpenBLAS sgemm peak the cpu backend measures at start-up in that same run (2048²
products, best of 5); NumPy's sgemm on the same product size gives an independent peak to hold
it against. PyTorch (Debian's python3-torch): the same model (tests/python/gpt_reference.py),
batch, optimizer and thread count, timed the same way. The quick-start model
(examples/quickstart.json, 2 threads): tokens/s with either threading.

Every measurement runs with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset, as on a user's
machine (these build machines preset both). When this shell presets them, a second table shows
what the presets cost each side: Keel with its default policy ("auto", which unsets them) and
with "env" (kept), PyTorch with them kept.

Run by hand, after scripts/build.sh:  /usr/bin/python3 benchmarks/gpt2_step_time.py [--quick]
(--quick: the 4 x 64 shape only). Prints tables; no pass/fail: these machines are noisy.
"""
import argparse
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
QUICKSTART = os.path.join(ROOT, "examples", "quickstart.json")
WARMUP, THREADS = 1, 2
SHAPES = ((4, 64, 11), (8, 256, 4))  # micro-batch, sequence, steps (the first one a warm-up)
QUICKSTART_STEPS = 60


PRESET_VARIABLES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def keel_run(env, config=CONFIG, steps=11, sets=()):
    """Runs keel; returns (median step s, logged peak GFLOP/s, median MFU, kernels, records)."""
    with tempfile.TemporaryDirectory() as work:
        metrics = os.path.join(work, "metrics.jsonl")
        cmd = [KEEL, "run", config, "--set", f'train.metrics_path="{metrics}"', "--set", f"train.steps={steps}",
               "--set", f'train.checkpoint.dir="{os.path.join(work, "checkpoints")}"', "--set", "train.log_every=1"]
        for s in sets:
            cmd += ["--set", s]
        p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=env)
        if p.returncode != 0:
            sys.exit(f"keel failed: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
        peak = float(re.search(r"peak ([0-9.e+]+) GFLOP/s", p.stdout).group(1))
        kernels = re.search(r"OpenBLAS kernels ([A-Za-z0-9_]+)", p.stdout + p.stderr)
        records = [r for r in (json.loads(line) for line in open(metrics)) if "step_ms" in r]
        step_ms = statistics.median(r["step_ms"] for r in records[WARMUP:])
        mfu = statistics.median(r["mfu"] for r in records[WARMUP:])
        return step_ms / 1e3, peak, mfu, kernels.group(1) if kernels else "?", records


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


def torch_run(env, B, T, steps):
    p = subprocess.run(["/usr/bin/python3", "-c", TORCH_CHILD, ROOT, str(THREADS), str(B), str(T), str(steps),
                        str(WARMUP)], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"torch failed:\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])["step_s"]


def threading_set(mode):
    return f'backend.gemm_threading="{mode}"'


def gpt2_table(env_user, shapes):
    print(f"{'shape':10s} {'run':31s} {'step s':>8s} {'MFU':>6s} {'MFU vs numpy peak':>18s} {'speed vs torch':>15s}")
    numpy_peak = None
    for B, T, steps in shapes:
        sets = (f"data.micro_batch={B}", f"data.global_batch={B}", f"data.seq_len={T}")
        runs = []
        for mode in ("partition", "openblas"):
            step_s, peak, mfu, kernels, _ = keel_run(env_user, steps=steps, sets=sets + (threading_set(mode),))
            runs.append((f"keel, gemm_threading {mode}", step_s, mfu, peak, kernels))
        torch_s = torch_run(env_user, B, T, steps)
        if numpy_peak is None:
            numpy_peak = numpy_peak_gflops(env_user)
        flops_per_step = runs[0][2] * runs[0][3] * 1e9 * runs[0][1]  # MFU × peak × step time
        for label, step_s, mfu, peak, kernels in runs:
            print(f"{B:>2d} x {T:<5d} {label:31s} {step_s:8.3f} {100 * mfu:5.1f}% "
                  f"{100 * flops_per_step / step_s / (numpy_peak * 1e9):17.1f}% {torch_s / step_s:14.2f}x")
        print(f"{B:>2d} x {T:<5d} {'pytorch':31s} {torch_s:8.3f} {100 * flops_per_step / torch_s / (runs[0][3] * 1e9):5.1f}% "
              f"{100 * flops_per_step / torch_s / (numpy_peak * 1e9):17.1f}% {1.0:14.2f}x")
    peaks = ", ".join(f"{label.split()[-1]} {peak:.1f}" for label, _, _, peak, _ in runs)
    print(f"sgemm peak GFLOP/s (2048², best of 5): keel's start-up measurement ({peaks}; kernels {runs[0][4]}), "
          f"numpy's {numpy_peak:.1f} in the same environment")


def quickstart_table(env_user):
    print(f"\nquick-start model (examples/quickstart.json, {THREADS} threads), median of {QUICKSTART_STEPS - 5} steps "
          f"after 5:")
    sets = ("train.eval_every=0", "train.sample_tokens=0", f"backend.threads={THREADS}")
    results = {}
    for mode in ("partition", "openblas"):
        with tempfile.TemporaryDirectory() as work:
            step_s, _, _, _, records = keel_run(env_user, QUICKSTART, QUICKSTART_STEPS,
                                                sets + (threading_set(mode), f'train.tensorboard_dir="{work}"'))
        steps = [r["step_ms"] for r in records[5:]]
        tokens = records[-1]["tokens"] / records[-1]["step"]
        results[mode] = tokens / (statistics.median(steps) / 1e3)
        print(f"  gemm_threading {mode:10s} {results[mode]:9.0f} tokens/s")
    print(f"  partition / openblas: {results['partition'] / results['openblas']:.2f}x")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the 4 x 64 shape only")
    args = parser.parse_args()
    presets = {k: os.environ[k] for k in PRESET_VARIABLES if os.environ.get(k)}
    env_user = {k: v for k, v in os.environ.items() if k not in PRESET_VARIABLES}
    env_user["OMP_NUM_THREADS"] = str(THREADS)
    shapes = SHAPES[:1] if args.quick else SHAPES
    print(f"GPT-2 124M, fp32 AdamW, {THREADS} threads; median step after {WARMUP} warm-up; "
          "OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset")
    gpt2_table(env_user, shapes)
    quickstart_table(env_user)
    if not presets:
        print("(this shell presets neither variable: no table of what presets cost)")
        return
    env_preset = dict(env_user, **presets)
    described = " ".join(f"{k}={v}" for k, v in presets.items())
    B, T, steps = SHAPES[0]
    sets = (f"data.micro_batch={B}", f"data.global_batch={B}", f"data.seq_len={T}")
    base_s = keel_run(env_user, steps=steps, sets=sets + ('backend.openblas_coretype="auto"',))[0]
    print(f"\nWith this machine's presets {described}, {B} x {T}:")
    for label, policy in (("keel, auto (unsets them)", "auto"), ("keel, env (keeps them)", "env")):
        s_, p_, m_, k_, _ = keel_run(env_preset, steps=steps, sets=sets + (f'backend.openblas_coretype="{policy}"',))
        print(f"{label:24s} {s_:8.3f} {k_:>10s} {p_:8.1f} {100 * m_:5.1f}%  ({s_ / base_s:.2f}x the unset step)")
    torch_unset = torch_run(env_user, B, T, steps)
    t_ = torch_run(env_preset, B, T, steps)
    print(f"{'pytorch, presets kept':24s} {t_:8.3f}  ({t_ / torch_unset:.2f}x its unset step)")


if __name__ == "__main__":
    main()
