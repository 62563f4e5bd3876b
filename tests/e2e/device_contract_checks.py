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
(the safetensors of a test backend's checkpoint equal the cpu run's byte for byte).
Usage: device_contract_checks.py CASE --keel KEEL --config QUICKSTART --plugins FOLDER"""
import argparse
import os
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
}
for schedule in ("gpipe", "1f1b", "interleaved", "zero-bubble"):
    virtual = 2 if schedule == "interleaved" else 1
    CASES[f"pp2_{schedule}"] = (2, "ddp", ["model.n_layer=4", "parallel.pp=2", f"parallel.schedule={{\"plugin\": \"{schedule}\"}}",
                                           f"parallel.virtual_stages={virtual}"])


def train(args, work, case, backend, steps=6, extra=(), resume=None, tag=None):
    ranks, strategy, sets = CASES.get(case, CASES["single"])
    sets = list(sets)
    if case == "offload_nvme":
        ranks, strategy = 1, "zero3"
        folder = os.path.join(work, f"nvme-{backend}")
        os.makedirs(folder, exist_ok=True)
        sets = [f'offload={{"plugin": "nvme", "path": "{folder}", "optimizer_state": true, "params": true, "gradients": true}}']
    tag = tag or backend
    sets += [f"backend={{\"plugin\": \"{backend}\"}}", "lr_schedule.decay_steps=8"] + list(extra)
    if "parallel.pp=2" in sets:
        sets.append(f"data.micro_batch={pc.G // 4}")  # 4 micro-batches: every schedule can run
    pc.run(args, ranks, strategy, work, tag, sets, steps=steps, resume=resume)
    return pc.losses(work, tag)


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


def check_resume(args, work):
    common = ["train.checkpoint.every=4"]
    reference = train(args, work, "zero2_dp2", "cpu", steps=8, extra=common, tag="cpu-straight")
    for backend in BACKENDS:
        tag = f"{backend}-split"
        train(args, work, "zero2_dp2", backend, steps=4, extra=common, tag=tag)
        resumed = train(args, work, "zero2_dp2", backend, steps=8, extra=common, resume="latest", tag=tag)
        same_losses(reference, resumed, f"resume on {backend} (zero-2 x2, 4 + 4 steps)")
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
    parser.add_argument("case", choices=sorted(CASES) + ["offload_nvme", "resume", "export"])
    parser.add_argument("--keel", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--plugins", required=True, help="the folder holding libkeel-test_backends.so")
    parser.add_argument("--mpirun", default=shutil.which("mpirun"))
    args = parser.parse_args()
    pc.ENV["KEEL_PLUGIN_PATH"] = args.plugins  # every run, and export, finds the test backends there
    ranks = CASES.get(args.case, (2 if args.case == "resume" else 1,))[0]
    if ranks > 1 and not args.mpirun:
        print("skipped: mpirun not found")
        return 77
    work = tempfile.mkdtemp(prefix=f"keel-device-{args.case}-")
    try:
        if args.case == "resume":
            check_resume(args, work)
        elif args.case == "export":
            check_export(args, work)
        else:
            check_layout(args, work, args.case)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
