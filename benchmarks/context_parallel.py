#!/usr/bin/env python3
"""Context parallelism (`parallel.cp`, docs/parallelism.md §6a) on the gpt model, in one run:

- activation memory per rank against cp: the model's own activation bytes for one micro-batch
  (KEEL_LOG_LEVEL=debug: "activations for micro-batch ...: X bytes", rank 0) at cp 1, 2 and 4,
  and its ratio to cp 1's (1/cp would be the per-token tensors alone; at cp 1 the cpu backend's
  whole-row attention also keeps its B·NH·T² probabilities, which the ring's lse replaces);
- the longest T that trains under a cap on those bytes (--cap-mib), at cp 1, 2 and 4: T doubles
  from 256 while a step's activations fit, each T run for one step;
- step time, the ring against the all-gather exchange (parallel.cp_exchange), at cp 2 and 4:
  the median step_ms after the first step.

Every run is the same model (--layers, --d-model, --heads; a learned position table as long as
the longest T), micro-batch 1, fp32 AdamW, OMP_NUM_THREADS=1 per rank, under mpirun
--oversubscribe: on this 2-core machine cp 4 runs four ranks on two cores, so its times measure
the exchanges' overheads, not a speed-up.

Run by hand after scripts/build.sh:  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE \\
    /usr/bin/python3 benchmarks/context_parallel.py [--seq-len 2048] [--cap-mib 64] [--steps 4]
Prints tables; no pass/fail (these machines are noisy)."""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEEL = os.path.join(ROOT, "build", "bin", "keel")
CONFIG = os.path.join(ROOT, "examples", "quickstart.json")
ACTIVATIONS = re.compile(r"activations for micro-batch 0 .*?: (\d+) bytes")


def run(args, cp, T, steps, work, tag, exchange="ring", max_T=None):
    metrics = os.path.join(work, f"{tag}.jsonl")
    sets = [f"model.n_layer={args.layers}", f"model.d_model={args.d_model}", f"model.n_head={args.heads}",
            f"model.seq_len={max_T or T}", f"data.seq_len={T}", "data.micro_batch=1", f"data.global_batch={cp}",
            f"parallel.cp={cp}", f'parallel.cp_exchange="{exchange}"', f"train.steps={steps}",
            f'train.metrics_path="{metrics}"', f'train.checkpoint.dir="{work}/{tag}"', "train.checkpoint.every=0",
            "train.sample_tokens=0", "train.eval_every=0", 'train.tensorboard_dir="none"',
            "data.text_max_bytes=4194304"]
    command = [KEEL, "run", CONFIG] + [a for s in sets for a in ("--set", s)]
    if cp > 1:
        command = [args.mpirun, "--oversubscribe", "-np", str(cp)] + command
    env = dict(os.environ, KEEL_LOG_LEVEL="debug", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    p = subprocess.run(command, capture_output=True, text=True, errors="replace", env=env, timeout=1800)
    if p.returncode != 0:
        sys.exit(f"{tag} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    found = ACTIVATIONS.search(p.stderr)
    rows = [json.loads(line) for line in open(metrics) if line.strip()]
    step_ms = [r["step_ms"] for r in rows if "step_ms" in r][1:]
    return int(found.group(1)) if found else None, statistics.median(step_ms) if step_ms else float("nan")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--cap-mib", type=float, default=64)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--max-seq-len", type=int, default=16384)
    parser.add_argument("--mpirun", default=shutil.which("mpirun"))
    args = parser.parse_args()
    if not args.mpirun:
        sys.exit("mpirun is not installed (apt-get install openmpi-bin)")
    print(f"gpt: {args.layers} layers, d_model {args.d_model}, {args.heads} heads, micro-batch 1, fp32, cpu backend")
    with tempfile.TemporaryDirectory() as work:
        print(f"\nActivation bytes per rank at T = {args.seq_len}")
        print(f"{'cp':>3} {'bytes':>14} {'vs cp 1':>9} {'1/cp':>6}")
        base = None
        for cp in (1, 2, 4):
            size, _ = run(args, cp, args.seq_len, 1, work, f"memory-cp{cp}")
            base = base or size
            print(f"{cp:>3} {size:>14,} {size / base:>9.3f} {1 / cp:>6.3f}")

        cap = args.cap_mib * 2**20
        print(f"\nLongest T whose activations fit in {args.cap_mib:g} MiB per rank (T doubling from 256)")
        print(f"{'cp':>3} {'longest T':>10} {'its bytes':>14}")
        for cp in (1, 2, 4):
            best, T = None, 256
            while T <= args.max_seq_len:
                size, _ = run(args, cp, T, 1, work, f"cap-cp{cp}-{T}", max_T=args.max_seq_len)
                if size > cap:
                    break
                best = (T, size)
                T *= 2
            print(f"{cp:>3} {best[0] if best else '-':>10} {best[1] if best else 0:>14,}")

        print(f"\nStep time at T = {args.seq_len}, median after the first of {args.steps} steps")
        print(f"{'cp':>3} {'ring ms':>9} {'all_gather ms':>14} {'ratio':>6}")
        for cp in (2, 4):
            _, ring = run(args, cp, args.seq_len, args.steps, work, f"time-ring-cp{cp}")
            _, gathered = run(args, cp, args.seq_len, args.steps, work, f"time-gather-cp{cp}", "all_gather")
            print(f"{cp:>3} {ring:>9.1f} {gathered:>14.1f} {gathered / ring:>6.2f}")


if __name__ == "__main__":
    main()
