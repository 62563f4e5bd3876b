#!/usr/bin/env python3
"""Activation recomputation of the gpt model (`model.recompute`), end to end (stdlib only).

Parity cases: one layout trained three times, with recompute "none", "selective" and "full". The
recomputed forward runs the same ops on the same inputs, so every logged loss and gradient norm
(metrics JSONL) and every final parameter (the last checkpoint, assembled from every rank's
slices) must equal "none"'s bit for bit; a comparison with no common step fails. Cases: one rank;
tp 2 with sequence parallelism; pp 2 with 1f1b and with zero-bubble (whose split backward
recomputes again in its WEIGHT part); ZeRO-3 at dp 2 (parameters gathered again in the backward
phase); bf16 on one rank.

memory: the model's own count of activation bytes (its debug log: "activations for micro-batch
...: X bytes" per micro-batch kept, "recompute buffer (...): Y bytes" once, one block's worth)
against the formula (docs/architecture.md, "Activation recomputation"). Per block, at B·T = N
tokens, C channels, NH heads, fp32 (e = 4 bytes), the kept tensors are
    none       e·16·N·C + 4·4·N + A      (A = attention's saved state, NH·T·T·4 bytes per sequence)
    selective  e·16·N·C + 4·4·N          plus one buffer of A + e·N·C for the whole model
    full       e·N·C                     plus one buffer of the rest (e·15·N·C + 4·4·N + A)
so over L blocks "none" − "selective" = L·A and "none" − "full" = L·(e·15·N·C + 16·N + A), each
within the carver's 64-byte alignment of every piece; the test asserts those and that each mode's
kept bytes plus its buffer are below "none"'s.
Usage: recompute_checks.py CASE --keel KEEL --config QUICKSTART"""
import argparse
import json
import re
import shutil
import sys
import tempfile

import parallel_checks as pc

MODES = ("none", "selective", "full")
STEPS = 6
# case -> (ranks, strategy, extra --set assignments)
CASES = {
    "single": (1, "ddp", []),
    "tp2_sp": (2, "ddp", ["parallel.tp=2", "parallel.sequence_parallel=true"]),
    "pp2_1f1b": (2, "ddp", ["model.n_layer=4", "parallel.pp=2", "parallel.schedule={\"plugin\": \"1f1b\"}",
                            f"data.micro_batch={pc.G // 4}"]),
    "pp2_zero-bubble": (2, "ddp", ["model.n_layer=4", "parallel.pp=2", "parallel.schedule={\"plugin\": \"zero-bubble\"}",
                                   f"data.micro_batch={pc.G // 4}"]),
    "zero3_dp2": (2, "zero3", []),
    "bf16_single": (1, "ddp", ["backend={\"plugin\": \"cpu\", \"precision\": \"bf16\"}"]),
}
ALIGN = 64  # Carver's alignment of every piece
PIECES = 40  # pieces of one Activations carve, more than there are


def metrics(work, tag):
    """step -> (loss, grad_norm), as logged."""
    rows = (json.loads(line) for line in open(f"{work}/{tag}.jsonl") if line.strip())
    return {r["step"]: (r["loss"], r.get("grad_norm")) for r in rows if "loss" in r}


def same_run(reference, other, what):
    common = sorted(set(reference) & set(other))
    if not common:
        sys.exit(f"FAIL: {what}: no common step to compare ({sorted(reference)} vs {sorted(other)})")
    differ = [(s, reference[s], other[s]) for s in common if reference[s] != other[s]]
    if differ:
        sys.exit(f"FAIL: {what}: (loss, grad_norm) differ from recompute none's at (step, none, this) {differ[:3]}")
    print(f"{what}: {len(common)} steps of loss and gradient norm equal to recompute none's, bit for bit")


def same_params(reference, other, what):
    if sorted(reference) != sorted(other):
        sys.exit(f"FAIL: {what}: the checkpoints hold different tensors")
    for name in reference:
        if reference[name] != other[name]:
            worst = max(abs(x - y) for x, y in zip(reference[name], other[name]))
            sys.exit(f"FAIL: {what}: final {name} differs from recompute none's (largest difference {worst:.3e})")
    print(f"{what}: {len(reference)} final parameter tensors equal to recompute none's, bit for bit")


