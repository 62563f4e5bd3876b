#!/usr/bin/env python3
"""The device-true contract (backend.h 0.8) proven without a GPU (stdlib only). Each case trains
one layout three times: on the cpu backend, on `poison` (backend memory behind handles host code
cannot dereference: a host read crashes the run, a host pointer handed to an op is refused) and on
`deferred` (every op queued on a worker thread that runs behind the host: a missing
synchronisation reads numbers not yet written). Both test backends run the cpu backend's
arithmetic, and the core stages their memory through host buffers for the mpi communicator, so
every logged loss must equal the cpu run's exactly; a case where a backend logged no common step
fails. Cases: one rank; ddp and ZeRO-1/2/3 at dp 2; tp 2 with sequence parallelism; pp 2 with
each schedule; offload to cpu and nvme; resume (4 steps + 4 resumed equal 8 straight); export
(the safetensors of a test backend's checkpoint equal the cpu run's byte for byte). The bf16_*
cases train at "precision": "bf16" (bf16 activations and parameter copies, fp32 masters, weight
gradients and arithmetic): the test backends equal the cpu backend's bf16 losses bit for bit, the
bf16 losses stay within BF16_BOUND of the fp32 run's yet differ from them (else bf16 never took
effect), ZeRO-3's bf16 gathers equal ZeRO-2's whole bf16 copy, and a bf16 run resumes bit for
bit. On the deferred backend every run must also keep the gradient norm off the blocking 0.1
sum_squares (it logs how often that ran).
Usage: device_contract_checks.py CASE --keel KEEL --config QUICKSTART --plugins FOLDER [--set A=V ...]
(--set: assignments every run of the case takes after the case's own, e.g. another model's sizes)"""
import argparse
import os
import re
import shutil
import sys
import tempfile

import parallel_checks as pc

BACKENDS = ("poison", "deferred")

# case -> (ranks, strategy, extra --set assignments)
CASES = {
    "single": (1, "ddp", []),
    "ddp_dp2": (2, "ddp", []),
    "zero1_dp2": (2, "zero1", []),
    "zero2_dp2": (2, "zero2", []),
    "zero3_dp2": (2, "zero3", []),
    "tp2_sp": (2, "ddp", ["parallel.tp=2", "parallel.sequence_parallel=true"]),
    "offload_cpu": (1, "zero3", ['offload={"plugin": "cpu", "optimizer_state": true, "params": true, "gradients": true}']),
    # Expert parallelism (a model with experts: its --set keys come from the test's command line).
    "ep2_zero3": (2, "zero3", ["parallel.ep=2"]),
}
for case in ("single", "zero2_dp2", "zero3_dp2", "tp2_sp", "offload_cpu", "ep2_zero3"):
    CASES[f"bf16_{case}"] = CASES[case]
CASES["bf16_pp2_1f1b"] = (2, "ddp", ["model.n_layer=4", "parallel.pp=2"])
# bf16 keeps 8 significant bits: each stored activation and parameter copy is within 2^-9
# relative of its fp32 value. The loss (about ln 256 = 5.5 here) is a mean over every position,
# so these errors average rather than add; over 8 steps at this learning rate the fp32 and bf16
# runs' losses stay within 2^-8 of the loss's size, 0.022 (measured: about 0.003).
BF16_BOUND = 5.5 / 256
for schedule in ("gpipe", "1f1b", "interleaved", "zero-bubble"):
    virtual = 2 if schedule == "interleaved" else 1
    CASES[f"pp2_{schedule}"] = (2, "ddp", ["model.n_layer=4", "parallel.pp=2", f"parallel.schedule={{\"plugin\": \"{schedule}\"}}",
                                           f"parallel.virtual_stages={virtual}"])


def train(args, work, case, backend, steps=6, extra=(), resume=None, tag=None, precision=None):
    ranks, strategy, sets = CASES.get(case, CASES["single"])
    precision = precision or ("bf16" if case.startswith("bf16") else "fp32")
    sets = list(sets)
    if case == "offload_nvme":
        ranks, strategy = 1, "zero3"
        folder = os.path.join(work, f"nvme-{backend}")
        os.makedirs(folder, exist_ok=True)
        sets = [f'offload={{"plugin": "nvme", "path": "{folder}", "optimizer_state": true, "params": true, "gradients": true}}']
    tag = tag or backend
    sets += [f"backend={{\"plugin\": \"{backend}\", \"precision\": \"{precision}\"}}",
             "lr_schedule.decay_steps=8"] + list(extra) + list(args.set)
    if "parallel.pp=2" in sets:
        sets.append(f"data.micro_batch={pc.G // 4}")  # 4 micro-batches: every schedule can run
    process = pc.run(args, ranks, strategy, work, tag, sets, steps=steps, resume=resume)
    if backend == "deferred":
        no_blocking_norm(process, f"{case} on deferred")
    return pc.losses(work, tag)


