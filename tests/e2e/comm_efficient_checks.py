#!/usr/bin/env python3
"""The communication-efficient strategies end to end, 4 (or 2) real ranks under mpirun, each
against its base on the same seed and data (stdlib only):
- limits: topk at ratio 1.0 is ddp bit for bit; powersgd at full rank (rank ≥ every matrix's
  smaller side) is ddp within 1e-5 relative on every loss; diloco syncing every step with inner
  sgd and outer sgd (lr 1, no momentum) is ddp with sgd within 1e-5;
- savings: topk 0.1 and powersgd rank 2 move fewer bytes a step than ddp (the metrics'
  comm_bytes_per_step) and still learn; diloco communicates only on sync steps;
- resume: a run stopped mid-way (mid-interval for diloco) and resumed is bit for bit the one that
  never stopped, error-feedback residuals and outer state included."""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parallel_checks as pc  # noqa: E402

import json  # noqa: E402

SGD = ["optimizer={\"plugin\": \"sgd\", \"lr\": 0.05, \"momentum\": 0.0, \"weight_decay\": 0.0}",
       "train.grad_clip=0"]


def strategy(spec):
    return [f"parallel.strategy={json.dumps(spec)}"]


def records(work, tag):
    return [json.loads(l) for l in open(f"{work}/{tag}.jsonl") if l.strip()]


def comm_bytes(work, tag):
    """Bytes per step summed over the collectives, averaged over the run's steps."""
    rows = records(work, tag)
    return sum(sum(r.get("comm_bytes_per_step", {}).values()) for r in rows) / len(rows)


def params_differ(a, b):
    return max(abs(x - y) for name in a for x, y in zip(a[name], b[name]))


def check_limits(args, work):
    pc.run(args, 4, "ddp", work, "ddp")
    ref, ref_params = pc.losses(work, "ddp"), pc.final_params(f"{work}/ddp/step-00000020")
    pc.run(args, 4, "ddp", work, "topk1", strategy({"plugin": "topk", "ratio": 1.0}))
    same = pc.losses(work, "topk1")
    assert same == ref, f"topk ratio 1.0 is not ddp bit for bit: {same} vs {ref}"
    assert pc.final_params(f"{work}/topk1/step-00000020") == ref_params, "topk ratio 1.0: parameters differ from ddp"
    print("topk ratio 1.0 x4: 20 losses and every parameter equal to ddp's, bit for bit")
    pc.run(args, 4, "ddp", work, "powersgd-full", strategy({"plugin": "powersgd", "rank": 1024}))
    pc.compare_losses(ref, pc.losses(work, "powersgd-full"), "powersgd at full rank x4 vs ddp", 1e-5)
    # 20 AdamW steps from rounding-level differences in the mean: the weights agree to ~1e-5.
    pc.compare_params(ref_params, pc.final_params(f"{work}/powersgd-full/step-00000020"), "powersgd full rank", 5e-5)
    pc.run(args, 4, "ddp", work, "ddp-sgd", SGD)
    diloco = {"plugin": "diloco", "sync_every": 1, "outer_optimizer": "sgd", "outer_lr": 1.0, "outer_momentum": 0.0}
    pc.run(args, 4, "ddp", work, "diloco-1", SGD + strategy(diloco))
    pc.compare_losses(pc.losses(work, "ddp-sgd"), pc.losses(work, "diloco-1"), "diloco every step, sgd/sgd x4 vs ddp sgd",
                      1e-5)
    pc.compare_params(pc.final_params(f"{work}/ddp-sgd/step-00000020"), pc.final_params(f"{work}/diloco-1/step-00000020"),
                      "diloco every step", 1e-5)


def check_savings(args, work):
    pc.run(args, 4, "ddp", work, "ddp")
    base = comm_bytes(work, "ddp")
    first = records(work, "ddp")[0]["loss"]
    for tag, spec, most in (("topk", {"plugin": "topk", "ratio": 0.1}, 0.5),
                            ("powersgd", {"plugin": "powersgd", "rank": 2}, 0.5),
                            ("diloco", {"plugin": "diloco", "sync_every": 5}, 0.3)):
        pc.run(args, 4, "ddp", work, tag, strategy(spec))
        sent, rows = comm_bytes(work, tag), records(work, tag)
        print(f"{tag}: {sent:.0f} bytes a step against ddp's {base:.0f} ({sent / base:.3f}x); loss {rows[0]['loss']:.3f} "
              f"-> {rows[-1]['loss']:.3f}")
        assert 0 < sent <= most * base, f"{tag}: {sent:.0f} bytes a step is not at most {most} x ddp's {base:.0f}"
        assert rows[-1]["loss"] < first - 0.3, f"{tag}: the loss did not fall ({rows[0]['loss']} -> {rows[-1]['loss']})"


def check_resume(args, work):
    common = ["lr_schedule.decay_steps=10", "train.checkpoint.every=3"]
    for tag, spec in (("topk", {"plugin": "topk", "ratio": 0.1}), ("powersgd", {"plugin": "powersgd", "rank": 2}),
                      ("diloco", {"plugin": "diloco", "sync_every": 4, "outer_optimizer": "nesterov"})):
        sets = common + strategy(spec)
        pc.run(args, 2, "ddp", work, f"{tag}-straight", sets, steps=10)
        pc.run(args, 2, "ddp", work, f"{tag}-split", sets, steps=6)  # diloco: saved at step 6, mid-interval
        pc.run(args, 2, "ddp", work, f"{tag}-split", sets, steps=10, resume="latest")
        a, b = pc.losses(work, f"{tag}-straight"), pc.losses(work, f"{tag}-split")
        assert sorted(b) == list(range(1, 11)) and all(a[s] == b[s] for s in range(1, 11)), \
            f"{tag}: resumed losses differ: {a} vs {b}"
        pa = pc.final_params(f"{work}/{tag}-straight/step-00000010")
        pb = pc.final_params(f"{work}/{tag}-split/step-00000010")
        assert pa == pb, f"{tag}: resumed parameters differ by {params_differ(pa, pb):.2e}"
        print(f"{tag} x2: 10 steps straight == 6 + resume + 4, bit for bit")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("check", choices=["limits", "savings", "resume"])
    parser.add_argument("--keel", required=True)
    parser.add_argument("--config", required=True)
    args = parser.parse_args()
    args.mpirun = shutil.which("mpirun")
    if not args.mpirun:
        print("mpirun not found: skipped")
        sys.exit(77)
    work = tempfile.mkdtemp(prefix="keel-comm-efficient-")
    try:
        {"limits": check_limits, "savings": check_savings, "resume": check_resume}[args.check](args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("OK")


if __name__ == "__main__":
    main()
