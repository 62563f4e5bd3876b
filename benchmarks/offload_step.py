#!/usr/bin/env python3
"""Optimizer-step time with the Adam state in the nvme offload tier over resident, and the
fraction of the tier's I/O hidden behind compute (Keel issue 11, ZeRO-Offload).

One process (build/bin/keel-offload-step-bench) builds the parameter store of a ~100M-parameter,
12-layer model on the host-memory backend with the adamw plugin, and times its step (best of R,
after one warm-up step) in three modes over the same numbers:
  resident   params, grads and both Adam moments in memory;
  serial     the moments in the nvme tier (O_DIRECT files in FOLDER), each window read, updated
             and written back to back: the step pays I/O + compute;
  pipelined  the same windows, window k+1 read and k-1 written while k updates (the default).
io = the tier's busy time in the serial step (some request in flight);
hidden = (serial - pipelined) / io: the share of the I/O the pipeline takes off the step
(1 when the step costs only max(io, compute); negative when pipelining costs more than it hides).

Run by hand after building keel-offload-step-bench and keel-adamw:
  /usr/bin/python3 benchmarks/offload_step.py [--params N] [--repeats R] [--folder DIR]
                                              [--queue-depth Q] [--block-bytes B]
FOLDER must be on a real disk (O_DIRECT; not tmpfs). Prints the command and a table; no
pass/fail: these machines are noisy and shared.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "build", "bin", "keel-offload-step-bench")
PLUGIN = os.path.join(ROOT, "build", "lib", "keel", "plugins", "libkeel-adamw.so")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=int, default=100_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--folder", default="/tmp")
    parser.add_argument("--queue-depth", type=int, default=16)
    parser.add_argument("--block-bytes", type=int, default=1 << 20)
    args = parser.parse_args()
    for path in (TOOL, PLUGIN):
        if not os.path.exists(path):
            sys.exit(f"offload_step.py: {path} is missing; build keel-offload-step-bench and keel-adamw first")
    with tempfile.TemporaryDirectory(prefix="keel-offload-step-", dir=args.folder) as folder:
        command = [TOOL, PLUGIN, folder, str(args.params), str(args.repeats), str(args.queue_depth),
                   str(args.block_bytes)]
        print("$ " + " ".join(command))
        run = subprocess.run(command, capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"offload_step.py: the tool failed ({run.returncode}): {run.stderr.strip()}")
    rows = {row["mode"]: row for row in map(json.loads, run.stdout.splitlines())}
    resident, serial, pipelined = rows["resident"], rows["serial"], rows["pipelined"]
    io = serial["busy_seconds"]
    moved = serial["bytes_read"] + serial["bytes_written"]
    print(f"\n{args.params / 1e6:.0f}M parameters, Adam state {serial['bytes_read'] / 2**20:.0f} MiB in the tier "
          f"(queue depth {args.queue_depth}, blocks {args.block_bytes >> 10} KiB), best of {args.repeats} steps\n")
    print(f"{'mode':<11}{'step s':>9}{'x resident':>12}{'tier GB/s':>11}")
    for name, row in (("resident", resident), ("serial", serial), ("pipelined", pipelined)):
        rate = (row["bytes_read"] + row["bytes_written"]) / row["seconds"] / 1e9 if row["bytes_read"] else 0.0
        print(f"{name:<11}{row['seconds']:>9.3f}{row['seconds'] / resident['seconds']:>12.1f}"
              f"{rate:>11.2f}")
    print(f"\nio (tier busy in the serial step) {io:.3f} s for {moved / 1e9:.2f} GB; "
          f"compute (resident step) {resident['seconds']:.3f} s")
    print(f"hidden = (serial - pipelined) / io = {(serial['seconds'] - pipelined['seconds']) / io:.2f}; "
          f"ideal = min(io, compute) / io = {min(io, resident['seconds']) / io:.2f}")


if __name__ == "__main__":
    main()
