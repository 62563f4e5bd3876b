#!/usr/bin/env python3
"""Activation recomputation (`model.recompute`) of GPT-2 124M or a llama of similar size
(SmolLM2-135M's shape): activation memory and step time per mode, in one run.

Each mode trains benchmarks/gpt2_124m.json (--model gpt) or benchmarks/llama_135m.json (--model
llama) at micro-batch B x T tokens (default 1 x 1024; about 12 s a step on 2 cores), fp32 AdamW,
2 threads, for STEPS steps.
Measured per mode:
- the model's own activation bytes (KEEL_LOG_LEVEL=debug: "activations for micro-batch ...: X
  bytes", kept per micro-batch in flight, plus "recompute buffer ...: Y bytes", once);
- the process's peak resident set (ru_maxrss of the child, from wait4);
- the median step time after the first step (step_ms in the metrics JSONL), and its ratio to
  "none"'s.
The formula, per transformer block and micro-batch at tp 1 (e bytes per activation element: 4 in
fp32, 2 in bf16; statistics fp32; A = attention's saved state, the cpu backend's B·NH·T² fp32
probabilities):
    none       e·16·B·T·C + 16·B·T + A
    selective  e·16·B·T·C + 16·B·T            + once: A + e·B·T·C
    full       e·B·T·C                        + once: e·15·B·T·C + 16·B·T + A
(16·B·T·C: ln_1, qkv (3), attention output, residual after attention, ln_2, fc (4) and its GELU
(4), block output; 16·B·T: the two layernorms' mean and rstd.) Every mode also keeps the same
fixed part per micro-batch: the embedding output, ln_f, the logits (B·T·Vp), the loss statistics
and the token ids; the table takes it as "none"'s count minus L blocks of "none"'s formula.
The llama's, with Ckv = NKV·C/NH, F = ffn_hidden and 8·B·T for the two RMSNorms' rstd:
    none       e·(6C + 2Ckv + 3F)·B·T + 8·B·T + A
    selective  e·(6C + 2Ckv + 3F)·B·T + 8·B·T            + once: A + e·B·T·C
    full       e·B·T·C                                   + once: e·(5C + 2Ckv + 3F)·B·T + 8·B·T + A
(ln1, q k v packed, attention output, residual after attention, ln2, gate and up packed, SwiGLU
output, block output.)

Run by hand after scripts/build.sh:  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE \\
    /usr/bin/python3 benchmarks/recompute.py [--model gpt|llama] [--seq-len 1024] [--micro-batch 1] [--steps 3]
Prints a table; no pass/fail (these machines are noisy)."""
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
MODELS = {  # config, and the sizes the formula needs (fp32: E = 4 bytes per element)
    "gpt": dict(config="gpt2_124m.json", name="GPT-2 124M", L=12, NH=12, C=768),
    "llama": dict(config="llama_135m.json", name="llama 135M (SmolLM2's shape)", L=30, NH=9, NKV=3, C=576, F=1536),
}
E = 4
MODES = ("none", "selective", "full")
ACTIVATIONS = re.compile(r"activations for micro-batch .*?recompute (\w+)\): (\d+) bytes")
BUFFER = re.compile(r"recompute buffer \((\w+), one block, \d+ tokens\): (\d+) bytes")


def run(model, mode, B, T, steps, work):
    metrics = os.path.join(work, f"{mode}.jsonl")
    sets = [f"model.recompute=\"{mode}\"", f"data.seq_len={T}", f"data.micro_batch={B}", f"data.global_batch={B}",
            f"train.steps={steps}", f"train.metrics_path=\"{metrics}\"", f"train.checkpoint.dir=\"{work}/{mode}\"",
            "train.sample_tokens=0", "train.eval_every=0", "train.tensorboard_dir=\"none\""]
    cmd = [KEEL, "run", os.path.join(ROOT, "benchmarks", model["config"])] + [a for s in sets for a in ("--set", s)]
    env = dict(os.environ, KEEL_LOG_LEVEL="debug", OMP_NUM_THREADS="2")
    with open(os.path.join(work, f"{mode}.log"), "w+") as log:
        child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(child.pid, 0)
        log.seek(0)
        text = log.read()
    if status != 0:
        sys.exit(f"recompute {mode} failed:\n{text[-3000:]}")
    kept = max(int(m[1]) for m in ACTIVATIONS.findall(text) if m[0] == mode)
    buffer = max((int(b[1]) for b in BUFFER.findall(text) if b[0] == mode), default=0)
    records = [json.loads(line) for line in open(metrics) if line.strip()]
    step_ms = statistics.median(r["step_ms"] for r in records[1:])
    return kept, buffer, usage.ru_maxrss * 1024, step_ms


def formula(model, mode, B, T):
    """(kept per micro-batch for L blocks, the once-only buffer), in bytes, without the fixed part."""
    L, NH, C = model["L"], model["NH"], model["C"]
    N, A = B * T, B * NH * T * T * 4
    if "F" in model:  # llama
        Ckv, F = model["NKV"] * C // NH, model["F"]
        block, stats = E * (6 * C + 2 * Ckv + 3 * F) * N, 8 * N
        full_buffer = E * (5 * C + 2 * Ckv + 3 * F) * N + stats + A
    else:
        block, stats = E * 16 * N * C, 16 * N
        full_buffer = E * 15 * N * C + stats + A
    if mode == "none":
        return L * (block + stats + A), 0
    if mode == "selective":
        return L * (block + stats), A + E * N * C
    return L * E * N * C, full_buffer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=sorted(MODELS), default="gpt")
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--micro-batch", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    B, T, model = args.micro_batch, args.seq_len, MODELS[args.model]
    print(f"{model['name']}, micro-batch {B} x {T} tokens, fp32 AdamW, 2 threads; median step time of "
          f"{args.steps - 1} steps after the first; MiB = 2^20 bytes")
    results = {}
    with tempfile.TemporaryDirectory() as work:
        for mode in MODES:
            results[mode] = run(model, mode, B, T, args.steps, work)
    fixed = results["none"][0] - formula(model, "none", B, T)[0]
    mib = 1 << 20
    print(f"{'recompute':>10} {'kept/mb MiB':>12} {'buffer MiB':>11} {'model total':>12} {'formula':>9} "
          f"{'peak RSS MiB':>13} {'RSS vs none':>12} {'step s':>8} {'overhead':>9}")
    for mode in MODES:
        kept, buffer, rss, step_ms = results[mode]
        f_kept, f_buffer = formula(model, mode, B, T)
        print(f"{mode:>10} {kept / mib:12.1f} {buffer / mib:11.1f} {(kept + buffer) / mib:12.1f} "
              f"{(f_kept + fixed + f_buffer) / mib:9.1f} {rss / mib:13.1f} {(rss - results['none'][2]) / mib:+12.1f} "
              f"{step_ms / 1e3:8.2f} {step_ms / results['none'][3]:8.3f}x")
    print(f"(fixed part per micro-batch, every mode: {fixed / mib:.1f} MiB; the model's total is its kept bytes "
          f"for one micro-batch in flight plus its buffer)")


if __name__ == "__main__":
    main()