def no_blocking_norm(process, what):
    """The gradient norm stays in backend memory until it is read once per step (sum_squares_dt
    into backend scalars): the deferred backend logs how often the blocking 0.1 sum_squares ran,
    once per rank, and every count must be 0."""
    counts = re.findall(r"deferred backend: (\d+) calls to the 0.1 sum_squares", process.stdout + process.stderr)
    if not counts:
        sys.exit(f"FAIL: {what}: the deferred backend logged no count of its sum_squares calls")
    if any(int(c) != 0 for c in counts):
        sys.exit(f"FAIL: {what}: the gradient norm waited on the queue through the 0.1 sum_squares ({counts} calls per rank)")


def same_losses(reference, other, what):
    common = sorted(set(reference) & set(other))
    if not common:
        sys.exit(f"FAIL: {what}: no common step to compare ({sorted(reference)} vs {sorted(other)})")
    differ = [(s, reference[s], other[s]) for s in common if reference[s] != other[s]]
    if differ:
        sys.exit(f"FAIL: {what}: losses differ from the cpu backend's at (step, cpu, other) {differ[:4]}")
    print(f"{what}: {len(common)} steps equal to the cpu backend's, bit for bit")


def check_layout(args, work, case):
    reference = train(args, work, case, "cpu")
    for backend in BACKENDS:
        same_losses(reference, train(args, work, case, backend), f"{case} on {backend}")
    if case.startswith("bf16"):
        close_to_fp32(train(args, work, case, "cpu", precision="fp32", tag="cpu-fp32"), reference, case)
    if case == "bf16_zero3_dp2":  # the gathered bf16 chunks make the layer ZeRO-2 converts whole
        same_losses(train(args, work, "bf16_zero2_dp2", "cpu", tag="cpu-zero2"), reference, "bf16 ZeRO-3 against ZeRO-2")


def close_to_fp32(fp32, bf16, what):
    common = sorted(set(fp32) & set(bf16))
    if not common:
        sys.exit(f"FAIL: {what}: no common step between the fp32 and bf16 runs")
    worst = max(abs(fp32[s] - bf16[s]) for s in common)
    if worst > BF16_BOUND:
        sys.exit(f"FAIL: {what}: bf16 losses differ from fp32 by {worst:.5f} > {BF16_BOUND:.5f}: {fp32} vs {bf16}")
    if all(fp32[s] == bf16[s] for s in common):
        sys.exit(f"FAIL: {what}: bf16 losses equal the fp32 ones bit for bit: bf16 never took effect")
    print(f"{what}: bf16 within {worst:.5f} of fp32 over {len(common)} steps (bound {BF16_BOUND:.5f}), not equal")


def check_resume(args, work, case="zero2_dp2"):
    common = ["train.checkpoint.every=4"]
    reference = train(args, work, case, "cpu", steps=8, extra=common, tag="cpu-straight")
    for backend in ("cpu",) + BACKENDS:
        tag = f"{backend}-split"
        train(args, work, case, backend, steps=4, extra=common, tag=tag)
        resumed = train(args, work, case, backend, steps=8, extra=common, resume="latest", tag=tag)
        same_losses(reference, resumed, f"resume of {case} on {backend} (4 + 4 steps)")
        if sorted(resumed) != list(range(1, 9)):
            sys.exit(f"FAIL: resume on {backend}: logged steps {sorted(resumed)}, expected 1..8")


def check_export(args, work):
    import tensor_parallel_checks as tpc
    common = ["train.checkpoint.every=4"]
    train(args, work, "single", "cpu", steps=4, extra=common)
    reference = tpc.export(args, f"{work}/cpu/step-00000004", f"{work}/cpu.safetensors")
    for backend in BACKENDS:
        train(args, work, "single", backend, steps=4, extra=common)
        exported = tpc.export(args, f"{work}/{backend}/step-00000004", f"{work}/{backend}.safetensors")
        if not reference or exported != reference:
            sys.exit(f"FAIL: export of the {backend} checkpoint differs from the cpu checkpoint's")
        print(f"export on {backend}: {len(exported)} tensors equal to the cpu run's, byte for byte")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("case", choices=sorted(CASES) + ["offload_nvme", "resume", "bf16_resume", "export"])
    parser.add_argument("--keel", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--plugins", required=True, help="the folder holding libkeel-test_backends.so")
    parser.add_argument("--mpirun", default=shutil.which("mpirun"))
    parser.add_argument("--set", action="append", default=[], help="an assignment every run takes last")
    args = parser.parse_args()
    pc.ENV["KEEL_PLUGIN_PATH"] = args.plugins  # every run, and export, finds the test backends there
    ranks = CASES.get(args.case, (2 if args.case.endswith("resume") else 1,))[0]
    if ranks > 1 and not args.mpirun:
        print("skipped: mpirun not found")
        return 77
    work = tempfile.mkdtemp(prefix=f"keel-device-{args.case}-")
    try:
        if args.case.endswith("resume"):
            check_resume(args, work, "bf16_zero2_dp2" if args.case == "bf16_resume" else "zero2_dp2")
        elif args.case == "export":
            check_export(args, work)
        else:
            check_layout(args, work, args.case)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
