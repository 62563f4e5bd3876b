#!/usr/bin/env python3
"""Does ZeRO-2's gradient reduction hide behind the backward pass the way ddp's does?

ddp all-reduces buckets of finished layers on a communication thread; zero stages 2/3
reduce-scatter each finished layer on one. If the reduction blocked the training thread, the
backward phase of ZeRO-2 would grow by the whole communication time; overlapped, it stays close
to ddp's (both move 2Ψ per step). Measured in one run: the same model, batch and data at dp 2,
the median backward time per step (rank 0's `time_ms.backward`, first steps dropped), and the
ratio to ddp. ZeRO-2 runs twice: reducing on its communication thread (the default) and with
"overlap_comm": false (blocking, on the training thread). ZeRO-2 on one rank (no communication
at all) is the floor.

Run by hand after scripts/build.sh:  /usr/bin/python3 benchmarks/zero_backward_overlap.py
Prints the table; no pass/fail (timings on a shared machine are noisy)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = ["model.n_layer=6", "model.n_head=6", "model.d_model=384", "model.vocab_size=256", "model.seq_len=128",
         "data.seq_len=128", "data.text_max_bytes=4194304", "data.val_batches=1", "train.sample_tokens=0",
         "train.tensorboard_dir=\"none\"", "train.log_every=1", "train.eval_every=0", "data.micro_batch=4"]
RUNS = [("ddp", '{"plugin": "ddp"}', 2), ("ZeRO-2", '{"plugin": "zero", "stage": 2}', 2),
        ("ZeRO-2, blocking", '{"plugin": "zero", "stage": 2, "overlap_comm": false}', 2),
        ("ZeRO-3", '{"plugin": "zero", "stage": 3}', 2), ("ZeRO-2, 1 rank", '{"plugin": "zero", "stage": 2}', 1)]


def backward_ms(args, work, name, strategy, ranks):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
    tag = name.replace(" ", "").replace(",", "")
    sets = MODEL + [f"parallel.strategy={strategy}", f"data.global_batch={4 * ranks}", f"train.steps={args.steps}",
                    f"train.metrics_path=\"{work}/{tag}.jsonl\"", f"train.checkpoint.dir=\"{work}/{tag}\""]
    cmd = [args.keel, "run", os.path.join(ROOT, "examples", "quickstart.json")] + [a for s in sets for a in ("--set", s)]
    if ranks > 1:
        cmd = ["mpirun", "--oversubscribe", "-np", str(ranks)] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"{name} failed:\n{p.stderr[-2000:]}")
    records = [json.loads(line) for line in open(f"{work}/{tag}.jsonl") if line.strip()]
    times = [r["time_ms"]["backward"] for r in records if r["step"] > 2]
    comm = sum(records[-1].get("comm_bytes_per_step", {}).values())
    return statistics.median(times), len(times), comm


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--keel", default=os.path.join(ROOT, "build", "bin", "keel"))
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name, strategy, ranks in RUNS:
            rows.append((name, ranks) + backward_ms(args, work, name, strategy, ranks))
    ddp = rows[0][2]
    print(f"GPT 6 layers, d_model 384, micro-batch 4 × 128 tokens, 1 thread per rank; median over the steps after 2")
    print(f"{'':16s} {'ranks':>5s} {'backward ms':>12s} {'vs ddp':>7s} {'steps':>6s} {'comm MB/step':>13s}")
    for name, ranks, ms, steps, comm in rows:
        print(f"{name:16s} {ranks:5d} {ms:12.1f} {ms / ddp:6.2f}x {steps:6d} {comm / 1e6:13.2f}")


if __name__ == "__main__":
    main()
