#!/usr/bin/env python3
"""Per-rank memory and communication of ddp and ZeRO stages 1-3 against the ZeRO paper's
formulas restated for fp32 training with AdamW (Ψ parameters, N data-parallel ranks):

                 parameters   gradients   optimizer state   communication per step
  ddp            4Ψ           4Ψ          8Ψ                2Ψ × 4 bytes (all-reduce)
  ZeRO-1         4Ψ           4Ψ          8Ψ/N              2Ψ × 4 bytes (reduce-scatter + all-gather)
  ZeRO-2         4Ψ           4Ψ/N        8Ψ/N              2Ψ × 4 bytes
  ZeRO-3         4Ψ/N         4Ψ/N        8Ψ/N              3Ψ × 4 bytes (2 all-gathers + reduce-scatter)

Measured in one run per strategy: the strategy's own count of its persistent allocations and the
comm plugin's byte counters (comm.h's convention: the paper's), both from rank 0's metrics.
Run by hand after scripts/build.sh:  /usr/bin/python3 benchmarks/zero_memory_comm.py [--ranks 4]
Prints the table and whether each figure is within 5% of theory (padding of the shards and the
strategy's few-byte gradient-norm exchange are the expected differences; the core's loss
exchange runs on a communicator of its own and is not counted); no pass/fail."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = ["model.n_layer=4", "model.n_head=4", "model.d_model=256", "model.vocab_size=256", "model.seq_len=64",
         "data.seq_len=64", "data.text_max_bytes=1048576", "data.val_batches=1", "train.sample_tokens=0",
         "train.tensorboard_dir=\"none\"", "train.log_every=1", "train.steps=3"]
STRATEGIES = {"ddp": '{"plugin": "ddp"}', "ZeRO-1": '{"plugin": "zero", "stage": 1}',
              "ZeRO-2": '{"plugin": "zero", "stage": 2}', "ZeRO-3": '{"plugin": "zero", "stage": 3}'}


def theory(name, psi, n):
    shard = {"ddp": (1, 1, 1), "ZeRO-1": (1, 1, n), "ZeRO-2": (1, n, n), "ZeRO-3": (n, n, n)}[name]
    comm = (3 if name == "ZeRO-3" else 2) * psi * 4
    return 4 * psi / shard[0], 4 * psi / shard[1], 8 * psi / shard[2], comm


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--keel", default=os.path.join(ROOT, "build", "bin", "keel"))
    args = parser.parse_args()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name, strategy in STRATEGIES.items():
            sets = MODEL + [f"parallel.strategy={strategy}", f"data.micro_batch=2", f"data.global_batch={2 * args.ranks}",
                            f"train.metrics_path=\"{work}/{name}.jsonl\"", f"train.checkpoint.dir=\"{work}/{name}\""]
            cmd = ["mpirun", "--oversubscribe", "-np", str(args.ranks), args.keel, "run",
                   os.path.join(ROOT, "examples", "quickstart.json")] + [a for s in sets for a in ("--set", s)]
            p = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if p.returncode != 0:
                sys.exit(f"{name} failed:\n{p.stderr[-2000:]}")
            record = [json.loads(line) for line in open(f"{work}/{name}.jsonl")][-1]
            psi = int(p.stdout.split("model gpt: ")[1].split(" parameters")[0])
            memory = record["strategy_bytes"]
            comm = sum(record["comm_bytes_per_step"].values())
            rows.append((name, psi, (memory["params"], memory["grads"], memory["optimizer_state"], comm)))
    n = args.ranks
    print(f"GPT {rows[0][1]} parameters (Ψ), fp32 AdamW, {n} data-parallel ranks; bytes per rank (rank 0)")
    print(f"{'':8s} {'params':>22s} {'grads':>22s} {'optimizer state':>22s} {'comm per step':>22s}")
    for name, psi, measured in rows:
        cells = []
        for m, t in zip(measured, theory(name, psi, n)):
            ratio = m / t
            cells.append(f"{m / 1e6:7.2f}M {ratio:6.3f}x{' ok' if abs(ratio - 1) <= 0.05 else ' !!'}")
        print(f"{name:8s} " + " ".join(f"{c:>22s}" for c in cells))
    print("each cell: measured MB, measured/theory, ok = within 5%")


if __name__ == "__main__":
    main()
