#!/usr/bin/env python3
"""Pipeline schedules measured against their theory, in one run.

1. Bubble fraction of stage 0, measured from its busy time: 1 - (forward + backward time) /
   (step time - data - optimizer), against the unit-time theory: (p-1)/(m+p-1) for gpipe and
   1f1b, (p-1)/(v·m+p-1) for interleaved, (p-1)/(3m+p-1) for zero-bubble (a backward costing two
   forwards). The stages are balanced by the placement; the last stage's head is small
   (vocabulary 256). Median over 6 steps after 2 warm-ups.
2. Peak activation sets held at once on stage 0 (the executor's count of chunk forwards whose
   backward had not yet run) against the schedule's bound: gpipe m, 1f1b and zero-bubble
   min(m, p), interleaved Megatron's warm-up 2(p−1) + (v−1)p + 1 capped at v·m.
3. Activation traffic per step on stage 0 (send bytes on the pipeline group) against the count
   of B·T·C-float tensors it must send: m activations per chunk boundary it feeds and m input
   gradients per chunk it holds beyond the first, (2v−1)·m in all.

pp 2 runs 2 ranks × 1 thread on this 2-core machine, so the stages really run in parallel.
Run by hand after scripts/build.sh:  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE \\
    /usr/bin/python3 benchmarks/pipeline.py
Prints tables; no pass/fail (these machines are noisy)."""
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEEL = os.path.join(ROOT, "build", "bin", "keel")
QUICKSTART = os.path.join(ROOT, "examples", "quickstart.json")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
B, T, C, LAYERS = 2, 64, 256, 8
MODEL = [f"model.n_layer={LAYERS}", "model.n_head=8", f"model.d_model={C}", "model.vocab_size=256", f"model.seq_len={T}",
         f"data.seq_len={T}", f"data.micro_batch={B}", "data.text_max_bytes=1048576", "data.val_batches=1",
         "train.sample_tokens=0", "train.tensorboard_dir=\"none\"", "train.log_every=1", "train.eval_every=0",
         "backend.threads=1", "train.checkpoint.every=0"]
WARMUP, MEASURED = 2, 6


def run(work, tag, pp, schedule, v, m):
    sets = MODEL + [f"parallel.pp={pp}", f"parallel.schedule={{\"plugin\": \"{schedule}\"}}", f"parallel.virtual_stages={v}",
                    f"data.global_batch={B * m}", f"train.steps={WARMUP + MEASURED}",
                    f"train.metrics_path=\"{work}/{tag}.jsonl\"", f"train.checkpoint.dir=\"{work}/{tag}\""]
    cmd = ["mpirun", "--oversubscribe", "-np", str(pp), KEEL, "run", QUICKSTART] + [a for s in sets for a in ("--set", s)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    if p.returncode != 0:
        sys.exit(f"{tag} failed:\n{p.stderr[-3000:]}")
    records = [json.loads(line) for line in open(f"{work}/{tag}.jsonl") if line.strip()]
    return [r for r in records if r["step"] > WARMUP]


def theory(schedule, p, m, v):
    if schedule == "interleaved":
        return (p - 1) / (v * m + p - 1)
    if schedule == "zero-bubble":
        return (p - 1) / (3 * m + p - 1)
    return (p - 1) / (m + p - 1)


def in_flight_bound(schedule, p, m, v):
    # gpipe keeps every micro-batch; 1f1b's stage 0 warms up with p; interleaved with
    # (v-1)·p + 2(p-1) + 1 chunk-forwards on stage 0 (Megatron's warm-up) capped at v·m;
    # zero-bubble (ZB-H1) holds what 1f1b holds.
    if schedule == "gpipe":
        return m
    if schedule == "interleaved":
        return min(v * m, (v - 1) * p + 2 * (p - 1) + 1)
    return min(m, p)


def main():
    p = 2
    cases = [("gpipe", 1, m) for m in (2, 4, 8)] + [("1f1b", 1, m) for m in (2, 4, 8)] + \
            [("interleaved", 2, m) for m in (2, 4, 8)] + [("zero-bubble", 1, m) for m in (2, 4, 8)]
    io_bytes = B * T * C * 4
    print(f"GPT {LAYERS} blocks, d_model {C}, micro-batch {B}×{T}; pp {p} (2 ranks × 1 thread)")
    print(f"{'schedule':>12} {'v':>2} {'m':>2} {'bubble':>8} {'theory':>7} {'diff':>6}  "
          f"{'peak held':>9} {'bound':>5}  {'sent/step':>10} {'count':>10} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as work:
        for schedule, v, m in cases:
            tag = f"{schedule}-v{v}-m{m}"
            records = run(work, tag, p, schedule, v, m)
            bubbles = []
            for r in records:
                t = r["time_ms"]
                compute = t["forward"] + t["backward"]
                window = r["step_ms"] - t["data"] - t["optimizer"]
                bubbles.append(1 - compute / window)
            bubble = statistics.median(bubbles)
            expected = theory(schedule, p, m, v)
            held = max(r["pp_peak_in_flight"] for r in records)
            sent = statistics.median(r["pp_comm_bytes_per_step"].get("send", 0) for r in records)
            # stage 0 feeds v chunk boundaries forward and sends back the input gradient of each
            # of its chunks but the first: (2v − 1)·m tensors (v 2: 0→1, 2→3, and 2's input grad)
            count = m * io_bytes * (2 * v - 1)
            print(f"{schedule:>12} {v:>2} {m:>2} {bubble:>8.3f} {expected:>7.3f} {100 * (bubble - expected):>+5.1f}p  "
                  f"{held:>9} {in_flight_bound(schedule, p, m, v):>5}  {sent:>10.0f} {count:>10} {sent / count:>6.3f}")


if __name__ == "__main__":
    main()