def check_parity(args, work, case):
    ranks, strategy, sets = CASES[case]
    runs = {}
    for mode in MODES:
        tag = f"{case}-{mode}"
        pc.run(args, ranks, strategy, work, tag, sets + [f"model.recompute=\"{mode}\""], steps=STEPS)
        runs[mode] = (metrics(work, tag), pc.final_params(f"{work}/{tag}/step-{STEPS:08d}"))
    for mode in MODES[1:]:
        same_run(runs["none"][0], runs[mode][0], f"{case}, recompute {mode}")
        same_params(runs["none"][1], runs[mode][1], f"{case}, recompute {mode}")


ACTIVATIONS = re.compile(r"activations for micro-batch \d+ \((\d+) x (\d+) tokens, tp 1, recompute (\w+)\): (\d+) bytes")
BUFFER = re.compile(r"recompute buffer \((\w+), one block, (\d+) tokens\): (\d+) bytes")


def check_memory(args, work):
    L, NH, C, T, e = 4, 2, 64, 64, 4
    sets = [f"model.n_layer={L}", f"model.n_head={NH}", f"model.d_model={C}", f"model.seq_len={T}", f"data.seq_len={T}"]
    kept, buffer = {}, {}
    for mode in MODES:
        p = pc.run(args, 1, "ddp", work, f"memory-{mode}", sets + [f"model.recompute=\"{mode}\""], steps=1,
                   env_extra={"KEEL_LOG_LEVEL": "debug"})
        log = p.stdout + p.stderr
        found = ACTIVATIONS.findall(log)
        if not found or any(m[2] != mode for m in found):
            sys.exit(f"FAIL: recompute {mode}: no activation log line naming the mode in\n{log[-2000:]}")
        B = int(found[0][0])
        kept[mode] = max(int(m[3]) for m in found if int(m[0]) == B and int(m[1]) == T)
        buffers = [int(b[2]) for b in BUFFER.findall(log) if b[0] == mode]
        if (mode == "none") != (not buffers):
            sys.exit(f"FAIL: recompute {mode}: recompute buffer lines {buffers} (none expected only for \"none\")")
        buffer[mode] = max(buffers, default=0)
    N = B * T
    A = B * NH * T * T * 4  # the cpu backend's attention keeps fp32 probabilities (B,NH,T,T)
    expect = {"selective": L * A, "full": L * (e * 15 * N * C + 4 * 4 * N + A)}
    expect_buffer = {"selective": A + e * N * C, "full": e * 15 * N * C + 4 * 4 * N + A}
    slack = ALIGN * PIECES
    for mode in MODES[1:]:
        dropped = kept["none"] - kept[mode]
        print(f"recompute {mode}: kept {kept[mode]} bytes per micro-batch (none: {kept['none']}), dropped {dropped} "
              f"(formula {expect[mode]}), buffer {buffer[mode]} (formula {expect_buffer[mode]})")
        if abs(dropped - expect[mode]) > slack:
            sys.exit(f"FAIL: recompute {mode} drops {dropped} bytes per micro-batch, the formula {expect[mode]}")
        if abs(buffer[mode] - expect_buffer[mode]) > slack:
            sys.exit(f"FAIL: recompute {mode}'s buffer is {buffer[mode]} bytes, the formula {expect_buffer[mode]}")
        if kept[mode] + buffer[mode] >= kept["none"]:
            sys.exit(f"FAIL: recompute {mode} holds {kept[mode]} + {buffer[mode]} bytes, not below none's {kept['none']}")
    if kept["full"] + buffer["full"] >= kept["selective"] + buffer["selective"]:
        sys.exit("FAIL: recompute full holds no less than selective")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("check", choices=sorted(CASES) + ["memory"])
    parser.add_argument("--keel", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--mpirun", default=shutil.which("mpirun"))
    args = parser.parse_args()
    if CASES.get(args.check, (1,))[0] > 1 and not args.mpirun:
        print("SKIP: mpirun not found")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as work:
        if args.check == "memory":
            check_memory(args, work)
        else:
            check_parity(args, work, args.check)
    print("PASS")


if __name__ == "__main__":
    main()
